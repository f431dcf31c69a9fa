//! Calls polled on a host event loop's thread (what the Node binding's executor does) on one
//! Redis instance: their lock scripts go out on caller-driven connections in non-blocking mode,
//! and the reply is read on the loop's thread once its socket is readable. A small executor
//! plays the loop (support/event_loop.rs).

use std::time::{Duration, Instant};

use crate::support::event_loop::on_loop;
use crate::support::{redis_url, unique, url};
use fencelock::{LockOptions, Locker};

fn opts() -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_secs(30))
}

/// Uncontended cycles on the loop: once the caller-driven connection is open (in the
/// background, the first calls going on the shared connection meanwhile), the acquire's and
/// the release's replies are read on the loop's thread; tokens increase and every release
/// frees the lock. Run on the plain server and on the ACL server (whose user the connection
/// authenticates as).
#[test]
fn calls_polled_on_an_event_loop_read_their_replies_there() {
    let runtime = fencelock::runtime::host_runtime("loop-test").unwrap();
    for url in [
        redis_url(),
        url(
            "REDIS_ACL",
            "redis://fencelock:fencelock-test@127.0.0.1:6381",
        ),
    ] {
        let locker = runtime.block_on(Locker::connect(&url)).unwrap();
        let name = unique("event-loop");
        let (mut on_the_loop, mut last_token) = (0, 0);
        let given_up = Instant::now() + Duration::from_secs(10);
        // Bounded by time, not by a count of cycles: until the caller-driven connection is open
        // (sooner or later on a busy machine) the cycles go on the shared connection.
        loop {
            let (lease, acquired) = on_loop(&locker, locker.acquire(&name, &opts()));
            let lease = lease.unwrap();
            assert!(lease.token() > last_token, "{url}: tokens went back");
            last_token = lease.token();
            let (released, release) = on_loop(&locker, lease.release());
            released.unwrap();
            let info = runtime.block_on(locker.inspect(&name)).unwrap();
            assert!(!info.held, "{url}: held after its release");
            if acquired.socket_waits > 0 && release.socket_waits > 0 {
                on_the_loop += 1;
            }
            if on_the_loop >= 10 {
                break;
            }
            assert!(
                Instant::now() < given_up,
                "{url}: {on_the_loop} of 10 cycles read their replies on the loop in 10 s"
            );
        }
        runtime.block_on(locker.close());
    }
}

/// A lock held by another Locker: the loop's acquire waits (woken from the runtime, not by a
/// socket) and takes the lock once the holder releases it.
#[test]
fn an_acquire_on_the_loop_waits_for_a_held_lock_and_gets_it_on_release() {
    let runtime = fencelock::runtime::host_runtime("loop-test").unwrap();
    let (holder, waiter) = (
        runtime.block_on(Locker::connect(&redis_url())).unwrap(),
        runtime.block_on(Locker::connect(&redis_url())).unwrap(),
    );
    let name = unique("event-loop-held");
    let held = runtime.block_on(holder.acquire(&name, &opts())).unwrap();
    let releaser = std::thread::spawn({
        let runtime = holder.runtime().clone();
        move || {
            std::thread::sleep(Duration::from_millis(300));
            runtime.block_on(held.release()).unwrap();
        }
    });
    let wait = opts().with_wait(Some(Duration::from_secs(20)));
    let (lease, driven) = on_loop(&waiter, waiter.acquire(&name, &wait));
    let lease = lease.unwrap();
    assert!(driven.other_waits > 0, "{driven:?}: it never waited");
    releaser.join().unwrap();
    let (released, _) = on_loop(&waiter, lease.release());
    released.unwrap();
    runtime.block_on(holder.close());
    runtime.block_on(waiter.close());
}
