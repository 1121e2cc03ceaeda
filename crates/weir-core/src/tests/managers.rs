//! The manager controller (`core::managers::Managers`) on its own: which registered workers a
//! heartbeat reveals gone, when a manager is offline and forgotten, what the snapshot holds
//! (fixed pools left out, verdicts learned and forgotten), and the allocation view of units.

use std::collections::{BTreeMap, BTreeSet};

use crate::managers::{Context, Gone, Managers};
use crate::scaling::{Decision, Demand, Tier, Verdict};
use crate::tasks::WorkerView;
use weir_proto::{EnvVerdict, ManagerState, UnitReport, UnitState};

fn state(id: &str, workers: &[&str]) -> ManagerState {
    ManagerState {
        labels: Vec::new(),
        id: id.into(),
        worker_type: "cpu".into(),
        max_task_concurrency: 8,
        worker_slots: 2,
        capabilities: vec![],
        workers: workers.iter().map(|w| w.to_string()).collect(),
        environments: vec![],
        fixed: None,
        exited: vec![],
        backend: String::new(),
        units: vec![],
        usable_ms: None,
        instances: vec![],
        launch: Default::default(),
    }
}

/// `state` naming each worker's process as [`view`] registers it (instance = id).
fn naming(mut state: ManagerState, instances: &[(&str, u64)]) -> ManagerState {
    state.instances = instances.iter().map(|(n, i)| (n.to_string(), *i)).collect();
    state
}

/// No verdict yet.
static NO_VERDICTS: BTreeMap<String, EnvVerdict> = BTreeMap::new();

fn view<'a>(id: u64, name: &'a str, manager: &'a str) -> WorkerView<'a> {
    WorkerView {
        id,
        name,
        instance: id,
        manager: Some(manager),
        slots: 2,
        busy: 0,
        idle_ms: 0,
        draining: false,
        cordoned: false,
        verdicts: &NO_VERDICTS,
    }
}

/// No decision applied yet.
static NO_DECISIONS: std::sync::LazyLock<crate::hash::HashMap<String, Decision>> =
    std::sync::LazyLock::new(Default::default);

fn context<'a>(now: u64, workers: Vec<WorkerView<'a>>, tiers: &'a [Tier]) -> Context<'a> {
    Context::new(now, workers, tiers, BTreeSet::new(), &NO_DECISIONS)
}

fn wanting(environment: &str) -> Vec<Demand> {
    vec![Demand {
        capabilities: vec![],
        environments: vec![environment.into()],
        queued: 1,
        running: 0,
        ..Default::default()
    }]
}

#[test]
fn a_worker_listed_then_missing_or_reported_exited_is_gone_at_once() {
    let mut managers = Managers::new(5_000);
    let workers = vec![view(1, "a", "m"), view(2, "b", "m"), view(3, "c", "m")];
    // "c" registered before the manager ever listed it: absence alone proves nothing.
    assert!(
        managers
            .heartbeat(
                0,
                naming(state("m", &["a", "b"]), &[("a", 1), ("b", 2)]),
                &workers
            )
            .is_empty()
    );
    let mut next = naming(state("m", &["b"]), &[("b", 2), ("c", 3)]);
    next.exited = vec!["c".into()];
    let mut gone = managers.heartbeat(1_000, next, &workers);
    gone.sort();
    assert_eq!(
        gone,
        vec![(1, Gone::Exited), (3, Gone::Exited)],
        "a: missing, c: exited"
    );
}

#[test]
fn a_restarted_manager_that_does_not_list_its_workers_yet_loses_none_of_them() {
    let mut managers = Managers::new(5_000);
    let workers = vec![view(1, "a", "m"), view(2, "b", "m")];
    managers.heartbeat(0, state("m", &["a", "b"]), &workers);
    // A new process under the same id (it adopts its batch jobs only after its first heartbeat):
    // absence from its first heartbeat proves nothing; what it says exited is still gone.
    managers
        .connect("m", "10.0.0.2:1".into())
        .expect("no other connection holds the id");
    let mut first = naming(state("m", &[]), &[("b", 2)]);
    first.exited = vec!["b".into()];
    assert_eq!(
        managers.heartbeat(1_000, first, &workers),
        vec![(2, Gone::Exited)]
    );
    let listed = naming(state("m", &["a"]), &[("a", 1)]);
    assert!(managers.heartbeat(2_000, listed, &workers).is_empty());
    // From then on, the same rule as ever: listed, then missing, is gone (the process it
    // named in its last report).
    assert_eq!(
        managers.heartbeat(3_000, state("m", &[]), &workers),
        vec![(1, Gone::Exited)]
    );
}

#[test]
fn a_drained_worker_that_is_gone_was_stopped_on_purpose() {
    let mut managers = Managers::new(5_000);
    let mut draining = view(1, "a", "m");
    draining.draining = true;
    let report = naming(state("m", &[]), &[("a", 1), ("b", 2)]);
    let gone = managers.heartbeat(0, report, &[draining, view(2, "b", "other")]);
    assert_eq!(
        gone,
        vec![(1, Gone::Stopped)],
        "another manager's worker is not its business"
    );
}

/// Two processes may hold one name (a twin manager started with the id names its workers as
/// the first does): a report of another process of the name is not about the registered
/// worker; a report naming no process may be, so it is unproven (fenced by the caller). What a
/// previous connection said of a name's process proves nothing for the next one.
#[test]
fn a_report_of_a_name_is_believed_at_once_only_of_the_process_it_names() {
    let workers = vec![view(1, "a", "m")];
    let exited = |instances: &[(&str, u64)]| {
        let mut report = naming(state("m", &[]), instances);
        report.exited = vec!["a".into()];
        report
    };
    let mut managers = Managers::new(5_000);
    // Another process of the name, exited, or listed then missing: left out.
    assert!(
        managers
            .heartbeat(0, exited(&[("a", 9)]), &workers)
            .is_empty()
    );
    let listed = naming(state("m", &["a"]), &[("a", 9)]);
    assert!(managers.heartbeat(1_000, listed, &workers).is_empty());
    assert!(
        managers
            .heartbeat(2_000, state("m", &[]), &workers)
            .is_empty()
    );
    // No process named: unproven.
    assert_eq!(
        managers.heartbeat(3_000, exited(&[]), &workers),
        vec![(1, Gone::Unproven)]
    );
    // One of the processes it names is this one: gone at once.
    assert_eq!(
        managers.heartbeat(4_000, exited(&[("a", 9), ("a", 1)]), &workers),
        vec![(1, Gone::Exited)]
    );
    // A new connection of the id: what the last one named is forgotten.
    let listed = naming(state("m", &["a"]), &[("a", 1)]);
    managers.heartbeat(5_000, listed, &workers);
    managers.disconnect("m");
    managers
        .connect("m", "10.0.0.2:1".into())
        .expect("no other connection holds the id");
    assert_eq!(
        managers.heartbeat(6_000, exited(&[]), &workers),
        vec![(1, Gone::Unproven)]
    );
}

#[test]
fn a_silent_manager_is_offline_then_forgotten() {
    let mut managers = Managers::new(5_000);
    managers.heartbeat(0, state("m", &[]), &[]);
    let tiers = [Tier {
        priority: 0,
        members: vec!["m".into()],
        ..Default::default()
    }];
    let online = |managers: &Managers, now| {
        let snapshot = managers.snapshot(&context(now, vec![], &tiers), 0, vec![]);
        snapshot
            .managers
            .iter()
            .map(|m| m.online)
            .collect::<Vec<_>>()
    };
    assert_eq!(online(&managers, 5_000), vec![true]);
    assert_eq!(online(&managers, 5_001), vec![false]);
    managers.drop_offline(60_000, 60_000);
    assert_eq!(managers.status(&context(60_000, vec![], &tiers)).len(), 1);
    managers.drop_offline(60_001, 60_000);
    assert!(managers.status(&context(60_001, vec![], &tiers)).is_empty());
}

#[test]
fn fixed_pools_are_not_for_the_policy() {
    let mut managers = Managers::new(5_000);
    let mut fixed = state("f", &[]);
    fixed.fixed = Some(3);
    managers.heartbeat(0, fixed, &[]);
    assert!(!managers.any_scalable());
    let snapshot = managers.snapshot(&context(0, vec![], &[]), 0, vec![]);
    assert!(snapshot.managers.is_empty());
    managers.heartbeat(0, state("m", &[]), &[]);
    assert!(managers.any_scalable());
    let snapshot = managers.snapshot(&context(0, vec![], &[]), 0, vec![]);
    let ids: Vec<&str> = snapshot.managers.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["m"]);
}

/// What the policy's snapshot says of the first manager on `big`, registered at run time (so
/// every worker evaluates it), with `workers` live.
fn snapshot_verdict(managers: &Managers, workers: Vec<WorkerView>) -> Vec<(String, Verdict)> {
    let registered = BTreeSet::from(["big".to_string()]);
    let context = Context::new(0, workers, &[], registered, &NO_DECISIONS);
    let snapshot = managers.snapshot(&context, 0, wanting("big"));
    snapshot.managers[0].environments.clone()
}

#[test]
fn what_its_workers_answered_is_remembered_until_the_definition_changes() {
    let mut managers = Managers::new(5_000);
    managers.heartbeat(0, state("m", &["a"]), &[]);
    // Registered at run time: its workers will evaluate it, so the policy may start one.
    assert_eq!(
        snapshot_verdict(&managers, vec![]),
        vec![("big".to_string(), Verdict::Unknown)]
    );
    let no_match = BTreeMap::from([("big".to_string(), EnvVerdict::NoMatch)]);
    let mut asked = view(1, "a", "m");
    asked.verdicts = &no_match;
    managers.heartbeat(10, state("m", &["a"]), std::slice::from_ref(&asked));
    // The worker is gone; what it answered stays.
    managers.heartbeat(20, state("m", &[]), &[asked]);
    assert_eq!(
        snapshot_verdict(&managers, vec![]),
        vec![("big".to_string(), Verdict::NoMatch)]
    );
    managers.forget_verdicts("big");
    assert_eq!(
        snapshot_verdict(&managers, vec![]),
        vec![("big".to_string(), Verdict::Unknown)]
    );
}

/// Workers of one manager that disagree: the manager matches if any of them does, whichever
/// answered first, now and after they are gone; a later answer replaces what was learned.
#[test]
fn a_manager_matches_where_any_of_its_workers_does_and_remembers_it() {
    let no_match = BTreeMap::from([("big".to_string(), EnvVerdict::NoMatch)]);
    let matched = BTreeMap::from([("big".to_string(), EnvVerdict::Match)]);
    let failed = BTreeMap::from([("big".to_string(), EnvVerdict::Error("trap".into()))]);
    for order in [[&no_match, &matched], [&matched, &no_match]] {
        let mut managers = Managers::new(5_000);
        let (mut a, mut b) = (view(1, "a", "m"), view(2, "b", "m"));
        (a.verdicts, b.verdicts) = (order[0], order[1]);
        let both = [a, b];
        managers.heartbeat(0, state("m", &["a", "b"]), &both);
        let now = snapshot_verdict(&managers, both.to_vec());
        assert_eq!(now, vec![("big".to_string(), Verdict::Match)]);
        // Both gone: what they answered stays.
        let gone = managers.heartbeat(10, state("m", &[]), &both);
        assert_eq!(gone.len(), 2);
        let after = snapshot_verdict(&managers, vec![]);
        assert_eq!(after, vec![("big".to_string(), Verdict::Match)]);
        // A new worker whose condition fails replaces it: an error is no match.
        let mut c = view(3, "c", "m");
        c.verdicts = &failed;
        managers.heartbeat(20, state("m", &["c"]), &[c]);
        let later = snapshot_verdict(&managers, vec![]);
        assert_eq!(later, vec![("big".to_string(), Verdict::NoMatch)]);
    }
}

/// A manager that changes its own definition of a name is asked again; one that repeats it
/// keeps what its workers answered.
#[test]
fn a_manager_whose_definition_changes_is_asked_again() {
    let declaring = |config: &str, workers: &[&str]| {
        let mut report = state("m", workers);
        report.environments = vec![weir_proto::EnvironmentDef {
            name: "big".into(),
            component: [7; 32],
            config: vec![("bytes".into(), config.into())],
        }];
        report
    };
    let snapshot_verdict = |managers: &Managers| {
        let context = context(0, vec![], &[]);
        let snapshot = managers.snapshot(&context, 0, wanting("big"));
        snapshot.managers[0].environments.clone()
    };
    let no_match = BTreeMap::from([("big".to_string(), EnvVerdict::NoMatch)]);
    let mut asked = view(1, "a", "m");
    asked.verdicts = &no_match;
    let mut managers = Managers::new(5_000);
    managers.heartbeat(0, declaring("1", &["a"]), &[asked]);
    managers.heartbeat(10, declaring("1", &[]), &[asked]);
    let kept = snapshot_verdict(&managers);
    assert_eq!(kept, vec![("big".to_string(), Verdict::NoMatch)]);
    managers.heartbeat(20, declaring("2", &[]), &[]);
    let asked_again = snapshot_verdict(&managers);
    assert_eq!(asked_again, vec![("big".to_string(), Verdict::Unknown)]);
}

#[test]
fn a_name_nobody_there_evaluates_never_matches() {
    let mut managers = Managers::new(5_000);
    managers.heartbeat(0, state("m", &[]), &[]);
    let snapshot = managers.snapshot(&context(0, vec![], &[]), 0, wanting("gpu-box"));
    assert_eq!(
        snapshot.managers[0].environments,
        vec![("gpu-box".to_string(), Verdict::NoMatch)]
    );
}

#[test]
fn a_worker_still_evaluating_a_wanted_environment_is_starting_not_idle() {
    let mut managers = Managers::new(5_000);
    let mut registered = BTreeSet::new();
    registered.insert("big".to_string());
    managers.heartbeat(0, state("m", &["a", "b"]), &[]);
    let matched = BTreeMap::from([("big".to_string(), EnvVerdict::Match)]);
    let mut answered = view(2, "b", "m");
    answered.verdicts = &matched;
    answered.idle_ms = 9_000;
    let mut pending = view(1, "a", "m");
    pending.idle_ms = 9_000;
    let context = Context::new(0, vec![pending, answered], &[], registered, &NO_DECISIONS);
    let snapshot = managers.snapshot(&context, 1_000, wanting("big"));
    let m = &snapshot.managers[0];
    let ids: Vec<u64> = m.workers.iter().map(|w| w.id).collect();
    assert_eq!(
        ids,
        [2],
        "only the worker that answered may be stopped as idle"
    );
    assert_eq!(m.starting, 1);
    // Demand for nothing it evaluates: both are plain workers.
    let snapshot = managers.snapshot(&context, 1_000, vec![]);
    assert_eq!(snapshot.managers[0].workers.len(), 2);
    assert_eq!(snapshot.managers[0].starting, 0);
}

fn unit(id: &str, state: UnitState, reason: Option<&str>, workers: &[&str]) -> UnitReport {
    UnitReport {
        id: id.into(),
        state,
        reason: reason.map(str::to_string),
        age_ms: 10_000,
        workers: workers.iter().map(|w| w.to_string()).collect(),
        time_left_ms: Some(600_000),
        ended_ms: None,
    }
}

#[test]
fn the_allocation_view_is_the_last_report_aged_to_now() {
    let mut managers = Managers::new(60_000);
    let mut hpc = state(
        "hpc",
        &["hpc-12-1", "hpc-12-2", "hpc-13-1", "hpc-13-2", "hpc-14-1"],
    );
    hpc.backend = "slurm".into();
    let mut ended = unit("11", UnitState::Ended, Some("drained"), &[]);
    (ended.time_left_ms, ended.ended_ms) = (None, Some(1_000));
    hpc.units = vec![
        unit("12", UnitState::Running, None, &["hpc-12-1", "hpc-12-2"]),
        unit(
            "13",
            UnitState::Pending,
            Some("JobHeldUser"),
            &["hpc-13-1", "hpc-13-2"],
        ),
        ended,
        // Its manager has not heard yet that its worker registered.
        unit("14", UnitState::Pending, None, &["hpc-14-1"]),
    ];
    let workers = vec![
        view(1, "hpc-12-1", "hpc"),
        view(2, "local-1", "local"),
        view(3, "hpc-14-1", "hpc"),
    ];
    managers.heartbeat(1_000, hpc, &workers);
    managers.heartbeat(1_000, state("local", &["local-1"]), &workers);

    // Asked 3 s after the report: the running job is 3 s older with 3 s less left; the held
    // one's time left is its whole limit still; the ended one lived as long, ended 3 s longer ago.
    let view = managers
        .units(&context(4_000, workers.clone(), &[]), Some("hpc"))
        .expect("hpc reported");
    assert_eq!(view.len(), 1);
    let hpc = &view[0];
    assert_eq!(
        (hpc.status.id.as_str(), hpc.backend.as_str()),
        ("hpc", "slurm")
    );
    assert_eq!(
        hpc.registered,
        ["hpc-12-1", "hpc-14-1"],
        "only its own registered workers"
    );
    let ages: Vec<_> = hpc
        .units
        .iter()
        .map(|u| (u.id.as_str(), u.state, u.age_ms, u.time_left_ms, u.ended_ms))
        .collect();
    assert_eq!(
        ages,
        [
            ("12", UnitState::Running, 13_000, Some(597_000), None),
            ("13", UnitState::Pending, 13_000, Some(600_000), None),
            ("11", UnitState::Ended, 10_000, None, Some(4_000)),
            ("14", UnitState::Running, 13_000, Some(597_000), None),
        ]
    );
    assert_eq!(hpc.units[1].reason.as_deref(), Some("JobHeldUser"));

    let all = managers.units(&context(4_000, workers.clone(), &[]), None);
    let ids: Vec<_> = all.iter().flatten().map(|m| m.status.id.clone()).collect();
    assert_eq!(ids, ["hpc", "local"]);
    assert!(
        managers
            .units(&context(4_000, workers, &[]), Some("nobody"))
            .is_none()
    );
}

#[test]
fn the_snapshot_tells_how_long_workers_have_been_starting_and_how_starts_failed() {
    let mut managers = Managers::new(60_000);
    let mut hpc = state("hpc", &["hpc-12-1", "hpc-12-2", "hpc-13-1", "hpc-14-1"]);
    let mut younger = unit("13", UnitState::Pending, Some("Priority"), &["hpc-13-1"]);
    younger.age_ms = 4_000;
    let mut stopping = unit("15", UnitState::Completing, None, &["hpc-15-1"]);
    stopping.age_ms = 50_000;
    hpc.units = vec![
        // One of its two workers registered: the other is still starting.
        unit("12", UnitState::Running, None, &["hpc-12-1", "hpc-12-2"]),
        younger,
        unit("14", UnitState::Pending, None, &["hpc-14-1"]),
        // Being stopped: not starting, whatever its age.
        stopping,
    ];
    hpc.launch = weir_proto::LaunchReport {
        failures: 2,
        last_failure_ms: Some(1_500),
        backoff_ms: 2_000,
    };
    let workers = vec![view(1, "hpc-12-1", "hpc")];
    managers.heartbeat(1_000, hpc, &workers);

    // 3 s after the report: every age 3 s older, the backoff 3 s shorter (over).
    let snapshot = managers.snapshot(&context(4_000, workers, &[]), 30_000, Vec::new());
    let hpc = &snapshot.managers[0];
    assert_eq!(hpc.starting, 3, "hpc-12-2, hpc-13-1, hpc-14-1");
    assert_eq!(
        hpc.starting_ages_ms,
        [13_000, 13_000, 7_000],
        "oldest first"
    );
    assert_eq!(
        hpc.launch,
        crate::scaling::Launch {
            failures: 2,
            last_failure_ms: Some(4_500),
            backoff_ms: 0,
        }
    );
}
