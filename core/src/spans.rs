//! Tracing spans of a Locker's and a Fence's operations, off unless
//! [`crate::LockerOptions::tracing`] or [`crate::LockerOptions::span_sink`] turns them on.
//!
//! The drivers run in Rust, so a host's own instrumentation of its Redis, ZooKeeper or SQL
//! client never sees lock traffic; these spans stand in for it. Each is reported when its
//! operation ends, as a [`SpanRecord`] with its start and end times and the caller's context:
//!
//! - with `tracing`, the core makes the spans itself through OpenTelemetry's global tracer
//!   provider (`opentelemetry::global::tracer("fencelock")`), each the child of the
//!   `opentelemetry::Context` current where the operation was called;
//! - with a [`SpanSink`], every record goes to the sink instead: that is how the Python, Node
//!   and JVM packages make the spans through their host's OpenTelemetry API, under the context
//!   the binding captured on the calling thread ([`in_caller_context`]).
//!
//! One table for every language: the names of [`SpanKind::ALL`] and the attribute keys of
//! [`attribute`].
//!
//! | span | what | attributes |
//! |---|---|---|
//! | `fencelock.acquire` | an acquire, waiting included | backend, lock, mode (`exclusive`, `permit`, `read`, `write`), outcome (`acquired`, `timeout`, `error`), token |
//! | `fencelock.release` | a release | backend, lock, mode, outcome (`released`, `lost`, `error`), token |
//! | `fencelock.extend` | an extend | backend, lock, mode, outcome (`extended`, `lost`, `error`), token |
//! | `fencelock.renew` | a renewal by the lease's own task: a root span, linked to the acquire's | backend, lock, mode, outcome (`renewed`, `lost`, `retried`), token |
//! | `fencelock.fence.write` | `fenced_execute` or `fenced_set` | backend (the fence's store), resource, lock, outcome (`accepted`, `stale`, `error`), token |
//!
//! An `error` outcome also carries `fencelock.error.code` (the stable code of
//! [`crate::ErrorCode`]) and the span's status is an error.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanKind as OtelSpanKind, Status, Tracer as _,
};
use opentelemetry::{Context, KeyValue};

use crate::error::{Error, Result};
use crate::sync::unpoisoned;

/// One of fencelock's spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanKind {
    Acquire,
    Release,
    Extend,
    Renewal,
    FenceWrite,
}

impl SpanKind {
    /// Every span, in a fixed order (bindings may number them by it).
    pub const ALL: [SpanKind; 5] = [
        SpanKind::Acquire,
        SpanKind::Release,
        SpanKind::Extend,
        SpanKind::Renewal,
        SpanKind::FenceWrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SpanKind::Acquire => "fencelock.acquire",
            SpanKind::Release => "fencelock.release",
            SpanKind::Extend => "fencelock.extend",
            SpanKind::Renewal => "fencelock.renew",
            SpanKind::FenceWrite => "fencelock.fence.write",
        }
    }
}

/// The attribute keys of the spans.
pub mod attribute {
    /// The backend (`redis`, `redlock`, `redis-cluster`, `zookeeper`, `sqlite`, `postgres`,
    /// `mysql`); for a fence write, the fence's store.
    pub const BACKEND: &str = "fencelock.backend";
    /// The lock's name.
    pub const LOCK: &str = "fencelock.lock";
    /// How the lease holds its name (`exclusive`, `permit`, `read`, `write`).
    pub const MODE: &str = "fencelock.mode";
    /// What came of the operation (see the table of [`crate::spans`]).
    pub const OUTCOME: &str = "fencelock.outcome";
    /// The lease's fencing token, once there is one.
    pub const TOKEN: &str = "fencelock.token";
    /// The fence's resource (fence writes).
    pub const RESOURCE: &str = "fencelock.resource";
    /// The stable error code of an `error` outcome.
    pub const ERROR_CODE: &str = "fencelock.error.code";

    /// Every key, in a fixed order.
    pub const ALL: [&str; 7] = [BACKEND, LOCK, MODE, OUTCOME, TOKEN, RESOURCE, ERROR_CODE];
}

/// What the host had current where an operation was called (its tracing context, its logging
/// context): opaque to the core, which carries it from the call to the records it reports
/// (spans, and log records: [`crate::logs::LogRecord::caller`]). A binding makes it on the
/// calling thread and downcasts it back where it delivers them.
#[derive(Clone)]
pub struct CallerContext(Arc<dyn Any + Send + Sync>);

impl CallerContext {
    pub fn new<T: Any + Send + Sync>(context: T) -> Self {
        CallerContext(Arc::new(context))
    }

    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl fmt::Debug for CallerContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallerContext")
    }
}

impl PartialEq for CallerContext {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CallerContext {}

tokio::task_local! {
    static CALLER: Option<CallerContext>;
}

/// Runs `operation` with `context` as its caller's: the spans and log records it produces carry
/// it. What a binding wraps each user call in, with the context it captured on the calling
/// thread (or `None`, at no cost beyond the wrapper, when nothing wants one).
pub async fn in_caller_context<F: Future>(
    context: Option<CallerContext>,
    operation: F,
) -> F::Output {
    CALLER.scope(context, operation).await
}

/// The caller's context of the operation being polled, if its binding gave one.
pub fn caller_context() -> Option<CallerContext> {
    CALLER.try_with(Clone::clone).ok().flatten()
}

/// Callers known by a number, for bindings whose host keeps each call's context itself (Node's
/// `index.js`, the JVM's Kotlin layer): the host numbers the context, sets the number on the
/// calling thread just before the native call ([`numbered::set`]), the call takes it in its
/// synchronous part ([`numbered::take`]), and records come back with it ([`numbered::number`]).
pub mod numbered {
    use std::cell::Cell;

    use super::CallerContext;

    struct Number(u32);

    thread_local! {
        static NEXT_CALL: Cell<u32> = const { Cell::new(0) };
    }

    /// The caller of the next native call made on this thread (0: none).
    pub fn set(number: u32) {
        NEXT_CALL.with(|n| n.set(number));
    }

    /// The caller of the native call being made on this thread, taken, so that a later call
    /// that set none never inherits it.
    pub fn take() -> Option<CallerContext> {
        match NEXT_CALL.with(|n| n.replace(0)) {
            0 => None,
            number => Some(CallerContext::new(Number(number))),
        }
    }

    /// The number of the caller a record was produced for, 0 for none (or one not numbered).
    pub fn number(caller: Option<&CallerContext>) -> u32 {
        caller
            .and_then(|c| c.downcast_ref::<Number>())
            .map_or(0, |n| n.0)
    }
}

/// One finished operation, as a span.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub kind: SpanKind,
    /// The backend, or for a fence write the fence's store (`BackendKind::as_str`).
    pub backend: &'static str,
    /// The lock's name (for a fence write, of the token's lock when the token names it).
    pub lock: Option<String>,
    /// The lease's mode, when there is a lease.
    pub mode: Option<&'static str>,
    /// The fence's resource (fence writes only).
    pub resource: Option<String>,
    pub outcome: &'static str,
    /// The stable code of the error, for an `error` outcome.
    pub error_code: Option<&'static str>,
    pub token: Option<u64>,
    /// The lease's id in this process: the acquire and later spans of one lease share it, so a
    /// renewal's span can link to its acquire's. 0 for fence writes.
    pub lease: u64,
    pub start: SystemTime,
    pub end: SystemTime,
    /// The caller's context ([`in_caller_context`]); none for renewals, which no call makes.
    pub caller: Option<CallerContext>,
}

impl SpanRecord {
    /// The attributes as key and value text, in the order of [`attribute::ALL`], those that
    /// apply only: what a binding hands its host.
    pub fn attributes(&self) -> Vec<(&'static str, AttributeValue<'_>)> {
        let mut out = vec![(attribute::BACKEND, AttributeValue::Text(self.backend))];
        if let Some(lock) = &self.lock {
            out.push((attribute::LOCK, AttributeValue::Text(lock)));
        }
        if let Some(mode) = self.mode {
            out.push((attribute::MODE, AttributeValue::Text(mode)));
        }
        out.push((attribute::OUTCOME, AttributeValue::Text(self.outcome)));
        if let Some(token) = self.token {
            // OpenTelemetry's integers are signed 64-bit; a token past that stays exact as text.
            out.push((
                attribute::TOKEN,
                match i64::try_from(token) {
                    Ok(token) => AttributeValue::Int(token),
                    Err(_) => AttributeValue::Owned(token.to_string()),
                },
            ));
        }
        if let Some(resource) = &self.resource {
            out.push((attribute::RESOURCE, AttributeValue::Text(resource)));
        }
        if let Some(code) = self.error_code {
            out.push((attribute::ERROR_CODE, AttributeValue::Text(code)));
        }
        out
    }

    /// A span whose outcome is `error`: the host marks its status as an error.
    pub fn is_error(&self) -> bool {
        self.error_code.is_some()
    }

    /// The acquire that took a lease: its renewals link to this span.
    pub fn takes_lease(&self) -> bool {
        self.kind == SpanKind::Acquire && self.outcome == "acquired"
    }

    /// The lease ended (released, found lost): its acquire need not be remembered.
    pub fn ends_lease(&self) -> bool {
        self.kind == SpanKind::Release || self.outcome == "lost"
    }
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue<'a> {
    Text(&'a str),
    Owned(String),
    Int(i64),
}

/// Where a Locker's or a Fence's spans go when it has a sink. Called on the thread that ended
/// the operation (often a runtime worker): a sink must return quickly and never block on the
/// lock it reports on. [`on_own_thread`] makes one that hands each record to a thread of its own.
pub trait SpanSink: Send + Sync {
    fn record(&self, span: SpanRecord);
}

/// A sink in [`crate::LockerOptions`]: compared by identity.
#[derive(Clone)]
pub struct SpanSinkHandle(pub Arc<dyn SpanSink>);

impl fmt::Debug for SpanSinkHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SpanSink")
    }
}

impl PartialEq for SpanSinkHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SpanSinkHandle {}

/// Spans the sinks of [`on_own_thread`] dropped, process-wide.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// How many spans the sinks of [`on_own_thread`] dropped because their queue was full (a host
/// that stopped taking them), in this process.
pub fn dropped_spans() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// A sink that queues records (up to 4096; more are dropped, never waited for) and calls
/// `deliver` on a thread named `thread_name` with what has queued up, in the order the
/// operations ended (an acquire's record before its renewals'). The thread ends when the sink
/// is dropped.
pub fn on_own_thread(
    thread_name: &str,
    deliver: impl FnMut(&[SpanRecord]) + Send + 'static,
) -> Result<Arc<dyn SpanSink>> {
    let queue = crate::delivery::on_own_thread(thread_name, "span", &DROPPED, deliver)?;
    Ok(Arc::new(QueuedSink { queue }))
}

struct QueuedSink {
    queue: crate::delivery::Queue<SpanRecord>,
}

impl SpanSink for QueuedSink {
    fn record(&self, span: SpanRecord) {
        self.queue.push(span);
    }
}

/// The span contexts of recent acquires by lease id, so that a renewal's root span can link to
/// its acquire's: what every binding's sink keeps, bounded (a lease that ends unseen, dropped
/// in a process that exits, must not grow it forever).
pub struct AcquireLinks<T> {
    by_lease: HashMap<u64, T>,
    order: VecDeque<u64>,
}

/// How many acquires [`AcquireLinks`] remembers; the oldest are forgotten first.
const REMEMBERED_ACQUIRES: usize = 4096;

impl<T> AcquireLinks<T> {
    pub fn new() -> Self {
        AcquireLinks {
            by_lease: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Notes what `record`'s span was made as (`context`) when it took a lease, and forgets a
    /// lease that ended (released, lost).
    pub fn note(&mut self, record: &SpanRecord, context: impl FnOnce() -> T) {
        if record.takes_lease() {
            if self.order.len() >= REMEMBERED_ACQUIRES
                && let Some(oldest) = self.order.pop_front()
            {
                self.by_lease.remove(&oldest);
            }
            self.order.push_back(record.lease);
            self.by_lease.insert(record.lease, context());
        } else if record.ends_lease() {
            self.order.retain(|id| *id != record.lease);
            self.by_lease.remove(&record.lease);
        }
    }

    /// The acquire a renewal of `lease` links to, if remembered.
    pub fn acquire_of(&self, lease: u64) -> Option<&T> {
        self.by_lease.get(&lease)
    }
}

impl<T> Default for AcquireLinks<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The sink of `tracing`: spans made through OpenTelemetry's global tracer provider.
struct OtelSpans {
    tracer: opentelemetry::global::BoxedTracer,
    acquires: Mutex<AcquireLinks<SpanContext>>,
}

impl SpanSink for OtelSpans {
    fn record(&self, record: SpanRecord) {
        let parent = match (record.kind, &record.caller) {
            (SpanKind::Renewal, _) | (_, None) => Context::new(),
            (_, Some(caller)) => caller
                .downcast_ref::<Context>()
                .cloned()
                .unwrap_or_default(),
        };
        let attributes: Vec<KeyValue> = record
            .attributes()
            .into_iter()
            .map(|(key, value)| match value {
                AttributeValue::Text(text) => KeyValue::new(key, text.to_string()),
                AttributeValue::Owned(text) => KeyValue::new(key, text),
                AttributeValue::Int(number) => KeyValue::new(key, number),
            })
            .collect();
        let links = match record.kind {
            SpanKind::Renewal => unpoisoned(&self.acquires)
                .acquire_of(record.lease)
                .map(|acquire| vec![Link::with_context(acquire.clone())])
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let mut span = self
            .tracer
            .span_builder(record.kind.name())
            .with_kind(OtelSpanKind::Client)
            .with_start_time(record.start)
            .with_attributes(attributes)
            .with_links(links)
            .start_with_context(&self.tracer, &parent);
        if let Some(code) = record.error_code {
            span.set_status(Status::error(code));
        }
        let context = span.span_context().clone();
        unpoisoned(&self.acquires).note(&record, || context);
        span.end_with_timestamp(record.end);
    }
}

/// A Locker's or a Fence's spans: reports its operations to its target.
pub(crate) struct LockSpans {
    sink: Arc<dyn SpanSink>,
    backend: &'static str,
    /// Spans made by the core (`tracing`): the caller's context is OpenTelemetry's current one.
    own_context: bool,
}

/// When an operation started, and for whom.
pub(crate) struct Started {
    at: SystemTime,
    caller: Option<CallerContext>,
}

/// The lease an operation is about: its name, mode, token and id.
pub(crate) struct LeaseFacts<'a> {
    pub lock: &'a str,
    pub mode: &'static str,
    pub token: Option<u64>,
    pub lease: u64,
}

impl LockSpans {
    /// Spans for the backend `backend` from `options`, or none when tracing is off.
    pub fn from_options(
        options: &crate::LockerOptions,
        backend: crate::url::BackendKind,
    ) -> Option<Arc<LockSpans>> {
        let (sink, own_context): (Arc<dyn SpanSink>, bool) =
            match (&options.span_sink, options.tracing) {
                (Some(handle), _) => (handle.0.clone(), false),
                (None, true) => (
                    Arc::new(OtelSpans {
                        tracer: opentelemetry::global::tracer("fencelock"),
                        acquires: Mutex::new(AcquireLinks::new()),
                    }),
                    true,
                ),
                (None, false) => return None,
            };
        Some(Arc::new(LockSpans {
            sink,
            backend: backend.as_str(),
            own_context,
        }))
    }

    /// An operation starts now, called from the caller's task.
    pub fn start(&self) -> Started {
        let caller = caller_context().or_else(|| {
            self.own_context
                .then(|| CallerContext::new(Context::current()))
        });
        Started {
            at: SystemTime::now(),
            caller,
        }
    }

    /// A renewal, which no caller made, started at `at`.
    pub fn renewal_started(at: SystemTime) -> Started {
        Started { at, caller: None }
    }

    /// Reports a lease operation that ended now with `outcome`.
    pub fn lease_operation(
        &self,
        kind: SpanKind,
        started: Started,
        lease: LeaseFacts<'_>,
        outcome: std::result::Result<&'static str, &Error>,
    ) {
        self.report(kind, started, Some(lease), None, outcome);
    }

    /// Reports a fence write on `resource` that ended now.
    pub fn fence_write(
        &self,
        started: Started,
        resource: &str,
        lock: Option<&str>,
        token: u64,
        outcome: std::result::Result<&'static str, &Error>,
    ) {
        let facts = LeaseFacts {
            lock: lock.unwrap_or_default(),
            mode: "",
            token: Some(token),
            lease: 0,
        };
        self.report(
            SpanKind::FenceWrite,
            started,
            Some(facts),
            Some(resource),
            outcome,
        );
    }

    fn report(
        &self,
        kind: SpanKind,
        started: Started,
        lease: Option<LeaseFacts<'_>>,
        resource: Option<&str>,
        outcome: std::result::Result<&'static str, &Error>,
    ) {
        let (outcome, error_code) = match outcome {
            Ok(outcome) => (outcome, None),
            Err(error) => (error_outcome(kind, error), Some(error.code().as_str())),
        };
        let error_code = error_code.filter(|_| outcome == "error");
        let (lock, mode, token, lease) = match lease {
            Some(facts) => (
                (!facts.lock.is_empty()).then(|| facts.lock.to_string()),
                (!facts.mode.is_empty()).then_some(facts.mode),
                facts.token,
                facts.lease,
            ),
            None => (None, None, None, 0),
        };
        self.sink.record(SpanRecord {
            kind,
            backend: self.backend,
            lock,
            mode,
            resource: resource.map(str::to_string),
            outcome,
            error_code,
            token,
            lease,
            start: started.at,
            end: SystemTime::now(),
            caller: started.caller,
        });
    }
}

/// The outcome an error means: a wait that ended, a lease found lost, a token found stale are
/// answers, not failures; anything else is `error`.
fn error_outcome(kind: SpanKind, error: &Error) -> &'static str {
    use crate::error::ErrorCode;
    match (kind, error.code()) {
        (SpanKind::Acquire, ErrorCode::Timeout) => "timeout",
        (SpanKind::FenceWrite, ErrorCode::StaleToken) => "stale",
        (SpanKind::Release | SpanKind::Extend | SpanKind::Renewal, ErrorCode::Lost) => "lost",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: SpanKind, outcome: &'static str, lease: u64) -> SpanRecord {
        SpanRecord {
            kind,
            backend: "sqlite",
            lock: Some("a".into()),
            mode: Some("exclusive"),
            resource: None,
            outcome,
            error_code: None,
            token: Some(7),
            lease,
            start: SystemTime::now(),
            end: SystemTime::now(),
            caller: None,
        }
    }

    #[test]
    fn names_and_keys_are_namespaced_and_distinct() {
        let names: std::collections::BTreeSet<_> = SpanKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), SpanKind::ALL.len());
        assert!(names.iter().all(|n| n.starts_with("fencelock.")));
        let keys: std::collections::BTreeSet<_> = attribute::ALL.iter().collect();
        assert_eq!(keys.len(), attribute::ALL.len());
        assert!(attribute::ALL.iter().all(|k| k.starts_with("fencelock.")));
    }

    #[test]
    fn renewals_link_to_their_acquire_until_the_lease_ends() {
        let mut links = AcquireLinks::new();
        links.note(&record(SpanKind::Acquire, "acquired", 1), || "span-1");
        links.note(&record(SpanKind::Renewal, "renewed", 1), || "r");
        assert_eq!(links.acquire_of(1), Some(&"span-1"));
        assert_eq!(links.acquire_of(2), None);
        links.note(&record(SpanKind::Release, "released", 1), || "x");
        assert_eq!(links.acquire_of(1), None);
        links.note(&record(SpanKind::Acquire, "acquired", 3), || "span-3");
        links.note(&record(SpanKind::Renewal, "lost", 3), || "r");
        assert_eq!(links.acquire_of(3), None);
    }

    #[test]
    fn remembered_acquires_are_bounded() {
        let mut links = AcquireLinks::new();
        for lease in 0..(REMEMBERED_ACQUIRES as u64 + 10) {
            links.note(&record(SpanKind::Acquire, "acquired", lease), || lease);
        }
        assert_eq!(links.by_lease.len(), REMEMBERED_ACQUIRES);
        assert_eq!(links.acquire_of(0), None);
        let last = REMEMBERED_ACQUIRES as u64 + 9;
        assert_eq!(links.acquire_of(last), Some(&last));
    }

    #[test]
    fn a_token_past_i64_stays_exact_as_text() {
        let mut r = record(SpanKind::Acquire, "acquired", 1);
        r.token = Some(u64::MAX);
        assert!(r.attributes().contains(&(
            attribute::TOKEN,
            AttributeValue::Owned(u64::MAX.to_string())
        )));
        r.token = Some(5);
        assert!(
            r.attributes()
                .contains(&(attribute::TOKEN, AttributeValue::Int(5)))
        );
    }
}
