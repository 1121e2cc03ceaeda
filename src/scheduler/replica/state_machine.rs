//! A replica's state machine: the journal records the cluster committed, kept as they came (one
//! [`Batch`] per leader round) behind the last snapshot's image. It does not run them: a replica
//! that becomes the leader replays them into a new core, exactly as a restarted scheduler replays
//! its journal. A snapshot is that image: the records replayed into a core and written back out
//! as the state they make ([`Scheduler::journal_image`]), in a checksummed file beside the log.

// openraft's traits return its `StorageError` (large, not ours to box).
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use super::log_store::on_disk;
use super::{Batch, NodeId, TypeConfig};
use crate::core::scheduler::{Config, Scheduler};
use crate::scheduler::journal::{JournalError, JournalStore, Log, Record};
use crate::scheduler::record::Framed;

/// The snapshot file's one record.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SnapshotRecord {
    meta: SnapshotMeta<NodeId, BasicNode>,
    /// postcard of the image's `Vec<Record>` (a [`Batch`]'s bytes).
    #[serde(with = "crate::proto::bytes::one")]
    data: Vec<u8>,
}

impl Framed for SnapshotRecord {
    const MAGIC: &'static [u8; 8] = b"WEIRSNAP";
    const WHAT: &'static str = "a weir replica's snapshot";
}

/// The state machine (clones share it).
#[derive(Clone)]
pub(crate) struct StateMachine {
    inner: Arc<Mutex<Inner>>,
    /// The snapshot file, apart from `inner` so that applying never waits on its writes. Taken
    /// first by whoever replaces the snapshot (a build, an install): they never cross.
    file: Arc<Mutex<Log<SnapshotRecord>>>,
    /// The core's settings, for replaying records into an image.
    config: Arc<Config>,
}

struct Inner {
    applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    /// The last snapshot's image, then what was applied since.
    batches: Vec<Batch>,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
    /// Snapshots installed from the leader so far: a snapshot built from the batches of an
    /// earlier generation is not kept (an installed one replaced those batches meanwhile).
    installed: u64,
}

/// Who replaces the snapshot.
enum Keep {
    /// A build from the first `batches` of generation `installed`.
    Built { batches: usize, installed: u64 },
    /// The leader's, in place of everything.
    Installed,
}

fn poisoned<T>(_: T) -> String {
    "the state machine's lock is poisoned".to_string()
}

fn sm_error(error: impl ToString) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(AnyError::error(error.to_string())).into()
}

/// Every record of `batches`, in order.
pub(crate) fn decode(batches: &[Batch]) -> Result<Vec<Record>, String> {
    let mut records = Vec::new();
    for batch in batches {
        let mut some: Vec<Record> = postcard::from_bytes(&batch.0)
            .map_err(|e| format!("a committed batch of records does not decode: {e}"))?;
        records.append(&mut some);
    }
    Ok(records)
}

impl StateMachine {
    /// Open (or create) the snapshot file at `path` and start from its snapshot.
    pub(crate) fn open(path: &Path, config: Config) -> Result<StateMachine, JournalError> {
        let (file, records) = Log::<SnapshotRecord>::open(path)?;
        Ok(StateMachine::from_file(file, records, config))
    }

    /// The snapshot kept in `store` (a simulation's disk).
    pub(crate) fn open_in(
        name: &Path,
        store: Box<dyn JournalStore>,
        config: Config,
    ) -> Result<StateMachine, JournalError> {
        let (file, records) = Log::<SnapshotRecord>::open_in(name, store, None)?;
        Ok(StateMachine::from_file(file, records, config))
    }

    fn from_file(
        file: Log<SnapshotRecord>,
        records: Vec<SnapshotRecord>,
        config: Config,
    ) -> StateMachine {
        let mut inner = Inner {
            applied: None,
            membership: StoredMembership::default(),
            batches: Vec::new(),
            snapshot: None,
            installed: 0,
        };
        if let Some(last) = records.into_iter().last() {
            inner.applied = last.meta.last_log_id;
            inner.membership = last.meta.last_membership.clone();
            inner.batches = vec![Batch(last.data.clone())];
            inner.snapshot = Some((last.meta, last.data));
        }
        StateMachine {
            inner: Arc::new(Mutex::new(inner)),
            file: Arc::new(Mutex::new(file)),
            config: Arc::new(config),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StorageError<NodeId>> {
        self.inner
            .lock()
            .map_err(|_| sm_error("the state machine's lock is poisoned"))
    }

    /// Every committed record applied here, in order: what a new leader replays.
    /// (Their batches: [`decode`] them, off the runtime's thread.)
    pub(crate) fn records(&self) -> Result<Vec<Batch>, String> {
        match self.inner.lock() {
            Ok(inner) => Ok(inner.batches.clone()),
            Err(_) => Err("the state machine's lock is poisoned".into()),
        }
    }

    /// The last applied entry's index.
    pub(crate) fn applied(&self) -> Option<u64> {
        self.inner.lock().ok()?.applied.map(|id| id.index)
    }

    /// Keep `meta` and `data` as the snapshot: in the file (synced, on a blocking thread), then
    /// in memory. Returns whether it was kept (a build overtaken by an install is not).
    async fn keep(
        &self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        data: Vec<u8>,
        how: Keep,
    ) -> Result<bool, StorageError<NodeId>> {
        let (inner, file) = (self.inner.clone(), self.file.clone());
        let meta = meta.clone();
        let work = move || -> Result<bool, String> {
            let mut file = file.lock().map_err(poisoned)?;
            if let Keep::Built { installed, .. } = how
                && inner.lock().map_err(poisoned)?.installed != installed
            {
                return Ok(false);
            }
            let record = SnapshotRecord {
                meta: meta.clone(),
                data: data.clone(),
            };
            file.rewrite(&[record]).map_err(|e| e.to_string())?;
            let mut inner = inner.lock().map_err(poisoned)?;
            match how {
                Keep::Built { batches, .. } => {
                    let replaced = batches.min(inner.batches.len());
                    inner.batches.splice(..replaced, [Batch(data.clone())]);
                }
                Keep::Installed => {
                    inner.batches = vec![Batch(data.clone())];
                    inner.applied = meta.last_log_id;
                    inner.membership = meta.last_membership.clone();
                    inner.installed += 1;
                }
            }
            inner.snapshot = Some((meta, data));
            Ok(true)
        };
        on_disk(&self.file, |f| f, "the snapshot", work)
            .await
            .map_err(sm_error)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (applied, membership, batches, installed) = {
            let inner = self.lock()?;
            (
                inner.applied,
                inner.membership.clone(),
                inner.batches.clone(),
                inner.installed,
            )
        };
        let count = batches.len();
        let config = (*self.config).clone();
        let work = move || -> Result<Vec<u8>, String> {
            let core = Scheduler::restored(config, decode(&batches)?, 0);
            postcard::to_stdvec(&core.journal_image()).map_err(|e| e.to_string())
        };
        // Off the runtime's thread, but for a simulation's disk (which runs all in line).
        let data = on_disk(&self.file, |f| f, "the snapshot", work)
            .await
            .map_err(sm_error)?;
        let snapshot_id = match applied {
            Some(id) => format!("{}-{}", id.leader_id.term, id.index),
            None => "empty".into(),
        };
        let meta = SnapshotMeta {
            last_log_id: applied,
            last_membership: membership,
            snapshot_id,
        };
        let how = Keep::Built {
            batches: count,
            installed,
        };
        if self.keep(&meta, data.clone(), how).await? {
            tracing::info!(snapshot = %meta.snapshot_id, bytes = data.len(), "replica snapshot built");
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let inner = self.lock()?;
        Ok((inner.applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock()?;
        let mut responses = Vec::new();
        for entry in entries {
            inner.applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => inner.batches.push(batch),
                EntryPayload::Membership(membership) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), membership);
                }
            }
            responses.push(());
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> StateMachine {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        // Refused before it replaces anything if it does not decode.
        decode(&[Batch(data.clone())]).map_err(sm_error)?;
        self.keep(meta, data, Keep::Installed).await?;
        tracing::info!(snapshot = %meta.snapshot_id, "replica snapshot installed from the leader");
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let inner = self.lock()?;
        Ok(inner.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}
