//! The epoch ticker that gives every plugin call its deadline, awake only while calls run.
//!
//! wasmtime interrupts a call once the engine's epoch passes the deadline its store was given,
//! so something must advance the epoch: a thread of ours, every [`EPOCH_TICK`]. Ticking when no
//! call runs would only wake the process 100 times a second for nothing (an idle worker, a
//! scheduler between policy calls; under load each wake-up costs a context switch on a busy
//! core), so the thread sleeps until a call begins and ticks until [`LINGER_TICKS`] ticks have
//! passed with none running. A call's deadline counts ticks from its start, so a sleeping
//! ticker changes nothing for it: the first tick comes one [`EPOCH_TICK`] after it woke.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use wasmtime::{Engine, EngineWeak};

use super::EPOCH_TICK;

/// Ticks the ticker goes on for after the last call ended, so a stream of short calls (one
/// wasm task after another) does not wake it for each one.
const LINGER_TICKS: u32 = 100;

/// While asleep, the ticker still looks this often whether its engine is gone, and ends then.
const CHECK_ENGINE: Duration = Duration::from_secs(1);

/// The engine and its ticker; cheap to clone. Hold a [`Busy`] across every call into a store.
#[derive(Clone)]
pub(super) struct Epoch {
    engine: Engine,
    shared: Arc<Shared>,
}

struct Shared {
    /// Calls running now.
    running: AtomicUsize,
    /// The ticker is waiting (or about to wait) on `wake`: a call that begins must wake it.
    asleep: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
    /// Ticks given so far (for tests).
    ticks: AtomicUsize,
}

/// A call in progress: the ticker ticks while one exists.
pub(super) struct Busy<'a>(&'a Shared);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, SeqCst);
    }
}

impl Epoch {
    /// Start the ticker thread of `engine`: it ticks for [`LINGER_TICKS`], then sleeps until
    /// a call begins.
    pub(super) fn start(engine: &Engine) -> Epoch {
        Epoch::with_check(engine, CHECK_ENGINE)
    }

    /// As [`Epoch::start`], the sleeping ticker looking every `check` whether its engine is
    /// gone (tests make it long, so only a call's wake-up can wake it).
    fn with_check(engine: &Engine, check: Duration) -> Epoch {
        let shared = Arc::new(Shared {
            running: AtomicUsize::new(0),
            asleep: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            ticks: AtomicUsize::new(0),
        });
        let weak = engine.weak();
        let ticker = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || tick(&weak, &ticker, check));
        if let Err(error) = spawned {
            // Without the ticker deadlines never fire; say so loudly rather than fail the process.
            tracing::error!(%error, "cannot start the epoch thread: plugin deadlines will not be enforced");
        }
        Epoch {
            engine: engine.clone(),
            shared,
        }
    }

    pub(super) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A call begins: the ticker ticks until it ends (and a little longer).
    pub(super) fn busy(&self) -> Busy<'_> {
        let shared = &*self.shared;
        shared.running.fetch_add(1, SeqCst);
        // Either the ticker sees `running` above zero before it waits, or this sees it asleep
        // (both are SeqCst): no call is left without ticks.
        if shared.asleep.load(SeqCst) {
            let _guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.wake.notify_one();
        }
        Busy(shared)
    }

    /// Ticks given so far.
    #[cfg(test)]
    fn ticks(&self) -> usize {
        self.shared.ticks.load(SeqCst)
    }
}

fn tick(engine: &EngineWeak, shared: &Shared, check: Duration) {
    let mut quiet = 0;
    loop {
        if quiet >= LINGER_TICKS {
            let mut guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.asleep.store(true, SeqCst);
            while shared.running.load(SeqCst) == 0 {
                let (next, _) = shared
                    .wake
                    .wait_timeout(guard, check)
                    .unwrap_or_else(|e| e.into_inner());
                guard = next;
                if engine.upgrade().is_none() {
                    return;
                }
            }
            shared.asleep.store(false, SeqCst);
            quiet = 0;
        }
        std::thread::sleep(EPOCH_TICK);
        let Some(engine) = engine.upgrade() else {
            return;
        };
        engine.increment_epoch();
        shared.ticks.fetch_add(1, SeqCst);
        if shared.running.load(SeqCst) == 0 {
            quiet += 1;
        } else {
            quiet = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough that a test waiting for a tick fails (by its bound) rather than passes
    /// by the ticker's own periodic look, if a call did not wake it.
    const NEVER: Duration = Duration::from_secs(3600);

    /// How long the tests wait for what must happen before failing.
    const BOUND: Duration = Duration::from_secs(20);

    /// Waits (polling its flag, bounded) until the ticker is asleep.
    fn until_asleep(epoch: &Epoch) {
        let started = std::time::Instant::now();
        while !epoch.shared.asleep.load(SeqCst) {
            assert!(started.elapsed() < BOUND, "the ticker never fell asleep");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_ticker_sleeps_without_calls_and_a_call_wakes_it() {
        let engine = Engine::default();
        let epoch = Epoch::with_check(&engine, NEVER);
        until_asleep(&epoch);
        let asleep_at = epoch.ticks();
        assert!(asleep_at >= LINGER_TICKS as usize, "it lingers first");
        // Asleep: no ticks while nothing runs (a time in which it would otherwise tick 20 times).
        std::thread::sleep(EPOCH_TICK * 20);
        assert_eq!(epoch.ticks(), asleep_at);
        // A call wakes it (only the call can: its own look is an hour away), and it ticks
        // while the call runs.
        {
            let _busy = epoch.busy();
            let started = std::time::Instant::now();
            while epoch.ticks() < asleep_at + 3 {
                assert!(started.elapsed() < BOUND, "a call did not wake the ticker");
                std::thread::sleep(EPOCH_TICK);
            }
        }
        until_asleep(&epoch);
    }

    #[test]
    fn a_deadline_still_interrupts_after_the_ticker_slept() {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).expect("engine");
        let epoch = Epoch::with_check(&engine, NEVER);
        until_asleep(&epoch);
        // (module (func (export "spin") (loop (br 0)))), assembled by hand.
        let spin_wasm: &[u8] = &[
            0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
            0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
            0x03, 0x02, 0x01, 0x00, // one function of that type
            0x07, 0x08, 0x01, 0x04, b's', b'p', b'i', b'n', 0x00, 0x00, // export "spin"
            0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // loop br 0
        ];
        let module = wasmtime::Module::new(&engine, spin_wasm).expect("module");
        // The endless loop, given a deadline of 3 ticks, on a thread of its own: if the call
        // never woke the ticker it would spin for ever, and the bound below fails the test.
        let (done, result) = std::sync::mpsc::channel();
        let caller = epoch.clone();
        std::thread::spawn(move || {
            let mut store = wasmtime::Store::new(caller.engine(), ());
            store.set_epoch_deadline(3);
            store.epoch_deadline_trap();
            let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instance");
            let spin = instance
                .get_typed_func::<(), ()>(&mut store, "spin")
                .expect("spin");
            let _busy = caller.busy();
            let error = spin.call(&mut store, ()).expect_err("interrupted");
            let _ = done.send(error.downcast_ref::<wasmtime::Trap>().copied());
        });
        let trap = result
            .recv_timeout(BOUND)
            .expect("the deadline never interrupted the call");
        assert_eq!(trap, Some(wasmtime::Trap::Interrupt));
    }
}
