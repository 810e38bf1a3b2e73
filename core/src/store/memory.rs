//! An in-memory store, for tests and the deterministic lease simulation.
//!
//! Besides being a correct [`KvStore`], it injects faults on command: the store can be taken
//! down (every operation fails as unavailable), and the next commits can be made to fail with
//! an unknown outcome, either applied or not, which is what a timeout after sending looks like.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use super::{BoxFuture, Check, Commit, Entry, KvStore, StoreError, Version, Write};

/// A fault to inject into an upcoming commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The commit fails before reaching the store: nothing is written.
    Unavailable,
    /// The commit is applied (if its checks hold) but the answer is lost.
    UnknownApplied,
    /// The commit is lost on the way: nothing is written, and the answer says "unknown".
    UnknownLost,
}

#[derive(Default)]
struct State {
    data: BTreeMap<Vec<u8>, (Vec<u8>, Version)>,
    next_version: Version,
    down: bool,
    faults: VecDeque<Fault>,
    commits: u64,
}

/// A `BTreeMap` behind a mutex.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the store down (true) or brings it back (false).
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// Queues a fault for the next commit that reaches the store.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push_back(fault);
    }

    /// Faults queued and not yet consumed.
    pub fn pending_faults(&self) -> usize {
        self.lock().faults.len()
    }

    /// Commits applied so far.
    pub fn commits(&self) -> u64 {
        self.lock().commits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-written (every mutation is a
        // single insert/remove loop that cannot panic), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_up(state: &State) -> Result<(), StoreError> {
        if state.down {
            Err(StoreError::Unavailable("memory store is down".into()))
        } else {
            Ok(())
        }
    }
}

impl KvStore for MemoryStore {
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
        let result = (|| {
            let state = self.lock();
            Self::check_up(&state)?;
            Ok(state.data.get(key).map(|(value, version)| Entry {
                key: key.to_vec(),
                value: value.clone(),
                version: *version,
            }))
        })();
        Box::pin(async move { result })
    }

    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
        let result = (|| {
            let state = self.lock();
            Self::check_up(&state)?;
            Ok(state
                .data
                .range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, (v, ver))| Entry {
                    key: k.clone(),
                    value: v.clone(),
                    version: *ver,
                })
                .collect())
        })();
        Box::pin(async move { result })
    }

    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        let result = (|| {
            let mut state = self.lock();
            Self::check_up(&state)?;
            let fault = state.faults.pop_front();
            match fault {
                Some(Fault::Unavailable) => {
                    return Err(StoreError::Unavailable("injected: commit not sent".into()))
                }
                Some(Fault::UnknownLost) => {
                    return Err(StoreError::Unknown("injected: commit lost".into()))
                }
                Some(Fault::UnknownApplied) | None => {}
            }
            let holds = checks.iter().all(|c| {
                let current = state.data.get(&c.key).map_or(0, |(_, v)| *v);
                current == c.version
            });
            let outcome = if holds {
                for w in writes {
                    match w {
                        Write::Put { key, value } => {
                            state.next_version += 1;
                            let v = state.next_version;
                            state.data.insert(key.clone(), (value.clone(), v));
                        }
                        Write::Delete { key } => {
                            state.data.remove(key);
                        }
                    }
                }
                state.commits += 1;
                Commit::Applied
            } else {
                Commit::Conflict
            };
            if fault == Some(Fault::UnknownApplied) {
                return Err(StoreError::Unknown(
                    "injected: commit applied, answer lost".into(),
                ));
            }
            Ok(outcome)
        })();
        Box::pin(async move { result })
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{conformance, Txn};

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn memory_store_conforms() {
        let s = MemoryStore::new();
        block_on(conformance::run(&s, "t/")).unwrap();
        // And a second namespace beside it is independent.
        block_on(conformance::run(&s, "u/")).unwrap();
    }

    #[test]
    fn faults_are_injected() {
        let s = MemoryStore::new();
        block_on(async {
            s.inject(Fault::UnknownApplied);
            let mut t = Txn::new(&s);
            t.put(b"k".to_vec(), b"v".to_vec());
            assert!(matches!(t.commit().await, Err(StoreError::Unknown(_))));
            assert_eq!(s.get(b"k").await.unwrap().unwrap().value, b"v");

            s.inject(Fault::UnknownLost);
            let mut t = Txn::new(&s);
            t.put(b"k2".to_vec(), b"v".to_vec());
            assert!(matches!(t.commit().await, Err(StoreError::Unknown(_))));
            assert_eq!(s.get(b"k2").await.unwrap(), None);

            s.inject(Fault::Unavailable);
            let mut t = Txn::new(&s);
            t.put(b"k3".to_vec(), b"v".to_vec());
            assert!(matches!(t.commit().await, Err(StoreError::Unavailable(_))));

            s.set_down(true);
            assert!(matches!(s.get(b"k").await, Err(StoreError::Unavailable(_))));
            assert!(matches!(s.scan(b"").await, Err(StoreError::Unavailable(_))));
            s.set_down(false);
            assert_eq!(s.scan(b"").await.unwrap().len(), 1);
        });
    }
}
