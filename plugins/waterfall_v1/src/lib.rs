//! `waterfall_v1`: content rows `priority, worker_manager_id[, max_task_concurrency]`.
//! The algorithm is `weir-waterfall`; see DESIGN §4. The WIT glue is the policy SDK's.

use weir_policy_sdk::{Decision, Policy, Snapshot, Tier};
use weir_waterfall::Flavor;

struct Waterfall(weir_waterfall::Policy);

impl Policy for Waterfall {
    fn create(content: &str) -> Result<Self, String> {
        weir_waterfall::Policy::parse(Flavor::ManagerId, content).map(Waterfall).map_err(|e| e.to_string())
    }

    fn tiers(&self) -> Vec<Tier> {
        self.0.tiers()
    }

    fn decide(&self, snapshot: &Snapshot) -> Vec<Decision> {
        self.0.decide(snapshot)
    }
}

weir_policy_sdk::export!(Waterfall);
