//! What a [`Pool`](crate::Pool) tells about its work (`clients/vectors/CONFIG.md`,
//! "Observability"): `tracing` events with target `idgen_client` (nothing is printed unless the
//! application installs a subscriber), and [`Hook`]s for metrics and tracing of its own.
//!
//! | event | level |
//! |---|---|
//! | `connect`, `request` | debug |
//! | `refused`, `node_up` | info |
//! | `connect_failed`, `failover`, `node_down` | warn |

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{Error, Status};

/// One thing a pool did, given to every [`Hook`] after the fact.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A connection to `node` is up (TLS and HELLO done) at protocol `version`.
    Connect {
        /// The node (`host:port` as configured).
        node: &'a str,
        /// The protocol version negotiated.
        version: u16,
        /// How long it took.
        duration: Duration,
    },
    /// Connecting to `node` failed.
    ConnectFailed {
        /// The node (`host:port` as configured).
        node: &'a str,
        /// Why.
        error: &'a Error,
        /// How long it took.
        duration: Duration,
    },
    /// A call finished (one per call of the pool, however many nodes it tried).
    Request {
        /// `ids`, `ids_with`, `masked_ids`, `uuids`, `values`.
        op: &'static str,
        /// How many IDs, UUIDs or values it asked for.
        count: u64,
        /// The node that answered, if one did.
        node: Option<&'a str>,
        /// How long it took.
        duration: Duration,
        /// `None`: it succeeded.
        error: Option<&'a Error>,
    },
    /// `node` answered an error status.
    Refused {
        /// The node (`host:port` as configured).
        node: &'a str,
        /// The call's kind (as in [`Event::Request`]).
        op: &'static str,
        /// The status.
        status: Status,
        /// The node's message.
        message: &'a str,
    },
    /// A call moves on from `from` (which failed with `reason`) to `to`.
    Failover {
        /// The node that failed.
        from: &'a str,
        /// The node tried next.
        to: &'a str,
        /// Why `from` failed.
        reason: &'a Error,
    },
    /// `node` failed and is skipped for its backoff.
    NodeDown {
        /// The node (`host:port` as configured).
        node: &'a str,
        /// Why.
        reason: &'a Error,
        /// How long it is skipped.
        backoff: Duration,
    },
    /// `node`, which had failed, answered again.
    NodeUp {
        /// The node.
        node: &'a str,
    },
}

impl Event<'_> {
    /// The event's name, as every idgen client names it.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Connect { .. } => "connect",
            Event::ConnectFailed { .. } => "connect_failed",
            Event::Request { .. } => "request",
            Event::Refused { .. } => "refused",
            Event::Failover { .. } => "failover",
            Event::NodeDown { .. } => "node_down",
            Event::NodeUp { .. } => "node_up",
        }
    }
}

/// Receives a pool's [`Event`]s, synchronously, after the fact: keep it quick. A hook that
/// panics is reported once (a `tracing` warning) and otherwise ignored: it never fails or
/// changes a call.
pub trait Hook: Send + Sync + 'static {
    /// Called with each event, after the fact.
    fn on_event(&self, event: &Event<'_>);
}

impl<F: Fn(&Event<'_>) + Send + Sync + 'static> Hook for F {
    fn on_event(&self, event: &Event<'_>) {
        self(event)
    }
}

/// A pool's hooks, and the `tracing` side of every event.
#[derive(Clone, Default)]
pub(crate) struct Observer {
    hooks: Vec<Arc<dyn Hook>>,
    panicked: Arc<AtomicBool>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

const TARGET: &str = "idgen_client";

impl Observer {
    pub(crate) fn new(hooks: Vec<Arc<dyn Hook>>) -> Observer {
        Observer {
            hooks,
            panicked: Arc::default(),
        }
    }

    pub(crate) fn emit(&self, e: &Event<'_>) {
        let ms = |d: &Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        match e {
            Event::Connect {
                node,
                version,
                duration,
            } => {
                tracing::debug!(target: TARGET, event = "connect", node, version, duration_ms = ms(duration))
            }
            Event::ConnectFailed {
                node,
                error,
                duration,
            } => {
                tracing::warn!(target: TARGET, event = "connect_failed", node, error = %error, duration_ms = ms(duration))
            }
            Event::Request {
                op,
                count,
                node,
                duration,
                error,
            } => tracing::debug!(
                target: TARGET,
                event = "request",
                op,
                count,
                node = node.unwrap_or(""),
                duration_ms = ms(duration),
                outcome = %error.map_or_else(|| "ok".to_string(), ToString::to_string)
            ),
            Event::Refused {
                node,
                op,
                status,
                message,
            } => {
                tracing::info!(target: TARGET, event = "refused", node, op, status = status.0, status_name = %status, message)
            }
            Event::Failover { from, to, reason } => {
                tracing::warn!(target: TARGET, event = "failover", from, to, reason = %reason)
            }
            Event::NodeDown {
                node,
                reason,
                backoff,
            } => {
                tracing::warn!(target: TARGET, event = "node_down", node, reason = %reason, backoff_ms = ms(backoff))
            }
            Event::NodeUp { node } => tracing::info!(target: TARGET, event = "node_up", node),
        }
        for hook in &self.hooks {
            if catch_unwind(AssertUnwindSafe(|| hook.on_event(e))).is_err()
                && !self.panicked.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(target: TARGET, event = e.name(), "a hook panicked; it is ignored (reported once)");
            }
        }
    }
}
