//! Reaching the scheduler: connect through the access file, and connect again (with backoff)
//! while a scheduler that may be restarting does not answer. A session that lost its scheduler
//! waits for it whatever its lock says (it was there a moment ago: a restart may follow).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use weir::client::Client;
use weir::net::AccessFile;

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
        let timeout = self.timeout;
        let client = weir::client::reach(&self.access_file, timeout, |error| {
            output.note(&format!(
                "{error}; retrying for up to {timeout:.0?} (it may be restarting)"
            ));
        })
        .await?;
        Ok(client)
    }

    /// After a lost connection: connect, retrying with backoff up to 5 s (re-reading the access
    /// file: a restarted scheduler may listen elsewhere) for up to `timeout` while the scheduler
    /// does not answer.
    pub(crate) async fn reconnect(&self) -> Result<Client> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(200);
        loop {
            let attempt = async { Client::connect(&AccessFile::read(&self.access_file)?).await };
            match attempt.await {
                Ok(client) => return Ok(client),
                Err(error) if started.elapsed() + backoff > self.timeout => {
                    return Err(anyhow::anyhow!(
                        "gave up reaching the scheduler after {:.0?}: {error}",
                        started.elapsed()
                    ));
                }
                Err(_) => tokio::time::sleep(backoff).await,
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}
