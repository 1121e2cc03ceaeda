//! `weir status`: managers, workers and task counts.

use anyhow::Result;
use weir::client::Client;

use crate::output::Output;

pub(crate) async fn run(client: &Client, output: &dyn Output) -> Result<()> {
    output.status(&client.status().await?);
    Ok(())
}
