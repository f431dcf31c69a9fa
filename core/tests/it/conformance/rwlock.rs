//! Read-write locks (issue 28): any number of readers or one writer; once a writer waits, new
//! readers queue behind it; a write lease's token is larger than every earlier read or write
//! token; re-entry per scope (a writer re-enters a read, a reader asking to write is DEADLOCK);
//! inspect and list show the kind and every lease; a forced release frees every reader; a write
//! lease fences and a read lease does not; a name is one kind at a time; on every backend
//! (on Redlock each on a majority of masters, write tokens raised by phase 2).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::{ErrorCode, Lease, Lock, LockKind, LockMode, Locker, LossReason};

use crate::conformance::backends::{Target, offers_semaphores};
use crate::conformance::exclusion::close;
use crate::conformance::fence::SqliteFence;
use crate::conformance::kinds::{
    HOLDER_TEXT, OTHER, OUTER, SOON, assert_deadlock, assert_kind_conflict, assert_shown_free,
    assert_shows_leases, at_once, inspect_until, reentrant, refused, tokens_of, tokens_shown,
    waiting,
};
use crate::conformance::release::held;
use crate::contract;
use crate::support::unique;

// The scenarios of read-write locks, which every backend offers.
crate::contract!(
    many_readers_at_once_and_a_writer_waits_for_the_last,
    a_writer_excludes_readers_and_writers,
    a_waiting_writer_goes_before_readers_that_arrive_after_it,
    readers_and_writers_never_overlap_and_writes_outrank_earlier_tokens,
    a_scope_re_enters_a_read_write_lock_by_the_rules,
    without_reentrant_a_nested_read_or_write_is_a_deadlock,
    inspect_shows_the_read_write_lock_and_its_leases,
    list_shows_held_names_of_every_kind,
    a_forced_release_frees_every_reader,
    a_write_lease_fences_and_a_read_lease_does_not,
    a_name_in_use_as_one_kind_refuses_the_others,
);
contract!(every_backend_offers_read_write_locks);

/// The read and the write side of the read-write lock `name`.
fn sides(locker: &Locker, name: &str) -> (Lock, Lock) {
    (
        locker.read_lock(name).unwrap(),
        locker.write_lock(name).unwrap(),
    )
}

async fn many_readers_at_once_and_a_writer_waits_for_the_last(target: Target) {
    let (first, second) = (target.locker().await, target.locker().await);
    let (writer, probe) = target.probed_locker().await;
    let name = unique("rw-readers");
    let (second_read, write) = sides(&second, &name);
    let reads = [first.read_lock(&name).unwrap(), second_read];
    assert_eq!((reads[0].name(), reads[0].mode()), (&*name, LockMode::Read));
    // Three readers at once, two through one Locker: each acquire is its own lease.
    let mut readers = Vec::new();
    for i in 0..3 {
        let lease = reads[i % 2].try_acquire(&held()).await.unwrap();
        let lease = lease.unwrap_or_else(|| panic!("reader {i} refused while only readers hold"));
        assert_eq!(lease.mode(), LockMode::Read);
        readers.push(lease);
    }
    assert_eq!(write.mode(), LockMode::Write);
    assert!(
        write.try_acquire(&held()).await.unwrap().is_none(),
        "a writer beside readers"
    );
    let waiting_writer = {
        let lock = writer.write_lock(&name).unwrap();
        tokio::spawn(async move { lock.acquire(&waiting()).await })
    };
    probe.until_waiting(&first, &name).await;
    let last = readers.pop().unwrap();
    for reader in &readers {
        reader.release().await.unwrap();
    }
    // One reader is left: the writer still waits for it.
    let expected = tokens_of(&[&last]);
    let info = inspect_until(&first, &name, "the last reader", |i| {
        tokens_shown(i) == expected
    });
    assert_eq!(info.await.leases[0].mode, LockMode::Read);
    last.release().await.unwrap();
    let lease = waiting_writer.await.unwrap();
    let lease = lease.unwrap_or_else(|e| panic!("the writer never got in: {e}"));
    assert_eq!(lease.mode(), LockMode::Write);
    let earlier = readers.iter().chain([&last]).map(Lease::token).max();
    assert!(Some(lease.token()) > earlier, "{lease:?} after {readers:?}");
    lease.release().await.unwrap();
    close(vec![first, second, writer]).await;
}

async fn a_writer_excludes_readers_and_writers(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let name = unique("rw-writer");
    let write = locker.write_lock(&name).unwrap().acquire(&waiting()).await;
    let write = write.unwrap();
    let (read, other_write) = sides(&other, &name);
    // Readers and writers of another Locker, and of the writer's own (outside any scope).
    let (own_read, own_write) = sides(&locker, &name);
    for lock in [&read, &other_write, &own_read, &own_write] {
        let got = lock.try_acquire(&held()).await.unwrap();
        assert!(got.is_none(), "{lock:?} got in beside the writer");
    }
    write.release().await.unwrap();
    let reader = read.try_acquire(&held()).await.unwrap();
    let reader = reader.expect("a reader gets in after the writer's release");
    let second_writer = other_write.try_acquire(&held()).await.unwrap();
    assert!(second_writer.is_none(), "a writer beside a reader");
    reader.release().await.unwrap();
    let second_writer = other_write.try_acquire(&held()).await.unwrap();
    let second_writer = second_writer.expect("a writer gets in once the reader left");
    // A write token is larger than every earlier read and write token.
    assert!(second_writer.token() > reader.token() && second_writer.token() > write.token());
    second_writer.release().await.unwrap();
    close(vec![locker, other]).await;
}

/// Readers do not starve a writer: once it waits, a reader that arrives (while only readers
/// hold the lock) queues behind it and gets in after the writer's release.
async fn a_waiting_writer_goes_before_readers_that_arrive_after_it(target: Target) {
    let (early, late) = (target.locker().await, target.locker().await);
    let (writer, probe) = target.probed_locker().await;
    let name = unique("rw-writer-first");
    let first_reader = early.read_lock(&name).unwrap().try_acquire(&held()).await;
    let first_reader = first_reader.unwrap().expect("a free lock");
    let granted = Arc::new(Mutex::new(Vec::new()));
    let waiting_writer = acquire_in_background(writer.write_lock(&name).unwrap(), &granted);
    probe.until_waiting(&early, &name).await;
    inspect_until(&early, &name, "the writer", |i| !i.waiters.is_empty()).await;

    let late_lock = late.read_lock(&name).unwrap();
    let ahead = late_lock.try_acquire(&held()).await.unwrap();
    assert!(ahead.is_none(), "a reader got in ahead of a waiting writer");
    let late_reader = acquire_in_background(late_lock, &granted);
    first_reader.release().await.unwrap();
    let write = waiting_writer.await.unwrap();
    let write = write.unwrap_or_else(|e| panic!("the writer never got in: {e}"));
    assert!(write.token() > first_reader.token());
    // The late reader is not beside it.
    let expected = tokens_of(&[&write]);
    let info = inspect_until(&early, &name, "the writer", |i| tokens_shown(i) == expected);
    assert_eq!(info.await.leases[0].mode, LockMode::Write);
    write.release().await.unwrap();
    let read = late_reader.await.unwrap();
    let read = read.unwrap_or_else(|e| panic!("the late reader never got in: {e}"));
    assert_eq!(*granted.lock().unwrap(), [LockMode::Write, LockMode::Read]);
    read.release().await.unwrap();
    close(vec![early, late, writer]).await;
}

/// Acquires `lock` in a task, waiting up to [`SOON`], and notes its mode in `granted` once it
/// holds it.
fn acquire_in_background(
    lock: Lock,
    granted: &Arc<Mutex<Vec<LockMode>>>,
) -> tokio::task::JoinHandle<fencelock::Result<Lease>> {
    let granted = granted.clone();
    tokio::spawn(async move {
        let lease = lock.acquire(&waiting()).await?;
        granted.lock().unwrap().push(lease.mode());
        Ok(lease)
    })
}

/// Who is inside the critical section now.
#[derive(Debug, Default)]
struct Occupancy {
    readers: usize,
    writers: usize,
    /// The modes and tokens in the order they entered: for a write, the order of grants.
    entered: Vec<(LockMode, u64)>,
}

async fn readers_and_writers_never_overlap_and_writes_outrank_earlier_tokens(target: Target) {
    const LOCKERS: usize = 2;
    const TASKS_PER_LOCKER: usize = 3;
    const ROUNDS: usize = 4;
    let name = unique("rw-contention");
    let occupancy = Arc::new(Mutex::new(Occupancy::default()));
    let options = held().with_wait(Some(Duration::from_secs(60)));
    let (mut tasks, mut lockers) = (Vec::new(), Vec::new());
    for l in 0..LOCKERS {
        let locker = target.locker().await;
        for t in 0..TASKS_PER_LOCKER {
            let (read, write) = sides(&locker, &name);
            let (options, occupancy) = (options.clone(), occupancy.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..ROUNDS {
                    // A third of the acquisitions write.
                    let writes = (l + t + round) % 3 == 0;
                    let lock = if writes { &write } else { &read };
                    let lease = lock.acquire(&options).await.unwrap();
                    enter(&occupancy, lease.mode(), lease.token());
                    tokio::task::yield_now().await;
                    leave(&occupancy, lease.mode());
                    lease.release().await.unwrap();
                }
            }));
        }
        lockers.push(locker);
    }
    for task in tasks {
        task.await.unwrap();
    }
    let entered = std::mem::take(&mut occupancy.lock().unwrap().entered);
    assert_eq!(entered.len(), LOCKERS * TASKS_PER_LOCKER * ROUNDS);
    // Every lease before a write in this order was granted (and released) before it.
    for (i, (mode, token)) in entered.iter().enumerate() {
        if *mode == LockMode::Write {
            let earlier = entered[..i].iter().map(|(_, t)| *t).max().unwrap_or(0);
            assert!(*token > earlier, "write {token} after {:?}", &entered[..i]);
        }
    }
    close(lockers).await;
}

fn enter(occupancy: &Mutex<Occupancy>, mode: LockMode, token: u64) {
    let mut now = occupancy.lock().unwrap();
    let writes = mode == LockMode::Write;
    let alone = now.writers == 0 && (!writes || now.readers == 0);
    assert!(alone, "a {mode} lease entered beside {now:?}");
    if writes {
        now.writers += 1;
    } else {
        now.readers += 1;
    }
    now.entered.push((mode, token));
}

fn leave(occupancy: &Mutex<Occupancy>, mode: LockMode) {
    let mut now = occupancy.lock().unwrap();
    match mode {
        LockMode::Write => now.writers -= 1,
        _ => now.readers -= 1,
    }
}

async fn a_scope_re_enters_a_read_write_lock_by_the_rules(target: Target) {
    let (locker, rival) = (target.locker().await, target.locker().await);
    let name = unique("rw-reentry");
    let (read, write) = sides(&locker, &name);
    let (rival_read, rival_write) = sides(&rival, &name);

    // A reader re-enters its read lease...
    let outer = read.acquire_in(OUTER, &reentrant()).await.unwrap();
    let inner = read.acquire_in(OUTER, &at_once()).await.unwrap();
    assert_eq!(
        inner.token(),
        outer.token(),
        "a nested read carries the outer token"
    );
    // ...but asking for the write lock would wait for its own read lease forever: DEADLOCK at
    // once, even with reentrant.
    assert_deadlock(
        write.acquire_in(OUTER, &reentrant()).await,
        &name,
        "read, then write",
    );
    let tried = write.try_acquire_in(OUTER, &reentrant()).await;
    assert_deadlock(tried, &name, "read, then a try to write");
    // That changed nothing: only readers hold it.
    let other_reader = rival_read.try_acquire(&held()).await.unwrap();
    other_reader
        .expect("a reader beside the scope's reader")
        .release()
        .await
        .unwrap();
    assert!(rival_write.try_acquire(&held()).await.unwrap().is_none());
    inner.release().await.unwrap();
    assert!(outer.is_held());
    assert!(rival_write.try_acquire(&held()).await.unwrap().is_none());
    outer.release().await.unwrap();

    // A writer re-enters its write lease, and a read of the same name inside it.
    let outer = write.acquire_in(OUTER, &reentrant()).await.unwrap();
    let inner_write = write.acquire_in(OUTER, &at_once()).await.unwrap();
    let inner_read = read.acquire_in(OUTER, &at_once()).await.unwrap();
    assert_eq!(inner_write.token(), outer.token());
    assert_eq!(
        inner_read.token(),
        outer.token(),
        "a read inside a write shares its lease"
    );
    // Another scope of the same Locker and another Locker are kept out.
    assert!(
        read.try_acquire_in(OTHER, &reentrant())
            .await
            .unwrap()
            .is_none()
    );
    assert!(rival_read.try_acquire(&held()).await.unwrap().is_none());
    inner_read.release().await.unwrap();
    inner_write.release().await.unwrap();
    assert!(rival_read.try_acquire(&held()).await.unwrap().is_none());
    outer.release().await.unwrap();
    let next = rival_read.acquire(&waiting()).await;
    let next = next.expect("free after the scope's last lease");
    next.release().await.unwrap();
    close(vec![locker, rival]).await;
}

async fn without_reentrant_a_nested_read_or_write_is_a_deadlock(target: Target) {
    let locker = target.locker().await;
    let name = unique("rw-deadlock");
    let (read, write) = sides(&locker, &name);
    let plain = waiting();
    for (outer_lock, outer_mode) in [(&read, "read"), (&write, "write")] {
        let outer = outer_lock.acquire_in(OUTER, &plain).await.unwrap();
        for (nested, nested_mode) in [(&read, "read"), (&write, "write")] {
            let what = format!("{outer_mode}, then {nested_mode}");
            assert_deadlock(nested.acquire_in(OUTER, &plain).await, &name, &what);
            assert_deadlock(nested.try_acquire_in(OUTER, &plain).await, &name, &what);
        }
        assert!(outer.is_held());
        // Another scope is another holder: it shares a read lock and waits for a write lock.
        let other = read.try_acquire_in(OTHER, &plain).await.unwrap();
        assert_eq!(
            other.is_some(),
            outer_mode == "read",
            "another scope's reader"
        );
        if let Some(other) = other {
            other.release().await.unwrap();
        }
        outer.release().await.unwrap();
    }
    locker.close().await;
}

async fn inspect_shows_the_read_write_lock_and_its_leases(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let name = unique("rw-inspect");
    let ttl = Duration::from_secs(10);
    let options = held().with_ttl(ttl).with_holder(HOLDER_TEXT);
    let ((read, _), (other_read, other_write)) = (sides(&locker, &name), sides(&other, &name));
    let first = read.acquire(&options).await.unwrap();
    let second = other_read.acquire(&options).await.unwrap();
    let readers = [&first, &second];
    let info = assert_shows_leases(&locker, &name, &readers, LockMode::Read, ttl).await;
    assert_eq!(info.name, name);
    let kind = (info.kind, info.permits);
    assert_eq!(kind, (LockKind::ReadWrite, None), "{info:?}");
    assert!(info.waiters.is_empty(), "{info:?}");
    first.release().await.unwrap();
    second.release().await.unwrap();
    assert_shown_free(&locker, &name).await;

    let write = other_write.acquire(&options).await.unwrap();
    let info = assert_shows_leases(&locker, &name, &[&write], LockMode::Write, ttl).await;
    assert_eq!(info.kind, LockKind::ReadWrite, "{info:?}");
    if let Some(token) = info.token {
        assert!(token >= write.token(), "{info:?}");
    }
    write.release().await.unwrap();
    assert_shown_free(&locker, &name).await;
    close(vec![locker, other]).await;
}

async fn list_shows_held_names_of_every_kind(target: Target) {
    let locker = target.locker().await;
    let base = unique("kinds-list");
    let at = |leaf: &str| format!("{base}/{leaf}");
    let mut leases = vec![locker.acquire(&at("mutex"), &waiting()).await.unwrap()];
    let mut expected = vec![(at("mutex"), LockKind::Mutex)];
    if offers_semaphores(target) {
        let semaphore = locker.semaphore(&at("permits"), 2).unwrap();
        leases.push(semaphore.acquire(&waiting()).await.unwrap());
        expected.push((at("permits"), LockKind::Semaphore));
    }
    leases.extend([
        locker
            .read_lock(&at("read"))
            .unwrap()
            .acquire(&waiting())
            .await
            .unwrap(),
        locker
            .write_lock(&at("write"))
            .unwrap()
            .acquire(&waiting())
            .await
            .unwrap(),
    ]);
    expected.extend([
        (at("read"), LockKind::ReadWrite),
        (at("write"), LockKind::ReadWrite),
    ]);
    let listed = locker.list(&at("")).await.unwrap();
    assert!(!listed.truncated);
    let shown: Vec<(String, LockKind)> = listed
        .locks
        .iter()
        .map(|l| (l.name.clone(), l.kind))
        .collect();
    assert_eq!(shown, expected, "{:?}", listed.locks);
    assert!(listed.locks.iter().all(|l| l.held), "{:?}", listed.locks);
    for lease in leases {
        lease.release().await.unwrap();
    }
    let after = locker.list(&base).await.unwrap();
    assert!(after.locks.is_empty(), "{:?}", after.locks);
    locker.close().await;
}

/// A forced release frees every reader at once (a writer gets in), and each reader is lost at
/// its next renewal, told the lock is no longer its own.
async fn a_forced_release_frees_every_reader(target: Target) {
    let (holder, operator) = (target.locker().await, target.locker().await);
    let name = unique("rw-forced");
    let read = holder.read_lock(&name).unwrap();
    let renewed = held().with_ttl(Duration::from_millis(4500));
    let readers = [
        read.acquire(&renewed).await.unwrap(),
        read.acquire(&renewed).await.unwrap(),
    ];
    let signals = readers.each_ref().map(Lease::lost_signal);
    operator.force_release(&name).await.unwrap();
    let write = operator
        .write_lock(&name)
        .unwrap()
        .try_acquire(&held())
        .await;
    let write = write
        .unwrap()
        .expect("a writer gets in after the forced release");
    for (reader, signal) in readers.iter().zip(signals) {
        let reason = tokio::time::timeout(SOON, signal.wait()).await;
        assert_eq!(reason.ok(), Some(LossReason::TakenOver));
        assert_eq!(reader.release().await.unwrap_err().code(), ErrorCode::Lost);
        assert!(write.token() > reader.token());
    }
    assert!(write.is_held());
    write.release().await.unwrap();
    close(vec![holder, operator]).await;
}

/// Readers run at once, so "the newest token wins" would refuse the others' writes: a fence
/// refuses a read lease, and takes a write lease as it takes a mutex lease.
async fn a_write_lease_fences_and_a_read_lease_does_not(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let store = SqliteFence::open("shared").await;
    let (fence, bump) = (&store.fence, SqliteFence::bump());
    let name = unique("rw-fenced");
    let read = locker
        .read_lock(&name)
        .unwrap()
        .acquire(&waiting())
        .await
        .unwrap();
    let refusals = [
        fence.fenced_execute(&read, &bump).await.map(|_| ()),
        fence
            .fenced_execute(read.fence_token(), &bump)
            .await
            .map(|_| ()),
        fence.check(&read).await,
        fence.check(read.fence_token()).await,
    ];
    for result in refusals {
        let err = refused(result, "a fenced write with a read lease");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    }
    assert_eq!(
        (store.count().await, fence.highest().await.unwrap()),
        (0, None)
    );
    read.release().await.unwrap();

    let first = locker
        .write_lock(&name)
        .unwrap()
        .acquire(&waiting())
        .await
        .unwrap();
    assert_eq!(fence.fenced_execute(&first, &bump).await.unwrap(), vec![1]);
    fence.check(first.fence_token()).await.unwrap();
    first.release().await.unwrap();
    let second = other
        .write_lock(&name)
        .unwrap()
        .acquire(&waiting())
        .await
        .unwrap();
    assert_eq!(fence.fenced_execute(&second, &bump).await.unwrap(), vec![1]);
    assert_eq!(fence.highest().await.unwrap(), Some(second.token()));
    let stale = fence
        .fenced_execute(first.token(), &bump)
        .await
        .unwrap_err();
    assert_eq!(stale.code(), ErrorCode::StaleToken, "{stale}");
    assert_eq!(store.count().await, 2);
    second.release().await.unwrap();
    store.close().await;
    close(vec![locker, other]).await;
}

async fn a_name_in_use_as_one_kind_refuses_the_others(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let name = unique("rw-kind");
    let (mutex, semaphore, read_write) =
        (LockKind::Mutex, LockKind::Semaphore, LockKind::ReadWrite);
    let (read, write) = sides(&other, &name);

    let held_mutex = locker.acquire(&name, &waiting()).await.unwrap();
    for lock in [&read, &write] {
        assert_kind_conflict(lock.try_acquire(&held()).await, &name, read_write, mutex);
        assert_kind_conflict(lock.acquire(&waiting()).await, &name, read_write, mutex);
    }
    held_mutex.release().await.unwrap();

    for lock in [&read, &write] {
        let lease = lock.acquire(&waiting()).await.unwrap();
        let as_mutex = locker.acquire(&name, &waiting()).await;
        assert_kind_conflict(as_mutex, &name, mutex, read_write);
        if offers_semaphores(target) {
            let as_semaphore = locker.semaphore(&name, 2).unwrap();
            let as_semaphore = as_semaphore.acquire(&waiting()).await;
            assert_kind_conflict(as_semaphore, &name, semaphore, read_write);
        }
        lease.release().await.unwrap();
    }
    if !offers_semaphores(target) {
        close(vec![locker, other]).await;
        return;
    }

    let permit = locker
        .semaphore(&name, 2)
        .unwrap()
        .acquire(&waiting())
        .await
        .unwrap();
    for lock in [&read, &write] {
        assert_kind_conflict(
            lock.try_acquire(&held()).await,
            &name,
            read_write,
            semaphore,
        );
    }
    permit.release().await.unwrap();
    // Idle, the name may be a read-write lock again.
    let again = write.try_acquire(&held()).await.unwrap();
    again.expect("a free name").release().await.unwrap();
    close(vec![locker, other]).await;
}

/// Every backend offers read-write locks (Redlock too: a reader's majority and a writer's
/// share a master, which refuses one of them), so making either side is never refused.
async fn every_backend_offers_read_write_locks(target: Target) {
    let locker = target.locker().await;
    let name = unique("rw-offered");
    let (read, write) = sides(&locker, &name);
    assert_eq!(
        (read.mode(), write.mode()),
        (LockMode::Read, LockMode::Write)
    );
    let lease = write.acquire(&waiting()).await.unwrap();
    assert_eq!(lease.mode(), LockMode::Write);
    lease.release().await.unwrap();
    locker.close().await;
}
