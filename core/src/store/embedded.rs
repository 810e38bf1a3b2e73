//! The embedded store: a crash-safe local database (redb) in the data directory.
//!
//! One file, `<dir>/idgen.redb`. Every key lives in the table `kv` with its version in front of
//! its value ([`encode_versioned`]); versions come from a counter in the table `meta`, bumped in
//! the same write transaction, so a deleted and re-created key never gets an old version back.
//! A commit is one redb write transaction with redb's default durability (`Immediate`: fsynced
//! before `commit` returns).
//!
//! Only one process may use a directory: the store holds an exclusive advisory lock on
//! `<dir>/LOCK` (with the holder's pid written in it) for as long as it lives.
//!
//! redb calls block; they run on tokio's blocking pool ([`tokio::task::spawn_blocking`]) so an
//! fsync never stalls a runtime worker.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{
    decode_versioned, encode_versioned, BoxFuture, Check, Commit, Entry, KvStore, StoreError,
    Version, Write,
};

/// The database file inside the directory.
pub const DB_FILE: &str = "idgen.redb";
/// The lock file inside the directory.
pub const LOCK_FILE: &str = "LOCK";

/// Keys and versioned values.
pub(crate) const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
/// Store metadata: the version counter.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const LAST_VERSION: &str = "last_version";

struct Inner {
    // Field order matters: the database closes before the lock is released.
    db: Database,
    _lock: File,
}

/// A redb database in a directory, locked against other processes.
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    dir: PathBuf,
}

fn invalid(dir: &Path, what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(format!("data directory {}: {what}: {e}", dir.display()))
}

/// Takes the exclusive lock on `<dir>/LOCK` and writes our pid into it.
fn lock_dir(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| invalid(dir, &format!("cannot open {}", path.display()), e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let pid = if holder.is_empty() {
                "unknown pid".to_string()
            } else {
                format!("pid {holder}")
            };
            return Err(StoreError::Invalid(format!(
                "data directory {} is in use by another idgen process ({pid})",
                dir.display()
            )));
        }
        Err(TryLockError::Error(e)) => {
            return Err(invalid(dir, &format!("cannot lock {}", path.display()), e))
        }
    }
    let write_pid = |file: &mut File| -> std::io::Result<()> {
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        writeln!(file, "{}", std::process::id())?;
        file.sync_all()
    };
    write_pid(&mut file)
        .map_err(|e| invalid(dir, &format!("cannot write {}", path.display()), e))?;
    Ok(file)
}

/// Whether another process holds the lock of the store in `dir` (a node serving from it), with
/// the holder's pid as it wrote it (empty if unknown). Creates nothing: no lock file, no
/// directory.
pub fn in_use(dir: &Path) -> Option<String> {
    let mut file = File::open(dir.join(LOCK_FILE)).ok()?;
    match file.try_lock_shared() {
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            Some(holder.trim().to_string())
        }
        // Free (our shared lock goes with `file`), or not lockable: not in use as far as we know.
        _ => None,
    }
}

fn storage(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Corrupted(m) => StoreError::Invalid(format!("embedded store corrupted: {m}")),
        redb::Error::TableTypeMismatch { .. } | redb::Error::UpgradeRequired(_) => {
            StoreError::Invalid("embedded store: not a database idgen wrote".into())
        }
        e => StoreError::Unavailable(format!("embedded store: {e}")),
    }
}

impl EmbeddedStore {
    /// Opens (creating if missing) the store in `dir`, and locks the directory.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| invalid(dir, "cannot create it", e))?;
        if !dir.is_dir() {
            return Err(StoreError::Invalid(format!(
                "data directory {} is not a directory",
                dir.display()
            )));
        }
        let lock = lock_dir(dir)?;
        let path = dir.join(DB_FILE);
        let db = Database::create(&path)
            .map_err(|e| invalid(dir, &format!("cannot open database {}", path.display()), e))?;
        // Create the tables, so that reads never meet a missing table.
        let setup = || -> Result<(), redb::Error> {
            let txn = db.begin_write()?;
            txn.open_table(KV)?;
            txn.open_table(META)?;
            txn.commit()?;
            Ok(())
        };
        setup().map_err(|e| invalid(dir, &format!("cannot initialise {}", path.display()), e))?;
        Ok(EmbeddedStore {
            inner: Arc::new(Inner { db, _lock: lock }),
            dir: dir.to_path_buf(),
        })
    }

    /// The directory this store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `f` on the blocking pool with the database.
    async fn blocking<T, F>(
        &self,
        on_panic: fn(String) -> StoreError,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        match tokio::task::spawn_blocking(move || f(&inner.db)).await {
            Ok(r) => r,
            Err(e) => Err(on_panic(format!("embedded store task failed: {e}"))),
        }
    }
}

fn read_entry(key: &[u8], raw: &[u8]) -> Result<Entry, StoreError> {
    let (version, value) = decode_versioned(raw).map_err(|e| corrupt(key, e))?;
    Ok(Entry {
        key: key.to_vec(),
        value: value.to_vec(),
        version,
    })
}

fn corrupt(key: &[u8], e: StoreError) -> StoreError {
    StoreError::Invalid(format!(
        "embedded store: key {:?}: {}",
        String::from_utf8_lossy(key),
        match e {
            StoreError::Invalid(m) | StoreError::Unavailable(m) | StoreError::Unknown(m) => m,
        }
    ))
}

/// The commit itself, in one write transaction.
fn commit_blocking(
    db: &Database,
    checks: &[Check],
    writes: &[Write],
) -> Result<Commit, StoreError> {
    let txn = db.begin_write().map_err(storage)?;
    {
        let mut kv = txn.open_table(KV).map_err(storage)?;
        for c in checks {
            let current: Version = match kv.get(c.key.as_slice()).map_err(storage)? {
                None => 0,
                Some(raw) => {
                    decode_versioned(raw.value())
                        .map_err(|e| corrupt(&c.key, e))?
                        .0
                }
            };
            if current != c.version {
                drop(kv);
                txn.abort().map_err(storage)?;
                return Ok(Commit::Conflict);
            }
        }
        let mut meta = txn.open_table(META).map_err(storage)?;
        let mut last = meta
            .get(LAST_VERSION)
            .map_err(storage)?
            .map_or(0, |v| v.value());
        for w in writes {
            match w {
                Write::Put { key, value } => {
                    // A new version is above every version given before (a key's version
                    // changes on every write and is never 0): a counter at its end is corrupt.
                    last = last.checked_add(1).ok_or_else(|| {
                        StoreError::Invalid(format!(
                            "embedded store: the version counter ({LAST_VERSION}) is at its maximum"
                        ))
                    })?;
                    kv.insert(key.as_slice(), encode_versioned(last, value).as_slice())
                        .map_err(storage)?;
                }
                Write::Delete { key } => {
                    kv.remove(key.as_slice()).map_err(storage)?;
                }
            }
        }
        meta.insert(LAST_VERSION, last).map_err(storage)?;
    }
    // A failed commit (e.g. fsync error) may or may not have reached the disk.
    txn.commit()
        .map_err(|e| StoreError::Unknown(format!("embedded store commit: {e}")))?;
    Ok(Commit::Applied)
}

impl KvStore for EmbeddedStore {
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
        let key = key.to_vec();
        Box::pin(self.blocking(StoreError::Unavailable, move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let kv = txn.open_table(KV).map_err(storage)?;
            let raw = kv.get(key.as_slice()).map_err(storage)?;
            raw.map(|raw| read_entry(&key, raw.value())).transpose()
        }))
    }

    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
        let prefix = prefix.to_vec();
        Box::pin(self.blocking(StoreError::Unavailable, move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let kv = txn.open_table(KV).map_err(storage)?;
            let mut out = Vec::new();
            for item in kv.range(prefix.as_slice()..).map_err(storage)? {
                let (k, v) = item.map_err(storage)?;
                let k = k.value();
                if !k.starts_with(&prefix) {
                    break;
                }
                out.push(read_entry(k, v.value())?);
            }
            Ok(out)
        }))
    }

    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        let checks = checks.to_vec();
        let writes = writes.to_vec();
        Box::pin(self.blocking(StoreError::Unknown, move |db| {
            commit_blocking(db, &checks, &writes)
        }))
    }

    fn describe(&self) -> String {
        format!("embedded {}", self.dir.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance;
    use crate::store::Txn;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn embedded_store_conforms() {
        let tmp = tempfile::tempdir().unwrap();
        let s = EmbeddedStore::open(tmp.path()).unwrap();
        block_on(conformance::run(&s, "t/")).unwrap();
        block_on(conformance::run(&s, "u/")).unwrap();
        // The empty prefix scans everything, in key order.
        let all = block_on(s.scan(b"")).unwrap();
        assert_eq!(all.len(), 8);
        assert!(all.windows(2).all(|w| w[0].key < w[1].key));
    }

    #[test]
    fn embedded_store_survives_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nested/data");
        let before = {
            let s = EmbeddedStore::open(&dir).unwrap();
            block_on(async {
                let mut t = Txn::new(&s);
                t.put(b"k".to_vec(), b"v".to_vec());
                t.put(b"k2".to_vec(), b"v2".to_vec());
                assert_eq!(t.commit().await.unwrap(), Commit::Applied);
                s.get(b"k").await.unwrap().unwrap()
            })
        };
        assert!(dir.join(DB_FILE).is_file());
        let s = EmbeddedStore::open(&dir).unwrap();
        block_on(async {
            assert_eq!(s.get(b"k").await.unwrap(), Some(before.clone()));
            assert_eq!(s.scan(b"k").await.unwrap().len(), 2);
            // The version counter survived too: a new write gets a version never used before.
            let mut t = Txn::new(&s);
            t.delete(b"k".to_vec());
            assert_eq!(t.commit().await.unwrap(), Commit::Applied);
            let mut t = Txn::new(&s);
            t.put(b"k".to_vec(), b"again".to_vec());
            assert_eq!(t.commit().await.unwrap(), Commit::Applied);
            let after = s.get(b"k").await.unwrap().unwrap();
            assert!(after.version > before.version);
        });
        assert_eq!(s.describe(), format!("embedded {}", dir.display()));
    }

    #[test]
    fn a_second_open_of_a_locked_directory_fails_clearly() {
        let tmp = tempfile::tempdir().unwrap();
        let first = EmbeddedStore::open(tmp.path()).unwrap();
        // flock(2) locks belong to the open file description, so a second File in this same
        // process conflicts just as another process would.
        let err = EmbeddedStore::open(tmp.path()).err().expect("must fail");
        let want = format!(
            "data directory {} is in use by another idgen process (pid {})",
            tmp.path().display(),
            std::process::id()
        );
        assert_eq!(err, StoreError::Invalid(want));
        drop(first);
        // Released with the store.
        let again = EmbeddedStore::open(tmp.path()).unwrap();
        drop(again);
    }

    #[test]
    fn a_file_where_the_directory_should_be_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        for dir in [file.clone(), file.join("below")] {
            match EmbeddedStore::open(&dir) {
                Err(StoreError::Invalid(m)) => {
                    assert!(m.contains(&dir.display().to_string()), "{m}")
                }
                other => panic!("{}: {:?}", dir.display(), other.map(|s| s.describe())),
            }
        }
    }

    #[test]
    fn an_unwritable_directory_is_a_clear_error() {
        // A directory in which nobody, root included, can create files: permission bits alone
        // would not stop root, and the tests run as root in CI.
        let dir = Path::new("/proc/self/fdinfo");
        assert!(dir.is_dir(), "the test needs procfs");
        match EmbeddedStore::open(dir) {
            Err(StoreError::Invalid(m)) => {
                assert!(m.contains("/proc/self/fdinfo"), "{m}");
                assert!(m.contains("LOCK"), "{m}");
            }
            other => panic!("{:?}", other.map(|s| s.describe())),
        }
    }

    #[test]
    fn a_corrupted_value_is_invalid() {
        let tmp = tempfile::tempdir().unwrap();
        let s = EmbeddedStore::open(tmp.path()).unwrap();
        block_on(async {
            let mut t = Txn::new(&s);
            t.put(b"good".to_vec(), b"v".to_vec());
            t.commit().await.unwrap();
        });
        {
            // Write garbage through redb directly, as a disk or another program might.
            let txn = s.inner.db.begin_write().unwrap();
            {
                let mut kv = txn.open_table(KV).unwrap();
                kv.insert(&b"bad"[..], &b"xyz"[..]).unwrap();
            }
            txn.commit().unwrap();
        }
        block_on(async {
            assert!(matches!(s.get(b"bad").await, Err(StoreError::Invalid(_))));
            assert!(matches!(s.scan(b"").await, Err(StoreError::Invalid(_))));
            let check = [Check {
                key: b"bad".to_vec(),
                version: 1,
            }];
            let write = [Write::Delete {
                key: b"bad".to_vec(),
            }];
            assert!(matches!(
                s.commit(&check, &write).await,
                Err(StoreError::Invalid(_))
            ));
            // Other keys are still fine.
            assert_eq!(s.get(b"good").await.unwrap().unwrap().value, b"v");
        });
    }
}
