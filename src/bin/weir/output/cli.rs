//! `--output cli`: lines and tables for people; remarks and progress on stderr.

use std::io::IsTerminal;

use weir::proto::{EnvironmentStatus, JobId, JobSummary, Outcome, StatusReport, TaskResult};

use super::{
    Canceled, Demo, Explanation, Forgotten, ForgottenFinished, JobDone, LocalRun, LocalStep,
    Output, PluginInfo, PolicyTested, PolicyTiers, Progress, SimulatedStep, Submitted,
    WorkersReady, progress, workers_matching,
};

pub(super) struct Cli;

impl Output for Cli {
    fn note(&self, line: &str) {
        eprintln!("{line}");
    }

    fn job_progress(&self, job: JobId) -> Box<dyn Progress> {
        progress::for_people(job)
    }

    fn error(&self, error: &anyhow::Error) {
        super::error_line(error);
    }

    fn submitted(&self, submitted: &Submitted) {
        println!("{submitted}");
    }

    fn job_done(&self, done: &JobDone) {
        let c = &done.counts;
        println!(
            "job {}: {} succeeded, {} failed, {} canceled",
            done.job, c.succeeded, c.failed, c.canceled
        );
    }

    fn results(&self, results: &[TaskResult]) {
        let first_line = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            text.lines().next().unwrap_or("").to_string()
        };
        for result in results {
            let detail = match &result.outcome {
                Outcome::Exited {
                    code: Some(code),
                    stdout,
                    ..
                } => format!("exit {code}: {}", first_line(stdout)),
                Outcome::Exited { code: None, .. } => "killed by a signal".to_string(),
                Outcome::Returned { output } => format!("returned: {}", first_line(output)),
                Outcome::Function { ok, value, .. } => format!(
                    "{} {} pickled bytes (read them from Python)",
                    if *ok { "returned" } else { "raised" },
                    value.len()
                ),
                Outcome::Error { message } => format!("error: {message}"),
            };
            let state = format!("{:?}", result.state).to_lowercase();
            println!("task {:>8} {state:<9} {detail}", result.task);
        }
    }

    fn canceled(&self, canceled: &Canceled) {
        let Canceled { job, canceled } = canceled;
        println!("job {job}: {canceled} task(s) canceled");
    }

    fn forgotten(&self, forgotten: &Forgotten) {
        let Forgotten { job, tasks } = forgotten;
        println!("job {job}: forgotten ({tasks} task results freed)");
    }

    fn all_forgotten(&self, _: &[Forgotten]) {}

    fn forgotten_finished(&self, forgotten: &ForgottenFinished) {
        println!(
            "{} finished job(s) forgotten ({} task results freed)",
            forgotten.jobs.len(),
            forgotten.tasks
        );
    }

    fn jobs(&self, jobs: &[JobSummary]) {
        if jobs.is_empty() {
            println!("no jobs");
            return;
        }
        let row = |cells: [&dyn std::fmt::Display; 7]| {
            let [job, state, queued, running, succeeded, failed, canceled] = cells;
            println!(
                "{job:>6}  {state:<9} {queued:>8} {running:>8} {succeeded:>9} {failed:>7} {canceled:>8}"
            );
        };
        row([
            &"job",
            &"state",
            &"queued",
            &"running",
            &"succeeded",
            &"failed",
            &"canceled",
        ]);
        for j in jobs {
            let c = &j.counts;
            let state = if j.forgotten {
                "forgotten"
            } else if c.queued + c.running > 0 {
                "active"
            } else {
                "finished"
            };
            row([
                &j.job,
                &state,
                &c.queued,
                &c.running,
                &c.succeeded,
                &c.failed,
                &c.canceled,
            ]);
        }
    }

    fn explanation(&self, explanation: &Explanation) {
        for line in &explanation.explanation {
            println!("{line}");
        }
    }

    fn status(&self, report: &StatusReport) {
        let t = &report.tasks;
        println!(
            "tasks: {} queued, {} running, {} succeeded, {} failed, {} canceled ({} jobs)",
            t.queued, t.running, t.succeeded, t.failed, t.canceled, report.jobs
        );
        if !report.managers.is_empty() {
            println!("managers: {}", report.managers.len());
        }
        for m in &report.managers {
            let tier = match (m.fixed, m.tier) {
                (Some(n), _) => format!("fixed {n}"),
                (None, Some(p)) => format!("priority {p}"),
                // The policy's tiers do not name it, but it decides for it (a policy whose
                // tiers are not manager ids or worker types): scaled, in no tier shown.
                (None, None) if m.desired.is_some() => "no tier".to_string(),
                (None, None) => "unlisted".to_string(),
            };
            let desired = m.desired.map_or("-".to_string(), |d| d.to_string());
            // Its workers' walltime: tasks with a longer --timeout are not scaled for here.
            let usable = m.usable_ms.map_or(String::new(), |ms| {
                format!(", tasks up to {} s", ms as f64 / 1000.0)
            });
            let labels = super::managers::labels(&m.labels);
            println!(
                "  {:<16} {:<10} {:<11} {} desired {desired}, live {}, starting {}{usable}{labels}  ({})",
                m.id,
                m.worker_type,
                tier,
                if m.online { "online " } else { "OFFLINE" },
                m.live,
                m.starting,
                m.reason
            );
        }
        if let Some(error) = &report.policy_error {
            println!("scaling policy error (last good decision held): {error}");
        }
        println!("workers: {}", report.workers.len());
        for w in &report.workers {
            let caps: Vec<String> = w
                .capabilities
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            let ahead = match w.prefetched {
                0 => String::new(),
                n => format!(" (+{n} waiting there)"),
            };
            println!(
                "  {:>4} {:<24} {}/{} slots busy{ahead}  {}",
                w.id,
                w.name,
                w.running,
                w.slots,
                caps.join(",")
            );
        }
    }

    fn managers(&self, managers: &[weir::proto::ManagerUnits]) {
        super::managers::managers(managers);
    }

    fn replicas(&self, replicas: &[weir::proto::ReplicaStatus]) {
        if replicas.is_empty() {
            println!("one scheduler, no replicas");
            return;
        }
        println!(
            "{:>4}  {:<28} {:<9} {:>6} {:>10} {:>6}",
            "id", "address", "role", "term", "log", "lag"
        );
        for r in replicas {
            let role = match (r.leader, r.voter) {
                (true, _) => "leader",
                (false, true) => "follower",
                (false, false) => "learner",
            };
            let known = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
            println!(
                "{:>4}  {:<28} {:<9} {:>6} {:>10} {:>6}",
                r.id,
                r.address,
                role,
                r.term,
                known(r.matched),
                known(r.lag)
            );
        }
    }

    fn manager_units(&self, manager: &weir::proto::ManagerUnits) {
        super::managers::units(manager);
    }

    fn workers_progress(&self, ready: u32, wanted: u32, environment: Option<&str>) {
        if std::io::stderr().is_terminal() {
            eprintln!(
                "{ready} of {wanted} {}",
                workers_matching(wanted, environment)
            );
        }
    }

    fn workers_ready(&self, ready: &WorkersReady) {
        let what = workers_matching(ready.workers, ready.environment.as_deref());
        println!("{} {what} ready", ready.workers);
    }

    fn environments(&self, list: &[EnvironmentStatus]) {
        if list.is_empty() {
            println!("no environments");
        }
        list.iter().for_each(environment);
    }

    fn environment_removed(&self, name: &str) {
        println!("environment `{name}` removed");
    }

    fn plugin(&self, plugin: &PluginInfo) {
        let info = &plugin.inspection;
        let world = match (info.world, info.version) {
            (Some(world), Some(version)) => format!("{world}, {version}"),
            _ => "none: exports no weir:plugin interface this host runs (0.1.0, 0.2.0)".to_string(),
        };
        println!("{}", plugin.file.display());
        println!("  world:   {world}");
        println!("  size:    {} bytes", info.size_bytes);
        println!("  sha256:  {}", info.sha256);
        println!(
            "  load:    {:.1} ms ({})",
            info.load_time.as_secs_f64() * 1e3,
            info.origin.describe()
        );
        println!("  imports: {}", info.imports.join(", "));
        println!("  exports: {}", info.exports.join(", "));
    }

    fn policy_tiers(&self, policy: &PolicyTiers) {
        let tiers = &policy.tiers;
        println!(
            "{}: content is valid; {} tier{}",
            policy.engine,
            tiers.len(),
            if tiers.len() == 1 { "" } else { "s" }
        );
        for tier in tiers {
            println!(
                "  priority {:>3}: {}",
                tier.priority,
                tier.describe_members()
            );
        }
    }

    fn simulated_step(&self, step: &SimulatedStep) {
        println!("snapshot {} (now_ms {}):", step.step, step.now_ms);
        for d in &step.decisions {
            let mut stop = match d.stop.is_empty() {
                true => String::new(),
                false => format!(" stop {:?}", d.stop),
            };
            if !d.drain.is_empty() {
                stop.push_str(&format!(" drain {:?}", d.drain));
            }
            println!(
                "  {:<12} desired {:>4}{stop}  ({})",
                d.manager_id, d.desired_workers, d.reason
            );
        }
    }

    fn simulation(&self, _: &[SimulatedStep]) {}

    fn workload(&self, run: &super::WorkloadRun) {
        println!("worker-seconds (started to stopped, starting ones included):");
        for m in &run.worker_seconds {
            println!(
                "  {:<12} {:<12} {:>10.0}",
                m.manager, m.worker_type, m.seconds
            );
        }
        println!("by worker type:");
        for (worker_type, seconds) in &run.by_worker_type {
            println!("  {worker_type:<25} {seconds:>10.0}");
        }
        println!("tasks finished: {}", run.finished);
    }

    fn policy(&self, report: &weir::proto::PolicyReport) {
        println!("policy:  {}", report.name);
        println!("sha256:  {}", report.sha256);
        println!("content:");
        for line in report.content.lines() {
            println!("  {line}");
        }
        for (priority, members) in &report.tiers {
            println!("tier {priority:>3}: {}", members.join(", "));
        }
        for (manager, desired, reason) in &report.last {
            println!("last decision for {manager}: {desired} worker(s), {reason}");
        }
        if let Some(error) = &report.error {
            println!("last error: {error}");
        }
    }

    fn policy_tested(&self, tested: &PolicyTested) {
        for run in &tested.scenarios {
            let status = if run.passed { "ok  " } else { "FAIL" };
            println!("{status} {}: {}", run.file, run.verdict.name);
            for failure in &run.verdict.failures {
                println!("       {failure}");
            }
        }
        println!(
            "{}: {} passed, {} failed",
            tested.engine, tested.passed, tested.failed
        );
    }

    fn demo(&self, demo: &Demo) {
        println!(
            "waterfall_v2 (bundled) with tiers `1, native` / `2, burst`; {} tasks of {} s each",
            demo.tasks, demo.task_seconds
        );
        println!(
            "{:>4}  {:>6} {:>7} {:>4}  {:>8} {:>7}",
            "t(s)", "queued", "running", "done", "native_1", "burst_1"
        );
        for t in &demo.ticks {
            println!(
                "{:>4}  {:>6} {:>7} {:>4}  {:>8} {:>7}",
                t.second, t.queued, t.running, t.done, t.workers.native_1, t.workers.burst_1
            );
        }
        for c in &demo.conditions {
            // `mem_gt threshold=` and a threshold of up to 5 characters, aligned.
            println!(
                "{:<22} on this machine ({} bytes): {}",
                c.condition, demo.total_memory_bytes, c.verdict
            );
        }
    }

    fn local_step(&self, step: &LocalStep) {
        match step {
            LocalStep::Scheduler { address } => println!("scheduler on {address}"),
            LocalStep::Workers { workers, slots } => println!("{workers} workers x {slots} slots"),
            LocalStep::Submitted {
                tasks,
                command_job,
                wasm_job,
            } => println!(
                "submitted {tasks} command tasks (job {command_job}) and {tasks} wasm tasks (job {wasm_job})"
            ),
            LocalStep::Checked(job) => println!(
                "{:>7} tasks: {}/{} correct results",
                job.kind, job.correct, job.tasks
            ),
        }
    }

    fn local_done(&self, run: &LocalRun) {
        println!(
            "all {} tasks done in {:.2} s ({:.0} tasks/s)",
            run.tasks,
            run.seconds,
            run.tasks as f64 / run.seconds
        );
    }
}

fn environment(env: &EnvironmentStatus) {
    println!(
        "{} ({}): {} matching, {} not matching, {} erroring, {} pending",
        env.name,
        env.source,
        env.matching.len(),
        env.not_matching.len(),
        env.erroring.len(),
        env.pending.len()
    );
    for (label, names) in [
        ("matching", &env.matching),
        ("not matching", &env.not_matching),
        ("pending", &env.pending),
    ] {
        if !names.is_empty() {
            println!("  {label}: {}", names.join(", "));
        }
    }
    for (worker, reason) in &env.erroring {
        println!("  error on {worker}: {reason}");
    }
    if !env.managers.is_empty() {
        println!("  declared by managers: {}", env.managers.join(", "));
    }
    if !env.own_definition.is_empty() {
        println!(
            "  their own --env-plugin definition (wins over the registered one there): {}",
            env.own_definition.join(", ")
        );
    }
    if !env.loads.is_empty() {
        let loads: Vec<String> = env
            .loads
            .iter()
            .map(|(worker, load)| format!("{worker} {load}"))
            .collect();
        println!("  condition loaded: {}", loads.join(", "));
    }
}
