//! The Slurm backend's units for the manager's report: each job as `squeue` last listed it
//! (pending with Slurm's reason, running with its time left, completing), then those it
//! cancelled and those that ended.

use std::time::Duration;

use super::{Jobs, Listed};
use crate::core::units::{self, Unit};
use crate::manager::unit_log;
use crate::proto::{UnitReport, UnitState};

impl Jobs {
    pub(super) fn units(&self, now: u64) -> Vec<UnitReport> {
        let (listed, at) = &self.listed;
        let since = Duration::from_millis(now.saturating_sub(*at));
        let live = self
            .book
            .units
            .iter()
            .map(|unit| {
                let job = listed.iter().find(|l| l.id == unit.id);
                unit_log::live(unit, engine_state(unit, job, since), now)
            })
            .collect();
        let (manager, size) = (&self.settings.id, self.slurm.unit_size);
        self.log
            .report(live, |job| units::names(manager, job, size), now)
    }
}

/// What Slurm said of a job `since` ago: its state, the reason, its time left now.
fn engine_state(
    unit: &Unit,
    listed: Option<&Listed>,
    since: Duration,
) -> (UnitState, Option<String>, Option<Duration>) {
    let Some(job) = listed else {
        return (UnitState::Pending, Some("submitted".into()), None);
    };
    match job.state.as_str() {
        "PENDING" => (UnitState::Pending, job.reason.clone(), job.time_left),
        "RUNNING" => (
            UnitState::Running,
            None,
            job.time_left.map(|left| left.saturating_sub(since)),
        ),
        "COMPLETING" => (UnitState::Completing, None, None),
        // CONFIGURING, SUSPENDED, ...: Slurm's word for it.
        other => {
            let state = match unit.running {
                true => UnitState::Running,
                false => UnitState::Pending,
            };
            (state, Some(other.to_lowercase()), job.time_left)
        }
    }
}

/// Why a job this manager did not cancel ended, from what `squeue` last said of it.
pub(super) fn ended_why(last: Option<&Listed>) -> String {
    match last {
        Some(job) => match job.time_left {
            Some(left) => format!(
                "left Slurm's queue (was {}, {}s left)",
                job.state.to_lowercase(),
                left.as_secs()
            ),
            None => format!("left Slurm's queue (was {})", job.state.to_lowercase()),
        },
        None => "left Slurm's queue".into(),
    }
}
