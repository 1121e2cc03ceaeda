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
mod journaling;
mod policy;
mod resend;
mod twins;
mod walltime;

fn config(journal: bool) -> Config {
    Config {
        tasks: tasks::Config::default(),
        manager_timeout_ms: 10_000,
        manager_forget_ms: 60_000,
        lease_ms: 10_000,
        tick_ms: 500,
        scaling_ms: Some(1_000),
        scale_down_delay_ms: 0,
        unschedulable_timeout_ms: None,
        policy: PolicyInfo {
            name: "test-policy".into(),
            ..PolicyInfo::default()
        },
        tiers: vec![Tier {
            priority: 0,
            members: vec!["m1".into()],
        }],
        journal,
        compact_min_bytes: 1 << 20,
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
    Input::ManagerJoined {
        connection: 1_000,
        state,
        peer: "127.0.0.1:1".into(),
    }
}

fn manager(id: &str) -> ManagerState {
    ManagerState {
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
    let mut tasks = Vec::new();
    for action in actions {
        if let Action::ToWorker {
            message: ToWorker::Run(assignments),
            ..
        } = action
        {
            tasks.extend(assignments.iter().map(|a| a.task));
        }
    }
    tasks
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
