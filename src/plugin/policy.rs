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
    /// The last snapshot in the WIT types, overwritten in place by the next call: its strings
    /// and lists keep their capacity, so a cluster whose shape holds converts without
    /// allocating (at 1,000 managers that was thousands of allocations per call).
    input: wit::Snapshot,
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
        let mut plugin = PolicyPlugin {
            sandbox,
            input: wit::Snapshot {
                now_ms: 0,
                scale_down_delay_ms: 0,
                managers: Vec::new(),
                demand: Vec::new(),
            },
        };
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
        reuse::snapshot_into_wit(snapshot, &mut self.input);
        let input = &self.input;
        let output = self.sandbox.call("decide", |store, live| {
            live.bindings
                .weir_plugin_scaling()
                .engine()
                .call_decide(store, live.engine, input)
        })?;
        let decisions: Vec<Decision> = output.into_iter().map(convert::decision_from_wit).collect();
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

    fn decide(&mut self, snapshot: &Snapshot) -> Result<Vec<Decision>, PolicyFailure> {
        Ok(PolicyPlugin::decide(self, snapshot)?)
    }
}

/// The snapshot written into the last call's WIT values instead of new ones (the decisions come
/// back owned, so `convert` serves for those).
mod reuse {
    use super::wit;
    use crate::core::scaling::{Snapshot, Verdict};

    pub(super) fn snapshot_into_wit(s: &Snapshot, out: &mut wit::Snapshot) {
        out.now_ms = s.now_ms;
        out.scale_down_delay_ms = s.scale_down_delay_ms;
        let blank_manager = |_: &_| wit::Manager {
            id: String::new(),
            worker_type: String::new(),
            max_task_concurrency: 0,
            worker_slots: 0,
            online: false,
            workers: Vec::new(),
            starting: 0,
            capabilities: Vec::new(),
            environments: Vec::new(),
        };
        overwrite(&mut out.managers, &s.managers, blank_manager, |w, m| {
            w.id.clone_from(&m.id);
            w.worker_type.clone_from(&m.worker_type);
            w.max_task_concurrency = m.max_task_concurrency;
            w.worker_slots = m.worker_slots;
            w.online = m.online;
            w.starting = m.starting;
            w.workers.clear();
            w.workers.extend(m.workers.iter().map(|k| wit::Worker {
                id: k.id,
                slots: k.slots,
                busy: k.busy,
                idle_ms: k.idle_ms,
            }));
            named(&mut w.capabilities, &m.capabilities, |amount| *amount);
            named(
                &mut w.environments,
                &m.environments,
                |verdict| match verdict {
                    Verdict::Match => wit::Verdict::Match,
                    Verdict::NoMatch => wit::Verdict::NoMatch,
                    Verdict::Unknown => wit::Verdict::Unknown,
                },
            );
        });
        let blank_demand = |_: &_| wit::Demand {
            capabilities: Vec::new(),
            environments: Vec::new(),
            queued: 0,
            running: 0,
        };
        overwrite(&mut out.demand, &s.demand, blank_demand, |w, d| {
            named(&mut w.capabilities, &d.capabilities, |amount| *amount);
            w.environments.clone_from(&d.environments);
            w.queued = d.queued;
            w.running = d.running;
        });
    }

    /// `out` made as long as `from`, each element written over from its counterpart by `write`
    /// (one made by `blank` first where `out` was shorter), so strings and lists inside keep
    /// their capacity from call to call.
    fn overwrite<S, T>(
        out: &mut Vec<T>,
        from: &[S],
        blank: impl Fn(&S) -> T,
        mut write: impl FnMut(&mut T, &S),
    ) {
        out.truncate(from.len());
        for (i, source) in from.iter().enumerate() {
            if i == out.len() {
                out.push(blank(source));
            }
            write(&mut out[i], source);
        }
    }

    /// `out` made equal to `from` (names with a value each), reusing its strings.
    fn named<A, B>(out: &mut Vec<(String, B)>, from: &[(String, A)], value: impl Fn(&A) -> B) {
        let blank = |(_, a): &(String, A)| (String::new(), value(a));
        overwrite(out, from, blank, |slot, (name, a)| {
            slot.0.clone_from(name);
            slot.1 = value(a);
        });
    }
}

/// The conversions `weir-waterfall` writes once for host and guests.
mod convert {
    use super::wit;
    weir_waterfall::wit_conversions!(wit);
}

#[cfg(test)]
mod tests {
    use super::{convert, reuse, wit};
    use crate::core::scaling::{Demand, Manager, Snapshot, Verdict, Worker};
    use proptest::prelude::*;

    fn names(max: usize) -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec("[a-z]{0,12}", 0..max)
    }

    fn manager() -> impl Strategy<Value = Manager> {
        let workers = prop::collection::vec((any::<u64>(), 0u32..4, 0u32..4, any::<u64>()), 0..6);
        let verdicts = prop::collection::vec(0u8..3, 0..4);
        (
            names(3),
            workers,
            names(4),
            verdicts,
            any::<(u32, u32, bool, u32)>(),
        )
            .prop_map(
                |(ids, workers, capabilities, verdicts, (cap, slots, online, starting))| Manager {
                    id: ids.first().cloned().unwrap_or_default(),
                    worker_type: ids.last().cloned().unwrap_or_default(),
                    max_task_concurrency: cap,
                    worker_slots: slots,
                    online,
                    workers: workers
                        .into_iter()
                        .map(|(id, slots, busy, idle_ms)| Worker {
                            id,
                            slots,
                            busy,
                            idle_ms,
                        })
                        .collect(),
                    starting,
                    capabilities: capabilities
                        .iter()
                        .map(|n| (n.clone(), n.len() as u64))
                        .collect(),
                    environments: capabilities
                        .into_iter()
                        .zip(verdicts)
                        .map(|(n, v)| {
                            (
                                n,
                                [Verdict::Match, Verdict::NoMatch, Verdict::Unknown][v as usize],
                            )
                        })
                        .collect(),
                },
            )
    }

    fn snapshot() -> impl Strategy<Value = Snapshot> {
        let demand = (names(3), names(3), any::<(u32, u32)>()).prop_map(
            |(caps, environments, (queued, running))| Demand {
                capabilities: caps.into_iter().map(|n| (n, 2)).collect(),
                environments,
                queued,
                running,
            },
        );
        (
            prop::collection::vec(manager(), 0..6),
            prop::collection::vec(demand, 0..4),
            any::<(u64, u64)>(),
        )
            .prop_map(
                |(managers, demand, (now_ms, scale_down_delay_ms))| Snapshot {
                    now_ms,
                    scale_down_delay_ms,
                    managers,
                    demand,
                },
            )
    }

    proptest! {
        /// Written over whatever the last call left (more managers, fewer, longer names), the
        /// reused snapshot is exactly the one a fresh conversion makes.
        #[test]
        fn a_snapshot_written_over_the_last_equals_a_fresh_conversion(
            snapshots in prop::collection::vec(snapshot(), 1..6)
        ) {
            let mut reused = wit::Snapshot {
                now_ms: 0,
                scale_down_delay_ms: 0,
                managers: Vec::new(),
                demand: Vec::new(),
            };
            for snapshot in &snapshots {
                reuse::snapshot_into_wit(snapshot, &mut reused);
                let fresh = convert::snapshot_to_wit(snapshot);
                prop_assert_eq!(format!("{reused:?}"), format!("{fresh:?}"));
            }
        }
    }
}
