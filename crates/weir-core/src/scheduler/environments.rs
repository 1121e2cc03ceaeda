//! Run-time environments (`weir env register/list/remove`) and the waits on workers
//! (`env register --wait`, `weir workers wait`).

use std::sync::Arc;

use super::{ClientId, EnvWait, Record, Scheduler, WorkerWait};
use crate::tasks::EnvSource;
use weir_proto::{ComponentHash, EnvironmentDef, ErrorCode, Response, WorkerId};

/// Most run-time environments at once (each is evaluated by every worker).
pub const MAX_ENVIRONMENTS: usize = 256;

/// Environment names become parts of variable names (`WEIR_ENV_<NAME>_<KEY>`).
pub fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "environment name `{name}` must be 1 to 64 letters, digits, `_` or `-`"
        ));
    }
    Ok(())
}

impl Scheduler {
    /// `weir env register`: checked, journaled, sent to every worker; with `wait`, answered
    /// once every live worker has a verdict.
    pub(super) fn env_register(
        &mut self,
        client: ClientId,
        name: String,
        config: Vec<(String, String)>,
        wait: bool,
        components: Vec<(ComponentHash, Arc<[u8]>)>,
    ) {
        let Some((hash, bytes)) = components.into_iter().next() else {
            return self.refuse(client, ErrorCode::Invalid, "no condition component".into());
        };
        if let Err(message) = check_env_name(&name) {
            return self.refuse(client, ErrorCode::Invalid, message);
        }
        let registered = self.tasks.environments().definitions().count();
        if !self.tasks.environments().is_registered(&name) && registered >= MAX_ENVIRONMENTS {
            return self.refuse(
                client,
                ErrorCode::Limit,
                format!("at most {MAX_ENVIRONMENTS} run-time environments; remove one first"),
            );
        }
        if matches!(
            self.tasks.environment_source(&name),
            Some(EnvSource::Worker | EnvSource::Manager)
        ) {
            tracing::info!(environment = %name, "registering a name some workers define with --env-plugin: their own definition wins on them (weir env list shows which)");
        }
        let def = EnvironmentDef {
            name: name.clone(),
            component: hash,
            config,
        };
        // The same definition again changes nothing: the workers would not evaluate it anew,
        // so forgetting their verdicts would leave `--wait` waiting for answers that never come.
        if self.tasks.environments().definition(&name) == Some(&def) {
            tracing::info!(environment = %name, "environment registered again, unchanged");
        } else {
            if self.config.journal {
                self.journal(Record::EnvRegister {
                    def: def.clone(),
                    component: bytes.to_vec(),
                });
            }
            self.tasks.register_environment(def, bytes);
            self.managers.forget_verdicts(&name);
            tracing::info!(environment = %name, "environment registered");
            self.send_environments_to_all();
        }
        if wait {
            let workers = self.tasks.worker_ids().into_iter().collect();
            self.env_waits.push(EnvWait {
                client,
                name,
                workers,
            });
            // Answered once durable: the sync of this round comes before the next one.
            return self.settle_env_waits();
        }
        let report = self.environment_report(Some(&name));
        self.reply_durable(client, Response::Environments(report));
    }

    pub(super) fn env_remove(&mut self, client: ClientId, name: String) {
        if self.tasks.remove_environment(&name).is_none() {
            let message = format!(
                "no run-time environment `{name}` (a worker's own --env-plugin cannot be removed here)"
            );
            return self.refuse(client, ErrorCode::NotFound, message);
        }
        self.managers.forget_verdicts(&name);
        // Managers that define the name themselves still do.
        if !self.managers.declaring(&name).is_empty() {
            self.tasks.declare_environments([name.as_str()]);
        }
        self.journal(Record::EnvRemove { name: name.clone() });
        self.send_environments_to_all();
        // An `env register --wait` for it would wait for verdicts no worker gives any more.
        let (gone, waits) = std::mem::take(&mut self.env_waits)
            .into_iter()
            .partition(|w| w.name == name);
        self.env_waits = waits;
        for wait in gone {
            let message = format!("environment `{name}` was removed while waiting for it");
            self.refuse(wait.client, ErrorCode::NotFound, message);
        }
        self.reply_durable(client, Response::EnvRemoved { name });
    }

    /// Answer the `env register --wait` requests every live worker has now answered.
    pub(super) fn settle_env_waits(&mut self) {
        if self.env_waits.is_empty() {
            return;
        }
        let live: crate::hash::HashSet<WorkerId> = self.tasks.worker_ids().into_iter().collect();
        let mut settled = Vec::new();
        let tasks = &self.tasks;
        self.env_waits.retain_mut(|wait| {
            wait.workers
                .retain(|w| live.contains(w) && !tasks.has_verdict(*w, &wait.name));
            if wait.workers.is_empty() {
                settled.push((wait.client, wait.name.clone()));
                return false;
            }
            true
        });
        for (client, name) in settled {
            let report = self.environment_report(Some(&name));
            self.reply_durable(client, Response::Environments(report));
        }
    }

    /// Answer the `weir workers wait` requests: progress when the count changed, and the last
    /// answer once there are enough.
    pub(super) fn settle_worker_waits(&mut self) {
        if self.worker_waits.is_empty() {
            return;
        }
        let mut answers = Vec::new();
        let tasks = &self.tasks;
        self.worker_waits.retain_mut(|wait| {
            let ready = tasks.ready_workers(wait.environment.as_deref());
            if wait.last == Some(ready) {
                return true;
            }
            wait.last = Some(ready);
            let done = ready >= wait.count;
            answers.push((wait.client, ready, wait.count, done));
            !done
        });
        for (client, ready, wanted, done) in answers {
            self.reply(client, Response::WorkersReady { ready, wanted }, done);
        }
    }

    pub(super) fn wait_workers(
        &mut self,
        client: ClientId,
        count: u32,
        environment: Option<String>,
    ) {
        self.worker_waits.push(WorkerWait {
            client,
            count,
            environment,
            last: None,
        });
        self.settle_worker_waits();
    }
}
