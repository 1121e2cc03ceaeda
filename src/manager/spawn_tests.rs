//! The process backend through its seams: a [`Spawner`] of fake processes and a clock moved by
//! hand, so the real `Pool` starts, reaps, replaces and stops workers with no process.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Process, Spawner};
use crate::clock::{ManualClock, Millis};
use crate::manager::{Pool, Seams, Settings};
use crate::net::udp::HostUdp;

/// A fake process's exit status, once it exited.
type Status = Arc<Mutex<Option<ExitStatus>>>;

/// Each process started: its arguments and status.
#[derive(Debug, Default)]
struct Fake {
    started: Mutex<Vec<(Vec<OsString>, Status)>>,
    /// Its processes outlive SIGTERM until the test ends them (a worker killing its tasks).
    linger: bool,
}

struct FakeProcess(Status, bool);

impl Spawner for Fake {
    fn spawn(
        &self,
        _program: &Path,
        args: &[OsString],
        _env: &[(String, String)],
    ) -> io::Result<Box<dyn Process>> {
        let status = Arc::new(Mutex::new(None));
        let mut started = self.started.lock().expect("not poisoned");
        started.push((args.to_vec(), status.clone()));
        Ok(Box::new(FakeProcess(status, self.linger)))
    }
}

impl Process for FakeProcess {
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        Ok(*self.0.lock().expect("not poisoned"))
    }

    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        // Only waited for after `terminate`, which ends it.
        let status = self.0.lock().expect("not poisoned").unwrap_or_default();
        Box::pin(async move { Ok(status) })
    }

    fn terminate(&mut self) {
        if !self.1 {
            *self.0.lock().expect("not poisoned") = Some(ExitStatus::from_raw(15));
        }
    }
}

fn settings(spawner: Arc<Fake>, clock: Millis) -> Settings {
    Settings {
        labels: Vec::new(),
        id: "pool".into(),
        worker_type: "default".into(),
        max_task_concurrency: 8,
        slots: 1,
        capabilities: vec![],
        worker_capabilities_flag: String::new(),
        env_plugin_flags: vec![],
        environments: vec![],
        fixed: Some(2),
        worker_command: "/opt/weir/worker".into(),
        access_file: "/tmp/access.json".into(),
        heartbeat_interval: Duration::from_millis(500),
        unit: None,
        ends_at: None,
        leave_before: Duration::from_secs(30),
        usable: None,
        seams: Seams {
            clock,
            spawner,
            udp: Arc::new(HostUdp),
            instances: super::super::Instances::Seeded(7),
        },
    }
}

fn names(fake: &Fake) -> Vec<String> {
    let started = fake.started.lock().expect("not poisoned");
    started
        .iter()
        .filter_map(|(args, _)| {
            let at = args.iter().position(|a| a == "--name")?;
            Some(args.get(at + 1)?.to_string_lossy().into_owned())
        })
        .collect()
}

/// The `--instance` each started worker was given, by name.
fn instances(fake: &Fake) -> Vec<(String, u64)> {
    let started = fake.started.lock().expect("not poisoned");
    started
        .iter()
        .filter_map(|(args, _)| {
            let arg = |flag: &str| {
                let at = args.iter().position(|a| a == flag)?;
                Some(args.get(at + 1)?.to_string_lossy().into_owned())
            };
            Some((arg("--name")?, arg("--instance")?.parse().ok()?))
        })
        .collect()
}

#[test]
fn the_pool_starts_replaces_after_a_backoff_and_stops_its_workers_through_the_spawner() {
    let fake = Arc::new(Fake::default());
    let manual = Arc::new(ManualClock::new());
    let mut pool = Pool::new(settings(fake.clone(), Millis::new(manual.clone())));
    pool.converge(0, &[], &[]).expect("starts");
    assert_eq!(names(&fake), ["pool-1", "pool-2"]);
    // One dies young: reaped and reported, replaced only after the backoff.
    let first = fake.started.lock().expect("not poisoned")[0].1.clone();
    *first.lock().expect("not poisoned") = Some(ExitStatus::from_raw(1 << 8));
    manual.advance(Duration::from_secs(1));
    pool.converge(0, &[], &[]).expect("converges");
    assert_eq!(names(&fake).len(), 2, "not replaced during the backoff");
    assert_eq!(pool.state().workers, ["pool-2"]);
    assert!(pool.state().exited.contains(&"pool-1".to_string()));
    // Each worker was given its instance, and the report names it (alive and exited alike).
    let given = instances(&fake);
    assert_eq!(given.len(), 2);
    assert_ne!(given[0].1, given[1].1);
    let mut reported = pool.state().instances;
    reported.sort();
    let mut expected = given.clone();
    expected.sort();
    assert_eq!(reported, expected);
    manual.advance(Duration::from_secs(120));
    pool.converge(0, &[], &[]).expect("converges");
    assert_eq!(names(&fake), ["pool-1", "pool-2", "pool-3"]);
    // Stopping all of them terminates every live one.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(pool.stop_all());
    let started = fake.started.lock().expect("not poisoned");
    for (_, status) in started.iter().skip(1) {
        assert_eq!(
            *status.lock().expect("not poisoned"),
            Some(ExitStatus::from_raw(15))
        );
    }
}

/// A fixed pool of two workers whose processes outlive SIGTERM, the first of which (pool-1) the
/// scheduler drained: it was sent SIGTERM and lingers. The spawner, the clock, the pool, and
/// the names registered.
fn pool_1_stopping() -> (Arc<Fake>, Arc<ManualClock>, Pool, [String; 2]) {
    let fake = Arc::new(Fake {
        linger: true,
        ..Fake::default()
    });
    let manual = Arc::new(ManualClock::new());
    let mut pool = Pool::new(settings(fake.clone(), Millis::new(manual.clone())));
    pool.converge(0, &[], &[]).expect("starts");
    let registered = ["pool-1".to_string(), "pool-2".to_string()];
    pool.converge(0, &registered[..1], &registered)
        .expect("converges");
    (fake, manual, pool, registered)
}

/// A worker sent SIGTERM is reported alive until its process has exited, then exited with its
/// instance: the scheduler takes that report as proof that the process is gone and requeues its
/// tasks at once, so it must not come while the worker may still run them (it kills them first).
#[test]
fn a_stopped_worker_is_reported_exited_only_once_its_process_has_exited() {
    let (fake, manual, mut pool, registered) = pool_1_stopping();
    let state = pool.state();
    assert!(state.workers.contains(&"pool-1".to_string()), "{state:?}");
    assert!(!state.exited.contains(&"pool-1".to_string()), "{state:?}");
    // It exits: the next round reports it exited, with its instance.
    let first = fake.started.lock().expect("not poisoned")[0].1.clone();
    *first.lock().expect("not poisoned") = Some(ExitStatus::from_raw(15));
    manual.advance(Duration::from_secs(1));
    pool.converge(0, &[], &registered[1..]).expect("converges");
    let state = pool.state();
    assert!(state.exited.contains(&"pool-1".to_string()), "{state:?}");
    assert!(!state.workers.contains(&"pool-1".to_string()), "{state:?}");
    let instance = instances(&fake)[0].1;
    assert!(state.instances.contains(&("pool-1".to_string(), instance)));
}

/// A decision to scale down, made before the workers just started registered, stops none of
/// them: they may have registered and taken tasks while it was on its way (the simulation's
/// seed 278 saw a busy worker stopped so). They go once the scheduler drains and names them.
#[test]
fn a_started_worker_is_stopped_only_once_named_never_as_one_too_many() {
    let fake = Arc::new(Fake::default());
    let manual = Arc::new(ManualClock::new());
    let dynamic = Settings {
        fixed: None,
        ..settings(fake.clone(), Millis::new(manual.clone()))
    };
    let mut pool = Pool::new(dynamic);
    pool.converge(2, &[], &[]).expect("starts");
    assert_eq!(names(&fake), ["pool-1", "pool-2"]);
    manual.advance(Duration::from_secs(1));
    pool.converge(0, &[], &[]).expect("converges");
    let alive = |fake: &Fake| {
        let started = fake.started.lock().expect("not poisoned");
        (started.iter())
            .map(|(_, status)| status.lock().expect("not poisoned").is_none())
            .collect::<Vec<_>>()
    };
    assert_eq!(alive(&fake), [true, true], "none stopped as one too many");
    assert_eq!(pool.state().workers, ["pool-1", "pool-2"]);
    let registered = ["pool-1".to_string(), "pool-2".to_string()];
    pool.converge(0, &registered[..1], &registered)
        .expect("converges");
    assert_eq!(alive(&fake), [false, true], "the one named is stopped");
    assert_eq!(names(&fake).len(), 2, "none started");
}

/// A worker told to stop runs until it exits, and counts toward the cap until then: its
/// replacement starts only once it is gone (the simulation's seed 17 saw a fourth worker under
/// a cap of three, started while a stopped one was still exiting).
#[test]
fn a_replacement_waits_for_the_stopped_worker_to_exit() {
    let (fake, manual, mut pool, registered) = pool_1_stopping();
    manual.advance(Duration::from_secs(1));
    pool.converge(0, &[], &registered[1..]).expect("converges");
    assert_eq!(
        names(&fake),
        ["pool-1", "pool-2"],
        "none while pool-1 exits"
    );
    let first = fake.started.lock().expect("not poisoned")[0].1.clone();
    *first.lock().expect("not poisoned") = Some(ExitStatus::from_raw(15));
    manual.advance(Duration::from_secs(1));
    pool.converge(0, &[], &registered[1..]).expect("converges");
    assert_eq!(
        names(&fake),
        ["pool-1", "pool-2", "pool-3"],
        "replaced once it exited"
    );
}
