//! `weir managers [units ID]`: the allocation view — each worker manager with its units (Slurm
//! jobs, command-backend units, or its own worker processes) by state, or one manager's units.

use anyhow::{Result, anyhow};
use weir::client::Client;

use crate::output::Output;

pub(crate) async fn run(
    client: &Client,
    units_of: Option<&str>,
    output: &dyn Output,
) -> Result<()> {
    match units_of {
        None => output.managers(&client.managers(None).await?),
        Some(id) => {
            let managers = client.managers(Some(id.to_string())).await?;
            let manager = managers
                .iter()
                .find(|m| m.status.id == id)
                .ok_or_else(|| anyhow!("no manager {id}"))?;
            output.manager_units(manager);
        }
    }
    Ok(())
}
