//! The host: one wasmtime `Engine` with its epoch ticker, a linker per world, and the typed
//! wrappers made from loaded components. Loading itself is in `load.rs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Config, Engine};

use super::sandbox::State;
use super::{
    ConditionPlugin, EPOCH_TICK, Limits, Loaded, Origin, PluginError, PolicyPlugin, TaskPlugin,
    World, bindings, cache,
};

struct Linkers {
    environment: Linker<State>,
    policy: Linker<State>,
    task: Linker<State>,
}

pub struct PluginHost {
    pub(super) engine: Engine,
    linkers: Linkers,
    pub(super) disk: Option<cache::DiskCache>,
    pub(super) loaded: Mutex<HashMap<[u8; 32], Component>>,
    /// Components [`PluginHost::validate`] accepted, by hash, with their world.
    pub(super) validated: Mutex<HashMap<[u8; 32], World>>,
}

impl PluginHost {
    /// A host with the compiled-component cache in `cache_dir` (`None`: memory only).
    pub fn new(cache_dir: Option<PathBuf>) -> Result<PluginHost, PluginError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        config.max_wasm_stack(1 << 20);
        let engine =
            Engine::new(&config).map_err(|e| engine_error("cannot create the engine", e))?;
        start_epoch_ticker(&engine);
        let linkers = Linkers {
            environment: linker(&engine, |l| {
                bindings::environment::Environment::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            policy: linker(&engine, |l| {
                bindings::policy::Policy::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            task: linker(&engine, |l| {
                bindings::task::Task::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
        };
        let disk = cache_dir.map(|dir| cache::DiskCache::new(dir, &engine));
        Ok(PluginHost {
            engine,
            linkers,
            disk,
            loaded: Mutex::new(HashMap::new()),
            validated: Mutex::new(HashMap::new()),
        })
    }

    /// A host caching compiled components in [`cache::default_dir`].
    pub fn with_default_cache() -> Result<PluginHost, PluginError> {
        PluginHost::new(cache::default_dir())
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Link `loaded` against `world`'s imports and check its exports have the WIT's types.
    fn typed_pre<P>(
        &self,
        loaded: &Loaded,
        world: World,
        typed: impl FnOnce(InstancePre<State>) -> wasmtime::Result<P>,
    ) -> Result<P, PluginError> {
        let linker = match world {
            World::Environment => &self.linkers.environment,
            World::Policy => &self.linkers.policy,
            World::Task => &self.linkers.task,
        };
        let link_error = |e: wasmtime::Error| PluginError::Link {
            plugin: loaded.name.to_string(),
            world,
            detail: format!("{e:#}"),
        };
        typed(
            linker
                .instantiate_pre(&loaded.component)
                .map_err(link_error)?,
        )
        .map_err(link_error)
    }

    /// Load a scaling policy and create its engine from `content` (so bad content fails here).
    pub fn policy(
        &self,
        loaded: &Loaded,
        content: &str,
        limits: Limits,
    ) -> Result<PolicyPlugin, PluginError> {
        let pre = self.typed_pre(loaded, World::Policy, bindings::policy::PolicyPre::new)?;
        PolicyPlugin::new(loaded.name.clone(), pre, content, limits)
    }

    pub fn condition(
        &self,
        loaded: &Loaded,
        limits: Limits,
    ) -> Result<ConditionPlugin, PluginError> {
        let pre = self.typed_pre(
            loaded,
            World::Environment,
            bindings::environment::EnvironmentPre::new,
        )?;
        Ok(ConditionPlugin::new(loaded.name.clone(), pre, limits))
    }

    pub fn task(&self, loaded: &Loaded, limits: Limits) -> Result<TaskPlugin, PluginError> {
        let pre = self.typed_pre(loaded, World::Task, bindings::task::TaskPre::new)?;
        Ok(TaskPlugin::new(loaded.name.clone(), pre, limits))
    }

    /// What `weir plugin inspect` shows.
    pub fn inspect(&self, loaded: &Loaded) -> Inspection {
        let ty = loaded.component.component_type();
        Inspection {
            world: loaded.world,
            imports: ty
                .imports(&self.engine)
                .map(|(n, _)| n.to_string())
                .collect(),
            exports: ty
                .exports(&self.engine)
                .map(|(n, _)| n.to_string())
                .collect(),
            size_bytes: loaded.size,
            sha256: hex::encode(loaded.sha256),
            origin: loaded.origin,
            load_time: loaded.load_time,
        }
    }
}

/// A component's interface, as `weir plugin inspect` prints it.
#[derive(Clone, Debug)]
pub struct Inspection {
    pub world: Option<World>,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    pub size_bytes: usize,
    pub sha256: String,
    pub origin: Origin,
    pub load_time: Duration,
}

fn linker(
    engine: &Engine,
    add_world: impl FnOnce(&mut Linker<State>) -> wasmtime::Result<()>,
) -> Result<Linker<State>, PluginError> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
        .map_err(|e| engine_error("cannot link WASI", e))?;
    add_world(&mut linker).map_err(|e| engine_error("cannot link the weir interfaces", e))?;
    Ok(linker)
}

fn engine_error(what: &str, error: wasmtime::Error) -> PluginError {
    PluginError::Compile {
        plugin: "(host)".to_string(),
        detail: format!("{what}: {error:#}"),
    }
}

fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("weir-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        });
    if let Err(error) = spawned {
        // Without the ticker deadlines never fire; say so loudly rather than fail the process.
        tracing::error!(%error, "cannot start the epoch thread: plugin deadlines will not be enforced");
    }
}
