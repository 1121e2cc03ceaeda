//! `weir wait` (and `submit --wait`): until every task of a job is final, showing progress and
//! reconnecting to a scheduler that restarts meanwhile; a job with failed or canceled tasks
//! exits 1. When
//! the scheduler says a queued task can run nowhere (no live worker could ever run it, no
//! worker manager could start one that would, for 2 s), it stops at once with that reason and
//! exit code 3 ([`EXIT_UNRUNNABLE`]); the tasks stay queued, and `weir wait JOB` waits on.

use anyhow::Result;
use weir::client::{Client, Waited};
use weir::proto::{JobCounts, JobId};

/// The exit code of a wait stopped because a task can run nowhere ([`Unrunnable`]).
pub(crate) const EXIT_UNRUNNABLE: u8 = 3;

use crate::connect::Reach;
use crate::output::{JobDone, Output, Unrunnable};

pub(crate) async fn run(
    client: &Client,
    job: JobId,
    output: &dyn Output,
    reach: &Reach,
) -> Result<()> {
    let counts = wait_for(client, job, output, reach).await?;
    let done = JobDone { job, counts };
    output.job_done(&done);
    match done.failure() {
        Some(failure) => Err(failure.into()),
        None => Ok(()),
    }
}

async fn wait_for(
    client: &Client,
    job: JobId,
    output: &dyn Output,
    reach: &Reach,
) -> Result<JobCounts> {
    let mut progress = output.job_progress(job);
    let mut reconnected: Option<Client> = None;
    let counts = loop {
        let current = reconnected.as_ref().unwrap_or(client);
        match current
            .wait_or_unrunnable(job, |counts| progress.update(counts))
            .await
        {
            Ok(Waited::Done(counts)) => break counts,
            Ok(Waited::Unrunnable { task, reason }) => {
                progress.finish();
                return Err(Unrunnable { job, task, reason }.into());
            }
            Err(error) if error.is_connection_lost() => {
                output.note(&format!("lost the scheduler ({error}); reconnecting"));
                reconnected = Some(reach.reconnect().await?);
            }
            Err(error) => return Err(error.into()),
        }
    };
    progress.finish();
    Ok(counts)
}
