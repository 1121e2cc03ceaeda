//! The journal through its seam (`JournalStore`): the real scheduler, in this process, on an
//! in-memory journal whose disk fails on request.

use std::path::Path;
use std::time::Duration;

use weir::client::Client;
use weir::net::AccessFile;
use weir::proto::{NewGroup, TaskKind, TaskSpec};
use weir::scheduler::journal::MemoryStore;
use weir::scheduler::{SchedulerError, Seams, Settings};

/// Long enough for any step here on a loaded machine: a failure shows as an error, not a hang.
const DEADLINE: Duration = Duration::from_secs(60);

fn settings(dir: &Path) -> Settings {
    Settings {
        listen: "127.0.0.1:0".parse().expect("an address"),
        access_file: dir.join("access.json"),
        read_access_file: None,
        heartbeat_timeout: Duration::from_secs(5),
        cert: None,
        scaling_interval: Duration::from_secs(1),
        scale_down_delay: Duration::from_secs(30),
        manager_forget_after: Duration::from_secs(60),
        max_drain_percent: 10,
        record_snapshots: None,
        // Named in errors only: the bytes are the store's.
        journal: Some(dir.join("journal")),
        metrics: None,
        dashboard: None,
        replica: None,
        max_connections: 100,
        forget_after: None,
        unschedulable_timeout: None,
        worker_lease: Duration::from_secs(10),
        idle_pace_per_worker: Duration::from_millis(2),
        prefetch: 0,
        max_walltime_requeues: 3,
    }
}

fn job() -> Vec<NewGroup> {
    let spec = TaskSpec {
        kind: TaskKind::Command {
            argv: vec!["true".into()],
            env: vec![],
        },
        capabilities: vec![],
        environments: vec![],
        priority: 0,
        timeout_ms: 0,
        retries: 0,
        input: vec![],
    };
    vec![NewGroup {
        spec,
        count: 2,
        inputs: vec![],
    }]
}

/// Start the real scheduler on `store`; its task (ending with the scheduler) and a client.
async fn start(
    dir: &Path,
    store: MemoryStore,
) -> (tokio::task::JoinHandle<Result<(), SchedulerError>>, Client) {
    let mut seams = Seams::real();
    seams.journal = Some(Box::new(store));
    let (ready, access) = tokio::sync::oneshot::channel::<AccessFile>();
    let scheduler = tokio::spawn(weir::scheduler::run_with(
        settings(dir),
        None,
        seams,
        move |running| {
            let _ = ready.send(running.access.clone());
        },
    ));
    let access = tokio::time::timeout(DEADLINE, access)
        .await
        .expect("the scheduler listens in time")
        .expect("the scheduler listens");
    let client = tokio::time::timeout(DEADLINE, Client::connect(&access))
        .await
        .expect("connects in time")
        .expect("connects");
    (scheduler, client)
}

#[test]
fn a_journal_whose_sync_fails_acknowledges_nothing_and_a_restart_has_every_acknowledged_job() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let store = MemoryStore::default();
    runtime.block_on(async {
        let (scheduler, client) = start(dir.path(), store.clone()).await;
        let (first, _, _) = tokio::time::timeout(DEADLINE, client.submit(vec![], job()))
            .await
            .expect("answered in time")
            .expect("acknowledged while the disk works");
        assert_eq!(first, 1);
        // The disk fails: the next submission is not acknowledged, and the scheduler stops.
        store.fail_syncs();
        let refused = tokio::time::timeout(DEADLINE, client.submit(vec![], job()))
            .await
            .expect("answered in time");
        let error = refused.expect_err("not acknowledged").to_string();
        assert!(
            error.contains("could not be written to the journal"),
            "{error}"
        );
        assert!(error.contains("the scheduler stops"), "{error}");
        let ended = tokio::time::timeout(DEADLINE, scheduler)
            .await
            .expect("the scheduler stops in time")
            .expect("its task did not panic");
        assert!(
            matches!(ended, Err(SchedulerError::Stopped(_))),
            "{ended:?}"
        );
    });
    // Restarted on what reached the disk: the acknowledged job, and ids go on after it.
    let synced = MemoryStore::with(store.durable());
    runtime.block_on(async {
        let (scheduler, client) = start(dir.path(), synced).await;
        let jobs = tokio::time::timeout(DEADLINE, client.jobs(10))
            .await
            .expect("answered in time")
            .expect("jobs");
        let ids: Vec<u64> = jobs.iter().map(|j| j.job).collect();
        assert_eq!(ids, [1], "{jobs:?}");
        let (next, _, _) = tokio::time::timeout(DEADLINE, client.submit(vec![], job()))
            .await
            .expect("answered in time")
            .expect("acknowledged");
        assert_eq!(next, 2);
        scheduler.abort();
    });
}
