//! `postgres://…` store URLs, parsed in every build (a build without the `postgres` feature
//! refuses them by name, as it does etcd's).

/// Where a PostgreSQL store is, parsed from `postgres://…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgUrl {
    pub user: Option<String>,
    pub hosts: Vec<(String, u16)>,
    pub database: Option<String>,
    pub prefix: String,
    /// `sslmode=verify-full`: TLS, the server's certificate checked against `postgres_ca` and
    /// the host's name. Without it (`sslmode=disable`, the default) the connection is plain.
    pub tls: bool,
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
            let bad =
                || format!("{s:?}: PostgreSQL host {h:?} is not host[:port] or [ipv6][:port]");
            let (host, port) = if let Some(v6) = h.strip_prefix('[') {
                let (host, after) = v6.split_once(']').ok_or_else(bad)?;
                match after {
                    "" => (host, None),
                    _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
                }
            } else {
                match h.split_once(':') {
                    Some((host, port)) if !port.contains(':') => (host, Some(port)),
                    Some(_) => return Err(bad()),
                    None => (h, None),
                }
            };
            let port = match port {
                Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?,
                None => 5432,
            };
            if host.is_empty() {
                return Err(format!("{s:?}: PostgreSQL host {h:?} has no name"));
            }
            parsed.push((host.to_string(), port));
        }
        if parsed.is_empty() {
            return Err(format!("{s:?}: postgres:// needs at least one host"));
        }
        let mut prefix = String::new();
        let mut tls = false;
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("prefix", p)) => prefix = p.trim_matches('/').to_string(),
                Some(("sslmode", "disable")) => tls = false,
                Some(("sslmode", "verify-full")) => tls = true,
                Some(("sslmode", other)) => {
                    return Err(format!(
                        "{s:?}: sslmode={other} is not offered: use sslmode=verify-full (TLS, \
                         the server's certificate checked against postgres_ca and its host \
                         name) or sslmode=disable (no TLS); modes that encrypt without checking \
                         whom they talk to are refused"
                    ))
                }
                _ => {
                    return Err(format!(
                        "{s:?}: unknown parameter {pair:?} (known: prefix=…, \
                         sslmode=verify-full|disable)"
                    ))
                }
            }
        }
        Ok(PgUrl {
            user: user.map(String::from),
            hosts: parsed,
            database,
            prefix,
            tls,
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
        let mut params = Vec::new();
        if !self.prefix.is_empty() {
            params.push(format!("prefix={}", self.prefix));
        }
        if self.tls {
            params.push("sslmode=verify-full".to_string());
        }
        if !params.is_empty() {
            write!(f, "?{}", params.join("&"))?;
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
        assert!(!u.tls);
        let v6: PgUrl = "postgres://[::1]:5432".parse().unwrap();
        assert_eq!(v6.hosts, vec![("::1".to_string(), 5432)]);
        assert_eq!(v6.to_string(), "postgres://[::1]:5432");
        let v6: PgUrl = "postgres://[::1],[fe80::1]:6000".parse().unwrap();
        assert_eq!(
            v6.hosts,
            vec![("::1".to_string(), 5432), ("fe80::1".to_string(), 6000)]
        );
        let t: PgUrl = "postgresql://idgen@db/idgen?sslmode=verify-full&prefix=a"
            .parse()
            .unwrap();
        assert!(t.tls);
        assert_eq!(
            t.to_string(),
            "postgres://idgen@db:5432/idgen?prefix=a&sslmode=verify-full"
        );
        assert_eq!(t.to_string().parse::<PgUrl>().unwrap(), t);
        assert!(
            !"postgres://db?sslmode=disable"
                .parse::<PgUrl>()
                .unwrap()
                .tls
        );
        let weak = "postgres://db?sslmode=require"
            .parse::<PgUrl>()
            .unwrap_err();
        assert!(weak.contains("verify-full"), "{weak}");

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
            "postgres://db?sslmode=prefer",
            "postgres://db?sslmode=verify-ca",
            "postgres://db?other=1",
            "postgres://::1",
            "postgres://[::1",
            "postgres://[::1]x",
            "postgres://db:0",
            "http://db",
        ] {
            assert!(bad.parse::<PgUrl>().is_err(), "{bad}");
        }
    }
}
