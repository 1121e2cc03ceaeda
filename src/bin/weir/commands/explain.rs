//! `weir explain`: why a task is queued, running or finished.

use anyhow::Result;
use weir::client::Client;
use weir::proto::TaskId;

use crate::output::{Explanation, Output};

pub(crate) async fn run(client: &Client, task: TaskId, output: &dyn Output) -> Result<()> {
    let explanation = client.explain(task).await?;
    output.explanation(&Explanation { task, explanation });
    Ok(())
}
