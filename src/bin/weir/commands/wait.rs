//! `weir wait` (and `submit --wait`): until every task of a job is final, showing progress and
//! reconnecting to a scheduler that restarts meanwhile; a job with failed tasks exits 1.

use anyhow::Result;
use weir::client::Client;
use weir::proto::{JobCounts, JobId};

use crate::connect::Reach;
use crate::output::{JobDone, Output};

pub async fn run(client: &Client, job: JobId, output: &dyn Output, reach: &Reach) -> Result<()> {
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
        match current.wait(job, |counts| progress.update(counts)).await {
            Ok(counts) => break counts,
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
