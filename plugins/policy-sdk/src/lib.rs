//! Write a weir scaling policy in Rust: implement [`Policy`] on your type and
//! `weir_policy_sdk::export!(YourType);` — the WIT glue (`weir:plugin/scaling@0.2.0`, in
//! `wit/0.2.0/weir.wit`), the conversion of its records to the plain types below and back, and
//! the `engine` resource are done here.
//!
//! A manager's workers come counted ([`Manager::summary`]); its list, when a policy needs one
//! (to name the idle workers to stop), is [`Snapshot::workers_of`], one call to the host for
//! that manager. `manager.workers` is empty in a component: the host copies the lists only for
//! the managers a policy asks about.
//!
//! ```ignore
//! struct Fixed(u32);
//!
//! impl weir_policy_sdk::Policy for Fixed {
//!     fn create(content: &str) -> Result<Self, String> {
//!         content.trim().parse().map(Fixed).map_err(|e| format!("line 1: {e}"))
//!     }
//!     fn tiers(&self) -> Vec<Tier> { Vec::new() }
//!     fn decide(&self, snapshot: &Snapshot) -> Vec<Decision> { /* one per online manager */ }
//! }
//!
//! weir_policy_sdk::export!(Fixed);
//! ```
//! Build with `cargo build --release --target wasm32-wasip2` (crate-type `cdylib`), try it with
//! `weir policy test --policy target/.../your.wasm --content ... SCENARIOS.toml`.

use std::marker::PhantomData;

pub use weir_waterfall::model::UNLIMITED;
/// The waterfall (`plugins/waterfall`), for policies that build on it (`consolidate`).
pub use weir_waterfall::{Flavor, Policy as Waterfall};
pub use weir_waterfall::{
    BusyGroup, Decision, Demand, Manager, Snapshot, Summary, Tier, Verdict, Worker,
};

/// A scaling policy: created once from its content, then asked to decide on every snapshot.
/// The scheduler checks every decision (caps, only idle workers stopped, known online managers)
/// and keeps the last good one when a call fails.
pub trait Policy: Sized + 'static {
    /// Parse the policy content (`scheduler --policy-content`). The error is shown to the
    /// operator as it is: name the line.
    fn create(content: &str) -> Result<Self, String>;
    /// The tiers the content describes (for `weir status`; may be empty).
    fn tiers(&self) -> Vec<Tier>;
    /// One decision per manager it scales: desired workers, idle workers to stop, and why.
    fn decide(&self, snapshot: &Snapshot) -> Vec<Decision>;
}

wit_bindgen::generate!({
    world: "policy",
    path: "../../wit/0.2.0",
    default_bindings_module: "weir_policy_sdk",
    pub_export_macro: true,
    export_macro_name: "export_policy_bindings",
});

use exports::weir::plugin::scaling as wit;
use weir::plugin::cluster;

/// The component around a [`Policy`]; named by [`export!`].
#[doc(hidden)]
pub struct Component<P>(PhantomData<P>);

impl<P: Policy> wit::Guest for Component<P> {
    type Engine = Engine<P>;
}

#[doc(hidden)]
pub struct Engine<P>(P);

impl<P: Policy> wit::GuestEngine for Engine<P> {
    fn create(content: String) -> Result<wit::Engine, String> {
        Ok(wit::Engine::new(Engine(P::create(&content)?)))
    }

    fn tiers(&self) -> Vec<wit::Tier> {
        self.0
            .tiers()
            .into_iter()
            .map(convert::tier_to_wit)
            .collect()
    }

    fn decide(&self, snapshot: wit::Snapshot) -> Vec<wit::Decision> {
        let snapshot = convert::snapshot_from_wit(snapshot, workers_from_host);
        self.0
            .decide(&snapshot)
            .into_iter()
            .map(convert::decision_to_wit)
            .collect()
    }
}

/// One manager's worker list, from the host (`cluster.workers`).
fn workers_from_host(manager: &str) -> Vec<Worker> {
    cluster::workers(manager)
        .into_iter()
        .map(convert::worker_from_wit)
        .collect()
}

/// The conversions `weir-waterfall` writes once for host and guests.
mod convert {
    use super::{cluster, wit};
    weir_waterfall::wit_conversions_v2!(cluster, wit);
}

/// Export `$policy` (a type implementing [`Policy`]) as the component's `weir:plugin/scaling`.
#[macro_export]
macro_rules! export {
    ($policy:ty) => {
        type __WeirPolicyComponent = $crate::Component<$policy>;
        $crate::export_policy_bindings!(__WeirPolicyComponent);
    };
}
