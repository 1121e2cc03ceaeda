//! The scheduler core without a network: unit cases for the rules, and property tests that
//! drive it with random event sequences (submits, joins, losses, finishes, duplicate and late
//! reports, cancels, ticks) and check the invariants after every step.

use std::collections::HashMap;

use crate::tasks::{Config, Effect, JobError, Loss, MAX_SPARED, SubmitError, Tasks};
use proptest::prelude::*;
use weir_proto::{
    EnvVerdict, NewGroup, Outcome, TaskKind, TaskSpec, TaskState, WorkerRegistration,
};

mod allocations;
mod basics;
mod fences;
mod prefetch;
mod property;
mod views;

fn spec(capabilities: &[(&str, u64)], priority: i32, retries: u32) -> TaskSpec {
    TaskSpec {
        kind: TaskKind::Command {
            argv: vec!["true".into()],
            env: vec![],
        },
        capabilities: capabilities
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect(),
        environments: vec![],
        priority,
        timeout_ms: 0,
        retries,
        input: vec![],
    }
}

fn group(count: u32, capabilities: &[(&str, u64)]) -> NewGroup {
    NewGroup {
        spec: spec(capabilities, 0, 3),
        count,
        inputs: vec![],
    }
}

fn worker(slots: u32, capabilities: &[(&str, u64)]) -> WorkerRegistration {
    // Each a process of its own: names are unique.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let instance = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    WorkerRegistration {
        name: format!("w{instance}"),
        instance,
        ends_in_ms: None,
        finished: vec![],
        slots,
        capabilities: capabilities
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect(),
        worker_type: String::new(),
        manager: None,
        local_environments: vec![],
        running: vec![],
    }
}

fn ok() -> Outcome {
    Outcome::Exited {
        code: Some(0),
        stdout: vec![],
        stderr: vec![],
    }
}

fn dispatched(actions: &[Effect]) -> HashMap<u64, Vec<u64>> {
    let mut map: HashMap<u64, Vec<u64>> = HashMap::new();
    for action in actions {
        if let Effect::Dispatch { worker, tasks } = action {
            map.entry(*worker).or_default().extend(tasks);
        }
    }
    map
}
