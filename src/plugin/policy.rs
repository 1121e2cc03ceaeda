//! Scaling policies: the `policy` world behind core's [`ScalingPolicy`] trait.
//!
//! The engine resource is created once from the policy content and kept in a live instance, so a
//! tick costs one call. A trap discards the instance; the next call re-creates it.

use std::sync::Arc;

use wasmtime::component::ResourceAny;

use super::bindings::policy::{Policy, PolicyPre, exports::weir::plugin::scaling as wit};
use super::epoch::Epoch;
use super::sandbox::{Sandboxed, State};
use super::{Limits, PluginError};
use crate::core::scaling::{
    Decision, PolicyFailure, ScalingPolicy, Snapshot, Tier, validate_decisions,
};

struct Live {
    bindings: Policy,
    engine: ResourceAny,
}

pub struct PolicyPlugin {
    sandbox: Sandboxed<Live>,
}

impl PolicyPlugin {
    pub(super) fn new(
        plugin: Arc<str>,
        pre: PolicyPre<State>,
        content: &str,
        limits: Limits,
        epoch: Epoch,
    ) -> Result<PolicyPlugin, PluginError> {
        let content = content.to_string();
        let sandbox = Sandboxed::new(plugin, limits, epoch, move |store| {
            let bindings: Policy = pre.instantiate(&mut *store)?;
            let created = bindings
                .weir_plugin_scaling()
                .engine()
                .call_create(&mut *store, &content)?;
            Ok(created.map(|engine| Live { bindings, engine }))
        });
        let mut plugin = PolicyPlugin { sandbox };
        plugin.sandbox.ensure_live("create")?;
        Ok(plugin)
    }

    pub fn name(&self) -> &str {
        &self.sandbox.plugin
    }

    /// The tiers the content describes.
    pub fn tiers(&mut self) -> Result<Vec<Tier>, PluginError> {
        let tiers = self.sandbox.call("tiers", |store, live| {
            live.bindings
                .weir_plugin_scaling()
                .engine()
                .call_tiers(store, live.engine)
        })?;
        Ok(tiers.into_iter().map(convert::tier_from_wit).collect())
    }

    /// Run `decide` and check the result can be applied to `snapshot`.
    pub fn decide(&mut self, snapshot: &Snapshot) -> Result<Vec<Decision>, PluginError> {
        let input = convert::snapshot_to_wit(snapshot);
        let output = self.sandbox.call("decide", |store, live| {
            live.bindings
                .weir_plugin_scaling()
                .engine()
                .call_decide(store, live.engine, &input)
        })?;
        let decisions: Vec<Decision> = output.into_iter().map(convert::decision_from_wit).collect();
        validate_decisions(snapshot, &decisions).map_err(|detail| PluginError::Nonsense {
            plugin: self.name().to_string(),
            detail,
        })?;
        Ok(decisions)
    }
}

impl ScalingPolicy for PolicyPlugin {
    fn name(&self) -> &str {
        PolicyPlugin::name(self)
    }

    fn decide(&mut self, snapshot: &Snapshot) -> Result<Vec<Decision>, PolicyFailure> {
        Ok(PolicyPlugin::decide(self, snapshot)?)
    }
}

/// The conversions `weir-waterfall` writes once for host and guests.
mod convert {
    use super::wit;
    weir_waterfall::wit_conversions!(wit);
}
