//! The one tokio runtime of this library, and how its futures reach Kotlin.
//!
//! Every exported `async fn` spawns the core's future onto this runtime (where the Locker was
//! connected, so renewals, the Redis and ZooKeeper connection tasks and background releases
//! all live here) and awaits the task's answer. uniffi polls that small waiting future from
//! Kotlin's side, so no JVM thread ever runs tokio's I/O, and a Kotlin coroutine that is
//! cancelled drops it: the task is then aborted (acquire and reads, cancel-safe in the core) or
//! left to finish (release and close, so nothing is left behind), as [`OnDrop`] says.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

use futures_util::FutureExt;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::error::{NativeError, from_panic};

static RUNTIME: OnceLock<fencelock::Result<Runtime>> = OnceLock::new();

/// The runtime, made on first use; it lives as long as the process.
pub(crate) fn runtime() -> Result<&'static Runtime, NativeError> {
    let made = RUNTIME.get_or_init(|| fencelock::runtime::host_runtime("fencelock-rt"));
    made.as_ref().map_err(|e| e.clone().into())
}

/// What happens to the task when the Kotlin side stops waiting (its coroutine was cancelled).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDrop {
    /// Abort it: for acquire (cancel-safe in the core) and reads.
    Cancel,
    /// Let it run to its end: for release and close.
    Finish,
}

/// The task of one call; aborted when dropped if [`OnDrop::Cancel`] (aborting a task that has
/// already finished does nothing).
struct Task<T> {
    handle: JoinHandle<T>,
    on_drop: OnDrop,
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        if self.on_drop == OnDrop::Cancel {
            self.handle.abort();
        }
    }
}

/// Runs `fut` on the runtime and returns its answer; a panic inside becomes INTERNAL.
pub(crate) async fn run<T, F>(fut: F, on_drop: OnDrop) -> Result<T, NativeError>
where
    T: Send + 'static,
    F: Future<Output = fencelock::Result<T>> + Send + 'static,
{
    let rt = runtime()?;
    let mut task = Task {
        handle: rt.spawn(AssertUnwindSafe(fut).catch_unwind()),
        on_drop,
    };
    match (&mut task.handle).await {
        Ok(Ok(result)) => result.map_err(NativeError::from),
        Ok(Err(payload)) => Err(from_panic(payload)),
        Err(join) if join.is_panic() => Err(from_panic(join.into_panic())),
        Err(_) => Err(fencelock::Error::internal(
            "the operation was cancelled by fencelock's runtime",
        )
        .into()),
    }
}

/// Runs `fut` on the runtime and blocks the calling (JVM) thread until it answers: one thread
/// wake-up per call, where a suspend call resumed from `runBlocking` costs several. For calls
/// that always run to their end (release), so nothing needs cancelling.
pub(crate) fn block<T, F>(fut: F) -> Result<T, NativeError>
where
    T: Send + 'static,
    F: Future<Output = fencelock::Result<T>> + Send + 'static,
{
    let rt = runtime()?;
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(fencelock::Error::internal(
            "a blocking fencelock call was made from a thread of fencelock's runtime; use the suspend API there",
        )
        .into());
    }
    let (answer, answered) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = answer.send(AssertUnwindSafe(fut).catch_unwind().await);
    });
    match answered.recv() {
        Ok(Ok(result)) => result.map_err(NativeError::from),
        Ok(Err(payload)) => Err(from_panic(payload)),
        Err(_) => Err(fencelock::Error::internal(
            "the operation was dropped by fencelock's runtime",
        )
        .into()),
    }
}

/// What a spawned call answers: its result, or the panic it caught.
type Answer<T> = std::thread::Result<fencelock::Result<T>>;

/// A call running on the runtime for a blocking JVM thread, which waits for it in slices so that
/// `Thread.interrupt()` is seen between them (the blocking acquires: one thread wake-up, where
/// `runBlocking` over the suspend call costs several). [`Pending::abort`] aborts it, and so does
/// dropping it; an answer that came but was never taken is dropped with it (a lease in it is
/// then released in the background, as every dropped lease is).
pub(crate) struct Pending<T> {
    answered: std::sync::Mutex<std::sync::mpsc::Receiver<Answer<T>>>,
    task: tokio::task::AbortHandle,
}

impl<T: Send + 'static> Pending<T> {
    /// Spawns `fut` on the runtime; a panic inside becomes INTERNAL when waited for.
    pub(crate) fn spawn<F>(fut: F) -> Result<Pending<T>, NativeError>
    where
        F: Future<Output = fencelock::Result<T>> + Send + 'static,
    {
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let task = runtime()?.spawn(async move {
            let _ = answer.send(AssertUnwindSafe(fut).catch_unwind().await);
        });
        Ok(Pending {
            answered: std::sync::Mutex::new(answered),
            task: task.abort_handle(),
        })
    }

    /// The call's answer if it comes within `slice_millis`, else `None`.
    pub(crate) fn wait(&self, slice_millis: u32) -> fencelock::Result<Option<T>> {
        use std::sync::mpsc::RecvTimeoutError;
        let answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        match answered.recv_timeout(std::time::Duration::from_millis(u64::from(slice_millis))) {
            Ok(Ok(outcome)) => outcome.map(Some),
            Ok(Err(payload)) => Err(fencelock::Error::from_panic(payload.as_ref())),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(fencelock::Error::internal(
                "the call was dropped by fencelock's runtime",
            )),
        }
    }

    /// Aborts the call (aborting one that already ended does nothing).
    pub(crate) fn abort(&self) {
        self.task.abort();
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
