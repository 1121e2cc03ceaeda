//! `weir env register | list | remove`: environments, conditions workers evaluate; tasks ask for
//! them with `submit --env NAME`.

use anyhow::{Result, bail};
use clap::Subcommand;
use weir::client::Client;

use super::files::component;
use crate::output::Output;

#[derive(Subcommand)]
pub(crate) enum EnvCommand {
    /// Register (or replace) an environment: every worker evaluates the condition and reports.
    Register {
        name: String,
        /// A component of the `environment` world (or the bundled `mem_gt`).
        file: String,
        /// A config value handed to the condition (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// Return once every live worker has answered, with the counts.
        #[arg(long)]
        wait: bool,
    },
    /// Every environment with its matching, not matching and erroring workers.
    List,
    /// Remove a run-time environment (workers tear it down; tasks needing it stay queued).
    Remove { name: String },
}

pub(crate) async fn run(client: &Client, command: &EnvCommand, output: &dyn Output) -> Result<()> {
    match command {
        EnvCommand::Register {
            name,
            file,
            config,
            wait,
        } => {
            let bytes = component(file)?;
            let list = client
                .env_register(name, bytes, parse_config(config)?, *wait)
                .await?;
            output.environments(&list);
        }
        EnvCommand::List => output.environments(&client.env_list().await?),
        EnvCommand::Remove { name } => {
            client.env_remove(name).await?;
            output.environment_removed(name);
        }
    }
    Ok(())
}

fn parse_config(items: &[String]) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((key, value)) => Ok((key.trim().to_string(), value.trim().to_string())),
            None => bail!("--config `{item}` is not KEY=VALUE"),
        })
        .collect()
}
