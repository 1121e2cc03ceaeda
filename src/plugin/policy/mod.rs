//! Scaling policies: the `policy` world behind core's [`ScalingPolicy`] trait.
//!
//! The engine resource is created once from the policy content and kept in a live instance, so a
//! tick costs one call. A trap discards the instance; the next call re-creates it.

use std::sync::Arc;

use wasmtime::component::ResourceAny;

use super::bindings::{v0_1, v0_2};
use super::epoch::Epoch;
use super::sandbox::{Sandboxed, State};
use super::{Limits, PluginError, Version};
use crate::core::scaling::{
    Decision, PolicyFailure, ScalingPolicy, Snapshot, Tier, validate_decisions,
};

use v0_1::policy::exports::weir::plugin::scaling as wit;
use v0_2::policy::exports::weir::plugin::scaling as wit2;
use v0_2::policy::weir::plugin::cluster;

/// A policy component linked for the version it was built against.
pub(super) enum Pre {
    V0_1(v0_1::policy::PolicyPre<State>),
    V0_2(v0_2::policy::PolicyPre<State>),
}

struct Live<B> {
    bindings: B,
    engine: ResourceAny,
}

/// The instance and the last snapshot in its version's WIT types, overwritten in place by the
/// next call: its strings and lists keep their capacity, so a cluster whose shape holds converts
/// without allocating (at 1,000 managers that was thousands of allocations per call).
enum Versioned {
    V0_1 {
        sandbox: Sandboxed<Live<v0_1::policy::Policy>>,
        input: wit::Snapshot,
    },
    V0_2 {
        sandbox: Sandboxed<Live<v0_2::policy::Policy>>,
        input: cluster::Snapshot,
    },
}

pub struct PolicyPlugin {
    versioned: Versioned,
}

impl PolicyPlugin {
    pub(super) fn new(
        plugin: Arc<str>,
        pre: Pre,
        content: &str,
        limits: Limits,
        epoch: Epoch,
    ) -> Result<PolicyPlugin, PluginError> {
        let content = content.to_string();
        let mut versioned = match pre {
            Pre::V0_1(pre) => Versioned::V0_1 {
                sandbox: Sandboxed::new(plugin, limits, epoch, move |store| {
                    let bindings = pre.instantiate(&mut *store)?;
                    let created = (bindings.weir_plugin_scaling().engine())
                        .call_create(&mut *store, &content)?;
                    Ok(created.map(|engine| Live { bindings, engine }))
                }),
                input: reuse::blank_v0_1(),
            },
            Pre::V0_2(pre) => Versioned::V0_2 {
                sandbox: Sandboxed::new(plugin, limits, epoch, move |store| {
                    let bindings = pre.instantiate(&mut *store)?;
                    let created = (bindings.weir_plugin_scaling().engine())
                        .call_create(&mut *store, &content)?;
                    Ok(created.map(|engine| Live { bindings, engine }))
                }),
                input: reuse::blank_v0_2(),
            },
        };
        match &mut versioned {
            Versioned::V0_1 { sandbox, .. } => sandbox.ensure_live("create")?,
            Versioned::V0_2 { sandbox, .. } => sandbox.ensure_live("create")?,
        }
        Ok(PolicyPlugin { versioned })
    }

    pub fn name(&self) -> &str {
        match &self.versioned {
            Versioned::V0_1 { sandbox, .. } => &sandbox.plugin,
            Versioned::V0_2 { sandbox, .. } => &sandbox.plugin,
        }
    }

    /// The `weir:plugin` version it was built against.
    pub fn version(&self) -> Version {
        match &self.versioned {
            Versioned::V0_1 { .. } => Version::V0_1,
            Versioned::V0_2 { .. } => Version::V0_2,
        }
    }

    /// The tiers the content describes.
    pub fn tiers(&mut self) -> Result<Vec<Tier>, PluginError> {
        Ok(match &mut self.versioned {
            Versioned::V0_1 { sandbox, .. } => sandbox
                .call("tiers", |store, live| {
                    let engine = live.bindings.weir_plugin_scaling().engine();
                    engine.call_tiers(store, live.engine)
                })?
                .into_iter()
                .map(convert::tier_from_wit)
                .collect(),
            Versioned::V0_2 { sandbox, .. } => sandbox
                .call("tiers", |store, live| {
                    let engine = live.bindings.weir_plugin_scaling().engine();
                    engine.call_tiers(store, live.engine)
                })?
                .into_iter()
                .map(convert_v0_2::tier_from_wit)
                .collect(),
        })
    }

    /// Run `decide` and check the result can be applied to `snapshot`. A 0.2.0 policy is
    /// handed each manager's workers counted, and the lists it asks for (`cluster.workers`)
    /// from `snapshot`, shared with the call, not copied.
    pub fn decide(&mut self, snapshot: &Arc<Snapshot>) -> Result<Vec<Decision>, PluginError> {
        let decisions: Vec<Decision> = match &mut self.versioned {
            Versioned::V0_1 { sandbox, input } => {
                reuse::snapshot_into_v0_1(snapshot, input);
                let input = &*input;
                sandbox
                    .call("decide", |store, live| {
                        let engine = live.bindings.weir_plugin_scaling().engine();
                        engine.call_decide(store, live.engine, input)
                    })?
                    .into_iter()
                    .map(convert::decision_from_wit)
                    .collect()
            }
            Versioned::V0_2 { sandbox, input } => {
                reuse::snapshot_into_v0_2(snapshot, input);
                let input = &*input;
                sandbox
                    .call("decide", |store, live| {
                        store.data_mut().deciding = Some(Deciding::new(snapshot.clone()));
                        let engine = live.bindings.weir_plugin_scaling().engine();
                        let decided = engine.call_decide(&mut *store, live.engine, input);
                        store.data_mut().deciding = None;
                        decided
                    })?
                    .into_iter()
                    .map(convert_v0_2::decision_from_wit)
                    .collect()
            }
        };
        validate_decisions(snapshot, &decisions).map_err(|rule| PluginError::Nonsense {
            plugin: self.name().to_string(),
            rule,
        })?;
        Ok(decisions)
    }
}

impl ScalingPolicy for PolicyPlugin {
    fn name(&self) -> &str {
        PolicyPlugin::name(self)
    }

    fn decide(&mut self, snapshot: &Arc<Snapshot>) -> Result<Vec<Decision>, PolicyFailure> {
        Ok(PolicyPlugin::decide(self, snapshot)?)
    }
}

/// The snapshot a 0.2.0 policy is deciding on, and its managers by id (made at the first
/// `cluster.workers` call of a decision: a policy that asks for every manager's list must not
/// search the managers for each).
pub(super) struct Deciding {
    snapshot: Arc<Snapshot>,
    by_id: Vec<usize>,
}

impl Deciding {
    fn new(snapshot: Arc<Snapshot>) -> Deciding {
        Deciding {
            snapshot,
            by_id: Vec::new(),
        }
    }

    fn manager(&mut self, id: &str) -> Option<&crate::core::scaling::Manager> {
        let managers = &self.snapshot.managers;
        if self.by_id.len() != managers.len() {
            self.by_id = (0..managers.len()).collect();
            self.by_id
                .sort_by(|&a, &b| managers[a].id.cmp(&managers[b].id));
        }
        let at = (self.by_id)
            .binary_search_by(|&i| managers[i].id.as_str().cmp(id))
            .ok()?;
        self.by_id.get(at).and_then(|&i| managers.get(i))
    }
}

/// `cluster.workers`: a manager's live workers in the snapshot being decided (none for a
/// manager not in it, and outside `decide`).
impl cluster::Host for State {
    fn workers(&mut self, manager_id: String) -> Vec<cluster::Worker> {
        let manager = self.deciding.as_mut().and_then(|d| d.manager(&manager_id));
        match manager {
            Some(m) => m.workers.iter().map(convert_v0_2::worker_to_wit).collect(),
            None => Vec::new(),
        }
    }
}

mod reuse;

/// The conversions `weir-waterfall` writes once for host and guests, per version.
mod convert {
    use super::wit;
    weir_waterfall::wit_conversions!(wit);
}

mod convert_v0_2 {
    use super::{cluster, wit2};
    weir_waterfall::wit_conversions_v2!(cluster, wit2);
}
