//! Sending one request to every master at once and collecting the answers until the outcome is
//! decided (docs/design.md §3.3, change 1): a round costs the slowest reply of the majority it
//! needs, and never more than the per-master timeout.
//!
//! The requests are polled in place (no task is spawned), so every one of them has been handed
//! to its connection by the first poll; answers still in flight when the outcome is decided are
//! dropped. A master that grants late grants to an owner id that is only ever ours, and a
//! release (sent to every master) or the ttl clears it.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use crate::error::{Error, Result};

type Pending<'a, T> = Pin<Box<dyn Future<Output = (usize, Result<T>)> + Send + 'a>>;

/// Runs `requests` (one per master, in master order) concurrently, each under `timeout`, and
/// returns their answers (`None` where none came) as soon as `decided` says so or all answered.
pub async fn fan_out<'a, T, F>(
    requests: Vec<F>,
    timeout: Duration,
    labels: &[String],
    mut decided: impl FnMut(&[Option<Result<T>>]) -> bool,
) -> Vec<Option<Result<T>>>
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
        // Every pending request is polled on every wake-up, so all of them are on their
        // connections before the first answer is looked at.
        let finished = poll_fn(|cx| {
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
        })
        .await;
        for (i, answer) in finished {
            answers[i] = Some(answer);
        }
        if decided(&answers) {
            break;
        }
    }
    answers
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
    use super::*;

    #[tokio::test]
    async fn stops_when_decided_and_never_waits_past_the_timeout() {
        let labels: Vec<String> = (0..3).map(|i| format!("m{i}")).collect();
        let slow = |ms: u64, v: u32| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<u32, Error>(v)
        };
        let started = std::time::Instant::now();
        let answers = fan_out(
            vec![slow(10, 1), slow(5000, 2), slow(20, 3)],
            Duration::from_millis(200),
            &labels,
            |a| a.iter().filter(|x| matches!(x, Some(Ok(_)))).count() >= 2,
        )
        .await;
        assert!(started.elapsed() < Duration::from_millis(150));
        assert!(answers[1].is_none());
        let started = std::time::Instant::now();
        let answers = fan_out(
            vec![slow(10, 1), slow(5000, 2), slow(20, 3)],
            Duration::from_millis(200),
            &labels,
            |_| false,
        )
        .await;
        assert!(started.elapsed() < Duration::from_millis(1000));
        assert_eq!(
            answers[1].as_ref().unwrap().as_ref().unwrap_err().code(),
            crate::error::ErrorCode::Unavailable
        );
    }
}
