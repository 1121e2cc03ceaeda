//! The sandbox every plugin call runs in: a `Store` whose WASI grants nothing, a memory cap
//! summed over all the component's memories, an epoch deadline on every call, and stdout/stderr
//! captured (bounded) and forwarded to `tracing`. [`Sandboxed`] keeps one live instance and
//! replaces it after a trap, since a trapped instance cannot be entered again.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{v0_1, v0_2};
use super::epoch::Epoch;
use super::facts::HostFacts;
use super::{EPOCH_TICK, Limits, PluginError};

/// Per-store data.
pub(super) struct State {
    pub(super) plugin: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) memory: MemoryCap,
    stdout: Output,
    stderr: Output,
    /// What a condition may see of its worker (`None` for policies and tasks).
    pub(super) facts: Option<Arc<HostFacts>>,
    /// `setup` values a sandboxed task may read, by environment name.
    pub(super) environment_values: Vec<(String, Vec<(String, String)>)>,
    /// The snapshot a 0.2.0 policy is deciding on, for the worker lists it asks for
    /// (`cluster.workers`); `None` outside `decide`.
    pub(super) deciding: Option<super::policy::Deciding>,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl State {
    pub(super) fn new(plugin: Arc<str>, limits: &Limits) -> State {
        let stdout = Output::new(limits.output_bytes);
        let stderr = Output::new(limits.output_bytes);
        // Nothing is granted: no files, no environment, no arguments, no network (the
        // builder's defaults), no stdin, and a wall clock frozen at the epoch.
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.pipe.clone())
            .stderr(stderr.pipe.clone())
            .wall_clock(FrozenClock)
            .build();
        State {
            plugin,
            wasi,
            table: ResourceTable::new(),
            memory: MemoryCap {
                limit: limits.memory_bytes,
                used: 0,
                hit: false,
            },
            stdout,
            stderr,
            facts: None,
            environment_values: Vec::new(),
            deciding: None,
        }
    }

    /// Forward what the guest printed since the last call to the logs; returns stderr's new text.
    fn drain_output(&mut self) -> String {
        if let Some(text) = self.stdout.take_new() {
            for line in text.lines() {
                tracing::info!(plugin = %self.plugin, stream = "stdout", "{line}");
            }
        }
        let stderr = self.stderr.take_new().unwrap_or_default();
        for line in stderr.lines() {
            tracing::warn!(plugin = %self.plugin, stream = "stderr", "{line}");
        }
        stderr
    }
}

/// Captured guest output. Past `capacity` bytes the pipe refuses writes and the guest's write
/// fails (a Rust guest's `print!` then panics): a plugin cannot flood the host.
struct Output {
    pipe: MemoryOutputPipe,
    seen: usize,
}

impl Output {
    fn new(capacity: usize) -> Output {
        Output {
            pipe: MemoryOutputPipe::new(capacity),
            seen: 0,
        }
    }

    fn take_new(&mut self) -> Option<String> {
        let all = self.pipe.contents();
        if all.len() <= self.seen {
            return None;
        }
        let text = String::from_utf8_lossy(&all[self.seen..]).into_owned();
        self.seen = all.len();
        Some(text)
    }
}

struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// Caps the sum of all linear memories of one store (a component may have several).
pub(super) struct MemoryCap {
    limit: u64,
    used: u64,
    /// Set when a growth was refused, so the resulting trap is reported as a memory limit.
    pub hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used - current as u64 + desired as u64;
        if total > self.limit {
            self.hit = true;
            return Ok(false);
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

impl State {
    /// A guest's log line, into `tracing` at `level`, cut at 4,096 characters.
    fn log(&self, level: tracing::Level, message: String) {
        const MAX: usize = 4096;
        let message = match message.char_indices().nth(MAX) {
            Some((cut, _)) => format!("{}... ({} bytes)", &message[..cut], message.len()),
            None => message,
        };
        let plugin = &*self.plugin;
        match level {
            tracing::Level::TRACE => tracing::trace!(plugin, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(plugin, "{message}"),
            tracing::Level::INFO => tracing::info!(plugin, "{message}"),
            tracing::Level::WARN => tracing::warn!(plugin, "{message}"),
            tracing::Level::ERROR => tracing::error!(plugin, "{message}"),
        }
    }
}

/// The `log` interface of each version: the same enum, generated once per version.
macro_rules! log_host {
    ($($log:ident)::+) => {
        impl $($log)::+::Host for State {
            fn log(&mut self, level: $($log)::+::Level, message: String) {
                use $($log)::+::Level;
                let level = match level {
                    Level::Trace => tracing::Level::TRACE,
                    Level::Debug => tracing::Level::DEBUG,
                    Level::Info => tracing::Level::INFO,
                    Level::Warn => tracing::Level::WARN,
                    Level::Error => tracing::Level::ERROR,
                };
                State::log(self, level, message);
            }
        }
    };
}

log_host!(v0_1::environment::weir::plugin::log);
log_host!(v0_2::policy::weir::plugin::log);

impl v0_1::environment::weir::plugin::types::Host for State {}
impl v0_2::policy::weir::plugin::types::Host for State {}

/// A guest's own refusal: the message of a WIT `result<_, string>` (it becomes
/// [`PluginError::Refused`]).
pub(super) type Refusal = String;

/// Instantiates a component and prepares its bindings; the inner `Err` is the guest's refusal.
type Make<B> = Box<dyn Fn(&mut Store<State>) -> wasmtime::Result<Result<B, Refusal>> + Send>;

/// One live instance of a component, created on first use and after every trap.
pub(super) struct Sandboxed<B> {
    pub(super) plugin: Arc<str>,
    pub(super) limits: Limits,
    /// The engine, and the ticker that must tick while a call runs.
    epoch: Epoch,
    make: Make<B>,
    live: Option<(Store<State>, B)>,
    /// Asked at every epoch tick: true stops the running call.
    cancel: Option<StopCheck>,
}

/// Whether a running call must stop (a canceled task, or one whose worker's lease ran out):
/// asked at every epoch tick, from the thread that runs the call.
pub type StopCheck = Arc<dyn Fn() -> bool + Send + Sync>;

impl<B> Sandboxed<B> {
    pub(super) fn new(
        plugin: Arc<str>,
        limits: Limits,
        epoch: Epoch,
        make: impl Fn(&mut Store<State>) -> wasmtime::Result<Result<B, Refusal>> + Send + 'static,
    ) -> Sandboxed<B> {
        Sandboxed {
            plugin,
            limits,
            epoch,
            make: Box::new(make),
            live: None,
            cancel: None,
        }
    }

    /// Calls from now on stop (with [`PluginError::Canceled`]) within one epoch tick of `stop`
    /// answering true, instead of running on until their deadline.
    pub(super) fn set_cancel(&mut self, stop: Option<StopCheck>) {
        self.cancel = stop;
    }

    /// Drop the live instance (the next call starts a fresh one).
    pub(super) fn reset(&mut self) {
        self.live = None;
    }

    /// Make sure an instance is live; `call` names what is being done, for errors.
    pub(super) fn ensure_live(&mut self, call: &'static str) -> Result<(), PluginError> {
        if self.live.is_some() {
            return Ok(());
        }
        let state = State::new(self.plugin.clone(), &self.limits);
        let mut store = Store::new(self.epoch.engine(), state);
        store.limiter(|state| &mut state.memory);
        self.arm(&mut store);
        let made = {
            let _busy = self.epoch.busy();
            (self.make)(&mut store)
        };
        let stderr = store.data_mut().drain_output();
        match made {
            Ok(Ok(bindings)) => {
                self.live = Some((store, bindings));
                Ok(())
            }
            Ok(Err(message)) => Err(PluginError::Refused {
                plugin: self.plugin.to_string(),
                call,
                message,
            }),
            Err(error) => Err(self.classify(call, error, &store, &stderr)),
        }
    }

    /// Run `f` on the live instance under the deadline; a trap discards the instance.
    pub(super) fn call<R>(
        &mut self,
        call: &'static str,
        f: impl FnOnce(&mut Store<State>, &B) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        let _span = tracing::debug_span!("plugin_call", plugin = %self.plugin, call).entered();
        self.ensure_live(call)?;
        let Some((mut store, bindings)) = self.live.take() else {
            unreachable!("ensure_live leaves an instance");
        };
        self.arm(&mut store);
        let result = {
            let _busy = self.epoch.busy();
            f(&mut store, &bindings)
        };
        let stderr = store.data_mut().drain_output();
        match result {
            Ok(value) => {
                self.live = Some((store, bindings));
                Ok(value)
            }
            Err(error) => Err(self.classify(call, error, &store, &stderr)),
        }
    }

    fn arm(&self, store: &mut Store<State>) {
        store.data_mut().memory.hit = false;
        match &self.cancel {
            None => {
                store.set_epoch_deadline(deadline_ticks(self.limits.deadline));
                store.epoch_deadline_trap();
            }
            Some(stop) => {
                // Look every tick: interrupted when canceled or when the deadline is reached.
                let stop = stop.clone();
                let mut left = deadline_ticks(self.limits.deadline);
                store.set_epoch_deadline(1);
                store.epoch_deadline_callback(move |_| {
                    left = left.saturating_sub(1);
                    if left == 0 || stop() {
                        return Ok(wasmtime::UpdateDeadline::Interrupt);
                    }
                    Ok(wasmtime::UpdateDeadline::Continue(1))
                });
            }
        }
    }

    fn classify(
        &self,
        call: &'static str,
        error: wasmtime::Error,
        store: &Store<State>,
        stderr: &str,
    ) -> PluginError {
        let plugin = self.plugin.to_string();
        tracing::debug!(%plugin, call, error = format!("{error:?}"), "plugin call failed");
        if store.data().memory.hit {
            return PluginError::MemoryLimit {
                plugin,
                call,
                limit: self.limits.memory_bytes,
            };
        }
        let canceled = self.cancel.as_ref().is_some_and(|stop| stop());
        if canceled && matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
            return PluginError::Canceled { plugin, call };
        }
        if let Some(Trap::Interrupt) = error.downcast_ref::<Trap>() {
            return PluginError::Timeout {
                plugin,
                call,
                deadline: self.limits.deadline,
            };
        }
        if let Some(message) = panic_message(stderr) {
            return PluginError::Panic {
                plugin,
                call,
                message,
            };
        }
        let detail = match error.downcast_ref::<Trap>() {
            Some(trap) => trap.to_string(),
            None => format!("{error:#}"),
        };
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        let detail = match last {
            Some(line) => format!("{detail} (stderr: {})", line.trim()),
            None => detail,
        };
        PluginError::Trap {
            plugin,
            call,
            detail,
        }
    }
}

/// A Rust guest's panic prints `panicked at FILE:LINE:COL:` and the message on the next line.
fn panic_message(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines();
    lines.find(|l| l.contains("panicked at"))?;
    let message: Vec<&str> = lines.take_while(|l| !l.starts_with("note:")).collect();
    Some(message.join("\n").trim().to_string()).filter(|m| !m.is_empty())
}

fn deadline_ticks(deadline: Duration) -> u64 {
    // +1: the current tick may be about to end.
    (deadline.as_nanos() / EPOCH_TICK.as_nanos()) as u64 + 1
}
