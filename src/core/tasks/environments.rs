//! Environment names: registered at run time, or declared by workers and managers.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvSource {
    /// `weir env register`: sent to every worker.
    Registered,
    /// A worker's own `--env-plugin`.
    Worker,
    /// A worker manager's `--env-plugin`, declared when it registers and passed on to the
    /// workers it starts (which evaluate it as their own).
    Manager,
}

impl EnvSource {
    fn label(self) -> &'static str {
        match self {
            EnvSource::Registered => "registered",
            EnvSource::Worker => "worker",
            EnvSource::Manager => "manager",
        }
    }
}

impl Tasks {
    /// Names a worker manager declared (its `--env-plugin` conditions): known from now on, so
    /// tasks may ask for them before any of its workers has reported.
    pub fn declare_environments<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            if !self.environments.contains_key(name) {
                self.environments
                    .insert(name.to_string(), EnvSource::Manager);
            }
        }
    }

    /// The environment names registered at run time (every worker evaluates them).
    pub fn registered_environments(&self) -> std::collections::BTreeSet<String> {
        self.environments
            .iter()
            .filter(|(_, source)| **source == EnvSource::Registered)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// A run-time environment was registered or replaced: every worker's verdict on it is
    /// pending until it reports again, except on workers with their own definition of the name
    /// (theirs wins there, so their verdict stands).
    pub fn register_environment(&mut self, name: &str) {
        self.environments
            .insert(name.to_string(), EnvSource::Registered);
        for worker in self.workers.values_mut() {
            if worker.info.local_environments.iter().any(|e| e == name) {
                continue;
            }
            worker.verdicts.remove(name);
            worker.loads.remove(name);
            worker.environments.remove(name);
        }
    }

    /// Forget a run-time environment. Tasks that need it stay queued (and `explain` says why).
    /// Workers that define the name themselves keep it (and their verdicts on it).
    pub fn remove_environment(&mut self, name: &str) -> bool {
        if self.environments.get(name) != Some(&EnvSource::Registered) {
            return false;
        }
        self.environments.remove(name);
        for worker in self.workers.values_mut() {
            if worker.info.local_environments.iter().any(|e| e == name) {
                self.environments
                    .insert(name.to_string(), EnvSource::Worker);
                continue;
            }
            worker.verdicts.remove(name);
            worker.loads.remove(name);
            worker.environments.remove(name);
        }
        true
    }

    pub fn environment_source(&self, name: &str) -> Option<EnvSource> {
        self.environments.get(name).copied()
    }

    /// Per environment: which live workers match, do not, fail, or have not answered.
    pub fn environment_report(&self, only: Option<&str>) -> Vec<EnvironmentStatus> {
        self.environments
            .iter()
            .filter(|(name, _)| only.is_none_or(|o| o == name.as_str()))
            .map(|(name, source)| {
                let mut status = EnvironmentStatus {
                    name: name.clone(),
                    source: source.label().into(),
                    ..EnvironmentStatus::default()
                };
                for worker in self.workers.values() {
                    let who = worker.info.name.clone();
                    if *source == EnvSource::Registered
                        && worker.info.local_environments.contains(name)
                    {
                        status.own_definition.push(who.clone());
                    }
                    if let Some(load) = worker.loads.get(name) {
                        status.loads.push((who.clone(), *load));
                    }
                    match worker.verdicts.get(name) {
                        Some(EnvVerdict::Match) => status.matching.push(who),
                        Some(EnvVerdict::NoMatch) => status.not_matching.push(who),
                        Some(EnvVerdict::Error(reason)) => {
                            status.erroring.push((who, reason.clone()))
                        }
                        None if worker.evaluates(name, &self.environments) => {
                            status.pending.push(who)
                        }
                        None => {}
                    }
                }
                status
            })
            .collect()
    }
}
