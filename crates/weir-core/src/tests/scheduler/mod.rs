//! The scheduler core through its one entry point, `handle(now, Input)`, with no network, no
//! journal file and no policy thread: the order of what it asks the shell to do, the checks it
//! makes of a policy's decisions, and a replay of the records it journaled.

use crate::record::Record;
use crate::scaling::{Decision, PolicyFailure, Tier};
use crate::scheduler::{Action, Config, Input, PolicyInfo, Scheduler};
use crate::tasks;
use weir_proto::{
    JobCounts, ManagerState, NewGroup, Outcome, Request, Response, TaskKind, TaskSpec, TaskState,
    ToManager, ToWorker, WorkerRegistration,
};

mod clients;
mod compaction;
mod connections;
mod demand;
mod drain;
mod journaling;
mod paces;
mod policy;
mod resend;
mod twins;
mod unrunnable;
mod walltime;

fn config(journal: bool) -> Config {
    Config {
        tasks: tasks::Config::default(),
        manager_timeout_ms: 10_000,
        manager_forget_ms: 60_000,
        lease_ms: 10_000,
        idle_pace_per_worker_us: 2_000,
        tick_ms: 500,
        scaling_ms: Some(1_000),
        scale_down_delay_ms: 0,
        max_drain_percent: 10,
        unschedulable_timeout_ms: None,
        policy: PolicyInfo {
            name: "test-policy".into(),
            ..PolicyInfo::default()
        },
        tiers: vec![Tier {
            priority: 0,
            members: vec!["m1".into()],
            ..Default::default()
        }],
        journal,
        compact_min_bytes: 1 << 20,
        restart_grace_ms: 20_000,
    }
}

fn submit(count: u32) -> Request {
    Request::Submit {
        groups: vec![NewGroup {
            spec: TaskSpec {
                kind: TaskKind::Command {
                    argv: vec!["true".into()],
                    env: vec![],
                },
                capabilities: vec![],
                environments: vec![],
                priority: 0,
                timeout_ms: 0,
                retries: 1,
                input: vec![],
            },
            count,
            inputs: vec![],
        }],
        components: vec![],
        request: None,
    }
}

fn worker(name: &str, slots: u32) -> WorkerRegistration {
    WorkerRegistration {
        name: name.into(),
        slots,
        capabilities: vec![],
        worker_type: String::new(),
        manager: None,
        local_environments: vec![],
        running: vec![],
        instance: name.bytes().map(u64::from).sum(),
        ends_in_ms: None,
        finished: vec![],
    }
}

/// A manager's connection registers with its first heartbeat.
fn manager_joins(state: ManagerState) -> Input {
    manager_joins_on(1_000, state)
}

/// [`manager_joins`] on another connection (a second manager, or a restart).
fn manager_joins_on(connection: u64, state: ManagerState) -> Input {
    Input::ManagerJoined {
        connection,
        state,
        peer: format!("127.0.0.1:{connection}"),
    }
}

fn manager(id: &str) -> ManagerState {
    ManagerState {
        labels: Vec::new(),
        id: id.into(),
        worker_type: "t".into(),
        max_task_concurrency: 4,
        worker_slots: 1,
        capabilities: vec![],
        workers: vec![],
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

fn ok() -> Outcome {
    Outcome::Exited {
        code: Some(0),
        stdout: b"done".to_vec(),
        stderr: vec![],
    }
}

/// A worker registering on connection `connection`.
fn join(connection: u64, info: WorkerRegistration) -> Input {
    Input::WorkerJoined { connection, info }
}

/// A client's request that brings no component.
fn from_client(client: u64, request: Request) -> Input {
    Input::Request {
        client,
        request,
        components: vec![],
    }
}

/// Feed inputs, end the batch, and return what the core asks for (the whole core sane after).
fn round(core: &mut Scheduler, now: u64, inputs: Vec<Input>) -> Vec<Action> {
    for input in inputs {
        core.handle(now, input);
    }
    core.handle(now, Input::EndOfBatch);
    if let Err(error) = core.sanity_check() {
        panic!("after a round at {now}: {error}");
    }
    core.take_actions()
}

fn position(actions: &[Action], what: impl Fn(&Action) -> bool) -> usize {
    actions
        .iter()
        .position(what)
        .unwrap_or_else(|| panic!("not found in {actions:#?}"))
}

fn runs(actions: &[Action]) -> Vec<u64> {
    assigned(actions)
        .into_iter()
        .map(|(_, task)| task)
        .collect()
}

/// (worker, task) of every task handed out among `actions`, in order.
fn assigned(actions: &[Action]) -> Vec<(u64, u64)> {
    let mut sent = Vec::new();
    for action in actions {
        if let Action::ToWorker {
            worker,
            message: ToWorker::Run(assignments),
        } = action
        {
            sent.extend(assignments.iter().map(|a| (*worker, a.task)));
        }
    }
    sent
}

fn replies(actions: &[Action], to: u64) -> Vec<(&Response, bool)> {
    let mut found = Vec::new();
    for action in actions {
        if let Action::Reply {
            client,
            response,
            last,
            ..
        } = action
            && *client == to
        {
            found.push((response, *last));
        }
    }
    found
}

fn journaled(actions: &[Action]) -> Vec<Record> {
    let mut records = Vec::new();
    for action in actions {
        if let Action::Journal { record, .. } = action {
            records.push(copy(record));
        }
    }
    records
}

/// Records are not Clone: round-trip one as the journal does.
fn copy(record: &Record) -> Record {
    let bytes = postcard::to_stdvec(record).expect("encodes");
    postcard::from_bytes(&bytes).expect("decodes")
}

/// A scheduler started from `records` (replayed, then `Replayed`): what it does first.
fn restarted(records: impl IntoIterator<Item = Record>) -> Vec<Action> {
    let mut core = Scheduler::new(config(true));
    for record in records {
        core.handle(10, Input::Replay(record));
    }
    core.handle(10, Input::Replayed);
    core.take_actions()
}

/// Queued tasks nothing could run were canceled, and tasks of the same class were submitted
/// long after: they get the whole `--unschedulable-timeout` from when they were found stuck,
/// not from when the first ones were (the class is reused; what was kept of it is not).
#[test]
fn a_class_stuck_again_long_after_gets_its_whole_unschedulable_timeout() {
    let mut config = config(false);
    config.unschedulable_timeout_ms = Some(1_000);
    let mut core = Scheduler::new(config);
    let needing_a_gpu = || {
        let mut request = submit(1);
        if let Request::Submit { groups, .. } = &mut request {
            groups[0].spec.capabilities = vec![("gpu".into(), 1)];
        }
        request
    };
    let failed = |core: &Scheduler| core.tasks().status().tasks.failed;
    round(&mut core, 0, vec![from_client(1, needing_a_gpu())]);
    // Found stuck (no worker, no manager), then canceled before its timeout.
    round(&mut core, 600, vec![Input::Timeout]);
    round(
        &mut core,
        700,
        vec![from_client(1, Request::CancelTasks { tasks: vec![1] })],
    );
    round(&mut core, 1_200, vec![Input::Timeout]);
    // The same class again, 10 s on: not failed at once.
    round(&mut core, 10_000, vec![from_client(1, needing_a_gpu())]);
    for now in [10_500, 11_000] {
        round(&mut core, now, vec![Input::Timeout]);
        assert_eq!(failed(&core), 0, "failed at {now}, within its own timeout");
    }
    for now in [11_500, 12_000] {
        round(&mut core, now, vec![Input::Timeout]);
    }
    assert_eq!(failed(&core), 1, "failed once stuck for its own timeout");
}
