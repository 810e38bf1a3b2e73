//! `expand=true`: each address a configured name resolves to is a node of its own
//! (`clients/vectors/CONFIG.md`, "Names with several addresses"), such as every ready pod of a
//! Kubernetes headless Service.
//!
//! The node list is the configured entries in order, each replaced by its addresses in the
//! resolver's order, duplicates removed. It is resolved at the first call (or at once by
//! [`PoolBuilder::connect`](crate::PoolBuilder::connect)) and again, in the background and at
//! most once a second, whenever a node fails: addresses that appear are added, addresses that
//! are gone are dropped once their connection fails. A name that resolves to nothing is one
//! node that is down, not an error.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Error;

/// The least time between two resolutions.
pub(crate) const RESOLVE_EVERY: Duration = Duration::from_secs(1);

/// What a resolution of one host returns.
pub(crate) type Resolved = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

/// Resolves a host name to its addresses (the system's resolver; tests give their own).
pub(crate) type Resolver = Arc<dyn Fn(String) -> Resolved + Send + Sync>;

/// The system resolver (`getaddrinfo`, through Tokio).
pub(crate) fn system_resolver() -> Resolver {
    Arc::new(|host: String| {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    })
}

/// One configured `host:port`.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// As configured: the name TLS verifies, and each of its nodes' [`NodeInfo::entry`](crate::NodeInfo::entry).
    pub(crate) addr: String,
    host: String,
    port: u16,
}

impl Entry {
    /// `host:port` or `[v6]:port`.
    pub(crate) fn parse(addr: &str) -> Result<Entry, Error> {
        let bad = || {
            Error::InvalidArgument(format!(
                "node {addr:?}: expand=true needs host:port (or [v6]:port)"
            ))
        };
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        let host = match host.strip_prefix('[') {
            Some(v6) => v6.strip_suffix(']').ok_or_else(bad)?,
            None if host.contains(':') => return Err(bad()),
            None => host,
        };
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(Entry {
            addr: addr.to_string(),
            host: host.to_string(),
            port,
        })
    }
}

/// When the pool last resolved, and whether a resolution is running.
#[derive(Debug, Default)]
struct Schedule {
    running: bool,
    last: Option<Instant>,
}

/// A pool's expansion: its entries, its resolver, when it resolves.
pub(crate) struct Expand {
    pub(crate) entries: Vec<Entry>,
    resolver: Resolver,
    schedule: Mutex<Schedule>,
    /// Set by the first resolution (concurrent first calls wait for it; later calls only
    /// check it).
    pub(crate) first: tokio::sync::OnceCell<()>,
}

impl std::fmt::Debug for Expand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expand")
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

/// What a node's place in an expansion is.
#[derive(Debug, Default)]
pub(crate) struct Origin {
    /// A name that resolved to nothing (or not yet resolved): the node is down.
    pub(crate) unresolved: bool,
    /// An address its name no longer resolves to: dropped when its connection fails.
    pub(crate) gone: AtomicBool,
    /// Out of the node list: a connection made late is not kept.
    pub(crate) retired: AtomicBool,
}

/// A node as a resolution makes it: its address, its entry, and whether it is unresolved.
pub(crate) struct Made {
    pub(crate) addr: String,
    pub(crate) entry: String,
    pub(crate) unresolved: bool,
}

impl Expand {
    pub(crate) fn new(entries: Vec<Entry>, resolver: Resolver) -> Expand {
        Expand {
            entries,
            resolver,
            schedule: Mutex::new(Schedule::default()),
            first: tokio::sync::OnceCell::new(),
        }
    }

    /// The nodes before any resolution: one unresolved node per entry.
    pub(crate) fn placeholders(&self) -> Vec<Made> {
        self.entries
            .iter()
            .map(|e| Made {
                addr: e.addr.clone(),
                entry: e.addr.clone(),
                unresolved: true,
            })
            .collect()
    }

    /// Whether a background resolution should start now; if so, it counts as started.
    pub(crate) fn due(&self) -> bool {
        let mut s = self.schedule.lock().unwrap_or_else(|p| p.into_inner());
        if s.running || s.last.is_some_and(|t| t.elapsed() < RESOLVE_EVERY) {
            return false;
        }
        s.running = true;
        s.last = Some(Instant::now());
        true
    }

    /// A resolution has ended.
    pub(crate) fn resolved(&self) {
        let mut s = self.schedule.lock().unwrap_or_else(|p| p.into_inner());
        s.running = false;
        s.last = Some(Instant::now());
    }

    /// Resolves every entry (each lookup within `limit`) into the new node list, as
    /// `(existing node index in old, or a node to make)`: the entries in order, each replaced
    /// by its addresses in the resolver's order, duplicates removed. Nodes of `old` are kept
    /// for the addresses still there; an entry whose name fails to resolve keeps its old
    /// nodes (or, with none, is one unresolved node: down). An address that is gone stays,
    /// marked gone, while `up(node)` says its connection is up.
    pub(crate) async fn resolve<N>(
        &self,
        old: &[N],
        view: impl Fn(&N) -> (&str, &str, &Origin),
        up: impl Fn(&N) -> bool,
        limit: Duration,
    ) -> Vec<Result<usize, Made>> {
        let mut list: Vec<Result<usize, Made>> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for e in &self.entries {
            let found: Option<Vec<IpAddr>> = match e.host.parse::<IpAddr>() {
                Ok(ip) => Some(vec![ip]),
                Err(_) => {
                    let lookup = (self.resolver)(e.host.clone());
                    match tokio::time::timeout(limit, lookup).await {
                        Ok(Ok(ips)) if !ips.is_empty() => Some(ips),
                        _ => None,
                    }
                }
            };
            let of_entry = || old.iter().enumerate().filter(|(_, n)| view(n).1 == e.addr);
            let Some(ips) = found else {
                let mut kept = false;
                for (i, n) in of_entry() {
                    if seen.insert(view(n).0.to_string()) {
                        list.push(Ok(i));
                    }
                    kept = true;
                }
                if !kept && seen.insert(e.addr.clone()) {
                    list.push(Err(Made {
                        addr: e.addr.clone(),
                        entry: e.addr.clone(),
                        unresolved: true,
                    }));
                }
                continue;
            };
            let mut now = std::collections::HashSet::new();
            for ip in ips {
                let addr = SocketAddr::new(ip, e.port).to_string();
                now.insert(addr.clone());
                if !seen.insert(addr.clone()) {
                    continue;
                }
                match of_entry().find(|(_, n)| view(n).0 == addr && !view(n).2.unresolved) {
                    Some((i, n)) => {
                        view(n).2.gone.store(false, Ordering::Relaxed);
                        list.push(Ok(i));
                    }
                    None => list.push(Err(Made {
                        addr,
                        entry: e.addr.clone(),
                        unresolved: false,
                    })),
                }
            }
            for (i, n) in of_entry() {
                let (addr, _, origin) = view(n);
                if origin.unresolved || now.contains(addr) {
                    continue;
                }
                origin.gone.store(true, Ordering::Relaxed);
                if up(n) && seen.insert(addr.to_string()) {
                    list.push(Ok(i));
                }
            }
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse() {
        let e = Entry::parse("idgen-headless.ids.svc:7420").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("idgen-headless.ids.svc", 7420));
        let e = Entry::parse("[::1]:7420").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 7420));
        for bad in [
            "idgen",
            "idgen:0",
            "idgen:x",
            ":7420",
            "::1:7420",
            "[::1:7420",
        ] {
            assert!(Entry::parse(bad).is_err(), "{bad}");
        }
    }
}
