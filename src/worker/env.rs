//! Environment conditions on the worker: its own (`--env-plugin`) and the scheduler's run-time
//! set. Each is evaluated under the sandbox's deadline; `setup` runs where it matches and its
//! values are kept for tasks; `teardown` runs when an environment goes away. Only changed
//! verdicts are reported.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use crate::plugin::{
    ConditionPlugin, HostFacts, Limits, Loaded, Origin, PluginError, PluginHost, World,
};

use crate::proto::{ComponentHash, ComponentLoad, EnvVerdict, EnvironmentDef, LoadOrigin};

pub type Values = Vec<(String, String)>;

/// `setup` values of the environments this worker matches, shared with the task runner.
pub type SharedValues = Arc<RwLock<HashMap<String, Values>>>;

/// A condition from the worker's own flags.
#[derive(Clone, Debug)]
pub struct LocalEnv {
    pub name: String,
    pub bytes: Arc<[u8]>,
    pub config: Values,
}

/// Why an environment's condition cannot be evaluated here (its verdict is this error).
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("the condition component never arrived")]
    NeverArrived,
}

struct Active {
    component: ComponentHash,
    config: Values,
    plugin: Result<ConditionPlugin, Unusable>,
    /// Its last evaluation ran into the deadline: it keeps its error and is not run again on
    /// rechecks (a looping condition costs its deadline once, not on every recheck, and cannot
    /// hold the others up); registering it again, or a new worker, tries it afresh.
    timed_out: bool,
}

pub struct Environments {
    host: Arc<PluginHost>,
    limits: Limits,
    facts: FactsSource,
    local: Vec<LocalEnv>,
    remote: Vec<EnvironmentDef>,
    components: HashMap<ComponentHash, Arc<[u8]>>,
    active: BTreeMap<String, Active>,
    verdicts: BTreeMap<String, EnvVerdict>,
    pub values: SharedValues,
}

pub struct FactsSource {
    pub worker_type: String,
    pub capabilities: Vec<(String, u64)>,
    pub env_allow: Vec<String>,
    /// Memory this worker offers, when less than the machine's (`worker --total-memory`).
    pub total_memory: Option<u64>,
    /// CPUs this worker offers, in place of the ones it may use (`worker --cpus`).
    pub cpus: Option<u32>,
}

impl FactsSource {
    /// This machine's facts as the worker's flags shape them.
    pub fn probe(&self) -> Arc<HostFacts> {
        let mut facts = HostFacts::probe(&self.worker_type, &self.capabilities, &self.env_allow);
        if let Some(limit) = self.total_memory {
            facts.total_memory_bytes = facts.total_memory_bytes.min(limit);
            facts.available_memory_bytes = facts.available_memory_bytes.min(limit);
        }
        if let Some(cpus) = self.cpus {
            facts.cpu_count = cpus;
        }
        Arc::new(facts)
    }
}

impl Environments {
    pub fn new(host: Arc<PluginHost>, facts: FactsSource, local: Vec<LocalEnv>) -> Environments {
        Environments {
            host,
            limits: Limits::default(),
            facts,
            local,
            remote: Vec::new(),
            components: HashMap::new(),
            active: BTreeMap::new(),
            verdicts: BTreeMap::new(),
            values: SharedValues::default(),
        }
    }

    /// The scheduler's set replaced the previous one.
    pub fn set_remote(
        &mut self,
        defs: Vec<EnvironmentDef>,
        components: Vec<(ComponentHash, Arc<[u8]>)>,
    ) {
        for (hash, bytes) in components {
            self.components.insert(hash, bytes);
        }
        self.remote = defs;
    }

    /// Whether there is anything to evaluate or tear down: a condition of its own, one the
    /// scheduler registered, or one still active.
    pub fn has_conditions(&self) -> bool {
        !self.local.is_empty() || !self.remote.is_empty() || !self.active.is_empty()
    }

    /// Evaluate every environment (new ones, changed ones, and — when `recheck` — all again).
    pub fn evaluate(&mut self, recheck: bool) -> Evaluated {
        let facts = self.facts.probe();
        // name -> (component, config, its bytes if this worker has them)
        type Wanted = (ComponentHash, Values, Option<Arc<[u8]>>);
        let mut wanted: BTreeMap<String, Wanted> = BTreeMap::new();
        for local in &self.local {
            let hash = crate::plugin::cache::content_hash(&local.bytes);
            wanted.insert(
                local.name.clone(),
                (hash, local.config.clone(), Some(local.bytes.clone())),
            );
        }
        for def in &self.remote {
            // A worker's own flag wins over a run-time registration of the same name.
            wanted.entry(def.name.clone()).or_insert_with(|| {
                (
                    def.component,
                    def.config.clone(),
                    self.components.get(&def.component).cloned(),
                )
            });
        }

        // Gone: tear down, forget.
        let gone: Vec<String> = self
            .active
            .keys()
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(Active {
                plugin: Ok(mut plugin),
                ..
            }) = self.active.remove(&name)
                && let Err(error) = plugin.teardown(&facts)
            {
                tracing::warn!(environment = %name, %error, "teardown failed");
            }
            self.verdicts.remove(&name);
            self.write_values(&name, None);
        }

        let mut changes = Vec::new();
        let mut loads = Vec::new();
        for (name, (hash, config, bytes)) in wanted {
            let fresh = match self.active.get(&name) {
                Some(active) => active.component != hash || active.config != config,
                None => true,
            };
            if fresh {
                let plugin = match bytes {
                    Some(bytes) => self
                        .host
                        .load(
                            &format!("environment {name}"),
                            &bytes,
                            Some(World::Environment),
                        )
                        .inspect(|loaded| {
                            let load = component_load(loaded);
                            tracing::info!(environment = %name, %load, "condition loaded");
                            loads.push((name.clone(), load));
                        })
                        .and_then(|loaded| self.host.condition(&loaded, self.limits.clone()))
                        .map_err(Unusable::from),
                    None => Err(Unusable::NeverArrived),
                };
                self.active.insert(
                    name.clone(),
                    Active {
                        component: hash,
                        config: config.clone(),
                        plugin,
                        timed_out: false,
                    },
                );
            } else if !recheck {
                continue;
            }
            let Some(active) = self.active.get_mut(&name) else {
                continue;
            };
            if active.timed_out {
                continue; // its error stands (see `Active::timed_out`)
            }
            let timed_out = |error: &PluginError| matches!(error, PluginError::Timeout { .. });
            let (verdict, values) = match &mut active.plugin {
                Err(error) => (EnvVerdict::Error(error.to_string()), None),
                Ok(plugin) => match plugin.evaluate(&facts, &config) {
                    Ok(true) => match plugin.setup(&facts, &config) {
                        Ok(values) => (EnvVerdict::Match, Some(values)),
                        Err(error) => (
                            EnvVerdict::Error(format!("setup: {}", error.message())),
                            None,
                        ),
                    },
                    Ok(false) => (EnvVerdict::NoMatch, None),
                    Err(error) if timed_out(&error) => {
                        active.timed_out = true;
                        let message = format!(
                            "{} (not evaluated again until it is registered again)",
                            error.message()
                        );
                        (EnvVerdict::Error(message), None)
                    }
                    Err(error) => (EnvVerdict::Error(error.message()), None),
                },
            };
            self.write_values(&name, values);
            if fresh || self.verdicts.get(&name) != Some(&verdict) {
                tracing::info!(environment = %name, ?verdict, "environment evaluated");
                changes.push((name.clone(), verdict.clone()));
            }
            self.verdicts.insert(name, verdict);
        }
        Evaluated { loads, changes }
    }

    fn write_values(&self, name: &str, values: Option<Values>) {
        let Ok(mut map) = self.values.write() else {
            return;
        };
        match values {
            Some(values) => map.insert(name.to_string(), values),
            None => map.remove(name),
        };
    }

    /// Every verdict as last evaluated (for a scheduler this worker just registered with).
    pub fn current(&self) -> Vec<(String, EnvVerdict)> {
        self.verdicts
            .iter()
            .map(|(name, verdict)| (name.clone(), verdict.clone()))
            .collect()
    }

    /// Tear every environment down (the worker is leaving).
    pub fn teardown_all(&mut self) {
        let facts = self.facts.probe();
        for (name, active) in std::mem::take(&mut self.active) {
            if let Ok(mut plugin) = active.plugin
                && let Err(error) = plugin.teardown(&facts)
            {
                tracing::warn!(environment = %name, %error, "teardown failed");
            }
        }
    }
}

/// `f` of the environments if no evaluation holds them now, else `None`. For the worker's one
/// runtime thread, which must not wait on a lock an evaluation (compiling a component, running
/// conditions to their deadlines) holds for seconds on a blocking thread.
pub(super) fn peek<T>(
    environments: &std::sync::Mutex<Environments>,
    f: impl FnOnce(&Environments) -> T,
) -> Option<T> {
    environments.try_lock().ok().map(|e| f(&e))
}

/// What one evaluation round has to report.
#[derive(Debug, Default)]
pub struct Evaluated {
    /// How the components of new or changed environments were loaded.
    pub loads: Vec<(String, ComponentLoad)>,
    /// The verdicts that changed, plus every verdict of a new or changed environment.
    pub changes: Vec<(String, EnvVerdict)>,
}

fn component_load(loaded: &Loaded) -> ComponentLoad {
    ComponentLoad {
        origin: match loaded.origin {
            Origin::Compiled => LoadOrigin::Compiled,
            Origin::Disk => LoadOrigin::DiskCache,
            Origin::Memory => LoadOrigin::Memory,
        },
        micros: u64::try_from(loaded.load_time.as_micros()).unwrap_or(u64::MAX),
    }
}

/// `WEIR_ENV_<NAME>_<KEY>`: upper case, anything but letters and digits becomes `_`.
pub fn variable(environment: &str, key: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("WEIR_ENV_{}_{}", clean(environment), clean(key))
}
