//! Locking the core's own mutexes.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning.
///
/// A mutex is poisoned when a thread panicked while holding it: perhaps a binding's callback or
/// a host thread that the core does not control. A lock library must keep working after such a
/// panic elsewhere: if its own bookkeeping (the held leases, the watchdog's deadlines, the lost
/// signal) became unusable, every later acquire, renewal and release in the process would fail
/// or panic, and leases could be neither renewed nor released. Every critical section in the
/// core leaves its data valid at each step, so the data behind a poisoned mutex is still sound
/// and the poison flag carries no information worth stopping for.
pub(crate) fn unpoisoned<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `future` to its end even if the caller stops waiting for it: in the caller's task while
/// the caller polls it, and, if the caller's future is dropped first (a timeout, a cancelled
/// acquire), in a task of its own from where it stopped. The effect of
/// `tokio::spawn(future).await` without its hop to another task (a wake-up of another worker
/// thread and two context switches) on every call that runs to its end. A panic inside it is
/// caught, as a task's would be, and returned as the core's internal error.
pub(crate) async fn finish_even_if_dropped<F>(future: F) -> Result<F::Output, crate::Error>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    struct Finishing<F: std::future::Future + Send + 'static> {
        future: Option<std::pin::Pin<Box<F>>>,
        runtime: tokio::runtime::Handle,
    }

    impl<F: std::future::Future + Send + 'static> std::future::Future for Finishing<F> {
        type Output = Result<F::Output, crate::Error>;

        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Self::Output> {
            let Some(future) = self.future.as_mut() else {
                return std::task::Poll::Pending;
            };
            let polled =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.as_mut().poll(cx)));
            let output = match polled {
                Ok(std::task::Poll::Pending) => return std::task::Poll::Pending,
                Ok(std::task::Poll::Ready(output)) => Ok(output),
                Err(panic) => Err(crate::Error::from_panic(panic.as_ref())),
            };
            self.future = None;
            std::task::Poll::Ready(output)
        }
    }

    impl<F: std::future::Future + Send + 'static> Drop for Finishing<F> {
        fn drop(&mut self) {
            if let Some(future) = self.future.take() {
                self.runtime.spawn(async move {
                    future.await;
                });
            }
        }
    }

    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Ok(future.await);
    };
    Finishing {
        future: Some(Box::pin(future)),
        runtime,
    }
    .await
}

/// Runs `futures` concurrently in the caller's task (none is spawned) and returns their outputs
/// in the order given, once all are done.
pub(crate) async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_future_the_caller_stops_waiting_for_still_runs_to_its_end() {
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (go_on, go_on_rx) = tokio::sync::oneshot::channel::<()>();
        let (finished_tx, finished) = tokio::sync::oneshot::channel();
        let waiting = finish_even_if_dropped(async move {
            started_tx.send(()).unwrap();
            go_on_rx.await.unwrap();
            finished_tx.send("finished").unwrap();
        });
        let cut = tokio::time::timeout(Duration::from_millis(50), async {
            tokio::join!(waiting, async { started.await.unwrap() }).0
        })
        .await;
        assert!(cut.is_err(), "the caller gave up before the end");
        go_on.send(()).unwrap();
        assert_eq!(finished.await.unwrap(), "finished");
    }

    #[tokio::test]
    async fn its_output_and_its_panic_come_back_to_the_caller() {
        assert_eq!(finish_even_if_dropped(async { 42 }).await.unwrap(), 42);
        let panicked = finish_even_if_dropped(async {
            if std::hint::black_box(true) {
                panic!("boom");
            }
        })
        .await;
        let error = panicked.unwrap_err();
        assert_eq!(error.code(), crate::ErrorCode::Internal);
        assert!(error.message().contains("boom"), "{error}");
    }
}
