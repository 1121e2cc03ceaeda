//! Sandboxed tasks: the `task` world. Each run gets a fresh instance, so tasks share nothing.

use std::sync::Arc;

use super::bindings::v0_1::task::{Task, TaskPre, weir::plugin::environment_values};
use super::condition::Config;
use super::epoch::Epoch;
use super::sandbox::{Sandboxed, State};
use super::{Limits, PluginError};

impl environment_values::Host for State {
    fn get(&mut self, environment: String) -> Option<Config> {
        self.environment_values
            .iter()
            .find(|(name, _)| *name == environment)
            .map(|(_, values)| values.clone())
    }
}

pub struct TaskPlugin {
    sandbox: Sandboxed<Task>,
}

impl TaskPlugin {
    pub(super) fn new(
        plugin: Arc<str>,
        pre: TaskPre<State>,
        limits: Limits,
        epoch: Epoch,
    ) -> TaskPlugin {
        let sandbox = Sandboxed::new(plugin, limits, epoch, move |store| {
            Ok(Ok(pre.instantiate(store)?))
        });
        TaskPlugin { sandbox }
    }

    /// Run the task on `input` with the `setup` values of its environments. Once `cancel`
    /// answers true the run stops within one epoch tick with [`PluginError::Canceled`].
    pub fn run(
        &mut self,
        input: &[u8],
        environments: Vec<(String, Config)>,
        cancel: super::sandbox::StopCheck,
    ) -> Result<Vec<u8>, PluginError> {
        self.sandbox.set_cancel(Some(cancel));
        let plugin = self.sandbox.plugin.to_string();
        let output = self.sandbox.call("run", |store, bindings| {
            store.data_mut().environment_values = environments;
            bindings.weir_plugin_runner().call_run(store, input)
        });
        self.sandbox.reset();
        output?.map_err(|message| PluginError::Refused {
            plugin,
            call: "run",
            message,
        })
    }
}
