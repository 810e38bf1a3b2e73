//! `postgres://…` store URLs, parsed in every build (a build without the `postgres` feature
//! refuses them by name, as it does etcd's).

/// Where a PostgreSQL store is, parsed from `postgres://…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgUrl {
    pub user: Option<String>,
    pub hosts: Vec<(String, u16)>,
    pub database: Option<String>,
    pub prefix: String,
}

impl std::str::FromStr for PgUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .strip_prefix("postgres://")
            .or_else(|| s.strip_prefix("postgresql://"))
            .ok_or_else(|| format!("{s:?}: a PostgreSQL store URL starts with postgres://"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, database) = match rest.split_once('/') {
            Some((a, d)) => (a, (!d.is_empty()).then(|| d.to_string())),
            None => (rest, None),
        };
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        if let Some(u) = user {
            if u.contains(':') {
                return Err(format!(
                    "{}: no password in the URL (it would show in process lists and logs): \
                     use postgres_password_file or IDGEN_POSTGRES_PASSWORD",
                    redact(s)
                ));
            }
            if u.is_empty() {
                return Err(format!("{s:?}: an empty user before @"));
            }
        }
        let mut parsed = Vec::new();
        for h in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            let (host, port) = match h.rsplit_once(':') {
                Some((host, port)) if !host.ends_with(']') || h.starts_with('[') => {
                    let port = port
                        .parse::<u16>()
                        .map_err(|_| format!("{s:?}: PostgreSQL host {h:?} is not host[:port]"))?;
                    (host, port)
                }
                _ => (h, 5432),
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(format!("{s:?}: PostgreSQL host {h:?} has no name"));
            }
            parsed.push((host.to_string(), port));
        }
        if parsed.is_empty() {
            return Err(format!("{s:?}: postgres:// needs at least one host"));
        }
        let mut prefix = String::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("prefix", p)) => prefix = p.trim_matches('/').to_string(),
                _ => {
                    return Err(format!(
                        "{s:?}: unknown parameter {pair:?} (only prefix=… is known; TLS is not \
                         supported yet)"
                    ))
                }
            }
        }
        Ok(PgUrl {
            user: user.map(String::from),
            hosts: parsed,
            database,
            prefix,
        })
    }
}

impl std::fmt::Display for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("postgres://")?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|(h, p)| {
                if h.contains(':') {
                    format!("[{h}]:{p}")
                } else {
                    format!("{h}:{p}")
                }
            })
            .collect();
        f.write_str(&hosts.join(","))?;
        if let Some(d) = &self.database {
            write!(f, "/{d}")?;
        }
        if !self.prefix.is_empty() {
            write!(f, "?prefix={}", self.prefix)?;
        }
        Ok(())
    }
}

/// A URL with whatever stands between `//` and `@` hidden, for an error message.
fn redact(s: &str) -> String {
    match (s.find("//"), s.rfind('@')) {
        (Some(a), Some(b)) if a + 2 <= b => format!("{}//…@{}", &s[..a], &s[b + 1..]),
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_print_and_keep_passwords_out() {
        let u: PgUrl = "postgres://idgen@db1:5433,db2/idgen?prefix=prod"
            .parse()
            .unwrap();
        assert_eq!(u.user.as_deref(), Some("idgen"));
        assert_eq!(
            u.hosts,
            vec![("db1".to_string(), 5433), ("db2".to_string(), 5432)]
        );
        assert_eq!(u.database.as_deref(), Some("idgen"));
        assert_eq!(u.prefix, "prod");
        assert_eq!(
            u.to_string(),
            "postgres://idgen@db1:5433,db2:5432/idgen?prefix=prod"
        );
        assert_eq!(u.to_string().parse::<PgUrl>().unwrap(), u);
        let v6: PgUrl = "postgres://[::1]:5432".parse().unwrap();
        assert_eq!(v6.hosts, vec![("::1".to_string(), 5432)]);
        assert_eq!(v6.to_string(), "postgres://[::1]:5432");

        let err = "postgres://idgen:hunter2@db/idgen"
            .parse::<PgUrl>()
            .unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("postgres_password_file"), "{err}");
        for bad in [
            "postgres://",
            "postgres://db:notaport",
            "postgres://@db",
            "postgres://db?sslmode=require",
            "http://db",
        ] {
            assert!(bad.parse::<PgUrl>().is_err(), "{bad}");
        }
    }
}
