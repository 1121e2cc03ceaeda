//! Scaling policies: the `policy` world behind core's [`ScalingPolicy`] trait.
//!
//! The engine resource is created once from the policy content and kept in a live instance, so a
//! tick costs one call. A trap discards the instance; the next call re-creates it.

use std::sync::Arc;

use wasmtime::component::ResourceAny;

use super::bindings::policy::{Policy, PolicyPre, exports::weir::plugin::scaling as wit};
use super::sandbox::{Sandboxed, State};
use super::{Limits, PluginError};
use crate::core::scaling::{
    Decision, Demand, PolicyFailure, ScalingPolicy, Snapshot, Tier, Verdict, validate_decisions,
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
    ) -> Result<PolicyPlugin, PluginError> {
        let content = content.to_string();
        let engine = pre.engine().clone();
        let sandbox = Sandboxed::new(plugin, limits, engine, move |store| {
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
        Ok(tiers
            .into_iter()
            .map(|t| Tier {
                priority: t.priority,
                members: t.members,
            })
            .collect())
    }

    /// Run `decide` and check the result can be applied to `snapshot`.
    pub fn decide(&mut self, snapshot: &Snapshot) -> Result<Vec<Decision>, PluginError> {
        let input = to_wit(snapshot);
        let output = self.sandbox.call("decide", |store, live| {
            live.bindings
                .weir_plugin_scaling()
                .engine()
                .call_decide(store, live.engine, &input)
        })?;
        let decisions: Vec<Decision> = output
            .into_iter()
            .map(|d| Decision {
                manager_id: d.manager_id,
                desired_workers: d.desired_workers,
                stop: d.stop,
                reason: d.reason,
            })
            .collect();
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

fn to_wit(s: &Snapshot) -> wit::Snapshot {
    wit::Snapshot {
        now_ms: s.now_ms,
        scale_down_delay_ms: s.scale_down_delay_ms,
        managers: s
            .managers
            .iter()
            .map(|m| wit::Manager {
                id: m.id.clone(),
                worker_type: m.worker_type.clone(),
                max_task_concurrency: m.max_task_concurrency,
                worker_slots: m.worker_slots,
                online: m.online,
                workers: m
                    .workers
                    .iter()
                    .map(|w| wit::Worker {
                        id: w.id,
                        slots: w.slots,
                        busy: w.busy,
                        idle_ms: w.idle_ms,
                    })
                    .collect(),
                starting: m.starting,
                capabilities: m.capabilities.clone(),
                environments: m
                    .environments
                    .iter()
                    .map(|(name, v)| {
                        let v = match v {
                            Verdict::Match => wit::Verdict::Match,
                            Verdict::NoMatch => wit::Verdict::NoMatch,
                            Verdict::Unknown => wit::Verdict::Unknown,
                        };
                        (name.clone(), v)
                    })
                    .collect(),
            })
            .collect(),
        demand: s.demand.iter().map(demand_to_wit).collect(),
    }
}

fn demand_to_wit(d: &Demand) -> wit::Demand {
    wit::Demand {
        capabilities: d.capabilities.clone(),
        environments: d.environments.clone(),
        queued: d.queued,
        running: d.running,
    }
}
