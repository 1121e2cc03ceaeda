//! The replica's storage: openraft's own conformance suite for a log store and state machine
//! (`openraft::testing::Suite`: votes, appends, truncations, purges, membership, snapshots), on
//! the files; and the log read back after a power loss that tore what was not synced.

use std::path::Path;

use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, StorageError, Vote};

use super::log_store::{LogOp, LogStore};
use super::state_machine::StateMachine;
use super::{Batch, NodeId, TypeConfig};
use crate::core::scheduler::Config;
use crate::scheduler::journal::MemoryStore;

fn config() -> Config {
    Config {
        tasks: crate::core::tasks::Config::default(),
        manager_timeout_ms: 5_000,
        manager_forget_ms: 60_000,
        lease_ms: 10_000,
        idle_pace_per_worker_us: 2_000,
        tick_ms: 500,
        scaling_ms: None,
        scale_down_delay_ms: 30_000,
        max_drain_percent: 10,
        unschedulable_timeout_ms: None,
        policy: Default::default(),
        tiers: Vec::new(),
        journal: true,
        compact_min_bytes: 1 << 20,
        restart_grace_ms: 0,
    }
}

struct Files;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Files {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("a directory");
        let log = LogStore::open(&dir.path().join("log")).expect("a log");
        let state =
            StateMachine::open(&dir.path().join("log.snapshot"), config()).expect("a snapshot");
        Ok((dir, log, state))
    }
}

#[test]
fn openraft_s_storage_suite_passes_on_the_files() {
    Suite::test_all(Files).expect("openraft's storage suite");
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Batch(vec![index as u8; 3])),
    }
}

/// What was synced survives a power loss whatever was torn after it: the vote, the entries,
/// truncations and purges, in order; a tail torn mid-record is cut.
#[test]
fn the_log_comes_back_as_synced_after_a_power_loss() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let store = MemoryStore::default();
    let log = LogStore::open_in(Path::new("log"), Box::new(store.clone())).expect("opens");
    runtime.block_on(async {
        let vote = Vote::new(3, 1);
        log.write_for_tests(LogOp::Vote(vote)).await.expect("vote");
        let entries: Vec<_> = (1..=10).map(|i| entry(3, i)).collect();
        log.write_for_tests(LogOp::Entries(entries))
            .await
            .expect("entries");
        log.write_for_tests(LogOp::Truncate(8))
            .await
            .expect("truncate");
        log.write_for_tests(LogOp::Purge(LogId::new(CommittedLeaderId::new(3, 1), 2)))
            .await
            .expect("purge");
    });
    for torn in [0, 1, 7, 100] {
        let bytes = store.after_power_loss(torn);
        let again = LogStore::open_in(Path::new("log"), Box::new(MemoryStore::with(bytes)))
            .expect("reopens");
        let (vote, first, last, purged) = again.summary_for_tests();
        assert_eq!(vote, Some(Vote::new(3, 1)), "torn {torn}");
        assert_eq!((first, last), (Some(3), Some(7)), "torn {torn}");
        assert_eq!(purged.map(|p| p.index), Some(2), "torn {torn}");
    }
}
