//! Loading a component: the header check, validation without compiling (what the scheduler
//! does), compiling, and the in-memory and on-disk caches of compiled components.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::Component;

use super::{EXPORTS, Origin, PluginError, PluginHost, Version, World, cache};

/// A checked, compiled component.
#[derive(Clone)]
pub struct Loaded {
    /// The name errors and logs use (usually the file name).
    pub name: Arc<str>,
    pub component: Component,
    pub world: Option<World>,
    /// The `weir:plugin` version of the interface it exports.
    pub version: Option<Version>,
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
            .field("version", &self.version)
            .field("sha256", &hex::encode(self.sha256))
            .field("size", &self.size)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl PluginHost {
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
        let found = World::of_exports(
            component
                .component_type()
                .exports(self.engine())
                .map(|(n, _)| n),
        );
        let world = found.map(|(world, _)| world);
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
            version: found.map(|(_, version)| version),
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
                EXPORTS
                    .iter()
                    .find(|(_, _, name)| types.component_item_for_export(name).is_some())
                    .map(|(world, _, _)| *world)
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
            .and_then(|d| d.load(self.engine(), sha256));
        let (component, origin) = match from_disk {
            Some(component) => (component, Origin::Disk),
            None => {
                let not_a_component = |e: wasmtime::Error| PluginError::Compile {
                    plugin: plugin.to_string(),
                    detail: format!("{e:#}"),
                };
                let precompiled = self
                    .engine()
                    .precompile_component(bytes)
                    .map_err(not_a_component)?;
                // SAFETY: `precompiled` was produced just now by this engine.
                let component = unsafe { Component::deserialize(self.engine(), &precompiled) }
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
