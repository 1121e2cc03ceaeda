//! A replica's Raft log on disk: the journal's file format ([`Log`]: checksummed records, a torn
//! tail cut, any other damage refused) holding [`LogOp`]s, replayed into memory at start.
//! Every append, vote and truncation is synced before openraft hears it is done.

// openraft's traits return its `StorageError` (large, not ours to box).
#![allow(clippy::result_large_err)]

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

/// The log: openraft's storage and reader (clones share it). What it holds is in `state`;
/// the file is apart, so that readers never wait for a sync.
#[derive(Clone)]
pub(crate) struct LogStore {
    state: Arc<Mutex<State>>,
    file: Arc<Mutex<File>>,
    /// The commit point to write with the next record (it needs no sync of its own).
    committed: Arc<Mutex<Option<Option<LogId<NodeId>>>>>,
}

#[derive(Default)]
struct State {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
}

struct File {
    log: Log<LogOp>,
    /// Records in the file since it was last rewritten (it is, once they outnumber the
    /// entries held by far: after purges).
    written: usize,
}

fn io_error(error: impl ToString) -> StorageError<NodeId> {
    StorageIOError::write_logs(AnyError::error(error.to_string())).into()
}

fn poisoned<T>(_: T) -> String {
    "the Raft log's lock is poisoned".to_string()
}

/// Run `work` (which writes to the log `log` finds in `file`, or to nothing) as that log's
/// store wants: on a blocking thread for a real disk; in line for a simulated one, and then
/// wait on the timer for as long as its calls took and settle them, as the journal does (see
/// `JournalStore::took`), so that what waits on the write hears of it only then. `what` names
/// the file in errors. The log store and the snapshot share it.
pub(super) async fn on_disk<T, R, W>(
    file: &Arc<Mutex<T>>,
    log: fn(&mut T) -> &mut Log<R>,
    what: &str,
    work: impl FnOnce() -> Result<W, String> + Send + 'static,
) -> Result<W, String>
where
    R: Framed,
    W: Send + 'static,
{
    let poisoned = || format!("{what}'s lock is poisoned");
    let blocks = file.lock().map(|mut f| log(&mut f).blocks());
    if blocks.map_err(|_| poisoned())? {
        return tokio::task::spawn_blocking(work)
            .await
            .unwrap_or_else(|e| Err(format!("{what}'s thread failed: {e}")));
    }
    let result = work();
    let took = file
        .lock()
        .map(|mut f| log(&mut f).took())
        .unwrap_or_default();
    if !took.is_zero() {
        tokio::time::sleep(took).await;
    }
    if let Ok(mut f) = file.lock() {
        log(&mut f).settled();
    }
    result
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

    fn from_ops(log: Log<LogOp>, ops: Vec<LogOp>) -> LogStore {
        let mut state = State::default();
        let written = ops.len();
        for op in ops {
            state.apply(op);
        }
        LogStore {
            state: Arc::new(Mutex::new(state)),
            file: Arc::new(Mutex::new(File { log, written })),
            committed: Arc::default(),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, StorageError<NodeId>> {
        self.state.lock().map_err(|e| io_error(poisoned(e)))
    }

    /// Write `op` and sync (on a blocking thread when the disk blocks), then apply it.
    async fn write(&self, op: LogOp) -> Result<(), StorageError<NodeId>> {
        let (state, file, committed) = (
            self.state.clone(),
            self.file.clone(),
            self.committed.clone(),
        );
        let work = move || -> Result<(), String> {
            let mut file = file.lock().map_err(poisoned)?;
            if let Some(point) = committed.lock().map_err(poisoned)?.take() {
                file.log
                    .append_lazily(&LogOp::Committed(point))
                    .map_err(|e| e.to_string())?;
                file.written += 1;
            }
            file.log.append(&op).map_err(|e| e.to_string())?;
            file.log.sync().map_err(|e| e.to_string())?;
            file.written += 1;
            let mut state = state.lock().map_err(poisoned)?;
            state.apply(op);
            file.rewrite_if_worth_it(&state).map_err(|e| e.to_string())
        };
        on_disk(&self.file, |f| &mut f.log, "the Raft log", work)
            .await
            .map_err(io_error)
    }
}

/// What [`LogStore::summary_for_tests`] tells.
#[cfg(test)]
pub(super) type Summary = (
    Option<Vote<NodeId>>,
    Option<u64>,
    Option<u64>,
    Option<LogId<NodeId>>,
);

#[cfg(test)]
impl LogStore {
    pub(super) async fn write_for_tests(&self, op: LogOp) -> Result<(), StorageError<NodeId>> {
        self.write(op).await
    }

    /// (vote, first and last entry index, last purged).
    pub(super) fn summary_for_tests(&self) -> Summary {
        let state = self.state.lock().expect("not poisoned");
        (
            state.vote,
            state.entries.keys().next().copied(),
            state.entries.keys().last().copied(),
            state.purged,
        )
    }
}

impl State {
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
}

impl File {
    /// Rewrite the file as `state` once it has five times as many records as that state needs
    /// (purged entries and old votes make up the rest).
    fn rewrite_if_worth_it(&mut self, state: &State) -> Result<(), JournalError> {
        if self.written < 64 || self.written < 5 * (state.entries.len() + 3) {
            return Ok(());
        }
        let mut ops = Vec::new();
        if let Some(vote) = state.vote {
            ops.push(LogOp::Vote(vote));
        }
        ops.push(LogOp::Committed(state.committed));
        if let Some(purged) = state.purged {
            ops.push(LogOp::Purge(purged));
        }
        ops.push(LogOp::Entries(state.entries.values().cloned().collect()));
        self.log.rewrite(&ops)?;
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
        // Not synced on its own: it is written with the next record (a lost one is learnt
        // again from the leader).
        self.lock()?.committed = committed;
        *self.committed.lock().map_err(|e| io_error(poisoned(e)))? = Some(committed);
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
