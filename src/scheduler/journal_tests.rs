//! The journal file against torn tails, flipped bytes, a second opener and big records.

use super::*;
use crate::proto::{Outcome, TaskState};
use std::fs::OpenOptions;

#[test]
fn a_torn_record_at_the_end_is_cut_off_and_the_rest_kept() {
    let dir = std::env::temp_dir().join(format!("weir-journal-test-{}", std::process::id()));
    let path = dir.join("journal");
    let _ = std::fs::remove_dir_all(&dir);
    {
        let (mut journal, records) = Journal::open(&path).unwrap();
        assert!(records.is_empty());
        journal
            .append(&Record::EnvRemove { name: "a".into() })
            .unwrap();
        journal
            .append(&Record::EnvRemove { name: "b".into() })
            .unwrap();
        journal.sync().unwrap();
    }
    let good = std::fs::metadata(&path).unwrap().len();
    // A crash mid-write: a length prefix promising more than was written.
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&[0, 0, 0, 50, 1, 2, 3]).unwrap();
    drop(file);

    let (mut journal, records) = Journal::open(&path).unwrap();
    let names: Vec<_> = records
        .iter()
        .map(|r| match r {
            Record::EnvRemove { name } => name.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        good,
        "the torn tail is cut off"
    );
    // Appending after the cut yields a readable journal again.
    journal
        .append(&Record::EnvRemove { name: "c".into() })
        .unwrap();
    journal.sync().unwrap();
    drop(journal);
    assert_eq!(Journal::open(&path).unwrap().1.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rewritten_journal_holds_the_new_records_and_takes_appends() {
    let dir = std::env::temp_dir().join(format!("weir-journal-rewrite-{}", std::process::id()));
    let path = dir.join("journal");
    let _ = std::fs::remove_dir_all(&dir);
    let (mut journal, _) = Journal::open(&path).unwrap();
    for name in ["a", "b", "c"] {
        journal
            .append(&Record::EnvRemove { name: name.into() })
            .unwrap();
    }
    let (before, after) = journal
        .rewrite(&[
            Record::Base {
                first_job: 4,
                first_task: 9,
            },
            Record::Compacted,
        ])
        .unwrap();
    assert!(after < before, "{before} -> {after}");
    journal.append(&Record::Forget { job: 4 }).unwrap();
    journal.sync().unwrap();
    drop(journal);
    let records = Journal::open(&path).unwrap().1;
    assert!(matches!(
        records[..],
        [
            Record::Base {
                first_job: 4,
                first_task: 9
            },
            Record::Compacted,
            Record::Forget { job: 4 }
        ]
    ));
    assert!(!path.with_extension("compacting").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

fn scratch(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("weir-journal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("journal");
    (dir, path)
}

fn three_records(path: &Path) {
    let (mut journal, _) = Journal::open(path).unwrap();
    for name in ["a", "b", "c"] {
        journal
            .append(&Record::EnvRemove { name: name.into() })
            .unwrap();
    }
    journal.sync().unwrap();
}

#[test]
fn one_flipped_byte_anywhere_is_refused_with_its_offset_and_nothing_is_cut() {
    let (dir, path) = scratch("flip");
    three_records(&path);
    let good = std::fs::read(&path).unwrap();
    for at in HEADER..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        std::fs::write(&path, &bad).unwrap();
        let error = match Journal::open(&path) {
            Err(error) => error.to_string(),
            Ok((_, records)) => panic!("flipped byte {at} accepted: {records:?}"),
        };
        assert!(
            error.contains("is damaged") || error.contains("does not decode"),
            "{error}"
        );
        assert!(error.contains("record at offset"), "{error}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bad,
            "the file is left as it was"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_that_is_not_a_journal_is_refused_and_never_modified() {
    let (dir, path) = scratch("foreign");
    let text = b"# weir\n\nA distributed task scheduler.\n".to_vec();
    std::fs::write(&path, &text).unwrap();
    let error = Journal::open(&path).err().expect("refused").to_string();
    assert!(error.contains("not a weir journal"), "{error}");
    assert_eq!(std::fs::read(&path).unwrap(), text);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_zero_filled_tail_is_cut_like_a_torn_one() {
    let (dir, path) = scratch("zeros");
    three_records(&path);
    let good = std::fs::metadata(&path).unwrap().len();
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&[0u8; 4096]).unwrap();
    drop(file);
    assert_eq!(Journal::open(&path).unwrap().1.len(), 3);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_scheduler_on_one_journal_is_refused_with_the_first_ones_pid() {
    let (dir, path) = scratch("lock");
    let (first, _) = Journal::open(&path).unwrap();
    let error = Journal::open(&path).err().expect("refused").to_string();
    assert!(
        error.contains(&format!(
            "in use by another scheduler (pid {}",
            std::process::id()
        )),
        "{error}"
    );
    drop(first);
    assert!(
        Journal::open(&path).is_ok(),
        "free once the first one is gone"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_record_larger_than_a_frame_is_written_and_read_back() {
    let (dir, path) = scratch("large");
    let outcome = Outcome::Error {
        message: "canceled".into(),
    };
    // ~60 MB: the cancel of a job of millions of tasks.
    let finals: Vec<_> = (0..4_000_000u64)
        .map(|task| (task, TaskState::Canceled, outcome.clone(), 0))
        .collect();
    {
        let (mut journal, _) = Journal::open(&path).unwrap();
        journal.append(&Record::Final(finals)).unwrap();
        journal.sync().unwrap();
    }
    assert!(std::fs::metadata(&path).unwrap().len() > crate::proto::MAX_FRAME as u64);
    let (_, records) = Journal::open(&path).unwrap();
    assert!(matches!(&records[..], [Record::Final(f)] if f.len() == 4_000_000));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reordered_duplicated_or_dropped_records_are_refused() {
    let (dir, path) = scratch("order");
    three_records(&path);
    let good = std::fs::read(&path).unwrap();
    // The three records' spans (each the same size: EnvRemove of a one-letter name).
    let record = (good.len() - HEADER) / 3;
    let span = |i: usize| HEADER + i * record..HEADER + (i + 1) * record;
    let variants: [Vec<u8>; 3] = [
        // the second record twice
        [&good[..], &good[span(1)]].concat(),
        // the first two swapped
        [
            &good[..HEADER],
            &good[span(1)],
            &good[span(0)],
            &good[span(2)],
        ]
        .concat(),
        // the middle one dropped
        [&good[..HEADER], &good[span(0)], &good[span(2)]].concat(),
    ];
    for bad in variants {
        std::fs::write(&path, &bad).unwrap();
        let error = Journal::open(&path).err().expect("refused").to_string();
        assert!(error.contains("out of order"), "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), bad);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_short_file_is_not_taken_for_a_journal_being_created() {
    let (dir, path) = scratch("short");
    for text in ["W", "WEIR", "WEIRJRN"] {
        std::fs::write(&path, text).unwrap();
        let error = Journal::open(&path).err().expect("refused").to_string();
        assert!(error.contains("not a weir journal"), "{error}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn another_path_to_the_same_journal_meets_the_same_lock() {
    let (dir, path) = scratch("links");
    let (_first, _) = Journal::open(&path).unwrap();
    let symbolic = dir.join("symbolic");
    std::os::unix::fs::symlink(&path, &symbolic).unwrap();
    let hard = dir.join("hard");
    std::fs::hard_link(&path, &hard).unwrap();
    for other in [symbolic, hard] {
        let error = Journal::open(&other).err().expect("refused").to_string();
        assert!(error.contains("in use by another scheduler"), "{error}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
