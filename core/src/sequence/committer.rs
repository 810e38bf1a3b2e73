//! Which node commits the strict sequences of a namespace, so the others forward their strict
//! calls to it instead of competing for the same records.
//!
//! ```text
//!   idgen/<namespace>/sequence-committer = {address, instance, term, expires_unix_ms}
//!
//!   node with an advertised address:  claim() every CLAIM_EVERY  ─ takes the record when it is
//!                                     free, expired, or its own; renews it while it holds it
//!   every node:                       the newest record seen (own claims included) ─▶ forward
//!                                     strict calls to `address` unless it is this node
//! ```
//!
//! Nothing here is needed for uniqueness or for the strict order: every strict value still
//! comes from a reservation committed, by whichever node receives the call, after the call
//! began (`strict.rs`). The record only decides where that commit happens. Two nodes that both
//! believe they commit (clocks disagree about an expiry, a view is stale) each commit their
//! own calls, as every node did before forwarding existed: slower, never wrong. A forwarded
//! call is sent with GET_VALUES_HERE, which the receiver answers itself, so a call is forwarded
//! at most once, whatever the views. A committer that does not answer is skipped by the
//! forwarding node (which then commits itself) until its claim is renewed or taken.

use serde::{Deserialize, Serialize};

use crate::store::{Commit, KvStore, StoreError, Txn};

/// How long a claim holds without renewal (the claimant's wall clock).
pub const CLAIM_TTL_MS: u64 = 6_000;
/// How often a claimant renews its claim, and every node reads the record.
pub const CLAIM_EVERY_MS: u64 = 1_000;

/// The record naming the committer of a namespace's strict sequences.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitterRecord {
    /// Where other nodes reach the committer's ID protocol (`host:port`).
    pub address: String,
    /// The claimant's process instance ([`crate::lease::Owner::instance`]).
    pub instance: String,
    /// Grows by one whenever the record passes to another instance: of two records, the one
    /// with the larger term is the newer.
    pub term: u64,
    /// The claimant's wall clock (ms since the Unix epoch) after which others may take it.
    pub expires_unix_ms: u64,
}

/// The committer record of one namespace in one store.
pub struct Committers<'s> {
    store: &'s dyn KvStore,
    key: Vec<u8>,
}

impl<'s> Committers<'s> {
    pub fn new(store: &'s dyn KvStore, namespace: &str) -> Self {
        Committers {
            store,
            key: format!("idgen/{namespace}/sequence-committer").into_bytes(),
        }
    }

    /// The record as the store holds it (`None`: no node ever claimed, or it is unreadable).
    pub async fn read(&self) -> Result<Option<CommitterRecord>, StoreError> {
        let entry = self.store.get(&self.key).await?;
        Ok(entry.and_then(|e| serde_json::from_slice(&e.value).ok()))
    }

    /// Claims (or renews) the record for `instance` at `address` when it is free, expired by
    /// `now_unix_ms`, unreadable, or already this instance's; otherwise leaves it. Returns the
    /// record as it stands after the attempt (this instance's when the claim committed).
    pub async fn claim(
        &self,
        address: &str,
        instance: &str,
        now_unix_ms: u64,
    ) -> Result<Option<CommitterRecord>, StoreError> {
        let mut txn = Txn::new(self.store);
        let current: Option<CommitterRecord> = txn
            .get(&self.key)
            .await?
            .and_then(|v| serde_json::from_slice(&v).ok());
        let term = match &current {
            Some(c) if c.instance == instance => c.term,
            Some(c) if c.expires_unix_ms > now_unix_ms => return Ok(current),
            Some(c) => c.term + 1,
            None => 1,
        };
        let mine = CommitterRecord {
            address: address.to_string(),
            instance: instance.to_string(),
            term,
            expires_unix_ms: now_unix_ms.saturating_add(CLAIM_TTL_MS),
        };
        let value = serde_json::to_vec(&mine).map_err(|e| StoreError::Invalid(e.to_string()))?;
        txn.put(self.key.clone(), value);
        match txn.commit().await? {
            Commit::Applied => Ok(Some(mine)),
            // Another node wrote it meanwhile: theirs stands.
            Commit::Conflict => self.read().await,
        }
    }

    /// Gives the record up (a node that stops), if it is still `instance`'s: the others take
    /// it at their next claim instead of after the claim's expiry.
    pub async fn release(&self, instance: &str) -> Result<(), StoreError> {
        let mut txn = Txn::new(self.store);
        let current: Option<CommitterRecord> = txn
            .get(&self.key)
            .await?
            .and_then(|v| serde_json::from_slice(&v).ok());
        if let Some(mut c) = current.filter(|c| c.instance == instance) {
            c.expires_unix_ms = 0;
            let value = serde_json::to_vec(&c).map_err(|e| StoreError::Invalid(e.to_string()))?;
            txn.put(self.key.clone(), value);
            txn.commit().await?;
        }
        Ok(())
    }
}

/// One node's view of the committer: the newest record it has seen (by term; its own claims
/// included), so that views only move forward.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    newest: Option<CommitterRecord>,
}

impl View {
    /// Takes `seen` if it is at least as new as what the view holds.
    pub fn saw(&mut self, seen: Option<CommitterRecord>) {
        if let Some(s) = seen {
            let newer = self
                .newest
                .as_ref()
                .is_none_or(|n| s.term > n.term || (s.term == n.term && s.instance == n.instance));
            if newer {
                self.newest = Some(s);
            }
        }
    }

    /// Where this node (process `instance`) forwards strict calls: the committer's address,
    /// unless it is this node, its claim has expired by `now_unix_ms`, or there is none.
    pub fn forward_to(&self, instance: &str, now_unix_ms: u64) -> Option<&str> {
        let c = self.newest.as_ref()?;
        (c.instance != instance && c.expires_unix_ms > now_unix_ms).then_some(c.address.as_str())
    }

    /// The record the view holds.
    pub fn newest(&self) -> Option<&CommitterRecord> {
        self.newest.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn a_claim_takes_a_free_or_expired_record_and_leaves_a_live_one() {
        let store = MemoryStore::new();
        let c = Committers::new(&store, "t");
        let a = c.claim("a:1", "ia", 1_000).await.unwrap().unwrap();
        assert_eq!((a.instance.as_str(), a.term), ("ia", 1));
        // b finds a's claim live: a's stands.
        let seen = c.claim("b:1", "ib", 2_000).await.unwrap().unwrap();
        assert_eq!(seen.instance, "ia");
        // a renews: the same term, a later expiry.
        let renewed = c.claim("a:1", "ia", 3_000).await.unwrap().unwrap();
        assert_eq!(renewed.term, 1);
        assert_eq!(renewed.expires_unix_ms, 3_000 + CLAIM_TTL_MS);
        // Expired: b takes it with the next term.
        let b = c
            .claim("b:1", "ib", 3_000 + CLAIM_TTL_MS)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((b.instance.as_str(), b.term), ("ib", 2));
        // Released: a takes it back at once.
        c.release("ib").await.unwrap();
        let a2 = c.claim("a:1", "ia", 3_001).await.unwrap().unwrap();
        assert_eq!((a2.instance.as_str(), a2.term), ("ia", 3));
        // Releasing another's claim does nothing.
        c.release("ib").await.unwrap();
        assert_eq!(c.read().await.unwrap().unwrap(), a2);
    }

    #[test]
    fn a_view_only_moves_forward_and_never_forwards_to_itself() {
        let rec = |instance: &str, term, expires| CommitterRecord {
            address: format!("{instance}:1"),
            instance: instance.into(),
            term,
            expires_unix_ms: expires,
        };
        let mut v = View::default();
        assert_eq!(v.forward_to("ia", 0), None);
        v.saw(Some(rec("ib", 2, 100)));
        assert_eq!(v.forward_to("ia", 50), Some("ib:1"));
        assert_eq!(v.forward_to("ib", 50), None, "never to itself");
        assert_eq!(v.forward_to("ia", 100), None, "not past its expiry");
        // An older term (a stale read) does not move the view back.
        v.saw(Some(rec("ic", 1, 1_000)));
        assert_eq!(v.newest().unwrap().instance, "ib");
        // A renewal of the same term does.
        v.saw(Some(rec("ib", 2, 1_000)));
        assert_eq!(v.forward_to("ia", 500), Some("ib:1"));
        v.saw(Some(rec("ia", 3, 2_000)));
        assert_eq!(v.forward_to("ia", 500), None);
    }
}
