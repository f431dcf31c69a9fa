//! What the scenarios of semaphores and read-write locks share: the macro that also lists the
//! scenarios a backend must offer the kind for, options, the checks of refusals, and the views
//! of `inspect` polled for until another client's change reached them.

use std::time::{Duration, Instant};

use fencelock::{
    BackendKind, Error, ErrorCode, HolderDescription, Lease, LockInfo, LockKind, LockMode,
    LockOptions, Locker, Result, Scope,
};

use crate::conformance::release::held;

/// [`contract!`] for scenarios that need a kind of lock some backends do not offer, and the
/// list of their names (`$list`) for [`crate::conformance::backends::not_offered`].
#[macro_export]
macro_rules! contract_needing {
    ($list:ident: $($scenario:ident),* $(,)?) => {
        $crate::contract!($($scenario),*);
        pub const $list: &[&str] = &[$(stringify!($scenario)),*];
    };
}

/// Generous bound for what must happen "soon" on a slow machine; never a speed claim.
pub const SOON: Duration = Duration::from_secs(20);

pub const OUTER: Scope = Scope::new(1);
pub const OTHER: Scope = Scope::new(2);

/// The holder text that inspect must show for every lease.
pub const HOLDER_TEXT: &str = "nightly report";

/// A long ttl (nothing expires unless a scenario means it to), waiting up to [`SOON`].
pub fn waiting() -> LockOptions {
    held().with_wait(Some(SOON))
}

pub fn reentrant() -> LockOptions {
    held().with_reentrant(true)
}

/// A nested acquire that had to wait would time out: this proves "at once" without timing it.
pub fn at_once() -> LockOptions {
    reentrant().with_wait(Some(Duration::ZERO))
}

/// The error of a call that must fail.
pub fn refused<T>(result: Result<T>, what: &str) -> Error {
    match result {
        Ok(_) => panic!("{what} was granted"),
        Err(e) => e,
    }
}

/// `result` is INVALID_ARGUMENT naming `name`, the kind it was wanted as and the kind it is in
/// use as. An acquire that waits must get this answer at once, not a TIMEOUT.
pub fn assert_kind_conflict<T>(result: Result<T>, name: &str, wanted: LockKind, found: LockKind) {
    let what = format!("{name} as a {wanted} while in use as a {found}");
    let err = refused(result, &what);
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{what}: {err}");
    for word in [name, wanted.as_str(), found.as_str()] {
        assert!(err.message().contains(word), "{what}: {err}");
    }
}

/// `result` is DEADLOCK naming `name`.
pub fn assert_deadlock<T>(result: Result<T>, name: &str, what: &str) {
    let err = refused(result, what);
    assert_eq!(err.code(), ErrorCode::Deadlock, "{what}: {err}");
    assert!(err.message().contains(name), "{what}: {err}");
}

/// The tokens of the leases `info` shows, sorted.
pub fn tokens_shown(info: &LockInfo) -> Vec<Option<u64>> {
    let mut shown: Vec<Option<u64>> = info.leases.iter().map(|l| l.token).collect();
    shown.sort_unstable();
    shown
}

/// The tokens of `leases`, sorted, as [`tokens_shown`] reads them.
pub fn tokens_of(leases: &[&Lease]) -> Vec<Option<u64>> {
    let mut tokens: Vec<Option<u64>> = leases.iter().map(|l| Some(l.token())).collect();
    tokens.sort_unstable();
    tokens
}

/// Reads `name` through `observer` until `settled` says the view is the one expected, and
/// returns it. Another client's change may reach the server `observer` reads from later (a
/// follower of a ZooKeeper ensemble), so the view is polled for rather than read once; a view
/// that never comes fails after [`SOON`], showing the last one.
pub async fn inspect_until(
    observer: &Locker,
    name: &str,
    expected: &str,
    settled: impl Fn(&LockInfo) -> bool,
) -> LockInfo {
    let deadline = Instant::now() + SOON;
    loop {
        let info = observer.inspect(name).await.unwrap();
        if settled(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "never shown {expected}: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `observer` shows exactly `leases` (once another client's change reached it), each in
/// `mode`, with [`HOLDER_TEXT`] and, where the server keeps an expiry, some time left within
/// `ttl`. Returns that view.
pub async fn assert_shows_leases(
    observer: &Locker,
    name: &str,
    leases: &[&Lease],
    mode: LockMode,
    ttl: Duration,
) -> LockInfo {
    let expected = tokens_of(leases);
    let info = inspect_until(
        observer,
        name,
        &format!("the leases {expected:?}"),
        |info| tokens_shown(info) == expected,
    )
    .await;
    assert!(info.held, "{info:?}");
    for lease in &info.leases {
        assert_eq!(lease.mode, mode, "{info:?}");
        let holder = lease.holder.as_deref().map(HolderDescription::parse);
        let holder = holder.unwrap_or_else(|| panic!("a lease without its holder: {info:?}"));
        assert_eq!(holder.text.as_deref(), Some(HOLDER_TEXT), "{info:?}");
        assert_eq!(holder.pid, Some(std::process::id()), "{info:?}");
        match observer.backend_kind() {
            // The session is the lease there: no time left to show.
            BackendKind::ZooKeeper => assert_eq!(lease.time_left, None, "{info:?}"),
            _ => {
                let left = lease.time_left.expect("time left on a TTL backend");
                assert!(left > Duration::ZERO && left <= ttl, "{info:?}");
            }
        }
    }
    // A mutex's fields stay empty: the leases say who holds it.
    assert_eq!((&info.holder, info.time_left), (&None, None), "{info:?}");
    info
}

/// Polls until `observer` shows `name` free.
pub async fn assert_shown_free(observer: &Locker, name: &str) {
    inspect_until(observer, name, "the lock free", |info| {
        !info.held && info.leases.is_empty()
    })
    .await;
}
