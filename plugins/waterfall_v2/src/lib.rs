//! `waterfall_v2`: content rows `priority, worker_type`; a tier is every online manager of the
//! listed worker types. The algorithm is `weir-waterfall`; see DESIGN §4.

struct ByWorkerType;

impl waterfall_guest::Flavored for ByWorkerType {
    const FLAVOR: weir_waterfall::Flavor = weir_waterfall::Flavor::WorkerType;
}

type Component = waterfall_guest::Waterfall<ByWorkerType>;

waterfall_guest::export_policy!(Component);
