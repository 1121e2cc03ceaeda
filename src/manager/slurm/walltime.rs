//! How long each job of a Slurm manager runs: its walltime, wherever it is set. The manager
//! reports it (less `--leave-before`) as the usable time per worker, so the policy never counts
//! a task whose timeout is longer for this manager. Before, only `--time-limit` was read, and a
//! walltime from `--sbatch-arg=--time=...` or the partition's default left the policy
//! believing the jobs unlimited: it started jobs for tasks they could never run.
//!
//! In order: `--time-limit`; an `--sbatch-arg` `--time`/`-t` (the one sbatch would use, the
//! last); the partition's `DefaultTime`, else its `MaxTime` (`scontrol show partition`).

use std::time::Duration;

use super::SlurmBackend;

/// Where a job's walltime comes from, and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Walltime {
    /// A limit, and which setting gave it (for the log).
    Limit(Duration, &'static str),
    /// None anywhere: the partition's `MaxTime` is `UNLIMITED`.
    Unlimited,
    /// Not known (`scontrol` failed, or answered what this cannot read): said in the log.
    Unknown(String),
}

/// The walltime given on the command line (`--time-limit` or an `--sbatch-arg`), if any;
/// `Err` for an `--sbatch-arg` time sbatch would refuse too.
pub fn from_arguments(slurm: &SlurmBackend) -> Result<Option<Walltime>, String> {
    if let Some(minutes) = slurm.time_limit {
        let limit = Duration::from_secs(u64::from(minutes) * 60);
        return Ok(Some(Walltime::Limit(limit, "--time-limit")));
    }
    let mut given = None;
    let mut args = slurm.sbatch_args.iter();
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--time" | "-t" => args.next().map(String::as_str),
            other => other
                .strip_prefix("--time=")
                .or_else(|| other.strip_prefix("-t"))
                .map(|v| v.strip_prefix('=').unwrap_or(v)),
        };
        if let Some(value) = value {
            given = Some(value.to_string());
        }
    }
    let Some(text) = given else {
        return Ok(None);
    };
    match parse_slurm_time(&text) {
        Some(Some(limit)) => Ok(Some(Walltime::Limit(limit, "--sbatch-arg --time"))),
        Some(None) => Ok(Some(Walltime::Unlimited)),
        None => Err(format!(
            "--sbatch-arg time `{text}` is not a Slurm time (minutes, minutes:seconds, \
             hours:minutes:seconds, days-hours[:minutes[:seconds]] or UNLIMITED)"
        )),
    }
}

/// Each job's walltime: from the arguments, else asked of `scontrol show partition` (run once,
/// at start-up). `Err` only for an argument that is not a Slurm time.
pub fn of_jobs(slurm: &SlurmBackend) -> Result<Walltime, String> {
    if let Some(walltime) = from_arguments(slurm)? {
        return Ok(walltime);
    }
    let mut scontrol = std::process::Command::new("scontrol");
    scontrol.args(["show", "partition", "-o"]);
    if let Some(partition) = &slurm.partition {
        scontrol.arg(partition);
    }
    Ok(match scontrol.output() {
        Ok(out) if out.status.success() => from_partition(
            &String::from_utf8_lossy(&out.stdout),
            slurm.partition.as_deref(),
        ),
        Ok(out) => Walltime::Unknown(format!(
            "scontrol show partition failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(error) => Walltime::Unknown(format!("cannot run scontrol: {error}")),
    })
}

/// The walltime of a job that asks for none, from `scontrol show partition -o` output: the
/// line of `partition`, or of the default partition (`Default=YES`) when `None`.
pub fn from_partition(scontrol: &str, partition: Option<&str>) -> Walltime {
    let fields = |line: &str| -> Vec<(String, String)> {
        line.split_whitespace()
            .filter_map(|f| f.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let get = |fields: &[(String, String)], key: &str| {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let line = scontrol.lines().map(fields).find(|f| match partition {
        Some(name) => get(f, "PartitionName").as_deref() == Some(name),
        None => get(f, "Default").as_deref() == Some("YES"),
    });
    let Some(line) = line else {
        return Walltime::Unknown(match partition {
            Some(name) => format!("scontrol lists no partition `{name}`"),
            None => "scontrol lists no default partition".into(),
        });
    };
    let limit = |key: &'static str| match get(&line, key).as_deref() {
        None | Some("NONE") => None,
        Some(text) => Some((parse_slurm_time(text), text.to_string(), key)),
    };
    match limit("DefaultTime").or_else(|| limit("MaxTime")) {
        Some((Some(Some(time)), _, "DefaultTime")) => {
            Walltime::Limit(time, "partition DefaultTime")
        }
        Some((Some(Some(time)), _, _)) => Walltime::Limit(time, "partition MaxTime"),
        Some((Some(None), _, _)) => Walltime::Unlimited,
        Some((None, text, key)) => Walltime::Unknown(format!("partition {key}={text} unreadable")),
        None => Walltime::Unknown("the partition has no DefaultTime or MaxTime".into()),
    }
}

/// A time as sbatch takes it and scontrol prints it: `minutes`, `minutes:seconds`,
/// `hours:minutes:seconds`, `days-hours`, `days-hours:minutes`, `days-hours:minutes:seconds`;
/// `Some(None)` for `UNLIMITED`/`INFINITE`, `None` for anything else.
pub fn parse_slurm_time(text: &str) -> Option<Option<Duration>> {
    let text = text.trim();
    if matches!(text, "UNLIMITED" | "INFINITE" | "unlimited" | "infinite") {
        return Some(None);
    }
    let number = |p: &str| p.parse::<u64>().ok();
    let seconds = match text.split_once('-') {
        Some((days, rest)) => {
            let days = number(days)?;
            let parts: Vec<u64> = rest.split(':').map(number).collect::<Option<_>>()?;
            let (h, m, s) = match parts[..] {
                [h] => (h, 0, 0),
                [h, m] => (h, m, 0),
                [h, m, s] => (h, m, s),
                _ => return None,
            };
            ((days * 24 + h) * 60 + m) * 60 + s
        }
        None => {
            let parts: Vec<u64> = text.split(':').map(number).collect::<Option<_>>()?;
            match parts[..] {
                [m] => m * 60,
                [m, s] => m * 60 + s,
                [h, m, s] => (h * 60 + m) * 60 + s,
                _ => return None,
            }
        }
    };
    Some(Some(Duration::from_secs(seconds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60;

    #[test]
    fn slurm_times_in_every_sbatch_form() {
        let secs = |t: &str| parse_slurm_time(t).map(|d| d.map(|d| d.as_secs()));
        assert_eq!(secs("2"), Some(Some(2 * MIN)));
        assert_eq!(secs("2:30"), Some(Some(2 * MIN + 30)));
        assert_eq!(secs("1:00:00"), Some(Some(60 * MIN)));
        assert_eq!(secs("1-2"), Some(Some(26 * 60 * MIN)));
        assert_eq!(secs("1-0:30"), Some(Some(24 * 60 * MIN + 30 * MIN)));
        assert_eq!(secs("1-00:00:05"), Some(Some(24 * 60 * MIN + 5)));
        assert_eq!(secs("UNLIMITED"), Some(None));
        assert_eq!(secs("soon"), None);
        assert_eq!(secs("1:2:3:4"), None);
    }

    #[test]
    fn the_walltime_comes_from_time_limit_then_the_last_sbatch_time() {
        let with = |time_limit: Option<u32>, args: &[&str]| SlurmBackend {
            time_limit,
            sbatch_args: args.iter().map(|a| a.to_string()).collect(),
            ..SlurmBackend::default()
        };
        let limit = |secs, from| Ok(Some(Walltime::Limit(Duration::from_secs(secs), from)));
        assert_eq!(from_arguments(&with(None, &[])), Ok(None));
        assert_eq!(
            from_arguments(&with(Some(5), &["--time=2"])),
            limit(5 * MIN, "--time-limit")
        );
        let sbatch = "--sbatch-arg --time";
        assert_eq!(
            from_arguments(&with(None, &["--time=2"])),
            limit(2 * MIN, sbatch)
        );
        assert_eq!(
            from_arguments(&with(None, &["-t", "3"])),
            limit(3 * MIN, sbatch)
        );
        assert_eq!(
            from_arguments(&with(None, &["-t4"])),
            limit(4 * MIN, sbatch)
        );
        assert_eq!(
            from_arguments(&with(None, &["--time", "1", "--mem=1G", "--time=0:90"])),
            limit(90, sbatch)
        );
        assert_eq!(
            from_arguments(&with(None, &["--time=UNLIMITED"])),
            Ok(Some(Walltime::Unlimited))
        );
        assert!(from_arguments(&with(None, &["--time=soon"])).is_err());
        // Not a time: `--test-only` starts with `-t` but is no `-t` flag.
        assert!(from_arguments(&with(None, &["--test-only"])).is_ok_and(|w| w.is_none()));
    }

    #[test]
    fn a_job_without_a_time_gets_the_partitions_default_else_its_maximum() {
        let scontrol = "PartitionName=debug Default=YES DefaultTime=NONE MaxTime=UNLIMITED State=UP\n\
                        PartitionName=short Default=NO DefaultTime=00:10:00 MaxTime=1:00:00\n\
                        PartitionName=capped Default=NO DefaultTime=NONE MaxTime=2-00:00:00\n";
        assert_eq!(from_partition(scontrol, None), Walltime::Unlimited);
        assert_eq!(
            from_partition(scontrol, Some("short")),
            Walltime::Limit(Duration::from_secs(10 * MIN), "partition DefaultTime")
        );
        assert_eq!(
            from_partition(scontrol, Some("capped")),
            Walltime::Limit(Duration::from_secs(48 * 60 * MIN), "partition MaxTime")
        );
        assert!(matches!(
            from_partition(scontrol, Some("gone")),
            Walltime::Unknown(_)
        ));
    }
}
