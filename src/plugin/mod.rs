//! The wasmtime host: loads, checks, caches and runs plugin components.
//!
//! - One [`PluginHost`] (one `Engine`) per process; an epoch thread ticks every [`EPOCH_TICK`] so
//!   every call can be given a deadline.
//! - [`PluginHost::load`] checks the bytes are a component of the expected [`World`] and compiles
//!   it once: in memory per process, on disk across processes ([`cache`]).
//! - [`sandbox`]: WASI that grants nothing, the summed memory cap, deadlines, output capture, and
//!   the mapping of traps to [`PluginError`].
//! - [`policy`], [`condition`], [`task`]: one typed wrapper per world.

mod bindings;
pub mod bundled;
pub mod cache;
pub mod condition;
mod error;
pub mod policy;
mod sandbox;
pub mod task;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Config, Engine};

pub use cache::Origin;
pub use condition::{ConditionPlugin, HostFacts};
pub use error::PluginError;
pub use policy::PolicyPlugin;
pub use task::TaskPlugin;

use sandbox::State;

/// Granularity of deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The three kinds of plugin, by the WIT world they implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum World {
    Environment,
    Policy,
    Task,
}

impl World {
    pub const ALL: [World; 3] = [World::Environment, World::Policy, World::Task];

    pub fn name(self) -> &'static str {
        match self {
            World::Environment => "environment",
            World::Policy => "policy",
            World::Task => "task",
        }
    }

    /// The interface a component of this world exports.
    pub fn export_name(self) -> &'static str {
        match self {
            World::Environment => "weir:plugin/condition@0.1.0",
            World::Policy => "weir:plugin/scaling@0.1.0",
            World::Task => "weir:plugin/runner@0.1.0",
        }
    }

    fn of_exports<'a>(mut exports: impl Iterator<Item = &'a str>) -> Option<World> {
        exports.find_map(|name| World::ALL.into_iter().find(|w| w.export_name() == name))
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Resource limits of every call into a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline of one call (epoch interruption).
    pub deadline: Duration,
    /// Cap on the sum of all the component's linear memories.
    pub memory_bytes: u64,
    /// Cap on what the guest may print to each of stdout and stderr over an instance's life.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            deadline: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            output_bytes: 1 << 20,
        }
    }
}

/// A checked, compiled component.
#[derive(Clone)]
pub struct Loaded {
    /// The name errors and logs use (usually the file name).
    pub name: Arc<str>,
    pub component: Component,
    pub world: Option<World>,
    pub sha256: [u8; 32],
    pub size: usize,
    pub origin: Origin,
    /// Time spent compiling or loading it.
    pub load_time: Duration,
}

impl fmt::Debug for Loaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loaded")
            .field("name", &self.name)
            .field("world", &self.world)
            .field("sha256", &hex::encode(self.sha256))
            .field("size", &self.size)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

struct Linkers {
    environment: Linker<State>,
    policy: Linker<State>,
    task: Linker<State>,
}

pub struct PluginHost {
    engine: Engine,
    linkers: Linkers,
    disk: Option<cache::DiskCache>,
    loaded: Mutex<HashMap<[u8; 32], Component>>,
    /// Components [`PluginHost::validate`] accepted, by hash, with their world.
    validated: Mutex<HashMap<[u8; 32], World>>,
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

    /// Read a component file; `expected` names the world in errors and is checked when given.
    pub fn load_file(&self, path: &Path, expected: Option<World>) -> Result<Loaded, PluginError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|error| PluginError::Read {
            plugin: name.clone(),
            error,
        })?;
        self.load(&name, &bytes, expected)
    }

    /// Check and compile `bytes` (or take the compiled form from the caches).
    pub fn load(
        &self,
        name: &str,
        bytes: &[u8],
        expected: Option<World>,
    ) -> Result<Loaded, PluginError> {
        let plugin = name.to_string();
        check_header(&plugin, bytes, expected)?;
        let started = Instant::now();
        let sha256 = cache::content_hash(bytes);
        let (component, origin) = self.compile(&plugin, bytes, &sha256)?;
        let load_time = started.elapsed();
        let world = World::of_exports(
            component
                .component_type()
                .exports(&self.engine)
                .map(|(n, _)| n),
        );
        if let Some(expected) = expected
            && world != Some(expected)
        {
            return Err(PluginError::WrongWorld {
                plugin,
                expected,
                found: world,
            });
        }
        tracing::debug!(plugin = name, ?origin, ?load_time, "component loaded");
        Ok(Loaded {
            name: name.into(),
            component,
            world,
            sha256,
            size: bytes.len(),
            origin,
            load_time,
        })
    }

    /// Check that `bytes` are a valid component of `expected`'s world *without compiling them*,
    /// returning its SHA-256: what the scheduler does with the components it only passes on to
    /// workers, which compile and link them. Garbage, core modules, invalid code and the wrong
    /// world are refused here; an import the world does not provide is found when a worker links
    /// it (and reported as that worker's error). Validating the 18 MB Python condition takes a
    /// fraction of the seconds compiling it does, and nothing compiled is kept.
    pub fn validate(
        &self,
        name: &str,
        bytes: &[u8],
        expected: World,
    ) -> Result<[u8; 32], PluginError> {
        let plugin = name.to_string();
        check_header(&plugin, bytes, Some(expected))?;
        let sha256 = cache::content_hash(bytes);
        let known = self.validated_cache().get(&sha256).copied();
        let world = match known {
            Some(world) => Some(world),
            None => {
                let types =
                    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::default())
                        .validate_all(bytes)
                        .map_err(|e| PluginError::Invalid {
                            plugin: plugin.clone(),
                            detail: e.to_string(),
                        })?;
                World::ALL
                    .into_iter()
                    .find(|w| types.component_item_for_export(w.export_name()).is_some())
            }
        };
        if world != Some(expected) {
            return Err(PluginError::WrongWorld {
                plugin,
                expected,
                found: world,
            });
        }
        self.validated_cache().insert(sha256, expected);
        Ok(sha256)
    }

    /// Forget the compiled component with this hash from memory (the disk cache keeps it).
    pub fn unload(&self, sha256: &[u8; 32]) {
        self.memory_cache().remove(sha256);
    }

    fn validated_cache(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], World>> {
        // As for `memory_cache`: a panic while holding the lock leaves a consistent map.
        self.validated
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn compile(
        &self,
        plugin: &str,
        bytes: &[u8],
        sha256: &[u8; 32],
    ) -> Result<(Component, Origin), PluginError> {
        if let Some(component) = self.memory_cache().get(sha256) {
            return Ok((component.clone(), Origin::Memory));
        }
        let from_disk = self
            .disk
            .as_ref()
            .and_then(|d| d.load(&self.engine, sha256));
        let (component, origin) = match from_disk {
            Some(component) => (component, Origin::Disk),
            None => {
                let not_a_component = |e: wasmtime::Error| PluginError::Compile {
                    plugin: plugin.to_string(),
                    detail: format!("{e:#}"),
                };
                let precompiled = self
                    .engine
                    .precompile_component(bytes)
                    .map_err(not_a_component)?;
                // SAFETY: `precompiled` was produced just now by this engine.
                let component = unsafe { Component::deserialize(&self.engine, &precompiled) }
                    .map_err(not_a_component)?;
                if let Some(disk) = &self.disk {
                    disk.store(sha256, &precompiled);
                }
                (component, Origin::Compiled)
            }
        };
        self.memory_cache().insert(*sha256, component.clone());
        Ok((component, origin))
    }

    fn memory_cache(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Component>> {
        // A panic while holding the lock cannot leave the map inconsistent: take it anyway.
        self.loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// Reject what is plainly not a component before handing it to the compiler.
fn check_header(plugin: &str, bytes: &[u8], expected: Option<World>) -> Result<(), PluginError> {
    let plugin = plugin.to_string();
    let expecting = expected.map_or(String::new(), |w| {
        format!("; expected a component of the `{w}` world")
    });
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        let detail = if bytes.is_empty() {
            "the file is empty".to_string()
        } else if bytes.starts_with(b"(") {
            "it looks like WebAssembly text; build a binary component".to_string()
        } else {
            "no WebAssembly header".to_string()
        };
        return Err(PluginError::NotWasm {
            plugin,
            detail,
            expected: expecting,
        });
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(PluginError::CoreModule {
            plugin,
            expected: expecting,
        });
    }
    Ok(())
}
