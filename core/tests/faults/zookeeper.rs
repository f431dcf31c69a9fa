//! ZooKeeper scenarios that cut connections or stop servers: a holder cut off by a TCP proxy,
//! a create whose reply is lost, an ensemble node going down. They run one at a time (a lock
//! inside this binary serializes them).
//!
//! Needs `tests/servers.sh start zookeeper zk-ensemble`.

// Each test runs on a runtime of its own; the guard only keeps the scenarios apart.
#![allow(clippy::await_holding_lock)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{self, servers, unique};
use fencelock::options::TestHook;
use fencelock::{LockOptions, Locker, LockerOptions, LossReason};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zookeeper_client::{Client, EventType};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn zk_host() -> String {
    support::zk_connect_string(&support::url("ZK", "zk://127.0.0.1:2181"))
}

fn ensemble_url() -> String {
    support::url(
        "ZK_ENSEMBLE",
        "zk://127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283",
    )
}

/// A TCP proxy in front of one ZooKeeper server that can freeze traffic (a partition: nothing
/// passes, connections stay open), can cut a connection right after it forwarded a create
/// request, so the client never sees the reply, and can freeze just before a delete request,
/// which is then lost with the connection.
struct Proxy {
    addr: SocketAddr,
    paused: Arc<AtomicBool>,
    /// Bumped on resume: connections from before are closed, as after a real partition.
    epoch: Arc<AtomicUsize>,
    cut_after_create: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
    hold_next_delete: Arc<AtomicBool>,
    held_deletes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

/// What a relay does to the frames it sees.
#[derive(Clone)]
struct Faults {
    paused: Arc<AtomicBool>,
    epoch: Arc<AtomicUsize>,
    cut_after_create: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
    hold_next_delete: Arc<AtomicBool>,
    held_deletes: Arc<AtomicUsize>,
}

/// ZooKeeper opcodes of the requests that create nodes (create, create2, createContainer).
const CREATE_OPCODES: [i32; 3] = [1, 15, 19];

/// ZooKeeper's opcode of a delete request.
const DELETE_OPCODE: i32 = 2;

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let faults = Faults {
            paused: Arc::new(AtomicBool::new(false)),
            epoch: Arc::new(AtomicUsize::new(0)),
            cut_after_create: Arc::new(AtomicBool::new(false)),
            cuts: Arc::new(AtomicUsize::new(0)),
            hold_next_delete: Arc::new(AtomicBool::new(false)),
            held_deletes: Arc::new(AtomicUsize::new(0)),
        };
        let task = {
            let faults = faults.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(&target).await else {
                        continue;
                    };
                    tokio::spawn(relay(client, server, faults.clone()));
                }
            })
        };
        let Faults {
            paused,
            epoch,
            cut_after_create,
            cuts,
            hold_next_delete,
            held_deletes,
        } = faults;
        Proxy {
            addr,
            paused,
            epoch,
            cut_after_create,
            cuts,
            hold_next_delete,
            held_deletes,
            task,
        }
    }

    fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    fn resume(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.paused.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// Relays one connection until either side closes, the proxy resumes after a pause (the
/// connection is then dropped) or a create is cut.
async fn relay(client: TcpStream, server: TcpStream, faults: Faults) {
    let Faults {
        paused,
        epoch,
        cut_after_create: cut,
        cuts,
        hold_next_delete,
        held_deletes,
    } = faults;
    let born = epoch.load(Ordering::SeqCst);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Set when a create is being cut: nothing more reaches the client.
    let cutting = AtomicBool::new(false);
    let alive = || epoch.load(Ordering::SeqCst) == born && !cutting.load(Ordering::SeqCst);
    let upstream = async {
        // Client to server, frame by frame (a 4-byte length, then the body; after the first
        // frame, the connect request, each body starts with xid and opcode).
        let mut pending: Vec<u8> = Vec::new();
        let mut frames = 0usize;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            while paused.load(Ordering::SeqCst) && alive() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if !alive() {
                return;
            }
            let n =
                match tokio::time::timeout(Duration::from_millis(20), client_read.read(&mut buf))
                    .await
                {
                    Err(_) => continue,
                    Ok(Ok(0)) | Ok(Err(_)) => return,
                    Ok(Ok(n)) => n,
                };
            pending.extend_from_slice(&buf[..n]);
            while pending.len() >= 4 {
                let len = u32::from_be_bytes(pending[..4].try_into().unwrap()) as usize;
                if pending.len() < 4 + len {
                    break;
                }
                let frame: Vec<u8> = pending.drain(..4 + len).collect();
                let opcode = (frames > 0 && len >= 8)
                    .then(|| i32::from_be_bytes(frame[8..12].try_into().unwrap()));
                frames += 1;
                if opcode == Some(DELETE_OPCODE) && hold_next_delete.swap(false, Ordering::SeqCst) {
                    // Frozen before the delete is sent: resuming drops it with the connection.
                    paused.store(true, Ordering::SeqCst);
                    held_deletes.fetch_add(1, Ordering::SeqCst);
                }
                while paused.load(Ordering::SeqCst) && alive() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if !alive() {
                    return;
                }
                let cut_here = opcode.is_some_and(|op| CREATE_OPCODES.contains(&op))
                    && cut.swap(false, Ordering::SeqCst);
                if cut_here {
                    // The server gets the create; the client never gets the reply.
                    cutting.store(true, Ordering::SeqCst);
                    cuts.fetch_add(1, Ordering::SeqCst);
                }
                if server_write.write_all(&frame).await.is_err() {
                    return;
                }
                if cut_here {
                    let _ = server_write.flush().await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return;
                }
            }
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            while paused.load(Ordering::SeqCst) && alive() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if !alive() {
                return;
            }
            let n =
                match tokio::time::timeout(Duration::from_millis(20), server_read.read(&mut buf))
                    .await
                {
                    Err(_) => continue,
                    Ok(Ok(0)) | Ok(Err(_)) => return,
                    Ok(Ok(n)) => n,
                };
            while paused.load(Ordering::SeqCst) && alive() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if !alive() || client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Either direction ending ends the connection (both halves are dropped here).
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
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

/// The holder is cut off from the ensemble: it hears nothing, and the server hears nothing
/// from it. Its lease must be reported suspended, then lost at the client deadline, which
/// comes before the server expires the session (the node is still there when the lease is
/// lost); after the partition heals, the same Locker locks again on a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_holder_is_lost_at_its_client_deadline_before_the_server_expires_its_session() {
    let _serial = serial();
    // The client deadline comes 1% + 2 ms before the server's expiry at the least (the
    // server rounds its expiry up to a tick): a longer session leaves the test more room.
    let timeout = Duration::from_secs(10);
    let proxy = Proxy::start(zk_host()).await;
    let url = format!(
        "zk://{}?session_timeout_ms={}&tick_ms=500",
        proxy.addr,
        timeout.as_millis()
    );
    let locker = Locker::connect(&url).await.unwrap();
    let raw = Client::connect(&zk_host()).await.unwrap();
    let name = unique("cut-off");
    let events = locker.subscribe();
    let lease = locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    let node = format!(
        "{}/{}",
        folder(&name),
        children(&raw, &folder(&name)).await.remove(0)
    );
    // When the server expires the session, the node goes: a watch tells the time.
    let (_, gone_watch) = raw.check_and_watch_stat(&node).await.unwrap();
    let gone = tokio::spawn(async move {
        let event = gone_watch.changed().await;
        (event.event_type, Instant::now())
    });
    let lost_at = Arc::new(Mutex::new(None));
    {
        let lost_at = lost_at.clone();
        lease
            .lost_signal()
            .on_lost(move |_| *lost_at.lock().unwrap() = Some(Instant::now()));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(lease.is_held() && !lease.is_suspended());

    proxy.pause();
    let paused_at = Instant::now();
    let mut suspended_seen = None;
    while !lease.is_lost() {
        if suspended_seen.is_none() && lease.is_suspended() {
            suspended_seen = Some(paused_at.elapsed());
        }
        assert!(
            paused_at.elapsed() < timeout * 2,
            "the cut-off lease was never lost"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The signal fires first, its callbacks and the observers (events) hear of it after.
    let lost_at = {
        let started = Instant::now();
        loop {
            if let Some(at) = *lost_at.lock().unwrap() {
                break at;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the on_lost callback never ran"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    assert_eq!(lease.lost_signal().reason(), Some(LossReason::Expired));
    assert!(
        suspended_seen.is_some(),
        "the lease was never reported suspended before it was lost"
    );
    assert!(!lease.is_suspended(), "a lost lease is not suspended");
    // The events tell the same story, in order: trouble (suspended or a retried renewal)
    // before the loss, and the loss last.
    let mut kinds = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("no lost event")
            .expect("the events ended");
        if event.name != name {
            continue;
        }
        let lost = event.kind.as_str() == "lost";
        kinds.push(event);
        if lost {
            break;
        }
    }
    let order: Vec<_> = kinds.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(order.first(), Some(&"acquired"), "{order:?}");
    assert_eq!(
        kinds.last().and_then(|e| e.loss),
        Some(LossReason::Expired),
        "{order:?}"
    );
    let trouble = order
        .iter()
        .position(|k| *k == "suspended" || *k == "renewal_retried");
    assert!(
        trouble.is_some_and(|at| at < order.len() - 1),
        "no suspended or retried renewal before the loss: {order:?}"
    );
    // The deadline counts from the last confirmed exists, sent before the pause.
    assert!(
        lost_at.duration_since(paused_at) <= timeout,
        "lost {:?} after the pause",
        lost_at.duration_since(paused_at)
    );
    let (event, gone_at) = tokio::time::timeout(timeout * 3, gone)
        .await
        .expect("the server never expired the session")
        .unwrap();
    assert_eq!(event, EventType::NodeDeleted);
    assert!(
        lost_at < gone_at,
        "the server expired the session {:?} before the client deadline",
        lost_at.duration_since(gone_at)
    );
    println!(
        "suspended after {:?}, lost after {:?}, node gone on the server after {:?}",
        suspended_seen.unwrap(),
        lost_at.duration_since(paused_at),
        gone_at.duration_since(paused_at)
    );
    proxy.resume();
    // The Locker makes a new session by itself.
    let next = tokio::time::timeout(
        Duration::from_secs(30),
        locker.acquire(&name, &LockOptions::default()),
    )
    .await
    .expect("no new session after the partition healed")
    .unwrap();
    assert!(next.token() > lease.token());
    next.release().await.unwrap();
}

/// The connection drops right after the server got our create: the client finds its node by
/// the owner id in its name, and no orphan is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_reply_was_lost_is_found_by_owner_id() {
    let _serial = serial();
    let proxy = Proxy::start(zk_host()).await;
    let found = Arc::new(AtomicUsize::new(0));
    let hook = {
        let found = found.clone();
        TestHook(Arc::new(move |point: &'static str| {
            if point == "zk_create_found_by_owner" {
                found.fetch_add(1, Ordering::SeqCst);
            }
        }))
    };
    let mut options = LockerOptions::default();
    options.test_hook = Some(hook);
    let locker = Locker::connect_with(
        &format!("zk://{}?session_timeout_ms=10000&tick_ms=500", proxy.addr),
        options,
    )
    .await
    .unwrap();
    let raw = Client::connect(&zk_host()).await.unwrap();
    for round in 0..3 {
        let name = unique("lost-reply");
        // The folder exists first, so the cut hits the lock node's create.
        let warm = locker
            .acquire(&name, &LockOptions::default())
            .await
            .unwrap();
        warm.release().await.unwrap();
        proxy.cut_after_create.store(true, Ordering::SeqCst);
        let lease = tokio::time::timeout(
            Duration::from_secs(30),
            locker.acquire(&name, &LockOptions::default()),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(
            !proxy.cut_after_create.load(Ordering::SeqCst),
            "round {round}: no create passed the proxy"
        );
        let nodes = children(&raw, &folder(&name)).await;
        assert_eq!(
            nodes.len(),
            1,
            "round {round}: an orphan was left: {nodes:?}"
        );
        let (_, stat) = raw
            .get_data(&format!("{}/{}", folder(&name), nodes[0]))
            .await
            .unwrap();
        assert_eq!(stat.czxid as u64, lease.token());
        lease.release().await.unwrap();
        assert!(children(&raw, &folder(&name)).await.is_empty());
    }
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 3);
    // The server applies a create it read before the connection closed, so the recovery path
    // ran; if a server ever dropped it instead, the plain retry would make one node all the same.
    println!(
        "creates recovered by owner id: {} of 3",
        found.load(Ordering::SeqCst)
    );
    assert!(found.load(Ordering::SeqCst) >= 1);
}

/// A waiter's acquire is dropped while its connection is frozen, so the abandonment of its
/// queue node (bounded in the background at twice the operation timeout + 1 s: 7 s here)
/// times out before the delete is answered. The
/// node must still be deleted once the connection is back: left in the queue, it would block
/// every later waiter once it reached the head, for as long as the waiter's session lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_during_a_partition_leaves_no_node_in_the_queue() {
    let _serial = serial();
    let proxy = Proxy::start(zk_host()).await;
    let holder = Locker::connect(&format!("zk://{}", zk_host()))
        .await
        .unwrap();
    let waits = Arc::new(AtomicUsize::new(0));
    let mut options = LockerOptions::default().with_operation_timeout(Duration::from_secs(3));
    options.test_hook = Some({
        let waits = waits.clone();
        TestHook(Arc::new(move |point: &'static str| {
            if point == "waiting" {
                waits.fetch_add(1, Ordering::SeqCst);
            }
        }))
    });
    // A session that outlives the partition: the waiter's node stays unless it is deleted.
    let waiter = Locker::connect_with(
        &format!("zk://{}?session_timeout_ms=40000&tick_ms=500", proxy.addr),
        options,
    )
    .await
    .unwrap();
    let raw = Client::connect(&zk_host()).await.unwrap();
    let name = unique("abandon-timeout");
    let held = holder
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();

    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire(&name, &LockOptions::default()).await })
    };
    let started = Instant::now();
    while waits.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the waiter never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(children(&raw, &folder(&name)).await.len(), 2);
    proxy.pause();
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    // The background abandonment gives up after 7 s without an answer.
    tokio::time::sleep(Duration::from_secs(8)).await;
    proxy.resume();

    held.release().await.unwrap();
    let next = holder
        .acquire(
            &name,
            &LockOptions::default().with_wait(Some(Duration::from_secs(10))),
        )
        .await;
    let left = children(&raw, &folder(&name)).await;
    assert!(
        next.is_ok(),
        "the lock was not free 10 s after its release: {next:?}; queue: {left:?}"
    );
    assert_eq!(left.len(), 1, "an orphan waiter node: {left:?}");
    next.unwrap().release().await.unwrap();
    waiter.close().await;
    holder.close().await;
}

async fn cycle(locker: &Locker, name: &str, count: usize, last: &mut u64) {
    for _ in 0..count {
        let lease = tokio::time::timeout(
            Duration::from_secs(30),
            locker.acquire(name, &LockOptions::default()),
        )
        .await
        .expect("acquire hung while a node was down")
        .unwrap();
        assert!(lease.token() > *last);
        *last = lease.token();
        lease.release().await.unwrap();
    }
}

/// One follower of a 3-node ensemble goes down and comes back: locking goes on, and a lease held
/// across it stays held (the session moves to another server). A follower, so that no election
/// runs: the leader's loss is `killing_the_leader_moves_clients_and_never_double_holds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locking_goes_on_while_one_ensemble_node_is_down() {
    let _serial = serial();
    let url = format!("{}?session_timeout_ms=20000&tick_ms=500", ensemble_url());
    let locker = Locker::connect(&url).await.unwrap();
    let kept = locker
        .acquire(&unique("held-across"), &LockOptions::default())
        .await
        .unwrap();
    let name = unique("ensemble");
    let mut last = 0;
    cycle(&locker, &name, 5, &mut last).await;
    let follower = ensemble_node_in_mode("follower")
        .await
        .expect("the ensemble has no follower");
    let down = StoppedNode::stop(follower);
    let stopped = Instant::now();
    cycle(&locker, &name, 20, &mut last).await;
    println!(
        "20 lock cycles with {} down in {:?}",
        down.0,
        stopped.elapsed()
    );
    drop(down);
    cycle(&locker, &name, 5, &mut last).await;
    assert!(
        kept.is_held(),
        "a lease held across the node's restart was lost"
    );
    kept.release().await.unwrap();
}

/// An ensemble node stopped by a test, started again when dropped: a test that fails while the
/// node is down must not leave the shared ensemble a node short for every test after it.
struct StoppedNode(String);

impl StoppedNode {
    fn stop(node: String) -> StoppedNode {
        servers(&["stop", &node]);
        StoppedNode(node)
    }
}

impl Drop for StoppedNode {
    fn drop(&mut self) {
        servers(&["start", &self.0]);
    }
}

/// The name of an ensemble node (`zk-ensemble-N`) whose role is `mode` (`leader`, `follower`).
async fn ensemble_node_in_mode(mode: &str) -> Option<String> {
    for (i, host) in support::zk_hosts(&ensemble_url()).iter().enumerate() {
        if mode_of(host).await.as_deref() == Some(mode) {
            return Some(format!("zk-ensemble-{}", i + 1));
        }
    }
    None
}

/// Asks one ensemble node for its role with the `srvr` four-letter word.
async fn mode_of(host_port: &str) -> Option<String> {
    let mut stream = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(host_port))
        .await
        .ok()?
        .ok()?;
    stream.write_all(b"srvr").await.ok()?;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(2), stream.read_to_string(&mut text))
        .await
        .ok()?
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Mode: ").map(str::to_string))
}

/// The ensemble's leader is killed while a lease is held and another Locker waits for it:
/// clients move to the surviving nodes, and the lock is never held by both at once — the
/// waiter gets it only after the holder released it, or after the holder's lease was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_moves_clients_and_never_double_holds() {
    let _serial = serial();
    let url = format!("{}?session_timeout_ms=20000&tick_ms=500", ensemble_url());
    let node = ensemble_node_in_mode("leader")
        .await
        .expect("the ensemble has no leader");
    let holder = Locker::connect(&url).await.unwrap();
    let waiter = Locker::connect(&url).await.unwrap();
    let name = unique("leader-kill");
    let lease = holder
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            waiter
                .acquire(
                    &name,
                    &LockOptions::default().with_wait(Some(Duration::from_secs(90))),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let down = tokio::task::spawn_blocking(move || StoppedNode::stop(node))
        .await
        .unwrap();
    // A new leader is elected; the holder keeps (or loses, never silently) its lease.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !waiting.is_finished() || lease.is_lost(),
        "the waiter got the lock while the holder still held it"
    );
    let held_through = lease.is_held();
    let released = lease.release().await;
    let next = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiter never got the lock")
        .unwrap()
        .unwrap();
    assert!(next.token() > lease.token());
    match released {
        Ok(()) => assert!(held_through),
        Err(e) => assert_eq!(e.code(), fencelock::ErrorCode::Lost, "{e}"),
    }
    next.release().await.unwrap();
    let leader = down.0.clone();
    tokio::task::spawn_blocking(move || drop(down))
        .await
        .unwrap();
    println!("leader {leader} killed; the holder kept its lease: {held_through}");
}

/// A semaphore waiter that gets its permit deletes its place on the internal mutex; when that
/// delete is lost with the connection while the acquire is dropped (a caller's timeout, a
/// cancelled task), the place must still go (safety review L2). Left behind, it sat at the head
/// of the internal mutex for as long as the waiter's session lived, and every participant,
/// Curator's too, queued behind it: here another Locker's acquire timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permits_place_whose_delete_is_lost_with_a_dropped_acquire_is_still_deleted() {
    let _serial = serial();
    let proxy = Proxy::start(zk_host()).await;
    // A session that outlives the test: only a delete can free the place.
    let waiter = Locker::connect_with(
        &format!("zk://{}?session_timeout_ms=40000&tick_ms=500", proxy.addr),
        LockerOptions::default().with_operation_timeout(Duration::from_secs(3)),
    )
    .await
    .unwrap();
    let direct = Locker::connect(&format!("zk://{}", zk_host()))
        .await
        .unwrap();
    let name = unique("stranded-place");
    let options = LockOptions::default().with_wait(Some(Duration::from_secs(20)));
    // Once first, so the folders exist and the next acquire's first delete is its place's.
    let warm = waiter.semaphore(&name, 1).unwrap().acquire(&options).await;
    warm.unwrap().release().await.unwrap();
    proxy.hold_next_delete.store(true, Ordering::SeqCst);
    let acquiring = {
        let (waiter, name, options) = (waiter.clone(), name.clone(), options.clone());
        tokio::spawn(async move { waiter.semaphore(&name, 1)?.acquire(&options).await })
    };
    let started = Instant::now();
    while proxy.held_deletes.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the permit's delete never came"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    acquiring.abort();
    let _ = acquiring.await;
    // The frozen connection closes with the held delete; the client reconnects, session alive.
    proxy.resume();
    let lease = direct
        .semaphore(&name, 1)
        .unwrap()
        .acquire(&options)
        .await
        .expect("another participant gets the permit once the dropped acquire's nodes are gone");
    lease.release().await.unwrap();
    waiter.close().await;
    direct.close().await;
}
