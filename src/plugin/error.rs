//! What can go wrong with a plugin. Every variant names the plugin, and for calls which call.

use std::time::Duration;

use super::World;
use crate::core::scaling::{Nonsense, PolicyFailure};

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("{plugin}: cannot read: {error}")]
    Read {
        plugin: String,
        error: std::io::Error,
    },

    /// `expected` is empty or `; expected a component of the `NAME` world`.
    #[error("{plugin}: not a WebAssembly component ({detail}){expected}")]
    NotWasm {
        plugin: String,
        detail: String,
        expected: String,
    },

    #[error(
        "{plugin}: a core WebAssembly module, not a component (build with `--target wasm32-wasip2`, \
         or wrap it with `wasm-tools component new`){expected}"
    )]
    CoreModule { plugin: String, expected: String },

    #[error("{plugin}: {}", wrong_world(*.expected, *.found))]
    WrongWorld {
        plugin: String,
        expected: World,
        found: Option<World>,
    },

    /// Refused by validation (`PluginHost::validate`), before any compiling.
    #[error("{plugin}: not a valid component: {detail}")]
    Invalid { plugin: String, detail: String },

    #[error("{plugin}: cannot be compiled: {detail}")]
    Compile { plugin: String, detail: String },

    #[error("{plugin}: needs something the `{world}` world does not provide: {detail}")]
    Link {
        plugin: String,
        world: World,
        detail: String,
    },

    #[error("{plugin}: {call} timed out after {deadline:?}")]
    Timeout {
        plugin: String,
        call: &'static str,
        deadline: Duration,
    },

    /// Stopped on request (a canceled task): interrupted at its next epoch tick.
    #[error("{plugin}: {call} was canceled")]
    Canceled { plugin: String, call: &'static str },

    #[error("{plugin}: {call} ran out of memory: the limit is {limit} bytes over all its memories")]
    MemoryLimit {
        plugin: String,
        call: &'static str,
        limit: u64,
    },

    #[error("{plugin}: {call} panicked: {message}")]
    Panic {
        plugin: String,
        call: &'static str,
        message: String,
    },

    #[error("{plugin}: {call} trapped: {detail}")]
    Trap {
        plugin: String,
        call: &'static str,
        detail: String,
    },

    /// The plugin returned its own error (`result::err`), e.g. bad policy content.
    #[error("{plugin}: {call} failed: {message}")]
    Refused {
        plugin: String,
        call: &'static str,
        message: String,
    },

    /// A policy's decision that cannot be applied.
    #[error("{plugin}: nonsense decision: {rule}")]
    Nonsense { plugin: String, rule: Nonsense },
}

/// A policy's failure in the core's terms ([`PolicyFailure`]), with the same words: what the
/// core stores and `weir policy show` prints. Loading errors are not the policy's doing; they
/// keep the host's whole message.
impl From<PluginError> for PolicyFailure {
    fn from(error: PluginError) -> PolicyFailure {
        match error {
            PluginError::Timeout {
                plugin,
                call,
                deadline,
            } => PolicyFailure::TimedOut {
                policy: plugin,
                call,
                deadline,
            },
            PluginError::Canceled { plugin, call } => PolicyFailure::Canceled {
                policy: plugin,
                call,
            },
            PluginError::MemoryLimit {
                plugin,
                call,
                limit,
            } => PolicyFailure::OutOfMemory {
                policy: plugin,
                call,
                limit,
            },
            PluginError::Panic {
                plugin,
                call,
                message,
            } => PolicyFailure::Panicked {
                policy: plugin,
                call,
                message,
            },
            PluginError::Trap {
                plugin,
                call,
                detail,
            } => PolicyFailure::Trapped {
                policy: plugin,
                call,
                detail,
            },
            PluginError::Refused {
                plugin,
                call,
                message,
            } => PolicyFailure::Refused {
                policy: plugin,
                call,
                message,
            },
            PluginError::Nonsense { plugin, rule } => PolicyFailure::Nonsense {
                policy: plugin,
                rule,
            },
            unloadable @ (PluginError::Read { .. }
            | PluginError::NotWasm { .. }
            | PluginError::CoreModule { .. }
            | PluginError::WrongWorld { .. }
            | PluginError::Invalid { .. }
            | PluginError::Compile { .. }
            | PluginError::Link { .. }) => PolicyFailure::Unloadable(unloadable.to_string()),
        }
    }
}

fn wrong_world(expected: World, found: Option<World>) -> String {
    let mut text = format!(
        "does not implement the `{expected}` world (it must export `{}`)",
        super::EXPORTS
            .iter()
            .filter(|(world, _, _)| *world == expected)
            .map(|(_, _, name)| *name)
            .collect::<Vec<_>>()
            .join("` or `")
    );
    match found {
        Some(found) => text.push_str(&format!("; it implements the `{found}` world instead")),
        None => {
            text.push_str("; it exports no weir:plugin interface the host knows (0.1.0, 0.2.0)")
        }
    }
    text
}

impl PluginError {
    /// The plugin's own error message for `Refused`; otherwise the whole error.
    pub fn message(&self) -> String {
        match self {
            PluginError::Refused { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}
