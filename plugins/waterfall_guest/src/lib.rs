//! WIT glue shared by the waterfall components: converts `weir:plugin/scaling` records to the
//! plain types of `weir-waterfall` and back. Each component crate only picks its [`Flavor`].

use std::marker::PhantomData;

use weir_waterfall::{Flavor, Policy};

wit_bindgen::generate!({
    world: "policy",
    path: "../../wit",
    default_bindings_module: "waterfall_guest",
    pub_export_macro: true,
    export_macro_name: "export_policy",
});

use exports::weir::plugin::scaling as wit;

/// Picks the content flavor of a waterfall component.
pub trait Flavored: 'static {
    const FLAVOR: Flavor;
}

/// The component: `export_policy!(Waterfall<YourFlavor>)` through a type alias.
pub struct Waterfall<F>(PhantomData<F>);

impl<F: Flavored> wit::Guest for Waterfall<F> {
    type Engine = Engine<F>;
}

pub struct Engine<F> {
    policy: Policy,
    flavor: PhantomData<F>,
}

impl<F: Flavored> wit::GuestEngine for Engine<F> {
    fn create(content: String) -> Result<wit::Engine, String> {
        let policy = Policy::parse(F::FLAVOR, &content).map_err(|e| e.to_string())?;
        Ok(wit::Engine::new(Engine::<F> { policy, flavor: PhantomData }))
    }

    fn tiers(&self) -> Vec<wit::Tier> {
        self.policy
            .tiers()
            .into_iter()
            .map(|t| wit::Tier { priority: t.priority, members: t.members })
            .collect()
    }

    fn decide(&self, snapshot: wit::Snapshot) -> Vec<wit::Decision> {
        self.policy
            .decide(&from_wit(snapshot))
            .into_iter()
            .map(|d| wit::Decision {
                manager_id: d.manager_id,
                desired_workers: d.desired_workers,
                stop: d.stop,
                reason: d.reason,
            })
            .collect()
    }
}

fn from_wit(s: wit::Snapshot) -> weir_waterfall::Snapshot {
    use weir_waterfall as w;
    w::Snapshot {
        now_ms: s.now_ms,
        scale_down_delay_ms: s.scale_down_delay_ms,
        managers: s
            .managers
            .into_iter()
            .map(|m| w::Manager {
                id: m.id,
                worker_type: m.worker_type,
                max_task_concurrency: m.max_task_concurrency,
                worker_slots: m.worker_slots,
                online: m.online,
                workers: m
                    .workers
                    .into_iter()
                    .map(|x| w::Worker { id: x.id, slots: x.slots, busy: x.busy, idle_ms: x.idle_ms })
                    .collect(),
                starting: m.starting,
                capabilities: m.capabilities,
                environments: m
                    .environments
                    .into_iter()
                    .map(|(name, v)| {
                        let v = match v {
                            wit::Verdict::Match => w::Verdict::Match,
                            wit::Verdict::NoMatch => w::Verdict::NoMatch,
                            wit::Verdict::Unknown => w::Verdict::Unknown,
                        };
                        (name, v)
                    })
                    .collect(),
            })
            .collect(),
        demand: s
            .demand
            .into_iter()
            .map(|d| w::Demand {
                capabilities: d.capabilities,
                environments: d.environments,
                queued: d.queued,
                running: d.running,
            })
            .collect(),
    }
}
