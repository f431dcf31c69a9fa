//! Sending one request to every master at once and collecting the answers until the outcome is
//! decided (docs/design.md §3.3, change 1): a round costs the slowest reply of the majority it
//! needs, and never more than the per-master timeout.
//!
//! The requests are polled in place (no task is spawned while the round runs). A round decided
//! before every master answered hands the requests still in flight to a task that drives them
//! to their answers or their timeout: a request is not on the wire when its first poll returns
//! (redis-rs queues it for the connection's driver, which skips a request whose caller has gone
//! by the time it is written), and a release, a renewal or a grant that a master never sees
//! would leave it out of step with the majority. The answers that task gets are dropped; a
//! master that grants late grants to an owner id that is only ever ours, and a release (sent
//! to every master, behind the grant on the same connection) or the ttl clears it.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use crate::error::{Error, Result};

type Pending<'a, T> = Pin<Box<dyn Future<Output = (usize, Result<T>)> + Send + 'a>>;

/// Runs `requests` (one per master, in master order) concurrently, each under `timeout`, and
/// returns every answer (`None` for none).
pub async fn fan_out<'a, T, F>(
    requests: Vec<F>,
    timeout: Duration,
    labels: &[String],
) -> Vec<Option<Result<T>>>
where
    T: Send + 'a,
    F: Future<Output = Result<T>> + Send + 'a,
{
    let (answers, _) = rounds(requests, timeout, labels, |_| false).await;
    answers
}

/// Runs `requests` (one per master, in master order) concurrently, each under `timeout`, and
/// returns their answers (`None` where none came yet) as soon as `decided` says so or all
/// answered. The requests still in flight then run to their end in a task of their own.
pub async fn fan_out_until<T, F>(
    requests: Vec<F>,
    timeout: Duration,
    labels: &[String],
    decided: impl FnMut(&[Option<Result<T>>]) -> bool,
) -> Vec<Option<Result<T>>>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let (answers, mut in_flight) = rounds(requests, timeout, labels, decided).await;
    if !in_flight.is_empty()
        && let Ok(runtime) = tokio::runtime::Handle::try_current()
    {
        runtime.spawn(async move {
            while !in_flight.is_empty() {
                poll_fn(|cx| poll_all(&mut in_flight, cx)).await;
            }
        });
    }
    answers
}

async fn rounds<'a, T, F>(
    requests: Vec<F>,
    timeout: Duration,
    labels: &[String],
    mut decided: impl FnMut(&[Option<Result<T>>]) -> bool,
) -> (Vec<Option<Result<T>>>, Vec<Pending<'a, T>>)
where
    T: Send + 'a,
    F: Future<Output = Result<T>> + Send + 'a,
{
    let mut answers: Vec<Option<Result<T>>> = requests.iter().map(|_| None).collect();
    let mut pending: Vec<Pending<'a, T>> = requests
        .into_iter()
        .enumerate()
        .map(|(i, request)| {
            let label = labels.get(i).cloned().unwrap_or_default();
            Box::pin(async move {
                let answer = match tokio::time::timeout(timeout, request).await {
                    Ok(answer) => answer,
                    Err(_) => Err(Error::unavailable(format!(
                        "redlock master {label} did not answer within {timeout:?}"
                    ))),
                };
                (i, answer)
            }) as Pending<'a, T>
        })
        .collect();
    while !pending.is_empty() {
        // Every pending request is polled on every wake-up, so all of them are queued on
        // their connections before the first answer is looked at.
        let finished = poll_fn(|cx| poll_all(&mut pending, cx)).await;
        for (i, answer) in finished {
            answers[i] = Some(answer);
        }
        if decided(&answers) {
            break;
        }
    }
    (answers, pending)
}

/// Polls every request in `pending`, removing and returning those that finished; pending
/// while none did.
fn poll_all<'a, T>(
    pending: &mut Vec<Pending<'a, T>>,
    cx: &mut std::task::Context<'_>,
) -> Poll<Vec<(usize, Result<T>)>> {
    let mut done = Vec::new();
    let mut at = 0;
    while at < pending.len() {
        if let Poll::Ready(answer) = pending[at].as_mut().poll(cx) {
            drop(pending.swap_remove(at));
            done.push(answer);
        } else {
            at += 1;
        }
    }
    if done.is_empty() {
        Poll::Pending
    } else {
        Poll::Ready(done)
    }
}

/// A short account of the errors among `answers`, for a "no quorum" message.
pub fn error_summary<T>(answers: &[Option<Result<T>>], labels: &[String]) -> String {
    let mut parts = Vec::new();
    for (answer, label) in answers.iter().zip(labels) {
        match answer {
            Some(Err(e)) => parts.push(format!("{label}: {e}")),
            None => parts.push(format!("{label}: no answer yet")),
            Some(Ok(_)) => {}
        }
    }
    parts.join("; ")
}

/// The most telling error among `answers`: AUTH or INVALID_ARGUMENT (a configuration problem
/// that retrying will not fix) before anything else.
pub fn fatal_error<T>(answers: &[Option<Result<T>>]) -> Option<Error> {
    answers.iter().flatten().find_map(|a| match a {
        Err(e) if !e.is_retryable() => Some(e.clone()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn slow(
        ms: u64,
        v: u32,
        finished: &Arc<AtomicU32>,
    ) -> impl Future<Output = Result<u32>> + use<> {
        let finished = finished.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            finished.fetch_add(1, Ordering::SeqCst);
            Ok(v)
        }
    }

    #[tokio::test]
    async fn stops_when_decided_and_lets_the_rest_finish_on_their_own() {
        let labels: Vec<String> = (0..3).map(|i| format!("m{i}")).collect();
        let finished = Arc::new(AtomicU32::new(0));
        let started = std::time::Instant::now();
        let answers = fan_out_until(
            vec![
                slow(10, 1, &finished),
                slow(400, 2, &finished),
                slow(20, 3, &finished),
            ],
            Duration::from_secs(5),
            &labels,
            |a| a.iter().filter(|x| matches!(x, Some(Ok(_)))).count() >= 2,
        )
        .await;
        assert!(started.elapsed() < Duration::from_millis(300));
        assert!(answers[1].is_none());
        assert_eq!(finished.load(Ordering::SeqCst), 2);
        // The straggler was not dropped: it runs to its answer.
        while finished.load(Ordering::SeqCst) < 3 {
            assert!(started.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn waits_for_every_answer_but_never_past_the_timeout() {
        let labels: Vec<String> = (0..3).map(|i| format!("m{i}")).collect();
        let finished = Arc::new(AtomicU32::new(0));
        let started = std::time::Instant::now();
        let answers = fan_out(
            vec![
                slow(10, 1, &finished),
                slow(5000, 2, &finished),
                slow(20, 3, &finished),
            ],
            Duration::from_millis(200),
            &labels,
        )
        .await;
        assert!(started.elapsed() < Duration::from_millis(1000));
        assert_eq!(
            answers[1].as_ref().unwrap().as_ref().unwrap_err().code(),
            crate::error::ErrorCode::Unavailable
        );
        assert_eq!(*answers[2].as_ref().unwrap().as_ref().unwrap(), 3);
    }
}
