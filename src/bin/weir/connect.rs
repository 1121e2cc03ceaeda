//! Reaching the scheduler: connect through the access file, and connect again (with backoff)
//! while a scheduler that may be restarting does not answer.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use weir::client::Client;
use weir::net::{AccessFile, NetError};

use crate::output::Output;

/// Where the scheduler is, and how long to keep trying to reach it when it does not answer.
pub struct Reach {
    pub access_file: PathBuf,
    pub timeout: Duration,
}

impl Reach {
    /// Connect to the scheduler. No access file: fail at once (no scheduler was ever started
    /// here). No answer: retry for `--reconnect-timeout`, saying so.
    pub async fn connect(&self, output: &dyn Output) -> Result<Client> {
        let access = AccessFile::read(&self.access_file)?;
        match Client::connect(&access).await {
            Err(error @ NetError::Connect { .. }) if !self.timeout.is_zero() => {
                output.note(&format!(
                    "{error}; retrying for up to {:.0?} (it may be restarting)",
                    self.timeout
                ));
                self.reconnect().await
            }
            connected => Ok(connected?),
        }
    }

    /// Connect, retrying with backoff up to 5 s (re-reading the access file: a restarted
    /// scheduler may listen elsewhere) for up to `timeout` while the scheduler does not answer.
    pub async fn reconnect(&self) -> Result<Client> {
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
