//! Configuration the way services are configured: one URL, or the environment
//! (`clients/vectors/CONFIG.md`, the same rules in every idgen client).
//!
//! ```text
//! idgen://HOST[:PORT][,HOST[:PORT]...][/][?PARAMS]     plain TCP
//! idgens://...?ca=FILE&cert=FILE&key=FILE&server_name=NAME
//!           &connect_timeout_ms=N&timeout_ms=N&expand=true|false
//! IDGEN_NODES (a URL, or host:port,host:port), IDGEN_CLIENT_CA, IDGEN_CLIENT_CERT,
//! IDGEN_CLIENT_KEY, IDGEN_CLIENT_SERVER_NAME, IDGEN_CLIENT_CONNECT_TIMEOUT_MS,
//! IDGEN_CLIENT_TIMEOUT_MS
//! ```
//!
//! Use it through [`PoolBuilder::url`](crate::PoolBuilder::url) and
//! [`PoolBuilder::from_env`](crate::PoolBuilder::from_env); [`ClientConfig`] is what they
//! read.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::Error;

/// The default port of a node's ID protocol.
pub const DEFAULT_PORT: u16 = 7420;
/// The longest timeout a URL or the environment may set.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// What a URL or the environment configures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// `host:port` (`[v6]:port`), the default port filled in, in the order given.
    pub nodes: Vec<String>,
    /// `idgens://`, or a TLS variable set.
    pub tls: bool,
    /// The CA bundle the nodes' certificates chain to (TLS without it: the system's roots).
    pub ca: Option<PathBuf>,
    /// The client certificate, for mutual TLS (with [`key`](Self::key)).
    pub cert: Option<PathBuf>,
    /// The client certificate's private key.
    pub key: Option<PathBuf>,
    /// The name TLS verifies instead of each node's host.
    pub server_name: Option<String>,
    /// The connect timeout (`connect_timeout_ms`).
    pub connect_timeout: Option<Duration>,
    /// The request timeout (`timeout_ms`).
    pub request_timeout: Option<Duration>,
    /// Each address a name resolves to is a node of its own (CONFIG.md).
    pub expand: bool,
}

fn bad(what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("idgen configuration: {what}"))
}

/// `host[:port]` with the default port, checked; IPv6 literals in brackets.
fn node(entry: &str) -> Result<String, Error> {
    if entry.is_empty() {
        return Err(bad("an empty node entry"));
    }
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return Err(bad(format!(
                "{entry:?}: an IPv6 address without its closing ']'"
            )));
        };
        if v6.is_empty() {
            return Err(bad(format!("{entry:?}: an empty IPv6 address")));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| bad(format!("{entry:?}: text after ']' that is not :PORT")))?,
            ),
        };
        (format!("[{v6}]"), port)
    } else {
        match entry.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (entry.to_string(), None),
        }
    };
    if host.is_empty() || host.contains(['@', '/', '?', '#', ':']) && !host.starts_with('[') {
        return Err(bad(format!("{entry:?} is not host[:port]")));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(bad(format!("{entry:?}: the port must be 1..=65535"))),
        },
    };
    Ok(format!("{host}:{port}"))
}

/// Nodes from a comma-separated list: each checked, none twice.
fn nodes(list: &str, trim: bool) -> Result<Vec<String>, Error> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for entry in list.split(',') {
        let entry = if trim { entry.trim() } else { entry };
        let n = node(entry)?;
        if !seen.insert(n.clone()) {
            return Err(bad(format!("node {n} is listed twice")));
        }
        out.push(n);
    }
    Ok(out)
}

fn timeout(name: &str, value: &str) -> Result<Duration, Error> {
    match value.parse::<u64>() {
        Ok(ms)
            if (1..=MAX_TIMEOUT_MS).contains(&ms) && value.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Ok(Duration::from_millis(ms))
        }
        _ => Err(bad(format!(
            "{name}={value:?}: a whole number of milliseconds, 1..={MAX_TIMEOUT_MS}"
        ))),
    }
}

fn percent_decode(s: &str) -> Result<String, Error> {
    // The crate leaves a malformed escape as it is; a URL with one is refused instead.
    let malformed = s.match_indices('%').any(|(i, _)| {
        !s.get(i + 1..i + 3)
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    if malformed {
        return Err(bad(format!("{s:?}: a '%' not followed by two hex digits")));
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|d| d.into_owned())
        .map_err(|_| bad(format!("{s:?} does not decode to UTF-8")))
}

impl ClientConfig {
    /// Parses an `idgen://` or `idgens://` URL.
    pub fn parse_url(url: &str) -> Result<ClientConfig, Error> {
        let (tls, rest) = if let Some(r) = url.strip_prefix("idgens://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("idgen://") {
            (false, r)
        } else {
            return Err(bad(format!(
                "{url:?}: a URL starts with idgen:// (plain) or idgens:// (TLS)"
            )));
        };
        if rest.contains('#') {
            return Err(bad(format!("{url:?}: a URL has no fragment")));
        }
        let (authority_path, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let authority = match authority_path.split_once('/') {
            Some((a, "")) => a,
            Some(_) => return Err(bad(format!("{url:?}: a URL has no path"))),
            None => authority_path,
        };
        if authority.contains('@') {
            return Err(bad(format!("{url:?}: a URL has no user info")));
        }
        if authority.is_empty() {
            return Err(bad(format!("{url:?} names no node")));
        }
        let mut c = ClientConfig {
            nodes: nodes(authority, false)?,
            tls,
            ..ClientConfig::default()
        };
        let mut given = BTreeSet::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(bad(format!("{url:?}: parameter {pair:?} has no '='")));
            };
            if !given.insert(name.to_string()) {
                return Err(bad(format!("{url:?}: parameter {name} given twice")));
            }
            let value = percent_decode(value)?;
            let tls_only = matches!(name, "ca" | "cert" | "key" | "server_name");
            if tls_only && !tls {
                return Err(bad(format!(
                    "{url:?}: {name} is a TLS setting: use idgens://"
                )));
            }
            match name {
                "ca" => c.ca = Some(value.into()),
                "cert" => c.cert = Some(value.into()),
                "key" => c.key = Some(value.into()),
                "server_name" => c.server_name = Some(value),
                "connect_timeout_ms" => c.connect_timeout = Some(timeout(name, &value)?),
                "timeout_ms" => c.request_timeout = Some(timeout(name, &value)?),
                "expand" => {
                    c.expand = match value.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad(format!("expand={value:?}: true or false"))),
                    }
                }
                other => return Err(bad(format!("{url:?}: unknown parameter {other:?}"))),
            }
        }
        c.check_pair()?;
        Ok(c)
    }

    /// Reads `IDGEN_NODES` and the `IDGEN_CLIENT_*` variables of the process.
    pub fn from_env() -> Result<ClientConfig, Error> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) over any lookup (tests, a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<ClientConfig, Error> {
        let get = |k: &str| get(k).filter(|v| !v.is_empty());
        let Some(nodes_var) = get("IDGEN_NODES") else {
            return Err(bad("IDGEN_NODES is not set"));
        };
        let client_vars = [
            "IDGEN_CLIENT_CA",
            "IDGEN_CLIENT_CERT",
            "IDGEN_CLIENT_KEY",
            "IDGEN_CLIENT_SERVER_NAME",
            "IDGEN_CLIENT_CONNECT_TIMEOUT_MS",
            "IDGEN_CLIENT_TIMEOUT_MS",
        ];
        if nodes_var.starts_with("idgen://") || nodes_var.starts_with("idgens://") {
            if let Some(v) = client_vars.iter().find(|v| get(v).is_some()) {
                return Err(bad(format!(
                    "IDGEN_NODES is a URL and {v} is set: give each setting one way"
                )));
            }
            return Self::parse_url(&nodes_var).map_err(|e| bad(format!("IDGEN_NODES: {e}")));
        }
        let mut c = ClientConfig {
            nodes: nodes(&nodes_var, true).map_err(|e| bad(format!("IDGEN_NODES: {e}")))?,
            ca: get("IDGEN_CLIENT_CA").map(Into::into),
            cert: get("IDGEN_CLIENT_CERT").map(Into::into),
            key: get("IDGEN_CLIENT_KEY").map(Into::into),
            server_name: get("IDGEN_CLIENT_SERVER_NAME"),
            ..ClientConfig::default()
        };
        if let Some(v) = get("IDGEN_CLIENT_CONNECT_TIMEOUT_MS") {
            c.connect_timeout = Some(timeout("IDGEN_CLIENT_CONNECT_TIMEOUT_MS", &v)?);
        }
        if let Some(v) = get("IDGEN_CLIENT_TIMEOUT_MS") {
            c.request_timeout = Some(timeout("IDGEN_CLIENT_TIMEOUT_MS", &v)?);
        }
        c.tls = c.ca.is_some() || c.cert.is_some() || c.key.is_some() || c.server_name.is_some();
        c.check_pair()?;
        Ok(c)
    }

    fn check_pair(&self) -> Result<(), Error> {
        match (&self.cert, &self.key) {
            (Some(_), None) => Err(bad("a client certificate without its key")),
            (None, Some(_)) => Err(bad("a client key without its certificate")),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(case: &serde_json::Value, got: Result<ClientConfig, Error>) {
        if let Some(why) = case.get("error") {
            assert!(
                got.is_err(),
                "{case}: expected an error ({why}), got {got:?}"
            );
            return;
        }
        let c = got.unwrap_or_else(|e| panic!("{case}: {e}"));
        let nodes: Vec<String> = case["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        assert_eq!(c.nodes, nodes, "{case}");
        assert_eq!(c.tls, case["tls"].as_bool().unwrap(), "{case}");
        let path = |k: &str| case[k].as_str().map(PathBuf::from);
        assert_eq!(c.ca, path("ca"), "{case}");
        assert_eq!(c.cert, path("cert"), "{case}");
        assert_eq!(c.key, path("key"), "{case}");
        assert_eq!(
            c.server_name.as_deref(),
            case["server_name"].as_str(),
            "{case}"
        );
        let ms = |k: &str| case[k].as_u64().map(Duration::from_millis);
        assert_eq!(c.connect_timeout, ms("connect_timeout_ms"), "{case}");
        assert_eq!(c.request_timeout, ms("timeout_ms"), "{case}");
        assert_eq!(
            c.expand,
            case["expand"].as_bool().unwrap_or(false),
            "{case}"
        );
    }

    #[test]
    fn every_case_of_the_shared_config_vectors() {
        let text = include_str!("../../vectors/config.json");
        let all: serde_json::Value = serde_json::from_str(text).unwrap();
        let urls = all["urls"].as_array().unwrap();
        let envs = all["envs"].as_array().unwrap();
        assert!(urls.len() >= 30 && envs.len() >= 10);
        for case in urls {
            run(case, ClientConfig::parse_url(case["url"].as_str().unwrap()));
        }
        assert!(ClientConfig::parse_url("idgens://h?ca=/a%2").is_err());
        assert!(ClientConfig::parse_url("idgens://h?ca=/a%zz").is_err());
        for case in envs {
            let env = case["env"].as_object().unwrap().clone();
            let got = ClientConfig::from_lookup(|k| {
                env.get(k).and_then(|v| v.as_str()).map(str::to_string)
            });
            run(case, got);
        }
    }
}
