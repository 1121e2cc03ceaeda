//! `waterfall_v1`: content rows `priority, worker_manager_id[, max_task_concurrency]`.
//! The algorithm is `weir-waterfall`; see DESIGN §4.

struct ByManagerId;

impl waterfall_guest::Flavored for ByManagerId {
    const FLAVOR: weir_waterfall::Flavor = weir_waterfall::Flavor::ManagerId;
}

type Component = waterfall_guest::Waterfall<ByManagerId>;

waterfall_guest::export_policy!(Component);
