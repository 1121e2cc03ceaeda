//! Environment names: registered at run time, or declared by workers and managers.

use super::*;
use weir_proto::EnvironmentDef;

/// Every environment name the scheduler knows, with where it comes from, and the definition of
/// each one registered at run time: the one store of both (the scheduler sends the definitions
/// to workers, the task core matches on the names).
#[derive(Default)]
pub struct Environments {
    known: BTreeMap<String, Known>,
}

enum Known {
    Registered(EnvironmentDef),
    Worker,
    Manager,
}

impl Environments {
    pub fn contains_key(&self, name: &str) -> bool {
        self.known.contains_key(name)
    }

    /// Where the name comes from, if known.
    pub fn get(&self, name: &str) -> Option<EnvSource> {
        self.known.get(name).map(|known| match known {
            Known::Registered(_) => EnvSource::Registered,
            Known::Worker => EnvSource::Worker,
            Known::Manager => EnvSource::Manager,
        })
    }

    pub(crate) fn is_registered(&self, name: &str) -> bool {
        matches!(self.known.get(name), Some(Known::Registered(_)))
    }

    /// The run-time definition of `name`, if it is registered.
    pub fn definition(&self, name: &str) -> Option<&EnvironmentDef> {
        match self.known.get(name) {
            Some(Known::Registered(def)) => Some(def),
            _ => None,
        }
    }

    /// The run-time definitions, by name.
    pub(crate) fn definitions(&self) -> impl Iterator<Item = &EnvironmentDef> {
        self.known.values().filter_map(|known| match known {
            Known::Registered(def) => Some(def),
            _ => None,
        })
    }

    /// Whether a run-time definition uses this condition component.
    pub(crate) fn uses_component(&self, hash: &ComponentHash) -> bool {
        self.definitions().any(|def| def.component == *hash)
    }

    /// Every known name with where it comes from.
    pub fn iter(&self) -> impl Iterator<Item = (&String, EnvSource)> {
        self.known
            .keys()
            .filter_map(|name| Some((name, self.get(name)?)))
    }

    /// Known from now on as `source` (a worker's or manager's own), unless known already.
    pub(super) fn declare(&mut self, name: &str, source: EnvSource) {
        if !self.known.contains_key(name) {
            let known = match source {
                EnvSource::Manager => Known::Manager,
                _ => Known::Worker,
            };
            self.known.insert(name.to_string(), known);
        }
    }
}

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
    pub(crate) fn declare_environments<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            self.environments.declare(name, EnvSource::Manager);
        }
    }

    /// A worker's own environment (`--env-plugin`) is known from now on, unless it is already.
    pub(super) fn declare_worker_environment(&mut self, name: &str) {
        self.environments.declare(name, EnvSource::Worker);
    }

    /// Every known environment, with the run-time definitions.
    pub fn environments(&self) -> &Environments {
        &self.environments
    }

    /// The environment names registered at run time (every worker evaluates them).
    pub(crate) fn registered_environments(&self) -> std::collections::BTreeSet<String> {
        self.environments
            .definitions()
            .map(|def| def.name.clone())
            .collect()
    }

    /// A run-time environment was registered or replaced: every worker's verdict on it is
    /// pending until it reports again, except on workers with their own definition of the name
    /// (theirs wins there, so their verdict stands). `condition`: its component's bytes (kept
    /// while a definition uses them). Returns the definition it replaces.
    pub(crate) fn register_environment(
        &mut self,
        def: EnvironmentDef,
        condition: Arc<[u8]>,
    ) -> Option<EnvironmentDef> {
        let name = def.name.clone();
        self.add_component(def.component, condition);
        let replaced = match self
            .environments
            .known
            .insert(name.clone(), Known::Registered(def))
        {
            Some(Known::Registered(old)) => Some(old),
            _ => None,
        };
        if let Some(old) = &replaced {
            self.condition_released(&old.component);
        }
        let name = name.as_str();
        for worker in self.workers.values_mut() {
            if worker.info.local_environments.iter().any(|e| e == name) {
                continue;
            }
            worker.verdicts.remove(name);
            worker.loads.remove(name);
            worker.environments.remove(name);
        }
        replaced
    }

    /// Forget a run-time environment. Tasks that need it stay queued (and `explain` says why).
    /// Workers that define the name themselves keep it (and their verdicts on it).
    /// Returns the definition removed (`None`: no run-time environment of that name).
    pub(crate) fn remove_environment(&mut self, name: &str) -> Option<EnvironmentDef> {
        let removed = match self.environments.known.remove(name) {
            Some(Known::Registered(def)) => def,
            Some(other) => {
                self.environments.known.insert(name.to_string(), other);
                return None;
            }
            None => return None,
        };
        self.condition_released(&removed.component);
        for worker in self.workers.values_mut() {
            if worker.info.local_environments.iter().any(|e| e == name) {
                self.environments.declare(name, EnvSource::Worker);
                continue;
            }
            worker.verdicts.remove(name);
            worker.loads.remove(name);
            worker.environments.remove(name);
        }
        Some(removed)
    }

    pub(crate) fn environment_source(&self, name: &str) -> Option<EnvSource> {
        self.environments.get(name)
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
                    if source == EnvSource::Registered
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
