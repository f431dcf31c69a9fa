//! The ZooKeeper backend against a real server (tests/servers.sh start zookeeper).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{self, unique};
use fencelock::options::TestHook;
use fencelock::{BootInstant, ErrorCode, LockOptions, Locker, LockerOptions, LossReason};
use zookeeper_client::{Client, EventType};

fn zk_url() -> String {
    support::url("ZK", "zk://127.0.0.1:2181")
}

/// `url` with `options` (`a=b&c=d`) appended.
fn with(url: &str, options: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{options}")
}

/// The `h1:p1,h2:p2` of a zk:// URL.
fn hosts(url: &str) -> String {
    let rest = url.trim_start_matches("zk://");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap().to_string()
}

/// A plain client, for looking at and meddling with the tree by hand.
async fn raw() -> Client {
    Client::connect(&hosts(&zk_url())).await.unwrap()
}

async fn children(raw: &Client, path: &str) -> Vec<String> {
    match raw.list_children(path).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

fn folder(name: &str) -> String {
    format!("/fencelock/{}", fencelock::internals::encode_name(name))
}

fn slow_poll() -> LockerOptions {
    LockerOptions::default().with_poll_interval(Duration::from_secs(60))
}

/// The layout of a lock (docs/zookeeper.md): one ephemeral sequential node per holder or waiter
/// under the name's folder, whose czxid is the token; a try that fails leaves no node, and a
/// release or close deletes the holder's. (Tokens, inspect, release and close as the contract
/// states them: the conformance suite.)
#[tokio::test]
async fn the_token_is_the_czxid_of_an_ephemeral_node_that_release_and_close_delete() {
    let locker = Locker::connect(&zk_url()).await.unwrap();
    let other = Locker::connect(&zk_url()).await.unwrap();
    let raw = raw().await;
    let name = unique("basic");
    let folder = folder(&name);
    for _ in 0..2 {
        let lease = locker
            .acquire(&name, &LockOptions::default())
            .await
            .unwrap();
        // No server-side expiry time: the lease lives with its session and node.
        assert_eq!(lease.expires_at(), None);
        // ... but a client deadline, which is the session's (renewed by its heartbeats).
        let valid = lease
            .valid_until()
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        assert!(
            valid > Duration::ZERO && valid <= Duration::from_secs(60),
            "{valid:?}"
        );
        let nodes = children(&raw, &folder).await;
        assert_eq!(nodes.len(), 1, "{nodes:?}");
        let node = &nodes[0];
        assert!(
            node.starts_with("_c_") && node.len() == "_c_".len() + 36 + "-lock-".len() + 10,
            "{node}"
        );
        let (data, stat) = raw.get_data(&format!("{folder}/{node}")).await.unwrap();
        assert_eq!(stat.czxid as u64, lease.token());
        assert_ne!(stat.ephemeral_owner, 0, "lock nodes are ephemeral");
        assert!(String::from_utf8_lossy(&data).contains("\"fencelock\":1"));
        // (The folder is a CONTAINER node; the server does not show that in a Stat.)
        // A try that fails leaves nothing in the queue.
        assert!(
            other
                .try_acquire(&name, &LockOptions::default())
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(children(&raw, &folder).await.len(), 1);
        lease.release().await.unwrap();
        assert!(children(&raw, &folder).await.is_empty());
    }
    // close() deletes the node of what the Locker still holds.
    let _kept = locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    locker.close().await;
    assert!(children(&raw, &folder).await.is_empty());
}

#[tokio::test]
async fn the_lease_lasts_one_session_timeout_and_the_heartbeat_keeps_it() {
    let locker = Locker::connect(&with(&zk_url(), "session_timeout_ms=3000&tick_ms=500"))
        .await
        .unwrap();
    let name = unique("session-ttl");
    // The ttl asked for does not apply: the session timeout is the lease.
    let lease = locker
        .acquire(
            &name,
            &LockOptions::default().with_ttl(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let left = BootInstant::now().until(lease.deadline());
    assert!(
        left <= Duration::from_secs(3) && left > Duration::from_secs(2),
        "{left:?}"
    );
    // Longer than the session timeout: the session heartbeat keeps it.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert!(lease.is_held() && !lease.is_suspended());
    let left = BootInstant::now().until(lease.deadline());
    assert!(
        left > Duration::from_millis(1500),
        "the renewals did not move the deadline: {left:?}"
    );
    // extend() waits for the next heartbeat; it does not lengthen the lease.
    lease.extend(Some(Duration::from_secs(600))).await.unwrap();
    let left = BootInstant::now().until(lease.deadline());
    assert!(
        left <= Duration::from_secs(3) && left > Duration::from_secs(2),
        "{left:?}"
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn without_auto_renew_the_lease_ends_after_one_session_timeout_and_its_node_goes() {
    let url = with(&zk_url(), "session_timeout_ms=2000&tick_ms=500");
    let locker = Locker::connect(&url).await.unwrap();
    let other = Locker::connect(&url).await.unwrap();
    let name = unique("no-renew");
    let lease = locker
        .acquire(&name, &LockOptions::default().with_auto_renew(false))
        .await
        .unwrap();
    let started = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost_signal().wait())
        .await
        .unwrap();
    assert_eq!(reason, LossReason::Expired);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The lost lease's node is deleted, so the next holder need not wait for the session.
    let next = other
        .acquire(
            &name,
            &LockOptions::default().with_wait(Some(Duration::from_secs(5))),
        )
        .await
        .unwrap();
    assert!(next.token() > lease.token());
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
    next.release().await.unwrap();
}

/// Waiters queue in the order they asked and each release wakes exactly the next one: the
/// fallback poll is a minute, so only the watch on the predecessor can wake anybody, and the
/// watch events are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_exactly_the_next_waiter_in_fifo_order() {
    const WAITERS: usize = 5;
    let url = zk_url();
    let name = unique("fifo");
    let holder = Locker::connect(&url).await.unwrap();
    let first = holder
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    let watch_events = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut releases = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let queued = Arc::new(tokio::sync::Notify::new());
        let hook = {
            let (queued, watch_events) = (queued.clone(), watch_events.clone());
            TestHook(Arc::new(move |point: &'static str| match point {
                "attempt_failed" => queued.notify_one(),
                "zk_watch_event" => {
                    watch_events.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }))
        };
        let mut options = slow_poll();
        options.test_hook = Some(hook);
        let locker = Locker::connect_with(&url, options).await.unwrap();
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        releases.push(release_tx);
        let (name, order) = (name.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let lease = locker
                .acquire(&name, &LockOptions::default())
                .await
                .unwrap();
            order.lock().unwrap().push((i, lease.token()));
            let _ = release_rx.await;
            lease.release().await.unwrap();
        }));
        // Its node is in the queue before the next waiter asks.
        tokio::time::timeout(Duration::from_secs(10), queued.notified())
            .await
            .unwrap();
    }
    assert_eq!(watch_events.load(Ordering::SeqCst), 0);
    let mut last_token = first.token();
    first.release().await.unwrap();
    for (handoff, release) in releases.into_iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(10);
        while order.lock().unwrap().len() <= handoff {
            assert!(
                Instant::now() < deadline,
                "handoff {handoff} never happened"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let got = order.lock().unwrap().clone();
        assert_eq!(
            got.len(),
            handoff + 1,
            "one release woke more than one waiter: {got:?}"
        );
        assert_eq!(
            got[handoff].0, handoff,
            "waiters must acquire in the order they asked: {got:?}"
        );
        assert!(got[handoff].1 > last_token);
        last_token = got[handoff].1;
        // Counted cumulatively: a waiter woken wrongly by this release shows here or, if its
        // event comes later, at the next hand-off or the end.
        assert_eq!(
            watch_events.load(Ordering::SeqCst),
            handoff + 1,
            "watch events after release {handoff}"
        );
        release.send(()).unwrap();
    }
    for task in tasks {
        task.await.unwrap();
    }
    // The last release had nobody to wake: one watch event per waiter, no more.
    assert_eq!(watch_events.load(Ordering::SeqCst), WAITERS);
}

/// ZooKeeper's waiters queue: inspect shows them, first in line first, with their holder text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_queue_of_waiters() {
    let url = zk_url();
    let holder = Locker::connect(&url).await.unwrap();
    let waiter = Locker::connect(&url).await.unwrap();
    let name = unique("ops-queue");
    let lease = holder
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    let waiting = {
        let waiter = waiter.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let opts = LockOptions::default()
                .with_wait(Some(Duration::from_secs(20)))
                .with_holder("second in line");
            waiter.acquire(&name, &opts).await
        })
    };
    let started = Instant::now();
    let info = loop {
        let info = holder.inspect(&name).await.unwrap();
        if !info.waiters.is_empty() {
            break info;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the waiter never showed up: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(info.token, Some(lease.token()));
    assert_eq!(info.waiters.len(), 1, "{info:?}");
    let described = fencelock::HolderDescription::parse(info.waiters[0].holder.as_deref().unwrap());
    assert_eq!(described.text.as_deref(), Some("second in line"));
    assert!(
        info.waiters[0].node.contains("-lock-"),
        "{:?}",
        info.waiters[0]
    );
    lease.release().await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    assert!(holder.inspect(&name).await.unwrap().waiters.is_empty());
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_holders_node_deleted_by_hand_makes_its_lease_lost_at_once() {
    let session = Duration::from_secs(6);
    let locker = Locker::connect(&with(&zk_url(), "session_timeout_ms=6000&tick_ms=500"))
        .await
        .unwrap();
    let raw = raw().await;
    let name = unique("forced");
    let lease = locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    let node = children(&raw, &folder(&name)).await.remove(0);
    raw.delete(&format!("{}/{node}", folder(&name)), None)
        .await
        .unwrap();
    let started = Instant::now();
    let reason = tokio::time::timeout(
        session / 3 + Duration::from_secs(2),
        lease.lost_signal().wait(),
    )
    .await
    .unwrap();
    assert_eq!(reason, LossReason::TakenOver);
    // The watch on its own node makes it immediate, not a renewal interval later.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "lost only after {:?}",
        started.elapsed()
    );
    assert!(lease.is_lost());
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
    let next = locker
        .try_acquire(&name, &LockOptions::default())
        .await
        .unwrap()
        .unwrap();
    assert!(next.token() > lease.token());
    next.release().await.unwrap();
}

#[tokio::test]
async fn names_with_slashes_dots_braces_and_non_ascii_stay_one_segment() {
    let root = format!("/{}", unique("fencelock-test-names"));
    let locker = Locker::connect(&with(&zk_url(), &format!("root={root}")))
        .await
        .unwrap();
    let raw = raw().await;
    for name in ["a/b", "..", ".", "{user}", "zürich ☃", "a/../b.{c}/", "%2F"] {
        let lease = locker.acquire(name, &LockOptions::default()).await.unwrap();
        assert_eq!(lease.name(), name);
        let encoded = fencelock::internals::encode_name(name);
        assert!(!encoded.contains(['/', '.', '{', '}']), "{encoded}");
        assert!(
            children(&raw, &root).await.contains(&encoded),
            "{name:?} is not one segment under {root}"
        );
        let nodes = children(&raw, &format!("{root}/{encoded}")).await;
        assert_eq!(nodes.len(), 1, "{name:?}: {nodes:?}");
        let (_, stat) = raw
            .get_data(&format!("{root}/{encoded}/{}", nodes[0]))
            .await
            .unwrap();
        assert_eq!(stat.czxid as u64, lease.token());
        lease.release().await.unwrap();
    }
    // Every name made exactly one folder under the root.
    assert_eq!(children(&raw, &root).await.len(), 7);
}

#[tokio::test]
async fn a_chroot_holds_the_whole_tree() {
    let chroot = format!("/{}", unique("fencelock-test-chroot"));
    let locker = Locker::connect(&format!("{}{chroot}", zk_url()))
        .await
        .unwrap();
    let raw = raw().await;
    let name = unique("in-chroot");
    let lease = locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    let nodes = children(&raw, &format!("{chroot}{}", folder(&name))).await;
    assert_eq!(nodes.len(), 1);
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_cancellation_leave_no_node_behind() {
    let url = zk_url();
    let raw = raw().await;
    let name = unique("give-up");
    let folder = folder(&name);
    let holder = Locker::connect(&url).await.unwrap();
    let lease = holder
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    let waiting = Arc::new(AtomicUsize::new(0));
    let hook = {
        let waiting = waiting.clone();
        TestHook(Arc::new(move |point: &'static str| {
            if point == "waiting" {
                waiting.fetch_add(1, Ordering::SeqCst);
            }
        }))
    };
    let mut options = slow_poll();
    options.test_hook = Some(hook);
    let waiter = Locker::connect_with(&url, options).await.unwrap();
    // A wait that runs out deletes the waiter's node before it returns.
    let started = Instant::now();
    let err = waiter
        .acquire(
            &name,
            &LockOptions::default().with_wait(Some(Duration::from_millis(400))),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Timeout, "{err}");
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(children(&raw, &folder).await.len(), 1);
    // A cancelled acquire deletes its node in the background.
    let waits_before = waiting.load(Ordering::SeqCst);
    let task = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire(&name, &LockOptions::default()).await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting.load(Ordering::SeqCst) == waits_before {
        assert!(
            Instant::now() < deadline,
            "the second waiter never started waiting"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(children(&raw, &folder).await.len(), 2);
    task.abort();
    let deadline = Instant::now() + Duration::from_secs(5);
    while children(&raw, &folder).await.len() != 1 {
        assert!(
            Instant::now() < deadline,
            "the cancelled waiter's node stayed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lease.release().await.unwrap();
    assert!(children(&raw, &folder).await.is_empty());
}

#[tokio::test]
async fn credentials_set_acls_that_keep_non_participants_out() {
    let root = format!("/{}", unique("fencelock-test-acl"));
    let host = hosts(&zk_url());
    let participant = format!("zk://fl-user:fl-secret@{host}?root={root}");
    let locker = Locker::connect(&participant).await.unwrap();
    let name = unique("acl");
    let lease = locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    let authed = Client::connector()
        .with_auth("digest", b"fl-user:fl-secret")
        .connect(&host)
        .await
        .unwrap();
    let folder = format!("{root}/{}", fencelock::internals::encode_name(&name));
    let node = format!(
        "{folder}/{}",
        authed.list_children(&folder).await.unwrap()[0]
    );
    for (path, perms) in [
        (&root, "READ|CREATE|DELETE"),
        (&folder, "READ|CREATE|DELETE"),
        (&node, "READ"),
    ] {
        let (acls, _) = authed.get_acl(path).await.unwrap();
        assert_eq!(acls.len(), 1, "{path}: {acls:?}");
        assert_eq!(acls[0].scheme(), "digest", "{path}: {acls:?}");
        assert!(acls[0].id().starts_with("fl-user:"), "{path}: {acls:?}");
        assert_eq!(acls[0].permission().to_string(), perms, "{path}");
    }
    // Somebody without the credentials, or with a wrong password, can neither queue nor look.
    let outsiders = [
        format!("zk://{host}?root={root}"),
        format!("zk://fl-user:wrong-hunter2@{host}?root={root}"),
    ];
    for url in outsiders {
        let outsider = Locker::connect(&url).await.unwrap();
        let err = outsider
            .try_acquire(&name, &LockOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Auth, "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let cause = err.cause().expect("the driver's error as the cause");
        assert_eq!(
            (cause.driver(), cause.code()),
            ("zookeeper", "NoAuth"),
            "{err:?}"
        );
        assert_eq!(
            outsider.inspect(&name).await.unwrap_err().code(),
            ErrorCode::Auth
        );
        let unrelated = outsider
            .try_acquire(&unique("acl-new"), &LockOptions::default())
            .await
            .unwrap_err();
        assert_eq!(unrelated.code(), ErrorCode::Auth, "{unrelated}");
    }
    // Participants share one identity: each may delete any lock node (the docs say so), and
    // the holder hears of it at once.
    let other = Locker::connect(&participant).await.unwrap();
    assert!(
        other
            .try_acquire(&name, &LockOptions::default())
            .await
            .unwrap()
            .is_none()
    );
    authed.delete(&node, None).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost_signal().wait())
        .await
        .unwrap();
    assert_eq!(reason, LossReason::TakenOver);
    assert!(
        other
            .try_acquire(&name, &LockOptions::default())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn bad_zookeeper_inputs_get_typed_errors() {
    let host = hosts(&zk_url());
    let cases = [
        (format!("zk://{host}?bogus=1"), ErrorCode::InvalidArgument),
        (
            format!("zk://{host}?session_timeout_ms=abc"),
            ErrorCode::InvalidArgument,
        ),
        (
            format!("zk://{host}?root=relative"),
            ErrorCode::InvalidArgument,
        ),
        (format!("zk://{host}/a/../b"), ErrorCode::InvalidArgument),
        (format!("zk://:pw@{host}"), ErrorCode::InvalidArgument),
        ("zk://127.0.0.1:1".to_string(), ErrorCode::Unavailable),
    ];
    for (url, code) in cases {
        let options = LockerOptions::default().with_operation_timeout(Duration::from_secs(5));
        let started = Instant::now();
        let err = Locker::connect_with(&url, options).await.unwrap_err();
        assert_eq!(err.code(), code, "{url}: {err}");
        assert!(!err.to_string().contains("pw@"), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{url} took {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn a_watch_event_type_is_what_the_own_node_watch_expects() {
    // Guards the assumption the lost signal rests on: deleting a node fires NodeDeleted on an
    // exists-watch set on it.
    let raw = raw().await;
    let path = format!("/{}", unique("fencelock-test-watch"));
    raw.create(
        &path,
        b"",
        &zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let (stat, watcher) = raw.check_and_watch_stat(&path).await.unwrap();
    assert!(stat.is_some());
    raw.delete(&path, None).await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), watcher.changed())
        .await
        .unwrap();
    assert_eq!(event.event_type, EventType::NodeDeleted);
}

/// An operator's force release of a semaphore also clears a holder's place left on the internal
/// mutex (a holder deletes it once its permit is granted; one whose delete was lost stays for
/// as long as its session lives, and every participant queues behind it). Before, the force
/// release deleted the lease nodes only and answered; the queue stayed blocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_semaphore_release_clears_a_holders_place_left_on_its_internal_mutex() {
    let raw = raw().await;
    let (holder, waiter, operator) = (
        Locker::connect(&zk_url()).await.unwrap(),
        Locker::connect(&zk_url()).await.unwrap(),
        Locker::connect(&zk_url()).await.unwrap(),
    );
    let name = unique("stranded-sem");
    let wait = |seconds| LockOptions::default().with_wait(Some(Duration::from_secs(seconds)));
    let lease = holder
        .semaphore(&name, 1)
        .unwrap()
        .acquire(&wait(20))
        .await
        .unwrap();
    // The holder's place, as its lost delete leaves it: `_c_<its owner>-lock-<seq>` in `locks`,
    // made here by a client of the test whose session outlives the test's Lockers.
    let leases = children(&raw, &format!("{}/leases", folder(&name))).await;
    let owner = leases[0].rsplit_once("lease-").unwrap().0.to_string();
    raw.create(
        &format!("{}/locks/{owner}lock-", folder(&name)),
        b"",
        &zookeeper_client::CreateMode::EphemeralSequential
            .with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let sem = waiter.semaphore(&name, 1).unwrap();
    let err = sem.acquire(&wait(1)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Timeout, "{err}");
    operator.force_release(&name).await.unwrap();
    let next = sem
        .acquire(&wait(20))
        .await
        .expect("the forced release cleared the holder's place too");
    assert!(lease.lost_signal().is_set() || !lease.is_held());
    next.release().await.unwrap();
    for locker in [holder, waiter, operator] {
        locker.close().await;
    }
}
