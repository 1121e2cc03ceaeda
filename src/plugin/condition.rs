//! Environment conditions: the `environment` world, evaluated on a worker with only the
//! [`HostFacts`] the worker chooses to reveal.

use std::sync::Arc;

use super::bindings::v0_1::environment::{Environment, EnvironmentPre, weir::plugin::host};
use super::epoch::Epoch;
use super::facts::HostFacts;
use super::sandbox::{Sandboxed, State};
use super::{Limits, PluginError};

impl host::Host for State {
    fn total_memory_bytes(&mut self) -> u64 {
        self.facts.as_ref().map_or(0, |f| f.total_memory_bytes)
    }
    fn available_memory_bytes(&mut self) -> u64 {
        self.facts.as_ref().map_or(0, |f| f.available_memory_bytes)
    }
    fn cpu_count(&mut self) -> u32 {
        self.facts.as_ref().map_or(0, |f| f.cpu_count)
    }
    fn hostname(&mut self) -> String {
        self.facts
            .as_ref()
            .map(|f| f.hostname.clone())
            .unwrap_or_default()
    }
    fn os(&mut self) -> String {
        self.facts
            .as_ref()
            .map(|f| f.os.clone())
            .unwrap_or_default()
    }
    fn arch(&mut self) -> String {
        self.facts
            .as_ref()
            .map(|f| f.arch.clone())
            .unwrap_or_default()
    }
    fn worker_type(&mut self) -> String {
        self.facts
            .as_ref()
            .map(|f| f.worker_type.clone())
            .unwrap_or_default()
    }
    fn capability(&mut self, name: String) -> Option<u64> {
        let facts = self.facts.as_ref()?;
        facts
            .capabilities
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }
    fn env_var(&mut self, name: String) -> Option<String> {
        let facts = self.facts.as_ref()?;
        facts
            .env
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }
}

pub type Config = Vec<(String, String)>;

/// One condition component with a live instance (so `setup` and `teardown` see the same one).
pub struct ConditionPlugin {
    sandbox: Sandboxed<Environment>,
}

impl ConditionPlugin {
    pub(super) fn new(
        plugin: Arc<str>,
        pre: EnvironmentPre<State>,
        limits: Limits,
        epoch: Epoch,
    ) -> ConditionPlugin {
        let sandbox = Sandboxed::new(plugin, limits, epoch, move |store| {
            Ok(Ok(pre.instantiate(store)?))
        });
        ConditionPlugin { sandbox }
    }

    pub fn name(&self) -> &str {
        &self.sandbox.plugin
    }

    /// `Ok(true)`: matches; `Ok(false)`: does not; `Err`: the condition failed (its own error,
    /// a trap, a timeout, ...), which the worker reports as `error(reason)`.
    pub fn evaluate(
        &mut self,
        facts: &Arc<HostFacts>,
        config: &Config,
    ) -> Result<bool, PluginError> {
        let plugin = self.name().to_string();
        let verdict = self.sandbox.call("evaluate", |store, bindings| {
            store.data_mut().facts = Some(facts.clone());
            bindings
                .weir_plugin_condition()
                .call_evaluate(store, config)
        })?;
        verdict.map_err(|message| PluginError::Refused {
            plugin,
            call: "evaluate",
            message,
        })
    }

    /// Values for the tasks that run in this environment.
    pub fn setup(
        &mut self,
        facts: &Arc<HostFacts>,
        config: &Config,
    ) -> Result<Config, PluginError> {
        let plugin = self.name().to_string();
        let values = self.sandbox.call("setup", |store, bindings| {
            store.data_mut().facts = Some(facts.clone());
            bindings.weir_plugin_condition().call_setup(store, config)
        })?;
        values.map_err(|message| PluginError::Refused {
            plugin,
            call: "setup",
            message,
        })
    }

    pub fn teardown(&mut self, facts: &Arc<HostFacts>) -> Result<(), PluginError> {
        let result = self.sandbox.call("teardown", |store, bindings| {
            store.data_mut().facts = Some(facts.clone());
            bindings.weir_plugin_condition().call_teardown(store)
        });
        self.sandbox.reset();
        result
    }
}
