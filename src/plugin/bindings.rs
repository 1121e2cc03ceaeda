//! Host bindings generated from `wit/weir.wit`, one module per world. The shared interfaces
//! (`types`, `log`) are generated once, in `environment`, and reused by the others.

pub(super) mod environment {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "environment",
    });
}

pub(super) mod policy {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "policy",
        with: {
            "weir:plugin/types": super::environment::weir::plugin::types,
            "weir:plugin/log": super::environment::weir::plugin::log,
        },
    });
}

pub(super) mod task {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "task",
        with: {
            "weir:plugin/types": super::environment::weir::plugin::types,
            "weir:plugin/log": super::environment::weir::plugin::log,
        },
    });
}
