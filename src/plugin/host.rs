//! The host: one wasmtime `Engine` with its epoch ticker, a linker per world, and the typed
//! wrappers made from loaded components. Loading itself is in `load.rs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Config, Engine};

use super::bindings::{v0_1, v0_2};
use super::epoch::Epoch;
use super::policy::Pre;
use super::sandbox::State;
use super::{
    ConditionPlugin, Limits, Loaded, Origin, PluginError, PolicyPlugin, TaskPlugin, Version, World,
    cache,
};

/// A linker per world and version (`bindings.rs`).
struct Linkers {
    environment: Linker<State>,
    policy: Linker<State>,
    policy_v2: Linker<State>,
    task: Linker<State>,
}

pub struct PluginHost {
    /// The engine, and the thread that ticks its epoch while a call runs (for deadlines).
    epoch: Epoch,
    linkers: Linkers,
    pub(super) disk: Option<cache::DiskCache>,
    pub(super) loaded: Mutex<HashMap<[u8; 32], Component>>,
    /// Components [`PluginHost::validate`] accepted, by hash, with their world.
    pub(super) validated: Mutex<HashMap<[u8; 32], World>>,
}

impl PluginHost {
    /// A host with the compiled-component cache in `cache_dir` (`None`: memory only).
    pub fn new(cache_dir: Option<PathBuf>) -> Result<PluginHost, PluginError> {
        PluginHost::with_engine(cache_dir, engine(&[Memory::OnDemand])?)
    }

    /// A host for a process that makes many short-lived instances (a worker: a fresh instance
    /// per wasm task): their memory comes from a pool reserved once (terabytes of address
    /// space, little of it ever touched), falling back to [`PluginHost::new`]'s mapping per
    /// instance where the pool cannot be had.
    pub fn pooled(cache_dir: Option<PathBuf>) -> Result<PluginHost, PluginError> {
        let ladder = [Memory::PoolScanned, Memory::Pool, Memory::OnDemand];
        PluginHost::with_engine(cache_dir, engine(&ladder)?)
    }

    fn with_engine(cache_dir: Option<PathBuf>, engine: Engine) -> Result<PluginHost, PluginError> {
        let epoch = Epoch::start(&engine);
        let linkers = Linkers {
            environment: linker(&engine, |l| {
                v0_1::environment::Environment::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            policy: linker(&engine, |l| {
                v0_1::policy::Policy::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            policy_v2: linker(&engine, |l| {
                v0_2::policy::Policy::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            task: linker(&engine, |l| {
                v0_1::task::Task::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
        };
        let disk = cache_dir.map(|dir| cache::DiskCache::new(dir, &engine));
        Ok(PluginHost {
            epoch,
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
        self.epoch.engine()
    }

    /// Link `loaded` against the imports of `world` in the version it was built for, and check
    /// its exports have the WIT's types.
    fn typed_pre<P>(
        &self,
        loaded: &Loaded,
        world: World,
        typed: impl FnOnce(InstancePre<State>) -> wasmtime::Result<P>,
    ) -> Result<P, PluginError> {
        let linker = match (world, loaded.version) {
            (World::Environment, _) => &self.linkers.environment,
            (World::Policy, Some(Version::V0_2)) => &self.linkers.policy_v2,
            (World::Policy, _) => &self.linkers.policy,
            (World::Task, _) => &self.linkers.task,
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
        let pre = match loaded.version {
            Some(Version::V0_2) => {
                Pre::V0_2(self.typed_pre(loaded, World::Policy, v0_2::policy::PolicyPre::new)?)
            }
            _ => Pre::V0_1(self.typed_pre(loaded, World::Policy, v0_1::policy::PolicyPre::new)?),
        };
        PolicyPlugin::new(
            loaded.name.clone(),
            pre,
            content,
            limits,
            self.epoch.clone(),
        )
    }

    pub fn condition(
        &self,
        loaded: &Loaded,
        limits: Limits,
    ) -> Result<ConditionPlugin, PluginError> {
        let pre = self.typed_pre(
            loaded,
            World::Environment,
            v0_1::environment::EnvironmentPre::new,
        )?;
        Ok(ConditionPlugin::new(
            loaded.name.clone(),
            pre,
            limits,
            self.epoch.clone(),
        ))
    }

    pub fn task(&self, loaded: &Loaded, limits: Limits) -> Result<TaskPlugin, PluginError> {
        let pre = self.typed_pre(loaded, World::Task, v0_1::task::TaskPre::new)?;
        Ok(TaskPlugin::new(
            loaded.name.clone(),
            pre,
            limits,
            self.epoch.clone(),
        ))
    }

    /// What `weir plugin inspect` shows.
    pub fn inspect(&self, loaded: &Loaded) -> Inspection {
        let ty = loaded.component.component_type();
        Inspection {
            world: loaded.world,
            version: loaded.version,
            imports: ty
                .imports(self.engine())
                .map(|(n, _)| n.to_string())
                .collect(),
            exports: ty
                .exports(self.engine())
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
    /// The `weir:plugin` version it was built against.
    pub version: Option<Version>,
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

/// Most sandboxed instances (tasks and conditions) one pooled host holds at once.
pub(super) const MAX_INSTANCES: u32 = 1000;

/// How instance memory is provided, fastest first: each is tried until the host accepts it.
#[derive(Clone, Copy, Debug)]
enum Memory {
    /// A pool of pre-reserved slots, reused (no mmap/munmap per instance). Between instances a
    /// slot's dirty pages are found with Linux's PAGEMAP_SCAN (6.7+) and reset in place up to
    /// 2 MiB, so a small task's memory never leaves the process; the rest is given back in
    /// batches of 32 (one TLB flush per batch, not per instance).
    PoolScanned,
    /// The same pool without PAGEMAP_SCAN: the first 64 KiB are reset in place, the rest given
    /// back in batches.
    Pool,
    /// A fresh mapping per instance (when the pool cannot be reserved: address space limited
    /// by `ulimit -v`, say).
    OnDemand,
}

fn config(memory: Memory) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    config.max_wasm_stack(1 << 20);
    let (keep_resident, scan) = match memory {
        Memory::PoolScanned => (2 << 20, wasmtime::Enabled::Yes),
        Memory::Pool => (64 << 10, wasmtime::Enabled::No),
        Memory::OnDemand => return config,
    };
    let mut pool = wasmtime::PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_INSTANCES)
        .total_core_instances(MAX_INSTANCES)
        .total_memories(MAX_INSTANCES)
        .total_tables(MAX_INSTANCES)
        // Calls are synchronous: no fiber stacks. A pool of them would be a thousand guard pages,
        // each its own mapping, and every fork of the worker (a command task) copies them all:
        // that halved the worker's `true` tasks/s.
        .total_stacks(0)
        // Interpreters compiled to wasm (a Python condition) have large function tables.
        .table_elements(1 << 18)
        .linear_memory_keep_resident(keep_resident)
        .pagemap_scan(scan)
        .decommit_batch_size(32);
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    config
}

/// The process's engine, with the first of `ladder`'s memory strategies the host accepts.
fn engine(ladder: &[Memory]) -> Result<Engine, PluginError> {
    let mut last = None;
    for &memory in ladder {
        match Engine::new(&config(memory)) {
            Ok(engine) => {
                tracing::debug!(?memory, "wasm engine ready");
                return Ok(engine);
            }
            Err(error) => {
                tracing::debug!(?memory, %error, "wasm memory strategy not available here");
                last = Some(error);
            }
        }
    }
    let error = last.unwrap_or_else(|| wasmtime::Error::msg("no memory strategy"));
    Err(engine_error("cannot create the engine", error))
}

fn engine_error(what: &str, error: wasmtime::Error) -> PluginError {
    PluginError::Compile {
        plugin: "(host)".to_string(),
        detail: format!("{what}: {error:#}"),
    }
}
