//! What the policy and the dashboard read of tasks: each demand group's oldest wait and run
//! times, the task stream, a job's page.

use super::*;

#[test]
fn the_demand_tells_how_long_the_oldest_task_waited_and_how_long_tasks_ran() {
    let mut core = Tasks::new(Config::default());
    let cpu = &[("cpu", 1)];
    core.submit_as(1_000, vec![group(3, cpu)], None).unwrap(); // 1, 2, 3
    core.submit_as(2_000, vec![group(1, &[("gpu", 1)])], None)
        .unwrap(); // 4: nothing here runs it
    let urgent = NewGroup {
        spec: spec(cpu, 5, 3),
        count: 2,
        inputs: vec![],
    };
    core.submit_as(5_000, vec![urgent], None).unwrap(); // 5, 6: first
    let w = core.worker_joined(5_000, worker(1, cpu)).expect("joins").0;
    for (at, task, ends) in [(6_000, 5, 6_500), (6_500, 6, 8_500)] {
        core.schedule(at);
        assert_eq!(dispatched(&core.take_effects())[&w], [task]);
        assert!(core.finished(ends, w, task, ok()));
    }
    core.schedule(8_500);
    assert_eq!(dispatched(&core.take_effects())[&w], [1]);

    let demand = |core: &Tasks| {
        let mut demand: Vec<_> = (core.demand(10_000).into_iter())
            .map(|d| {
                (
                    d.capabilities[0].0.clone(),
                    d.queued,
                    d.oldest_queued_ms,
                    d.runtimes,
                )
            })
            .collect();
        demand.sort_by(|a, b| a.0.cmp(&b.0));
        demand
    };
    let ran = crate::scaling::Runtimes {
        count: 2,
        p50_ms: 500,
        p90_ms: 2_000,
        max_ms: 2_000,
    };
    assert_eq!(
        demand(&core),
        [
            // Tasks 2 and 3 waited since 1 000; 5 and 6 ran 500 ms and 2 s (one class with
            // the queue of priority 5).
            ("cpu".to_string(), 2, 9_000, Some(ran.clone())),
            ("gpu".to_string(), 1, 8_000, None),
        ]
    );
    // Canceled, the queued ones wait no longer (task 1 still runs: the group stays).
    assert_eq!(core.cancel_tasks(&[2, 3]), 2);
    assert_eq!(demand(&core)[0], ("cpu".to_string(), 0, 0, Some(ran)));
}

/// Canceled tasks used to leave their queue only when scheduling reached them, and the demand
/// looked past a bounded number of them: a canceled job of 2,000 tasks ahead of a queued one
/// (and no worker to schedule on) made the queued task's wait read 0 to the policy.
#[test]
fn a_canceled_job_ahead_in_the_queue_does_not_hide_how_long_the_next_task_waited() {
    let mut core = Tasks::new(Config::default());
    let cpu = &[("cpu", 1)];
    let (big, _, _) = core
        .submit_as(1_000, vec![group(2_000, cpu)], None)
        .unwrap();
    let (_, waiting, _) = core.submit_as(2_000, vec![group(1, cpu)], None).unwrap();
    assert_eq!(core.cancel_job(big), 2_000);
    let demand = core.demand(10_000);
    assert_eq!(demand.len(), 1, "{demand:?}");
    assert_eq!((demand[0].queued, demand[0].oldest_queued_ms), (1, 8_000));
    // And it is still the one scheduled first.
    let w = core.worker_joined(10_000, worker(1, cpu)).expect("joins").0;
    core.schedule(10_000);
    assert_eq!(dispatched(&core.take_effects())[&w], [waiting]);
}

/// The same after a restart: the journal's replay marks the canceled tasks final where they
/// wait, and the placement round that would drop them needs a worker. A cancel of part of a
/// job, and a queue of another priority that is canceled whole, too.
#[test]
fn after_a_restart_canceled_tasks_ahead_do_not_hide_the_wait_either() {
    let cpu = &[("cpu", 1)];
    for fence_ms in [0, 10_000] {
        let mut replayed = Tasks::new(Config {
            fence_ms,
            ..Config::default()
        });
        replayed.restore(vec![group(2_000, cpu)], None).unwrap(); // 1..=2000
        replayed.restore(vec![group(1, cpu)], None).unwrap(); // 2001
        let urgent = NewGroup {
            spec: spec(cpu, 5, 3),
            count: 3,
            inputs: vec![],
        };
        replayed.restore(vec![urgent], None).unwrap(); // 2002..=2004, a queue of their own
        let canceled = || Outcome::Error {
            message: "canceled".into(),
        };
        for task in (1..=2_000).chain(2_002..=2_004) {
            replayed.restore_final(task, TaskState::Canceled, canceled(), 0);
        }
        replayed.fence_unfinished(5_000);
        replayed.sanity_check().unwrap();
        let demand = replayed.demand(10_000);
        assert_eq!(demand.len(), 1, "{demand:?}");
        assert_eq!(
            (demand[0].queued, demand[0].oldest_queued_ms),
            (1, 10_000),
            "fence {fence_ms}"
        );
        // Part of a job canceled in the running scheduler: the rest still waits, the front
        // is the first of it.
        let (_, first, _) = replayed
            .submit_as(6_000, vec![group(4, cpu)], None)
            .unwrap();
        assert_eq!(replayed.cancel_tasks(&[2_001, first, first + 1]), 3);
        let demand = replayed.demand(10_000);
        assert_eq!((demand[0].queued, demand[0].oldest_queued_ms), (2, 4_000));
        let w = replayed
            .worker_joined(10_000, worker(1, cpu))
            .expect("joins")
            .0;
        replayed.schedule(10_000);
        assert_eq!(dispatched(&replayed.take_effects())[&w], [first + 2]);
        replayed.sanity_check().unwrap();
    }
}

#[test]
fn the_task_stream_has_each_finished_run_with_its_times_and_the_runs_now() {
    let mut core = Tasks::new(Config::default());
    let (job, first, _) = core
        .submit(vec![NewGroup {
            spec: spec(&[], 0, 0),
            count: 3,
            inputs: vec![],
        }])
        .unwrap();
    let info = worker(2, &[]);
    let name = info.name.clone();
    let w = core.worker_joined(100, info).unwrap().0;
    core.schedule(100);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![first, first + 1]);
    let failed = Outcome::Exited {
        code: Some(1),
        stdout: vec![],
        stderr: vec![],
    };
    assert!(core.finished(400, w, first, ok()));
    assert!(core.finished(900, w, first + 1, failed));
    core.schedule(900);
    let run = |task, started_ms, ended_ms, failed| crate::tasks::Run {
        task,
        job,
        worker: name.clone(),
        started_ms,
        ended_ms,
        failed,
    };
    // A task handed to a free slot is timed from its hand-over (one held ahead, from its start).
    assert_eq!(
        core.stream(0),
        vec![
            run(first, 100, Some(400), false),
            run(first + 1, 100, Some(900), true),
            run(first + 2, 900, None, false),
        ]
    );
    // Since a time: the runs that ended since, and the one running.
    assert_eq!(
        core.stream(500),
        vec![
            run(first + 1, 100, Some(900), true),
            run(first + 2, 900, None, false)
        ]
    );
    core.sanity_check().unwrap();
}

#[test]
fn a_jobs_detail_lists_its_failures_with_their_error_and_where_its_tasks_ran() {
    let mut core = Tasks::new(Config::default());
    let (job, first, _) = core
        .submit(vec![NewGroup {
            spec: spec(&[], 0, 0),
            count: 3,
            inputs: vec![],
        }])
        .unwrap();
    let info = worker(3, &[]);
    let name = info.name.clone();
    let w = core.worker_joined(0, info).unwrap().0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&w].len(), 3);
    let failed = Outcome::Exited {
        code: Some(2),
        stdout: vec![],
        stderr: b"reading input\nboom: no such file\n".to_vec(),
    };
    assert!(core.finished(10, w, first, ok()));
    assert!(core.finished(20, w, first + 1, failed));
    let detail = core.job_detail(job).unwrap();
    assert_eq!(
        (
            detail.counts.succeeded,
            detail.counts.failed,
            detail.counts.running
        ),
        (1, 1, 1)
    );
    assert_eq!(
        detail.failures,
        vec![crate::tasks::Failure {
            task: first + 1,
            attempts: 1,
            ran_on: Some(format!("worker {name}")),
            error: "exit code 2: reading input\nboom: no such file".into(),
        }]
    );
    assert!(detail.retried.is_empty());
    assert_eq!(detail.ran_on, vec![(format!("worker {name}"), 2)]);
    assert!(core.job_detail(job + 1).is_err());
}
