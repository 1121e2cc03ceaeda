//! A replica's Raft log on disk: the journal's file format ([`Log`]: checksummed records, a torn
//! tail cut, any other damage refused) holding [`LogOp`]s, replayed into memory at start.
//! Every append, vote and truncation is synced before openraft hears it is done.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, LogState, OptionalSend, RaftLogReader, StorageError, StorageIOError,
    Vote,
};
use serde::{Deserialize, Serialize};

use super::{NodeId, TypeConfig};
use crate::scheduler::journal::{JournalError, JournalStore, Log};
use crate::scheduler::record::Framed;

/// What the log file records, in order.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum LogOp {
    Vote(Vote<NodeId>),
    Committed(Option<LogId<NodeId>>),
    Entries(Vec<Entry<TypeConfig>>),
    /// Entries from this index on were dropped (a new leader's log differs).
    Truncate(u64),
    /// Entries up to this one were dropped (a snapshot holds them).
    Purge(LogId<NodeId>),
}

impl Framed for LogOp {
    const MAGIC: &'static [u8; 8] = b"WEIRRAFT";
    const WHAT: &'static str = "a weir replica's Raft log";
}

/// The log: openraft's storage and reader (clones share it).
#[derive(Clone)]
pub(crate) struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    file: Log<LogOp>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    /// Records in the file since it was last rewritten (it is, once they outnumber the
    /// entries held by far: after purges).
    written: usize,
}

fn io_error(error: impl ToString) -> StorageError<NodeId> {
    StorageIOError::write_logs(AnyError::error(error.to_string())).into()
}

impl LogStore {
    /// Open (or create) the log at `path`.
    pub(crate) fn open(path: &Path) -> Result<LogStore, JournalError> {
        let (file, ops) = Log::<LogOp>::open(path)?;
        Ok(LogStore::from_ops(file, ops))
    }

    /// The log kept in `store` (a simulation's disk).
    pub(crate) fn open_in(
        name: &Path,
        store: Box<dyn JournalStore>,
    ) -> Result<LogStore, JournalError> {
        let (file, ops) = Log::<LogOp>::open_in(name, store, None)?;
        Ok(LogStore::from_ops(file, ops))
    }

    fn from_ops(file: Log<LogOp>, ops: Vec<LogOp>) -> LogStore {
        let mut inner = Inner {
            file,
            vote: None,
            committed: None,
            purged: None,
            entries: BTreeMap::new(),
            written: ops.len(),
        };
        for op in ops {
            inner.apply(op);
        }
        LogStore {
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StorageError<NodeId>> {
        self.inner
            .lock()
            .map_err(|_| io_error("the Raft log's lock is poisoned"))
    }

    /// Write `op` and sync, then apply it; on a blocking thread when the disk blocks.
    async fn write(&self, op: LogOp) -> Result<(), StorageError<NodeId>> {
        let inner = self.inner.clone();
        let work = move || -> Result<(), String> {
            let mut inner = inner
                .lock()
                .map_err(|_| "the Raft log's lock is poisoned")?;
            inner.file.append(&op).map_err(|e| e.to_string())?;
            inner.file.sync().map_err(|e| e.to_string())?;
            inner.written += 1;
            inner.apply(op);
            inner.rewrite_if_worth_it().map_err(|e| e.to_string())
        };
        let blocks = self.lock()?.file.blocks();
        let result = match blocks {
            true => tokio::task::spawn_blocking(work)
                .await
                .unwrap_or_else(|e| Err(format!("the Raft log's thread failed: {e}"))),
            false => work(),
        };
        result.map_err(io_error)
    }
}

impl Inner {
    fn apply(&mut self, op: LogOp) {
        match op {
            LogOp::Vote(vote) => self.vote = Some(vote),
            LogOp::Committed(committed) => self.committed = committed,
            LogOp::Entries(entries) => {
                for entry in entries {
                    self.entries.insert(entry.log_id.index, entry);
                }
            }
            LogOp::Truncate(from) => {
                self.entries.split_off(&from);
            }
            LogOp::Purge(upto) => {
                self.entries = self.entries.split_off(&(upto.index + 1));
                self.purged = Some(upto);
            }
        }
    }

    /// Rewrite the file as the state it holds once it has five times as many records as that
    /// state needs (purged entries and old votes make up the rest).
    fn rewrite_if_worth_it(&mut self) -> Result<(), JournalError> {
        if self.written < 64 || self.written < 5 * (self.entries.len() + 3) {
            return Ok(());
        }
        let mut ops = Vec::new();
        if let Some(vote) = self.vote {
            ops.push(LogOp::Vote(vote));
        }
        ops.push(LogOp::Committed(self.committed));
        if let Some(purged) = self.purged {
            ops.push(LogOp::Purge(purged));
        }
        ops.push(LogOp::Entries(self.entries.values().cloned().collect()));
        self.file.rewrite(&ops)?;
        self.written = ops.len();
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let inner = self.lock()?;
        Ok(inner
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = self.lock()?;
        let last = inner
            .entries
            .last_key_value()
            .map(|(_, entry)| entry.log_id)
            .or(inner.purged);
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(LogOp::Vote(*vote)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock()?.vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        // Not synced on its own: it rides with the next append (a lost one is learnt again
        // from the leader).
        let mut inner = self.lock()?;
        inner.committed = committed;
        inner
            .file
            .append_lazily(&LogOp::Committed(committed))
            .map_err(io_error)?;
        inner.written += 1;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock()?.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let result = self.write(LogOp::Entries(entries)).await;
        callback.log_io_completed(
            result
                .as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        result
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(LogOp::Truncate(log_id.index)).await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(LogOp::Purge(log_id)).await
    }
}
