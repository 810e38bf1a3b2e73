//! Strict sequence calls sent to the node that commits them (`idgen_core::sequence::committer`).
//!
//! ```text
//!   shard: GET_VALUES of a strict sequence ─▶ Holder ─▶ Forwarder::forward
//!      committer is another node ─▶ one connection to it (control thread), GET_VALUES_HERE
//!          pipelined ─▶ VALUES ─▶ answered            (no answer in time: committed here)
//!      committer is this node, none, or skipped ─▶ committed here, as without forwarding
//!   control thread, every second: claim the record (with an advertised address) or read it
//! ```
//!
//! Forwarding chooses where a strict commit happens, nothing else: the committer's
//! reservation begins after the forwarded request arrived, so after the call began, and a
//! call it does not answer in time is committed here (a value it reserved for it is a gap).
//! Three nodes that commit one sequence's calls on their own compete for one record; one
//! committer batches them all into its commits.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BytesMut};
use idgen_core::sequence::committer::{Committers, View, CLAIM_EVERY_MS};
use idgen_core::sequence::holder::Forward;
use idgen_core::sequence::{Mode, SequenceName};
use idgen_core::store::{BoxFuture, KvStore};
use idgen_protocol::client::{Answer, Handshake};
use idgen_protocol::{SeqMode, SeqName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

/// The longest a forwarded call waits for the committer before it is committed here.
const FORWARD_WAIT: Duration = Duration::from_millis(500);
/// How long a committer that failed a forward (no connection, no answer in time) is skipped.
const SKIP_FOR: Duration = Duration::from_secs(2);
/// Connecting to the committer, HELLO included.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Forwarded batches queued for one connection before callers commit here instead.
const QUEUE: usize = 4096;

use idgen_core::sequence::holder::Forwarded as Answers;

struct Job {
    name: SeqName,
    counts: Vec<u64>,
    answer: oneshot::Sender<Answers>,
}

struct Peer {
    address: String,
    jobs: mpsc::Sender<Job>,
}

/// One node's forwarder: its view of the committer and its connection to it.
pub struct Forwarder {
    instance: String,
    advertise: Option<SocketAddr>,
    store: Arc<dyn KvStore>,
    namespace: String,
    rt: tokio::runtime::Handle,
    view: Mutex<View>,
    peer: Mutex<Option<Peer>>,
    /// A committer that failed a forward, and until when it is skipped.
    skipped: Mutex<Option<(String, tokio::time::Instant)>>,
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Forwarder {
    /// A forwarder for process `instance` (advertised at `advertise`, if any), its
    /// connections and claims running on `rt` (the control thread).
    pub fn new(
        instance: String,
        advertise: Option<SocketAddr>,
        store: Arc<dyn KvStore>,
        namespace: &str,
        rt: tokio::runtime::Handle,
    ) -> Arc<Self> {
        Arc::new(Forwarder {
            instance,
            advertise,
            store,
            namespace: namespace.to_string(),
            rt,
            view: Mutex::new(View::default()),
            peer: Mutex::new(None),
            skipped: Mutex::new(None),
        })
    }

    /// Claims (with an advertised address) or reads the committer record every second until
    /// `shutdown`; then gives up a claim this node holds.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let every = Duration::from_millis(CLAIM_EVERY_MS);
        loop {
            self.refresh().await;
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => break,
            }
        }
        if self.advertise.is_some() {
            let committers = Committers::new(self.store.as_ref(), &self.namespace);
            if let Err(e) = committers.release(&self.instance).await {
                tracing::debug!(event = "sequence_committer_release_failed", error = %e);
            }
        }
    }

    /// One claim or read of the committer record; a store that fails leaves the view as it was.
    pub async fn refresh(&self) {
        let committers = Committers::new(self.store.as_ref(), &self.namespace);
        let seen = match self.advertise {
            Some(a) => {
                committers
                    .claim(&a.to_string(), &self.instance, wall_ms())
                    .await
            }
            None => committers.read().await,
        };
        match seen {
            Ok(seen) => {
                let mut view = lock(&self.view);
                let before = view.newest().map(|c| (c.instance.clone(), c.term));
                view.saw(seen);
                let after = view.newest().map(|c| (c.instance.clone(), c.term));
                if before != after {
                    if let Some(c) = view.newest() {
                        tracing::info!(
                            event = "sequence_committer",
                            address = %c.address,
                            term = c.term,
                            this_node = c.instance == self.instance,
                            "strict sequence calls are committed by {}",
                            if c.instance == self.instance { "this node" } else { c.address.as_str() }
                        );
                    }
                }
            }
            Err(e) => {
                tracing::debug!(event = "sequence_committer_read_failed", error = %e);
            }
        }
    }

    /// Where strict calls go now: `None` to commit them here.
    fn target(&self) -> Option<String> {
        let target = lock(&self.view)
            .forward_to(&self.instance, wall_ms())
            .map(str::to_owned)?;
        let mut skipped = lock(&self.skipped);
        match &*skipped {
            Some((addr, until)) if *addr == target && tokio::time::Instant::now() < *until => None,
            Some(_) => {
                *skipped = None;
                Some(target)
            }
            None => Some(target),
        }
    }

    fn skip(&self, target: &str) {
        *lock(&self.skipped) = Some((target.to_string(), tokio::time::Instant::now() + SKIP_FOR));
        let mut peer = lock(&self.peer);
        if peer.as_ref().is_some_and(|p| p.address == target) {
            *peer = None;
        }
    }

    /// The queue of the connection to `target`, opened if there is none.
    fn jobs(&self, target: &str) -> mpsc::Sender<Job> {
        let mut peer = lock(&self.peer);
        if let Some(p) = peer
            .as_ref()
            .filter(|p| p.address == target && !p.jobs.is_closed())
        {
            return p.jobs.clone();
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        self.rt.spawn(connection(target.to_string(), rx));
        *peer = Some(Peer {
            address: target.to_string(),
            jobs: tx.clone(),
        });
        tx
    }
}

impl Forward for Forwarder {
    fn forward<'a>(
        &'a self,
        name: &'a SequenceName,
        counts: &'a [u64],
        until: tokio::time::Instant,
    ) -> BoxFuture<'a, Answers> {
        Box::pin(async move {
            let none = || vec![None; counts.len()];
            let Some(target) = self.target() else {
                return none();
            };
            let Ok(wire_name) = SeqName::new(name.as_str().as_bytes()) else {
                return none();
            };
            let (tx, rx) = oneshot::channel();
            let job = Job {
                name: wire_name,
                counts: counts.to_vec(),
                answer: tx,
            };
            if self.jobs(&target).try_send(job).is_err() {
                // Full (the committer is slow) or gone: these calls are committed here.
                return none();
            }
            let wait = until.min(tokio::time::Instant::now() + FORWARD_WAIT);
            match tokio::time::timeout_at(wait, rx).await {
                Ok(Ok(answers)) => answers,
                // The connection failed, or no answer in time: commit here, and skip this
                // committer for a while.
                _ => {
                    self.skip(&target);
                    none()
                }
            }
        })
    }
}

/// One connection to a committer: HELLO, then the jobs' GET_VALUES_HERE pipelined and their
/// answers matched in order. Ends (dropping every job waiting, whose callers commit the calls
/// themselves) on any failure or a closing ERROR.
async fn connection(address: String, mut jobs: mpsc::Receiver<Job>) {
    let setup = async {
        let mut stream = TcpStream::connect(address.as_str()).await.ok()?;
        let _ = stream.set_nodelay(true);
        // Version 3 is the first with named sequences (and so GET_VALUES_HERE).
        let handshake = Handshake::offering(3, idgen_protocol::PROTOCOL_VERSION);
        stream.write_all(&handshake.hello()).await.ok()?;
        let mut buf = BytesMut::with_capacity(4096);
        loop {
            if stream.read_buf(&mut buf).await.ok()? == 0 {
                return None;
            }
            match handshake.receive(&buf) {
                Ok(Some((conn, used))) => {
                    buf.advance(used);
                    return Some((stream, conn, buf));
                }
                Ok(None) => continue,
                Err(_) => return None,
            }
        }
    };
    let Ok(Some((mut stream, mut conn, mut inbuf))) =
        tokio::time::timeout(CONNECT_TIMEOUT, setup).await
    else {
        tracing::debug!(event = "sequence_forward_connect_failed", address = %address);
        return;
    };
    // Each job's answers so far, oldest first.
    let mut waiting: VecDeque<(Job, Answers)> = VecDeque::new();
    let mut out = BytesMut::with_capacity(4096);
    loop {
        tokio::select! {
            job = jobs.recv() => {
                let Some(job) = job else { return };
                out.clear();
                for &n in &job.counts {
                    // `n <= MAX_BLOCK` (2^20): fits a u32.
                    conn.get_values_here(job.name, u32::try_from(n).unwrap_or(u32::MAX), &mut out);
                }
                if stream.write_all(&out).await.is_err() {
                    return;
                }
                waiting.push_back((job, Vec::new()));
            }
            read = stream.read_buf(&mut inbuf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return;
                }
                loop {
                    let (got, used, closes) = match conn.decode(&inbuf) {
                        Ok(None) => break,
                        Err(_) => return,
                        Ok(Some((Answer::Values(v), used))) => {
                            let mode = match v.mode() {
                                SeqMode::Dense => Mode::Dense,
                                SeqMode::Strict => Mode::Strict,
                            };
                            (Some((mode, v.to_vec())), used, false)
                        }
                        // A refusal (unknown opcode on an older node, the committer's store
                        // unavailable, ...): this call is committed by the node that got it.
                        Ok(Some((Answer::Refused(r), used))) => (None, used, r.after.closes()),
                        Ok(Some((_, _))) => return,
                    };
                    inbuf.advance(used);
                    let Some((job, answers)) = waiting.front_mut() else { return };
                    answers.push(got);
                    if answers.len() == job.counts.len() {
                        if let Some((job, answers)) = waiting.pop_front() {
                            let _ = job.answer.send(answers);
                        }
                    }
                    if closes {
                        return;
                    }
                }
            }
        }
    }
}
