//! Reading what Slurm prints: `squeue` lines, the job id of `sbatch --parsable`, time left.

use std::time::Duration;

/// A job as `squeue` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    pub state: String,
    /// Its time left (`%L`; for a pending job, its whole limit).
    pub time_left: Option<Duration>,
    /// Why it is pending (`%r`), if Slurm says (`None` is not a reason).
    pub reason: Option<String>,
}

/// The `squeue -o` format [`parse_squeue`] reads: the reason last, as it may hold spaces.
pub(super) const SQUEUE_FORMAT: &str = "%i %T %L %r";

/// Parse `squeue -h -o '%i %T %L %r'`: one job a line, id, state, then (optionally) time left
/// and the pending reason. Lines with less than id and state are skipped (and said).
pub fn parse_squeue(text: &str) -> Vec<Listed> {
    let mut jobs = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (id, rest) = word(line);
        let (state, rest) = word(rest);
        let (left, reason) = word(rest);
        if state.is_empty() {
            tracing::warn!(%line, "squeue printed a line that is not `ID STATE ...`; ignored");
            continue;
        }
        jobs.push(Listed {
            id: id.to_string(),
            state: state.to_string(),
            time_left: parse_time_left(left),
            reason: Some(reason.trim())
                .filter(|r| !r.is_empty() && *r != "None")
                .map(str::to_string),
        });
    }
    jobs
}

/// The first word of `text`, and the rest.
fn word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    text.split_at(text.find(char::is_whitespace).unwrap_or(text.len()))
}

/// The job id `sbatch --parsable` printed: `ID` or `ID;CLUSTER`.
pub fn parse_sbatch(text: &str) -> Option<String> {
    let id = text.trim().split(';').next()?.trim();
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit() || c == '_')).then(|| id.to_string())
}

/// Slurm's time left (`squeue -o %L`): `[DAYS-][HOURS:]MINUTES:SECONDS`; `None` for
/// `UNLIMITED`, `NOT_SET` or anything else.
pub fn parse_time_left(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (days, rest) = match text.split_once('-') {
        Some((days, rest)) => (days.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let (hours, minutes, seconds) = match parts[..] {
        [h, m, s] => (h, m, s),
        [m, s] => (0, m, s),
        _ => return None,
    };
    Some(Duration::from_secs(
        ((days * 24 + hours) * 60 + minutes) * 60 + seconds,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines() {
        let jobs = parse_squeue(
            "12 RUNNING 1:59 None\n 13 PENDING \n\nbad\n14 PENDING 10:00 ReqNodeNotAvail, UnavailableNodes:n[1-2]\n",
        );
        let listed = |id: &str, state: &str, left: Option<u64>, reason: Option<&str>| Listed {
            id: id.into(),
            state: state.into(),
            time_left: left.map(Duration::from_secs),
            reason: reason.map(str::to_string),
        };
        assert_eq!(
            jobs,
            vec![
                listed("12", "RUNNING", Some(119), None),
                listed("13", "PENDING", None, None),
                listed(
                    "14",
                    "PENDING",
                    Some(600),
                    Some("ReqNodeNotAvail, UnavailableNodes:n[1-2]")
                ),
            ]
        );
    }

    #[test]
    fn sbatch_ids() {
        assert_eq!(parse_sbatch("42\n").as_deref(), Some("42"));
        assert_eq!(parse_sbatch("42;cluster\n").as_deref(), Some("42"));
        assert_eq!(parse_sbatch("Submitted batch job 42"), None);
        assert_eq!(parse_sbatch(""), None);
    }

    #[test]
    fn time_left() {
        let secs = |s| parse_time_left(s).map(|d| d.as_secs());
        assert_eq!(secs("1:59"), Some(119));
        assert_eq!(secs("01:00:05"), Some(3605));
        assert_eq!(secs("2-03:04:05"), Some(2 * 86400 + 3 * 3600 + 4 * 60 + 5));
        assert_eq!(secs("UNLIMITED"), None);
        assert_eq!(secs("NOT_SET"), None);
        assert_eq!(secs(""), None);
        assert_eq!(secs("1:2:3:4"), None);
    }
}
