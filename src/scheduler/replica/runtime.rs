//! openraft's async runtime: tokio's, but for where its random draws (the election timeouts)
//! come from. A simulated cluster seeds them ([`seed_elections`]) so that its elections, and
//! with them a whole run, replay exactly; the host's replicas draw from the OS as tokio's do.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::async_runtime::AsyncRuntime;
use openraft::{OptionalSend, TokioInstant, TokioRuntime};
use rand08::rngs::StdRng;
use rand08::{RngCore, SeedableRng};

/// [`TokioRuntime`] with [`Draws`] for its random numbers.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Runtime;

thread_local! {
    /// This thread's seeded draws, once a simulation asked for them.
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// The replicas that run on this thread draw their election timeouts from `seed` from now on.
/// A simulation runs all its hosts on one thread, in an order fixed by its own seed, so the
/// draws land where they did in the last run of that seed.
pub fn seed_elections(seed: u64) {
    SEEDED.with(|rng| *rng.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// Random numbers from this thread's seeded generator, else the OS's (`thread_rng`).
pub(crate) struct Draws;

impl Draws {
    fn draw<T>(seeded: impl FnOnce(&mut StdRng) -> T, os: impl FnOnce() -> T) -> T {
        SEEDED.with(|rng| match rng.borrow_mut().as_mut() {
            Some(rng) => seeded(rng),
            None => os(),
        })
    }
}

impl RngCore for Draws {
    fn next_u32(&mut self) -> u32 {
        Draws::draw(|r| r.next_u32(), || rand08::thread_rng().next_u32())
    }

    fn next_u64(&mut self) -> u64 {
        Draws::draw(|r| r.next_u64(), || rand08::thread_rng().next_u64())
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        SEEDED.with(|rng| match rng.borrow_mut().as_mut() {
            Some(rng) => rng.fill_bytes(dest),
            None => rand08::thread_rng().fill_bytes(dest),
        })
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand08::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl AsyncRuntime for Runtime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = Draws;
    type OneshotSender<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Draws {
        Draws
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        TokioRuntime::oneshot()
    }
}
