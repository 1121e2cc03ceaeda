//! Host bindings, one module per version of `weir:plugin` and one per world in it (as Zed keeps
//! one module per extension API version): the host runs components built against any version
//! it has bindings for.
//!
//! - [`v0_1`]: `wit/weir.wit`, every world. The shared interfaces (`types`, `log`) are generated
//!   once, in `environment`, and reused by the others.
//! - [`v0_2`]: `wit/0.2.0/weir.wit`, the `policy` world only (conditions and tasks are 0.1.0).

pub(super) mod v0_1 {
    pub(in crate::plugin) mod environment {
        wasmtime::component::bindgen!({
            path: "wit/weir.wit",
            world: "environment",
        });
    }

    pub(in crate::plugin) mod policy {
        wasmtime::component::bindgen!({
            path: "wit/weir.wit",
            world: "policy",
            with: {
                "weir:plugin/types": super::environment::weir::plugin::types,
                "weir:plugin/log": super::environment::weir::plugin::log,
            },
        });
    }

    pub(in crate::plugin) mod task {
        wasmtime::component::bindgen!({
            path: "wit/weir.wit",
            world: "task",
            with: {
                "weir:plugin/types": super::environment::weir::plugin::types,
                "weir:plugin/log": super::environment::weir::plugin::log,
            },
        });
    }
}

pub(super) mod v0_2 {
    pub(in crate::plugin) mod policy {
        wasmtime::component::bindgen!({
            path: "wit/0.2.0",
            world: "policy",
        });
    }
}
