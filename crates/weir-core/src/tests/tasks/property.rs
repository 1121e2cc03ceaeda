//! The property test: random event sequences, the invariants checked after every step, and a
//! compacted journal that rebuilds the end state.

use super::*;

#[derive(Clone, Debug)]
enum Event {
    Submit {
        count: u32,
        gpu: bool,
        priority: i32,
        retries: u32,
    },
    Join {
        slots: u32,
        gpu: u64,
    },
    Lose(usize),
    Finish {
        pick: usize,
        success: bool,
    },
    Duplicate(usize),
    Cancel(u64),
    Forget(u64),
    /// `fail_unschedulable` with a zero timeout; whether a manager could serve.
    Unschedulable(bool),
    Tick(u64),
    Rejoin(usize),
    /// A live worker registers again (its connection broke and it came back before the old one
    /// was declared lost): the earlier connection is replaced.
    Reconnect(usize),
    /// A worker answers a revoke: it gives back some of the asked tasks that wait there (those
    /// beyond its first `slots`, which run), as the bits of the mask pick.
    Answer {
        pick: usize,
        mask: u64,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        2 => (1u32..20, prop::bool::weighted(0.3), -2i32..3, 0u32..3)
            .prop_map(|(count, gpu, priority, retries)| Event::Submit { count, gpu, priority, retries }),
        1 => (1u32..4, 0u64..3).prop_map(|(slots, gpu)| Event::Join { slots, gpu }),
        1 => any::<usize>().prop_map(Event::Lose),
        5 => (any::<usize>(), prop::bool::weighted(0.8)).prop_map(|(pick, success)| Event::Finish { pick, success }),
        1 => any::<usize>().prop_map(Event::Duplicate),
        1 => (1u64..6).prop_map(Event::Cancel),
        1 => (1u64..6).prop_map(Event::Forget),
        1 => any::<bool>().prop_map(Event::Unschedulable),
        1 => (0u64..3000).prop_map(Event::Tick),
        1 => any::<usize>().prop_map(Event::Rejoin),
        1 => any::<usize>().prop_map(Event::Reconnect),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(pick, mask)| Event::Answer { pick, mask }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_task_lost_none_finished_twice_capacity_never_exceeded(events in prop::collection::vec(event(), 1..120), prefetch in 0u32..4) {
        // Finished jobs are also forgotten by age, so forgetting races everything else.
        // Lost workers' tasks are fenced, and lost workers come back claiming what they ran.
        // Workers may hold tasks ahead of a free slot, and give some back when asked.
        // A lost worker goes on running what it held until its lease runs out, LEASE after the
        // last thing the core heard from it; the fence is longer (as `core::lease::fence` is).
        const LEASE: u64 = 150;
        let mut core = Tasks::new(Config { heartbeat_timeout_ms: 1000, idle_silence_ms: 1000, forget_after_ms: Some(1500), fence_ms: LEASE + 50, undrain_ms: 20_000, prefetch, max_walltime_requeues: 3 });
        // When the core last heard from each worker.
        let mut heard: HashMap<u64, u64> = HashMap::new();
        // Revokes asked and not answered: worker -> (tasks, count).
        let mut asked: HashMap<u64, (Vec<u64>, u32)> = HashMap::new();
        let mut stale: Vec<(u64, Vec<u64>)> = Vec::new();
        // Each worker's registration, to come back as the same process.
        let mut infos: HashMap<u64, WorkerRegistration> = HashMap::new();
        let mut jobs: Vec<u64> = Vec::new(); // task count per job
        let mut now = 0u64;
        let mut live: Vec<u64> = Vec::new();
        // What each worker was told to run and has not reported (as a real worker would know).
        let mut running: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut finished_events: HashMap<u64, u32> = HashMap::new();
        let mut submitted = 0u64;
        let mut lost: Vec<u64> = Vec::new();

        let mut apply = |core: &mut Tasks, running: &mut HashMap<u64, Vec<u64>>, live: &mut Vec<u64>, asked: &mut HashMap<u64, (Vec<u64>, u32)>| {
            core.schedule(0);
            for action in core.take_effects() {
                match action {
                    Effect::Revoke { worker, tasks, count } => {
                        assert!(asked.insert(worker, (tasks, count)).is_none(), "two revokes outstanding for worker {worker}");
                    }
                    Effect::Dispatch { worker, tasks } => running.entry(worker).or_default().extend(tasks),
                    Effect::Finished { task, .. } => {
                        // The shell journals this record now: it must exist, forgotten or not.
                        assert!(core.final_record(task).is_some(), "task {task}: nothing to journal");
                        *finished_events.entry(task).or_default() += 1;
                    }
                    Effect::Disconnect { worker, .. } => { live.retain(|w| *w != worker); running.remove(&worker); asked.remove(&worker); }
                    // Its first worker came back with the outcome: no longer this one's.
                    Effect::TakeBack { worker, tasks } => {
                        if let Some(held) = running.get_mut(&worker) { held.retain(|t| !tasks.contains(t)) }
                    }
                    Effect::Cancel { .. } | Effect::Forgot { .. } | Effect::Dropped { .. } | Effect::Cut(_) => {}
                }
            }
        };

        for event in events {
            now += 10;
            match event {
                Event::Submit { count, gpu, priority, retries } => {
                    let caps: &[(&str, u64)] = if gpu { &[("gpu", 1)] } else { &[] };
                    let new = NewGroup { spec: spec(caps, priority, retries), count, inputs: vec![] };
                    let (_, _, n) = core.submit(vec![new]).unwrap();
                    submitted += n;
                    jobs.push(n);
                }
                Event::Join { slots, gpu } => {
                    let info = worker(slots, &[("gpu", gpu)]);
                    let id = core.worker_joined(now, info.clone()).expect("joins").0;
                    infos.insert(id, info);
                    heard.insert(id, now);
                    live.push(id);
                }
                Event::Lose(pick) if !live.is_empty() => {
                    let w = live.remove(pick % live.len());
                    core.worker_lost(now, w, "test", Loss::Silent);
                    asked.remove(&w);
                    if let Some(tasks) = running.remove(&w) {
                        lost.extend(tasks.iter().map(|t| (w << 32) | *t));
                        stale.push((w, tasks));
                    }
                }
                Event::Rejoin(pick) if !stale.is_empty() => {
                    // A lost worker reconnects claiming the tasks it still runs: those still
                    // waiting are adopted, the others (run elsewhere by now, or final) refused.
                    let (old, tasks) = stale.remove(pick % stale.len());
                    let mut info = infos[&old].clone();
                    info.running = tasks.clone();
                    let (id, refused) = core.worker_joined(now, info.clone()).expect("the same process joins again");
                    infos.insert(id, info);
                    heard.insert(id, now);
                    live.push(id);
                    let adopted: Vec<u64> = tasks.iter().copied().filter(|t| !refused.contains(t)).collect();
                    running.entry(id).or_default().extend(adopted);
                }
                Event::Reconnect(pick) if !live.is_empty() => {
                    let old = live[pick % live.len()];
                    let tasks = running.get(&old).cloned().unwrap_or_default();
                    // Another process under its name is refused; the same one replaces it.
                    let mut impostor = infos[&old].clone();
                    impostor.instance ^= 1 << 40;
                    prop_assert!(core.worker_joined(now, impostor).is_err());
                    let mut info = infos[&old].clone();
                    info.running = tasks.clone();
                    let (id, refused) = core.worker_joined(now, info.clone()).expect("the same process joins again");
                    // Its running tasks move over; those canceled meanwhile are stopped there.
                    infos.insert(id, info);
                    heard.insert(id, now);
                    live.push(id);
                    let adopted: Vec<u64> = tasks.iter().copied().filter(|t| !refused.contains(t)).collect();
                    running.insert(id, adopted);
                }
                Event::Finish { pick, success } => {
                    let all: Vec<(u64, u64)> = running.iter().flat_map(|(w, ts)| ts.iter().map(move |t| (*w, *t))).collect();
                    if !all.is_empty() {
                        let (w, t) = all[pick % all.len()];
                        running.get_mut(&w).unwrap().retain(|x| *x != t);
                        let outcome = if success { ok() } else { Outcome::Exited { code: Some(1), stdout: vec![], stderr: vec![] } };
                        prop_assert!(core.finished(now, w, t, outcome), "report of a dispatched task refused");
                        for other in &live { core.heartbeat(now, *other); heard.insert(*other, now); }
                    }
                }
                Event::Duplicate(pick) => {
                    // A report the core must ignore: a task already reported, or from a lost worker.
                    if !lost.is_empty() {
                        let entry = lost[pick % lost.len()];
                        prop_assert!(!core.finished(now, entry >> 32, entry & 0xffff_ffff, ok()));
                    }
                }
                Event::Cancel(job) => { core.cancel_job(job); }
                Event::Forget(job) => match core.forget(job) {
                    Ok(_) => prop_assert_eq!(core.results(job), Err(JobError::Forgotten(job))),
                    Err(JobError::NotFinished { unfinished, .. }) => prop_assert!(unfinished > 0),
                    Err(JobError::Unknown(j)) => prop_assert!(j as usize > jobs.len()),
                    Err(JobError::Forgotten(j)) => prop_assert!(false, "forgetting {} twice is not an error", j),
                },
                Event::Unschedulable(managers_could) => {
                    core.fail_unschedulable(now, 0, |_, _, _| managers_could);
                }
                Event::Tick(dt) => { now += dt; core.tick(now); }
                Event::Answer { pick, mask } if !asked.is_empty() => {
                    let mut workers: Vec<u64> = asked.keys().copied().collect();
                    workers.sort_unstable();
                    let w = workers[pick % workers.len()];
                    let (tasks, count) = asked.remove(&w).unwrap();
                    let held = running.get(&w).cloned().unwrap_or_default();
                    // The first `slots` it holds run; the rest wait and may be given back.
                    let slots = infos[&w].slots as usize;
                    let waiting: Vec<u64> = held.iter().skip(slots).copied().collect();
                    let given: Vec<u64> = tasks.iter().copied()
                        .filter(|t| waiting.contains(t))
                        .enumerate().filter(|(i, _)| mask & (1 << (i % 64)) != 0).map(|(_, t)| t)
                        .take(count as usize)
                        .collect();
                    if let Some(ts) = running.get_mut(&w) { ts.retain(|t| !given.contains(t)) }
                    let back = core.revoked(w, &given);
                    prop_assert!(back <= given.len());
                }
                Event::Lose(_) | Event::Rejoin(_) | Event::Reconnect(_) | Event::Answer { .. } => {}
            }
            apply(&mut core, &mut running, &mut live, &mut asked);
            if let Err(violation) = core.sanity_check() { prop_assert!(false, "{}", violation); }
            // No task is held by two live workers (given back means gone from the giver).
            let mut holders: HashMap<u64, u64> = HashMap::new();
            for (w, tasks) in &running {
                for t in tasks {
                    if let Some(other) = holders.insert(*t, *w) {
                        prop_assert!(false, "task {} held by workers {} and {}", t, other, w);
                    }
                }
            }
            // Never twice at once: a lost worker whose lease may still hold runs what it held,
            // and none of that is held by a live worker meanwhile.
            for (w, tasks) in &stale {
                if now < heard[w] + LEASE {
                    for t in tasks {
                        if let Some(other) = holders.get(t) {
                            prop_assert!(false, "task {} runs on worker {} while lost worker {} may still run it (heard at {}, now {})", t, other, w, heard[w], now);
                        }
                    }
                }
            }
            // What the scaling policy is told is queued is what is queued.
            let demanded: u64 = core.demand(0).iter().map(|d| u64::from(d.queued)).sum();
            prop_assert_eq!(demanded, core.status().tasks.queued);
        }

        // Drain: a big worker with every capability, and every run reported.
        let big = core.worker_joined(now, worker(64, &[("gpu", 64)])).expect("joins").0;
        live.push(big);
        for _ in 0..10_000 {
            // Time passes (fenced tasks are released), and every live worker keeps in touch.
            now += 300;
            for w in &live { core.heartbeat(now, *w); }
            core.tick(now);
            // Revokes still asked are answered: nothing given back.
            for w in asked.keys().copied().collect::<Vec<_>>() { asked.remove(&w); core.revoked(w, &[]); }
            apply(&mut core, &mut running, &mut live, &mut asked);
            let all: Vec<(u64, u64)> = running.iter().flat_map(|(w, ts)| ts.iter().map(move |t| (*w, *t))).collect();
            if all.is_empty() { break; }
            for (w, t) in all {
                running.get_mut(&w).unwrap().retain(|x| *x != t);
                core.finished(now, w, t, ok());
            }
        }
        apply(&mut core, &mut running, &mut live, &mut asked);
        if let Err(violation) = core.sanity_check() { prop_assert!(false, "{}", violation); }
        let counts = core.status().tasks;
        prop_assert_eq!(counts.finished(), counts.total(), "unfinished tasks: {:?}", counts);
        prop_assert_eq!(finished_events.len() as u64, submitted);
        prop_assert!(finished_events.values().all(|n| *n == 1), "a task finished twice");
        // Every job has all its results, or was forgotten whole.
        for (index, n) in jobs.iter().enumerate() {
            let job = index as u64 + 1;
            match core.results(job) {
                Ok(results) => prop_assert_eq!(results.len() as u64, *n),
                Err(error) => prop_assert_eq!(error, JobError::Forgotten(job)),
            }
        }
        // What a compacted journal holds rebuilds the same state: ids, results, forgotten jobs.
        let mut rebuilt = Tasks::new(Config::default());
        let (first_job, first_task) = core.first_ids();
        prop_assert!(rebuilt.start_ids_at(first_job, first_task));
        for held in core.held_jobs() {
            let (job, _, _) = rebuilt.restore(held.groups, held.request).unwrap();
            prop_assert_eq!(job, held.job);
            for (task, state, outcome, attempts) in held.finals {
                rebuilt.restore_final(task, state, outcome, attempts);
            }
            if held.forgotten {
                rebuilt.forget(job).unwrap();
            }
        }
        if let Err(violation) = rebuilt.sanity_check() { prop_assert!(false, "rebuilt: {}", violation); }
        prop_assert_eq!(rebuilt.status().tasks, core.status().tasks);
        for job in 1..=jobs.len() as u64 + 1 {
            prop_assert_eq!(rebuilt.results(job), core.results(job));
        }
        prop_assert_eq!(rebuilt.first_ids(), core.first_ids());

        // Forget everything: nothing is held any more, and no id is reused.
        for job in 1..=jobs.len() as u64 {
            core.forget(job).unwrap();
        }
        core.tick(now);
        if let Err(violation) = core.sanity_check() { prop_assert!(false, "{}", violation); }
        prop_assert_eq!(core.status().tasks.total(), 0);
        let (job, first_task, _) = core.submit(vec![group(1, &[])]).unwrap();
        prop_assert_eq!(job, jobs.len() as u64 + 1);
        prop_assert_eq!(first_task, submitted + 1);
    }
}
