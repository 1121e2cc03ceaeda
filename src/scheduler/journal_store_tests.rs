//! The journal on a [`MemoryStore`]: power losses that tear a write at every byte, and a disk
//! whose syncs fail.

use std::path::Path;

use super::MemoryStore;
use crate::scheduler::journal::{Journal, Record};

fn open(store: &MemoryStore) -> (Journal, Vec<Record>) {
    Journal::open_in(Path::new("memory"), Box::new(store.clone()), None).expect("opens")
}

fn record(name: &str) -> Record {
    Record::EnvRemove { name: name.into() }
}

fn names(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| match r {
            Record::EnvRemove { name } => name.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

#[test]
fn a_power_loss_keeps_what_was_synced_and_cuts_a_write_torn_at_any_byte() {
    let store = MemoryStore::default();
    let (mut journal, records) = open(&store);
    assert!(records.is_empty());
    journal.append(&record("a")).expect("appended");
    journal.sync().expect("synced");
    journal.append(&record("b")).expect("appended");
    journal.append(&record("c")).expect("appended");
    journal.write_through().expect("written");
    let synced = store.durable().len();
    let unsynced = store.after_power_loss(usize::MAX).len() - synced;
    assert!(unsynced > 0);
    for torn in 0..=unsynced {
        let after = MemoryStore::with(store.after_power_loss(torn));
        let (mut again, records) = open(&after);
        let kept = names(&records);
        let all = ["a", "b", "c"].map(String::from);
        assert!(
            !kept.is_empty() && all.starts_with(&kept),
            "{torn}: {kept:?}"
        );
        assert_eq!(kept.len() == 3, torn == unsynced, "{torn}: {kept:?}");
        // Appending resumes right after what was kept (the torn tail is cut, not skipped).
        again.append(&record("d")).expect("appended");
        again.sync().expect("synced");
        let (_, records) = open(&MemoryStore::with(after.durable()));
        let mut expected = kept.clone();
        expected.push("d".into());
        assert_eq!(names(&records), expected, "{torn}");
    }
}

#[test]
fn a_failed_sync_is_an_error_and_a_restart_has_only_what_was_synced() {
    let store = MemoryStore::default();
    let (mut journal, _) = open(&store);
    journal.append(&record("a")).expect("appended");
    journal.sync().expect("synced");
    store.fail_syncs();
    journal.append(&record("b")).expect("appended");
    let error = journal.sync().expect_err("the disk fails").to_string();
    assert!(error.contains("injected fault"), "{error}");
    assert!(journal.dirty(), "what the failed sync held is still owed");
    // A compaction syncs first: it fails too, and the old journal stays.
    let error = journal
        .rewrite(&[record("z")])
        .expect_err("fails")
        .to_string();
    assert!(error.contains("injected fault"), "{error}");
    let (_, records) = open(&MemoryStore::with(store.durable()));
    assert_eq!(names(&records), ["a"]);
}

#[test]
fn a_compaction_that_cannot_be_written_keeps_the_old_journal() {
    let store = MemoryStore::default();
    let (mut journal, _) = open(&store);
    journal.append(&record("a")).expect("appended");
    journal.sync().expect("synced");
    store.fail_syncs();
    // Nothing owed: the sync passes, the replacement fails.
    let error = journal
        .rewrite(&[record("z")])
        .expect_err("fails")
        .to_string();
    assert!(error.contains("the old journal stays"), "{error}");
    let (_, records) = open(&MemoryStore::with(store.durable()));
    assert_eq!(names(&records), ["a"]);
}

/// A slow disk: each sync takes its latency, owed until the scheduler asks (and waits that long
/// on its timer), and is on disk only once that wait is over.
#[test]
fn a_slow_disk_owes_each_sync_its_latency_and_keeps_it_only_once_settled() {
    let store = MemoryStore::default();
    store.slow_syncs(std::time::Duration::from_millis(40));
    let (mut journal, _) = open(&store);
    let _ = journal.took();
    journal.settled();
    journal.append(&record("a")).expect("appended");
    journal.sync().expect("synced");
    assert_eq!(journal.took(), std::time::Duration::from_millis(40));
    assert_eq!(journal.took(), std::time::Duration::ZERO);
    journal.settled();
    journal.append(&record("b")).expect("appended");
    journal.sync().expect("synced");
    assert_eq!(journal.took(), std::time::Duration::from_millis(40));
    // Not on disk before the wait is over: a power loss now keeps "a" only.
    let (_, records) = open(&MemoryStore::with(store.after_power_loss(0)));
    assert_eq!(names(&records), ["a"]);
    journal.settled();
    let (_, records) = open(&MemoryStore::with(store.after_power_loss(0)));
    assert_eq!(names(&records), ["a", "b"]);
}
