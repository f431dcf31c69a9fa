//! The resource side: a [`Fence`] accepts an operation only if its token is at least the
//! highest it has accepted for that resource (docs/design.md §3.7).
//!
//! The guarded write *is* the fence: [`Fence::fenced_execute`] checks the token and runs the
//! caller's statements in one transaction. [`Fence::check`] exists but is advisory: a check
//! followed by a separate write protects nothing, because a newer holder can write in
//! between.
//!
//! What a fence promises: the tokens of the writes it accepted never decrease, in the order
//! it accepted them. It does not promise that two holders never ran at once; it makes the
//! stale one's writes fail.

mod origins;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod sql;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub(crate) mod sql_statements;

pub(crate) use origins::RETIRED_KEPT as RETIRED_ORIGINS_KEPT;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::mode::LockKind;
use crate::options::LockerOptions;
use crate::spans::LockSpans;
pub use crate::sql_value::SqlValue;
use crate::url::{BackendKind, LockerUrl};

/// Which lock a token belongs to: tokens are only ordered per lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockIdentity {
    pub deployment: String,
    pub name: String,
    /// What the name is used as. Part of the identity: a read-write lock and a mutex of the
    /// same name (one after the other, or on two deployments) are different locks to a fence.
    pub kind: LockKind,
}

impl LockIdentity {
    /// The key a fence records. A mutex's keeps the spelling fences recorded before read-write
    /// locks existed; the other kinds add theirs after a `#`, which no encoded name contains.
    pub(crate) fn key(&self) -> String {
        let name = crate::name::encode(&self.name);
        match self.kind {
            LockKind::Mutex => format!("{}/{name}", self.deployment),
            LockKind::ReadWrite => format!("{}/{name}#rw", self.deployment),
            LockKind::Semaphore => format!("{}/{name}#semaphore", self.deployment),
        }
    }
}

/// How a recorded lock key compares with a token's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockMatch {
    Same,
    /// The same lock under an identity from before (another spelling, or before a
    /// `deployment` name was given).
    Alias,
    Other,
}

/// A token as a fence sees it: from a lease (with the lock's identity and the client
/// deadline) or a bare number (from another process).
#[derive(Debug, Clone)]
pub struct FenceToken {
    pub token: u64,
    pub lock: Option<LockIdentity>,
    /// Other keys a fence may have recorded for the same lock (see [`crate::deployment::Deployment::aliases`]).
    lock_aliases: Vec<String>,
    /// The origin mark of the stored data the token was minted from, where the backend keeps
    /// one ([`origins`]).
    origin: Option<u64>,
    lease: Option<Lease>,
    deadline: Option<BootInstant>,
}

impl FenceToken {
    pub(crate) fn from_lease(lease: &Lease) -> Self {
        let deployment = lease.deployment();
        let kind = lease.mode().kind();
        let alias_key = |alias: &String| LockIdentity {
            deployment: alias.clone(),
            name: lease.name().to_string(),
            kind,
        };
        FenceToken {
            token: lease.token(),
            lock: Some(LockIdentity {
                deployment: deployment.id.clone(),
                name: lease.name().to_string(),
                kind,
            }),
            lock_aliases: deployment
                .aliases
                .iter()
                .map(|a| alias_key(a).key())
                .collect(),
            origin: lease.origin(),
            lease: Some(lease.clone()),
            deadline: Some(lease.deadline()),
        }
    }

    /// A bare token with the lock it came from, so the fence can check it belongs.
    pub fn with_lock(token: u64, lock: LockIdentity) -> Self {
        FenceToken {
            token,
            lock: Some(lock),
            lock_aliases: Vec::new(),
            origin: None,
            lease: None,
            deadline: None,
        }
    }

    /// Whether a fence that recorded `stored` as its lock guards this token's lock: the same
    /// key, or one of its aliases (a fence then moves to the current key).
    pub(crate) fn matches_lock(&self, stored: &str) -> LockMatch {
        match &self.lock {
            None => LockMatch::Same,
            Some(lock) if lock.key() == stored => LockMatch::Same,
            Some(_) if self.lock_aliases.iter().any(|a| a == stored) => LockMatch::Alias,
            Some(_) => LockMatch::Other,
        }
    }

    /// The keys a Redis fence script accepts besides the lock's own.
    pub(crate) fn lock_aliases(&self) -> &[String] {
        &self.lock_aliases
    }

    /// Refuses, before anything is sent, a token from a lease that is lost, released or
    /// past its client deadline, and tokens that cannot be stored.
    pub(crate) fn usable(&self) -> Result<()> {
        if fencing_disabled_for_fault_tests() {
            return Ok(());
        }
        if self.token >= 1 << 63 {
            return Err(Error::invalid(format!(
                "token {} is not below 2^63",
                self.token
            )));
        }
        if let Some(lease) = &self.lease {
            let mode = lease.mode();
            if !mode.is_exclusive() {
                return Err(Error::invalid(format!(
                    "a {} lease of {:?} cannot guard a fence: the name has several holders at \
                     once, so \"the newest token wins\" would turn away a holder that still runs; \
                     guard the resource with a mutex or a write lease (docs/design.md §1.8)",
                    mode.as_str(),
                    lease.name()
                )));
            }
            lease.ensure_held()?;
        }
        if self.deadline.is_some_and(|d| d.has_passed()) {
            return Err(Error::lost("the lease's client deadline has passed"));
        }
        Ok(())
    }
}

/// Reports a fence's warning about a token's origin ([`origins`]): in the log, and to the
/// subscribers of the lease's Locker when the token came with its lease.
fn warn_of_origin(resource: &str, token: &FenceToken, warning: Option<String>) {
    let Some(warning) = warning else {
        return;
    };
    let lock = token.lock.as_ref().map(|l| l.name.as_str()).unwrap_or("");
    flog!(warn, lock = lock, "fence {resource:?}: {warning}");
    if let Some(lease) = &token.lease {
        lease.report_deployment_mismatch(format!("fence {resource:?}: {warning}"));
    }
}

/// True only in a build with the test-only `fault-injection-disable-fencing` feature AND with
/// `FENCELOCK_FAULT_INJECTION_DISABLE_FENCING=1` in the environment: the fault suite's
/// deliberately broken build, which must make its history checker fail. Always false otherwise.
#[cfg(feature = "fault-injection-disable-fencing")]
pub(crate) fn fencing_disabled_for_fault_tests() -> bool {
    std::env::var_os("FENCELOCK_FAULT_INJECTION_DISABLE_FENCING").is_some_and(|v| v == "1")
}

#[cfg(not(feature = "fault-injection-disable-fencing"))]
#[inline(always)]
pub(crate) fn fencing_disabled_for_fault_tests() -> bool {
    false
}

// Here rather than with the lease, so that the lease module does not depend on the fences
// that read its tokens.
impl Lease {
    /// The token with what a fence needs to check it (the lock's identity and deadline).
    pub fn fence_token(&self) -> FenceToken {
        FenceToken::from_lease(self)
    }
}

impl From<u64> for FenceToken {
    fn from(token: u64) -> Self {
        FenceToken {
            token,
            lock: None,
            lock_aliases: Vec::new(),
            origin: None,
            lease: None,
            deadline: None,
        }
    }
}

impl From<&Lease> for FenceToken {
    fn from(lease: &Lease) -> Self {
        FenceToken::from_lease(lease)
    }
}

/// One statement of the caller's, run inside the fence's transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<SqlValue>,
}

impl Statement {
    pub fn new(sql: impl Into<String>) -> Self {
        Statement {
            sql: sql.into(),
            params: Vec::new(),
        }
    }
    pub fn bind(mut self, value: SqlValue) -> Self {
        self.params.push(value);
        self
    }
}

#[async_trait]
pub(crate) trait FenceBackend: Send + Sync {
    async fn fenced_execute(
        &self,
        resource: &str,
        token: &FenceToken,
        statements: &[Statement],
    ) -> Result<Vec<u64>>;
    async fn fenced_set(
        &self,
        _resource: &str,
        _token: &FenceToken,
        _key: &str,
        _value: &[u8],
    ) -> Result<()> {
        Err(Error::invalid(
            "fenced_set is for Redis fences; a SQL fence writes with fenced_execute",
        ))
    }
    async fn check(&self, resource: &str, token: &FenceToken) -> Result<()>;
    async fn highest(&self, resource: &str) -> Result<Option<u64>>;
    async fn query(&self, _sql: &str, _params: &[SqlValue]) -> Result<Vec<Vec<SqlValue>>> {
        Err(Error::invalid(
            "query is for SQL fences; read a Redis fence's data with your Redis client",
        ))
    }
    async fn close(&self);
}

/// A fence on one resource, opened on its own URL (independent of the lock's backend).
#[derive(Clone)]
pub struct Fence {
    url: LockerUrl,
    resource: String,
    backend: Arc<dyn FenceBackend>,
    /// The process that opened it: a child made by fork() has none of its connections' threads.
    pid: u32,
    /// Spans of its writes, when [`LockerOptions::tracing`] is on or a span sink is given.
    spans: Option<Arc<LockSpans>>,
}

impl Fence {
    /// Opens a fence for `resource` in the database at `url` (its table is created on first
    /// use; `?table=` names it, default `fencelock_fences`).
    pub async fn open(url: &str, resource: &str) -> Result<Fence> {
        Fence::open_with(url, resource, LockerOptions::default()).await
    }

    pub async fn open_with(url: &str, resource: &str, options: LockerOptions) -> Result<Fence> {
        options.validate()?;
        crate::name::LockName::new(resource)
            .map_err(|e| Error::invalid(format!("fence resource name: {}", e.message())))?;
        let parsed = LockerUrl::parse(url)?;
        let backend: Arc<dyn FenceBackend> = match parsed.kind {
            #[cfg(feature = "sqlite")]
            BackendKind::Sqlite => Arc::new(sql::SqlFence::open(&parsed, &options).await?),
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => Arc::new(sql::SqlFence::open(&parsed, &options).await?),
            #[cfg(feature = "mysql")]
            BackendKind::MySql => Arc::new(sql::SqlFence::open(&parsed, &options).await?),
            #[cfg(feature = "redis")]
            BackendKind::Redis => Arc::new(redis::RedisFence::open(&parsed, &options).await?),
            BackendKind::Redlock => {
                return Err(Error::invalid(
                    "a fence lives where the resource's data lives, not on the lock's masters: \
                     open it on that store (sqlite://, postgres://, mysql://, redis://); it \
                     accepts the tokens of Redlock leases like any other's",
                ));
            }
            BackendKind::RedisCluster | BackendKind::ZooKeeper => {
                return Err(Error::invalid(format!(
                    "there is no fence on {} yet: open it on the store of the resource's data \
                     (sqlite://, postgres://, mysql://, redis://); it accepts the tokens of any \
                     backend's leases",
                    parsed.kind.as_str()
                )));
            }
            #[allow(
                unreachable_patterns,
                reason = "reached only in a build without every backend feature"
            )]
            other => return Err(crate::backend::not_built(other)),
        };
        let spans = LockSpans::from_options(&options, parsed.kind);
        Ok(Fence {
            url: parsed,
            resource: resource.to_string(),
            backend,
            pid: crate::runtime::process_id(),
            spans,
        })
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Runs `statements` in one transaction if `token` is at least the highest accepted;
    /// records `token` as the highest. Returns the rows each statement affected.
    ///
    /// # Errors
    /// STALE_TOKEN when an equal-or-newer holder has written before (nothing is written);
    /// LOST for a lease past its deadline (nothing is sent); INVALID_ARGUMENT for a token of
    /// another lock; BACKEND when a statement fails (everything is rolled back).
    pub async fn fenced_execute(
        &self,
        token: impl Into<FenceToken>,
        statements: &[Statement],
    ) -> Result<Vec<u64>> {
        let token = token.into();
        let write = async {
            self.ensure_same_process()?;
            token.usable()?;
            self.backend
                .fenced_execute(&self.resource, &token, statements)
                .await
        };
        self.traced_write(&token, write).await
    }

    /// Sets `key` to `value` if `token` is at least the highest accepted, in one script
    /// (Redis fences). On a Redis Cluster `key` must carry the fence's hash tag.
    ///
    /// # Errors
    /// STALE_TOKEN when a newer token was accepted (nothing is written); LOST for a lease past
    /// its deadline (nothing is sent); INVALID_ARGUMENT for a token of another lock.
    pub async fn fenced_set(
        &self,
        token: impl Into<FenceToken>,
        key: &str,
        value: &[u8],
    ) -> Result<()> {
        let token = token.into();
        let write = async {
            self.ensure_same_process()?;
            token.usable()?;
            self.backend
                .fenced_set(&self.resource, &token, key, value)
                .await
        };
        self.traced_write(&token, write).await
    }

    /// Runs a fenced write, reported as a span when tracing is on.
    async fn traced_write<T>(
        &self,
        token: &FenceToken,
        write: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(spans) = &self.spans else {
            return write.await;
        };
        let started = spans.start();
        let result = write.await;
        let lock = token.lock.as_ref().map(|identity| identity.name.as_str());
        let outcome = result.as_ref().map(|_| "accepted");
        spans.fence_write(started, &self.resource, lock, token.token, outcome);
        result
    }

    /// Advisory: `Ok` when `token` would be accepted now. A check followed by a separate write
    /// protects nothing; use [`Fence::fenced_execute`] for the write itself.
    pub async fn check(&self, token: impl Into<FenceToken>) -> Result<()> {
        let token = token.into();
        self.ensure_same_process()?;
        token.usable()?;
        self.backend.check(&self.resource, &token).await
    }

    /// Reads the fence's database: runs `sql` with `params` read-only, outside any fenced
    /// write, and returns every row, each value as the type the database gave it. For a
    /// SQLite fence this is how the process that writes through it reads its data: a second
    /// SQLite library in the same process (Python's `sqlite3`, `node:sqlite`, sqlite-jdbc)
    /// drops fencelock's file locks when it closes the file, and SQLite may then delete a
    /// live WAL file (docs/sqlite.md, "One SQLite library per process").
    ///
    /// A read protects nothing by itself: decide what to write from it, then write with
    /// [`Fence::fenced_execute`], which refuses a token older than one already accepted.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a statement that writes (the database refuses it: nothing is
    /// written) and on a Redis fence; BACKEND for a statement the database rejects, or a
    /// column of a type other than an integer, a float, text or bytes (CAST it in the query).
    pub async fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Vec<SqlValue>>> {
        self.ensure_same_process()?;
        self.backend.query(sql, params).await
    }

    /// The highest token accepted so far, if any.
    pub async fn highest(&self) -> Result<Option<u64>> {
        self.ensure_same_process()?;
        self.backend.highest(&self.resource).await
    }

    fn ensure_same_process(&self) -> Result<()> {
        if self.pid != crate::runtime::process_id() {
            return Err(Error::closed(format!(
                "this fence was opened in process {} before fork(); open a new one in this process",
                self.pid
            )));
        }
        Ok(())
    }

    pub async fn close(&self) {
        self.backend.close().await;
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fence({}, {:?})", self.url.redacted(), self.resource)
    }
}
