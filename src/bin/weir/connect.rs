//! Reaching the scheduler: connect through the access file, and connect again (with backoff)
//! while a scheduler that may be restarting does not answer. A session that lost its scheduler
//! waits for it whatever its lock says (it was there a moment ago: a restart may follow).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use weir::client::{Client, Patience};

use crate::output::Output;

/// Where the scheduler is, and how long to keep trying to reach it when it does not answer.
pub(crate) struct Reach {
    pub access_file: PathBuf,
    pub timeout: Duration,
}

impl Reach {
    /// Connect to the scheduler ([`weir::client::reach`]): a scheduler known to be gone (its
    /// lock free, its process gone) or never started here fails at once; one that may be
    /// (re)starting is waited for up to `--reconnect-timeout`, saying so.
    pub(crate) async fn connect(&self, output: &dyn Output) -> Result<Client> {
        self.connect_with(Patience::Running, output).await
    }

    /// [`Reach::connect`], waiting for what `patience` says too (saying so once).
    pub(crate) async fn connect_with(
        &self,
        patience: Patience,
        output: &dyn Output,
    ) -> Result<Client> {
        let timeout = self.timeout;
        let client = weir::client::reach_with(&self.access_file, timeout, patience, |error| {
            output.note(&match patience {
                Patience::Start => format!("waiting for a scheduler to start ({error})"),
                _ => format!("{error}; retrying for up to {timeout:.0?} (it may be restarting)"),
            });
        })
        .await?;
        Ok(client)
    }

    /// After a lost connection: connect, retrying with backoff for up to `timeout` whatever
    /// fails (re-reading the access file: a restarted scheduler may listen elsewhere).
    pub(crate) async fn reconnect(&self) -> Result<Client> {
        let client =
            weir::client::reach_with(&self.access_file, self.timeout, Patience::Restart, |_| {})
                .await?;
        Ok(client)
    }
}
