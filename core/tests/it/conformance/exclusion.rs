//! Mutual exclusion: one holder at a time, under contention from several Lockers and tasks,
//! each holder's token larger than the one before it, and a held lock is not granted to a
//! try-once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::{LockOptions, Locker};

use crate::conformance::backends::Target;
use crate::contract;
use crate::support::unique;

contract!(
    one_holder_at_a_time_under_contention,
    a_held_lock_is_not_granted_to_a_try
);

const LOCKERS: usize = 2;
const TASKS_PER_LOCKER: usize = 3;
const ROUNDS: usize = 4;

async fn one_holder_at_a_time_under_contention(target: Target) {
    let name = unique("contention");
    let inside = Arc::new(AtomicUsize::new(0));
    // The tokens in the order of the critical sections they entered.
    let entered = Arc::new(Mutex::new(Vec::new()));
    let options = LockOptions::default()
        .with_ttl(Duration::from_secs(30))
        .with_wait(Some(Duration::from_secs(60)));
    let mut tasks = Vec::new();
    let mut lockers = Vec::new();
    for _ in 0..LOCKERS {
        let locker = target.locker().await;
        for _ in 0..TASKS_PER_LOCKER {
            let (locker, name, options) = (locker.clone(), name.clone(), options.clone());
            let (inside, entered) = (inside.clone(), entered.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let lease = locker.acquire(&name, &options).await.unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    entered.lock().unwrap().push(lease.token());
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lease.release().await.unwrap();
                }
            }));
        }
        lockers.push(locker);
    }
    for task in tasks {
        task.await.unwrap();
    }
    let tokens = entered.lock().unwrap().clone();
    assert_eq!(tokens.len(), LOCKERS * TASKS_PER_LOCKER * ROUNDS);
    // Each holder's token is larger than its predecessor's (so a fence never refuses the
    // current holder), which also makes every token its holder's own.
    let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
    assert!(
        increasing,
        "tokens out of order from holder to holder: {tokens:?}"
    );
    close(lockers).await;
}

async fn a_held_lock_is_not_granted_to_a_try(target: Target) {
    let (holder, other) = (target.locker().await, target.locker().await);
    let name = unique("try");
    let options = LockOptions::default().with_ttl(Duration::from_secs(30));
    let lease = holder.acquire(&name, &options).await.unwrap();
    assert!(other.try_acquire(&name, &options).await.unwrap().is_none());
    // Not even to its own Locker: a lease is not re-entered without the reentrant option.
    assert!(holder.try_acquire(&name, &options).await.unwrap().is_none());
    lease.release().await.unwrap();
    let next = other.try_acquire(&name, &options).await.unwrap();
    let next = next.expect("free after the release");
    assert!(next.token() > lease.token());
    next.release().await.unwrap();
    close(vec![holder, other]).await;
}

pub async fn close(lockers: Vec<Locker>) {
    for locker in lockers {
        locker.close().await;
    }
}
