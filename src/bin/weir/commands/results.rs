//! `weir results`: the results of a job's finished tasks.

use anyhow::Result;
use weir::client::Client;
use weir::proto::JobId;

use crate::output::Output;

pub(crate) async fn run(client: &Client, job: JobId, output: &dyn Output) -> Result<()> {
    output.results(&client.results(job).await?);
    Ok(())
}
