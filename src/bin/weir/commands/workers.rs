//! `weir workers wait N [--env NAME]`: until N live workers (matching NAME) are registered, so
//! scripts never sleep.

use std::cell::Cell;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use weir::client::Patience;

use crate::connect::Reach;
use crate::output::{Output, WorkersReady, workers_matching};

pub(crate) async fn wait(
    reach: &Reach,
    count: u32,
    environment: Option<&str>,
    timeout: Duration,
    output: &dyn Output,
) -> Result<()> {
    // Started with the cluster (`scheduler & ... weir workers wait N`): before the scheduler
    // has taken its lock, the access file is missing or left by one that is gone. This command
    // is how scripts wait for the cluster, so it waits for a scheduler to start too, within the
    // same timeout (others fail at once there, see `weir::client::reach`).
    let started = Instant::now();
    let until_started = Reach {
        access_file: reach.access_file.clone(),
        timeout,
    };
    let client = until_started
        .connect_with(Patience::Start, output)
        .await
        .map_err(|error| {
            anyhow::anyhow!("{error}; no scheduler answered within {timeout:?} (--timeout)")
        })?;
    let left = timeout.saturating_sub(started.elapsed());

    let what = workers_matching(count, environment);
    let seen = Cell::new(0u32);
    let waiting = client.wait_workers(count, environment.map(str::to_string), |ready| {
        seen.set(ready);
        output.workers_progress(ready, count, environment);
    });
    let workers = match tokio::time::timeout(left, waiting).await {
        Ok(ready) => ready?,
        Err(_) => bail!(
            "only {} of {count} {what} after {:?} (--timeout); `weir status` and `weir env list` show who is there",
            seen.get(),
            left
        ),
    };
    output.workers_ready(&WorkersReady {
        workers,
        wanted: count,
        environment: environment.map(str::to_string),
    });
    Ok(())
}
