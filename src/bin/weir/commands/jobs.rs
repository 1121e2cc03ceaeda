//! The jobs the scheduler holds: `weir jobs` lists them, `weir cancel` cancels one's unfinished
//! tasks, `weir forget` frees finished ones.

use anyhow::Result;
use weir::client::Client;
use weir::proto::JobId;

use crate::output::{Canceled, Forgotten, ForgottenFinished, Output};

/// `weir jobs`: the newest `last`, newest first.
pub(crate) async fn list(client: &Client, last: u32, output: &dyn Output) -> Result<()> {
    output.jobs(&client.jobs(last).await?);
    Ok(())
}

pub(crate) async fn cancel(client: &Client, job: JobId, output: &dyn Output) -> Result<()> {
    let canceled = client.cancel(job).await?;
    output.canceled(&Canceled { job, canceled });
    Ok(())
}

/// `weir forget JOB...`, one job after the other.
pub(crate) async fn forget(client: &Client, jobs: &[JobId], output: &dyn Output) -> Result<()> {
    let mut all = Vec::new();
    for &job in jobs {
        let forgotten = Forgotten {
            job,
            tasks: client.forget(job).await?,
        };
        output.forgotten(&forgotten);
        all.push(forgotten);
    }
    output.all_forgotten(&all);
    Ok(())
}

/// `weir forget --finished`.
pub(crate) async fn forget_finished(client: &Client, output: &dyn Output) -> Result<()> {
    let (jobs, tasks) = client.forget_finished().await?;
    output.forgotten_finished(&ForgottenFinished { jobs, tasks });
    Ok(())
}
