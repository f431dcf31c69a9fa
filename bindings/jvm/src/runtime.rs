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

use fencelock::blocking::FirstPoll;
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
    let fut = fencelock::spans::in_caller_context(fencelock::spans::numbered::take(), fut);
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

/// Polls `fut` once on the calling (JVM) thread, which may block there: an uncontended acquire
/// or a release on one Redis instance does its round trip on a caller-driven connection and
/// answers without waking any other thread (`fencelock::blocking::first_poll_on_caller`). A
/// future that has to wait is given back, to continue on the runtime. A round trip on the
/// caller's thread is not interrupted by `Thread.interrupt()`: it ends with its reply or with
/// the operation timeout.
fn first_poll<T, F>(rt: &Runtime, fut: F) -> Result<Answer<T>, std::pin::Pin<Box<F>>>
where
    F: Future<Output = fencelock::Result<T>>,
{
    match fencelock::blocking::first_poll_on_caller(rt.handle(), fut) {
        FirstPoll::Ready(result) => Ok(Ok(result)),
        FirstPoll::Pending(fut) => Err(fut),
        FirstPoll::Panicked(payload) => Ok(Err(payload)),
    }
}

/// A blocking call made on a thread of the runtime would stall it: refused with INTERNAL.
fn refuse_on_runtime_thread() -> Result<(), NativeError> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(fencelock::Error::internal(
            "a blocking fencelock call was made from a thread of fencelock's runtime; use the suspend API there",
        )
        .into());
    }
    Ok(())
}

/// Runs `fut` for the calling (JVM) thread until it answers: on that thread where it can
/// ([`first_poll`]), else on the runtime, with one thread wake-up per call, where a suspend
/// call resumed from `runBlocking` costs several. For calls that always run to their end
/// (release), so nothing needs cancelling.
pub(crate) fn block<T, F>(fut: F) -> Result<T, NativeError>
where
    T: Send + 'static,
    F: Future<Output = fencelock::Result<T>> + Send + 'static,
{
    let fut = fencelock::spans::in_caller_context(fencelock::spans::numbered::take(), fut);
    let rt = runtime()?;
    refuse_on_runtime_thread()?;
    let fut = match first_poll(rt, fut) {
        Ok(Ok(result)) => return result.map_err(NativeError::from),
        Ok(Err(payload)) => return Err(from_panic(payload)),
        Err(fut) => fut,
    };
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
    /// `None` when the call answered on the caller's thread.
    task: Option<tokio::task::AbortHandle>,
}

impl<T: Send + 'static> Pending<T> {
    /// Starts `fut` on the calling thread ([`first_poll`]) and continues it on the runtime if
    /// it has to wait; a panic inside becomes INTERNAL when waited for.
    pub(crate) fn spawn<F>(fut: F) -> Result<Pending<T>, NativeError>
    where
        F: Future<Output = fencelock::Result<T>> + Send + 'static,
    {
        let fut = fencelock::spans::in_caller_context(fencelock::spans::numbered::take(), fut);
        let rt = runtime()?;
        refuse_on_runtime_thread()?;
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let task = match first_poll(rt, fut) {
            Ok(outcome) => {
                let _ = answer.send(outcome);
                None
            }
            Err(fut) => {
                let task = rt.spawn(async move {
                    let _ = answer.send(AssertUnwindSafe(fut).catch_unwind().await);
                });
                Some(task.abort_handle())
            }
        };
        Ok(Pending {
            answered: std::sync::Mutex::new(answered),
            task,
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
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
