//! What the Slurm backend says to Slurm: the batch script and `sbatch` arguments of a unit,
//! `squeue` / `scancel` by job id, each run with a timeout (what they print is read in
//! `parse`).

use std::time::Duration;

use super::Jobs;
use super::parse::{Listed, SQUEUE_FORMAT, parse_sbatch, parse_squeue};
use crate::manager::command::CommandError;

impl Jobs {
    fn job_name(&self) -> String {
        format!("weir-{}", self.settings.id)
    }

    /// The batch script: the fixed manager of one unit, named by its job id.
    pub fn script(&self) -> Result<String, CommandError> {
        let s = &self.settings;
        let mut args: Vec<String> = vec![
            self.slurm.manager_command.display().to_string(),
            "--fixed".into(),
            self.slurm.unit_size.to_string(),
            "--id".into(),
            s.id.clone(),
            "--worker-type".into(),
            s.worker_type.clone(),
            "--slots".into(),
            s.slots.to_string(),
            "--access-file".into(),
            s.access_file.display().to_string(),
            "--worker-command".into(),
            s.worker_command.display().to_string(),
            "--leave-before".into(),
            format!("{:.3}", s.leave_before.as_secs_f64()),
        ];
        if !s.worker_capabilities_flag.is_empty() {
            args.extend(["--capabilities".into(), s.worker_capabilities_flag.clone()]);
        }
        for env in &s.env_plugin_flags {
            args.extend(["--env-plugin".into(), env.clone()]);
        }
        let quoted = shlex::try_join(args.iter().map(String::as_str)).map_err(|error| {
            CommandError::Script {
                error: error.to_string(),
            }
        })?;
        // The walltime left is asked of Slurm from inside the job (the whole limit if that
        // fails): its workers take no task whose timeout would outlive the allocation, and
        // leave before it ends.
        let limit = self.slurm.time_limit.map_or(String::new(), |minutes| {
            (u64::from(minutes) * 60).to_string()
        });
        Ok(format!(
            "#!/bin/sh\n\
             # A weir unit of {count} worker(s); stopped by `scancel`.\n\
             left=$(squeue -h -j \"$SLURM_JOB_ID\" -o %L 2>/dev/null)\n\
             exec {quoted} --unit \"$SLURM_JOB_ID\" --time-left \"${{left:-{limit}}}\"\n",
            count = self.slurm.unit_size,
        ))
    }

    /// What a unit asks Slurm for, each unless an `--sbatch-arg` of its kind is given (that one
    /// wins, and no flag is given twice): one node; one task of `--unit-size` x (the `cpu`
    /// capability, else `--slots`) CPUs; `--unit-size` x the `memory` capability (in MiB,
    /// rounded up), when there is one.
    pub fn resources(&self) -> Vec<String> {
        let given = |flags: &[&str]| {
            self.slurm.sbatch_args.iter().any(|arg| {
                flags.iter().any(|flag| {
                    arg == flag
                        || arg.starts_with(&format!("{flag}="))
                        // `-c4`: a short flag with its value attached.
                        || (flag.len() == 2 && arg.starts_with(flag))
                })
            })
        };
        let size = u64::from(self.slurm.unit_size.max(1));
        let capability = |name: &str| {
            self.settings
                .capabilities
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, amount)| *amount)
        };
        let mut args = Vec::new();
        if !given(&["--nodes", "-N"]) {
            args.push("--nodes=1".to_string());
        }
        let cpu_flags = [
            "--ntasks",
            "-n",
            "--ntasks-per-node",
            "--cpus-per-task",
            "-c",
            "--mincpus",
        ];
        if !given(&cpu_flags) {
            let per_worker = capability("cpu").unwrap_or(u64::from(self.settings.slots));
            args.push("--ntasks=1".to_string());
            args.push(format!(
                "--cpus-per-task={}",
                per_worker.max(1).saturating_mul(size)
            ));
        }
        if let Some(bytes) = capability("memory")
            && !given(&["--mem", "--mem-per-cpu", "--mem-per-gpu"])
        {
            let mib = bytes.saturating_mul(size).div_ceil(1 << 20).max(1);
            args.push(format!("--mem={mib}M"));
        }
        args
    }

    fn sbatch_args(&self) -> Vec<String> {
        let mut args = vec![
            "--parsable".to_string(),
            format!("--job-name={}", self.job_name()),
            format!("--output={}", self.slurm.job_output),
            // A job Slurm would requeue (a failed node) comes back under the same id: this
            // manager submits a new one instead.
            "--no-requeue".to_string(),
        ];
        args.extend(self.resources());
        let knobs = [
            ("--partition", self.slurm.partition.clone()),
            ("--time", self.slurm.time_limit.map(|m| m.to_string())),
            ("--account", self.slurm.account.clone()),
            ("--qos", self.slurm.qos.clone()),
        ];
        for (flag, value) in knobs {
            if let Some(value) = value {
                args.push(format!("{flag}={value}"));
            }
        }
        args.extend(self.slurm.sbatch_args.iter().cloned());
        args
    }

    pub(super) async fn sbatch(&self) -> Result<String, CommandError> {
        let script = self.script()?;
        let args = self.sbatch_args();
        let out = run("sbatch", &args, Some(script), COMMAND_TIMEOUT).await?;
        parse_sbatch(&out).ok_or_else(|| CommandError::Output {
            command: format!("sbatch {}", args.join(" ")),
            output: out,
        })
    }

    /// This manager's jobs Slurm still has (pending, running, completing...).
    pub(super) async fn squeue(&self) -> Result<Vec<Listed>, CommandError> {
        let name = format!("--name={}", self.job_name());
        let args = ["-h", "--me", "-o", SQUEUE_FORMAT, &name].map(String::from);
        Ok(parse_squeue(
            &run("squeue", &args, None, POLL_TIMEOUT).await?,
        ))
    }

    /// Tell a unit to end from inside: SIGTERM to its batch step (the unit's manager), which
    /// stops its workers and exits 0, so the job ends COMPLETED, not CANCELLED. False if Slurm
    /// could not be told.
    pub(super) async fn end_from_inside(&self, job: &str) -> bool {
        let args = ["--batch", "--signal=TERM", job].map(String::from);
        match run("scancel", &args, None, COMMAND_TIMEOUT).await {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(job, %error, "scancel --signal failed; the job is cancelled later");
                false
            }
        }
    }

    pub(super) async fn scancel(&self, job: &str) {
        if let Err(error) = run("scancel", &[job.to_string()], None, COMMAND_TIMEOUT).await {
            tracing::warn!(job, %error, "scancel failed");
        }
    }
}

/// How long a poll (`squeue`) may take: the session with the scheduler waits for it (Slurm's
/// commands retry for a long while when slurmctld does not answer).
const POLL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `sbatch` or `scancel` may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Run one Slurm command (stdin from `input`) for at most `timeout`, and return what it printed.
async fn run(
    program: &str,
    args: &[String],
    input: Option<String>,
    timeout: Duration,
) -> Result<String, CommandError> {
    use tokio::io::AsyncWriteExt;
    let command = format!("{program} {}", args.join(" "));
    let spawned = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return Err(CommandError::Spawn { command, error }),
    };
    if let Some(mut stdin) = child.stdin.take() {
        let input = input.unwrap_or_default();
        if let Err(error) = stdin.write_all(input.as_bytes()).await {
            return Err(CommandError::Spawn { command, error });
        }
    }
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(error)) => return Err(CommandError::Spawn { command, error }),
        Err(_) => return Err(CommandError::TimedOut { command }),
    };
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(CommandError::Failed {
            command,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::SlurmBackend;
    use super::*;
    use crate::manager::Settings;

    fn settings() -> Settings {
        Settings {
            labels: Vec::new(),
            id: "hpc".into(),
            worker_type: "big 'one'".into(),
            max_task_concurrency: 8,
            slots: 4,
            capabilities: vec![],
            worker_capabilities_flag: "cpu=4,gpu=1".into(),
            env_plugin_flags: vec!["big=/shared/my conditions/mem_gt.wasm,threshold=$HOME".into()],
            environments: vec![],
            fixed: None,
            worker_command: "/opt/weir/bin/worker".into(),
            access_file: "/shared/weir access.json".into(),
            heartbeat_interval: Duration::from_millis(500),
            unit: None,
            ends_at: None,
            leave_before: Duration::from_secs(30),
            usable: None,
            seams: crate::manager::Seams::real(),
        }
    }

    #[test]
    fn the_batch_script_passes_every_argument_through_the_shell_unchanged() {
        let settings = settings();
        let slurm = SlurmBackend {
            unit_size: 2,
            manager_command: "/opt/weir/bin/worker-manager".into(),
            ..SlurmBackend::default()
        };
        let script = Jobs::new(settings, slurm).script().unwrap();
        let exec = script
            .lines()
            .find_map(|l| l.strip_prefix("exec "))
            .unwrap();
        let line = exec.split(" --unit ").next().unwrap();
        let args = shlex::split(line).unwrap();
        let expected = [
            "/opt/weir/bin/worker-manager",
            "--fixed",
            "2",
            "--id",
            "hpc",
            "--worker-type",
            "big 'one'",
            "--slots",
            "4",
            "--access-file",
            "/shared/weir access.json",
            "--worker-command",
            "/opt/weir/bin/worker",
            "--leave-before",
            "30.000",
            "--capabilities",
            "cpu=4,gpu=1",
            "--env-plugin",
            "big=/shared/my conditions/mem_gt.wasm,threshold=$HOME",
        ];
        assert_eq!(args, expected);
        assert!(script.starts_with("#!/bin/sh\n"), "{script}");
    }

    fn resources(
        slots: u32,
        capabilities: &[(&str, u64)],
        unit_size: u32,
        extra: &[&str],
    ) -> Vec<String> {
        let settings = Settings {
            slots,
            capabilities: capabilities
                .iter()
                .map(|(n, a)| (n.to_string(), *a))
                .collect(),
            ..settings()
        };
        let slurm = SlurmBackend {
            unit_size,
            sbatch_args: extra.iter().map(|a| a.to_string()).collect(),
            ..SlurmBackend::default()
        };
        Jobs::new(settings, slurm).resources()
    }

    #[test]
    fn a_job_asks_for_the_cpus_and_memory_its_unit_runs() {
        // 2 workers of 16 slots: 32 CPUs in one task on one node.
        assert_eq!(
            resources(16, &[], 2, &[]),
            ["--nodes=1", "--ntasks=1", "--cpus-per-task=32"]
        );
        // A `cpu` capability says what a worker uses; memory per worker, in MiB rounded up.
        assert_eq!(
            resources(16, &[("cpu", 4), ("memory", 1_000_000_000)], 2, &[]),
            [
                "--nodes=1",
                "--ntasks=1",
                "--cpus-per-task=8",
                "--mem=1908M"
            ]
        );
    }

    #[test]
    fn an_sbatch_arg_of_the_same_kind_wins_and_no_flag_is_given_twice() {
        let memory = [("memory", 1 << 30)];
        assert_eq!(
            resources(4, &memory, 1, &["--cpus-per-task=2", "--mem-per-cpu=1G"]),
            ["--nodes=1"]
        );
        assert_eq!(
            resources(4, &memory, 1, &["-c8", "-N", "2"]),
            ["--mem=1024M"]
        );
        assert_eq!(
            resources(4, &[], 1, &["--ntasks=4"]),
            ["--nodes=1"],
            "tasks given: the CPUs are the operator's"
        );
        // Other arguments leave the defaults alone.
        assert_eq!(
            resources(4, &[], 1, &["--constraint=fast", "--mem=2G"]),
            ["--nodes=1", "--ntasks=1", "--cpus-per-task=4"]
        );
    }
}
