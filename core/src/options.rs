//! Lock options (docs/design.md §4): one meaning in every language.

use std::time::Duration;

use crate::error::{Error, Result};

/// The default lease length on TTL backends.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The shortest ttl accepted: below this the drift margin and one round trip eat the lease.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// The longest ttl accepted. A lock held for longer should renew.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest finite `wait` accepted; longer waits should use `None` (forever).
pub const MAX_WAIT: Duration = Duration::from_secs(366 * 24 * 3600);

/// Options for one acquisition.
///
/// ```
/// use std::time::Duration;
/// let opts = fencelock::LockOptions::default()
///     .with_ttl(Duration::from_secs(10))
///     .with_wait(Some(Duration::ZERO));
/// assert_eq!(opts.ttl, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    /// Lease length on TTL backends (default 30 s). ZooKeeper's liveness is its session.
    pub ttl: Duration,
    /// How long acquire may block: `None` waits forever (the default, like Redisson,
    /// Curator and redis-py); `Some(ZERO)` tries once.
    pub wait: Option<Duration>,
    /// Renew every ttl/3 while held (default on).
    pub auto_renew: bool,
    /// Stop renewing after this long, so a live but stuck holder cannot keep the lock
    /// forever; the lease is then lost at its next deadline (default none).
    pub max_hold: Option<Duration>,
    /// Re-entry by the same execution scope (default off): see [`crate::Locker::acquire_in`].
    pub reentrant: bool,
    /// Free text stored with the holder's description (host and pid are added).
    pub holder: Option<String>,
    /// `release()` returns once the release is queued on the connection, without waiting for the
    /// reply, so it rides along with the caller's next command (docs/design.md §8.4). The reply is
    /// still checked: a lock found no longer ours fires the lost signal, and a failure is logged
    /// (the lock then expires at its ttl). Default off.
    pub pipelined_release: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: DEFAULT_TTL,
            wait: None,
            auto_renew: true,
            max_hold: None,
            reentrant: false,
            holder: None,
            pipelined_release: false,
        }
    }
}

impl LockOptions {
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    pub fn with_wait(mut self, wait: Option<Duration>) -> Self {
        self.wait = wait;
        self
    }
    pub fn with_auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }
    pub fn with_max_hold(mut self, max_hold: Option<Duration>) -> Self {
        self.max_hold = max_hold;
        self
    }
    pub fn with_reentrant(mut self, on: bool) -> Self {
        self.reentrant = on;
        self
    }
    pub fn with_pipelined_release(mut self, on: bool) -> Self {
        self.pipelined_release = on;
        self
    }

    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// Checks every field; the message names the field and the accepted range.
    pub fn validate(&self) -> Result<()> {
        validate_ttl(self.ttl)?;
        if let Some(wait) = self.wait
            && wait > MAX_WAIT
        {
            return Err(Error::invalid(format!(
                "wait of {wait:?} is longer than a year; pass no wait to wait forever"
            )));
        }
        if self.max_hold.is_some_and(|max_hold| max_hold.is_zero()) {
            return Err(Error::invalid("max_hold must be positive"));
        }
        if self
            .holder
            .as_ref()
            .is_some_and(|holder| holder.len() > 1024)
        {
            return Err(Error::invalid("holder text is longer than 1024 bytes"));
        }
        Ok(())
    }
}

/// Lock options as a binding receives them from its language: each field absent means the
/// default. [`LockOptions::from_overrides`] is the one conversion every binding calls, so the
/// defaults and the checks cannot drift apart between languages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockOptionOverrides {
    pub ttl: Option<Duration>,
    /// `None` here is "wait forever", like [`LockOptions::wait`]: there is no other default.
    pub wait: Option<Duration>,
    pub auto_renew: Option<bool>,
    pub max_hold: Option<Duration>,
    pub reentrant: Option<bool>,
    pub holder: Option<String>,
    pub pipelined_release: Option<bool>,
}

impl LockOptions {
    /// The defaults with `given` applied, checked by [`LockOptions::validate`].
    pub fn from_overrides(given: LockOptionOverrides) -> Result<LockOptions> {
        let defaults = LockOptions::default();
        let options = LockOptions {
            ttl: given.ttl.unwrap_or(defaults.ttl),
            wait: given.wait,
            auto_renew: given.auto_renew.unwrap_or(defaults.auto_renew),
            max_hold: given.max_hold,
            reentrant: given.reentrant.unwrap_or(defaults.reentrant),
            holder: given.holder,
            pipelined_release: given
                .pipelined_release
                .unwrap_or(defaults.pipelined_release),
        };
        options.validate()?;
        Ok(options)
    }
}

pub fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL {
        return Err(Error::invalid(format!(
            "ttl of {ttl:?} is too short: the minimum is {MIN_TTL:?}"
        )));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "ttl of {ttl:?} is too long: the maximum is 7 days; hold longer by renewing"
        )));
    }
    Ok(())
}

/// Options common to a Locker, whatever the backend. Backend-specific settings (table
/// name, key prefix, …) come from the URL's query.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockerOptions {
    /// Base interval of the fallback poll while waiting (jittered ±50%). Backends that are
    /// woken by the server still poll at this rate in case a wake-up is missed.
    pub poll_interval: Duration,
    /// How long a single backend operation may take before it is abandoned as UNAVAILABLE.
    pub operation_timeout: Duration,
    /// The client's language, recorded in holder descriptions (`rust`, `python`, `cli`, …).
    pub language: String,
    /// Record OpenTelemetry metrics (acquire latency and wait, hold time, renewals, losses, by
    /// backend) through the global meter provider; see the `metrics` module docs for the
    /// instruments. Default off.
    pub metrics: bool,
    /// Send every measurement to this sink instead of OpenTelemetry's global meter provider
    /// (how the Python, Node and JVM packages record into their host's OpenTelemetry); see
    /// [`crate::metrics`]. Default none.
    pub metrics_sink: Option<crate::metrics::MetricsSinkHandle>,
    /// Make OpenTelemetry spans of acquires (waiting included), releases, extends, renewals
    /// and fence writes through the global tracer provider, each the child of the context
    /// current where the operation was called (renewals: root spans linked to their acquire's);
    /// see the `spans` module docs. Default off.
    pub tracing: bool,
    /// Send every span to this sink instead of OpenTelemetry's global tracer provider (how the
    /// Python, Node and JVM packages make spans through their host's OpenTelemetry); see
    /// [`crate::spans`]. Default none.
    pub span_sink: Option<crate::spans::SpanSinkHandle>,
    /// Test-only: called at named points of the acquire loop, so tests can force
    /// interleavings (a release between a failed attempt and the subscription, say).
    #[doc(hidden)]
    pub test_hook: Option<TestHook>,
}

/// A callback for [`LockerOptions::test_hook`]; receives the point's name.
#[doc(hidden)]
#[derive(Clone)]
pub struct TestHook(pub std::sync::Arc<dyn Fn(&'static str) + Send + Sync>);

impl std::fmt::Debug for TestHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestHook")
    }
}

impl PartialEq for TestHook {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TestHook {}

impl Default for LockerOptions {
    fn default() -> Self {
        LockerOptions {
            poll_interval: Duration::from_millis(50),
            operation_timeout: Duration::from_secs(10),
            language: "rust".to_string(),
            metrics: false,
            metrics_sink: None,
            tracing: false,
            span_sink: None,
            test_hook: None,
        }
    }
}

/// Locker options as a binding receives them (absent: the default); see
/// [`LockerOptions::from_overrides`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockerOptionOverrides {
    pub poll_interval: Option<Duration>,
    pub operation_timeout: Option<Duration>,
}

impl LockerOptions {
    /// The defaults for a binding in `language` (recorded in holder descriptions) with `given`
    /// applied, checked by [`LockerOptions::validate`].
    pub fn from_overrides(language: &str, given: LockerOptionOverrides) -> Result<LockerOptions> {
        let defaults = LockerOptions::default();
        let options = LockerOptions {
            poll_interval: given.poll_interval.unwrap_or(defaults.poll_interval),
            operation_timeout: given
                .operation_timeout
                .unwrap_or(defaults.operation_timeout),
            language: language.to_string(),
            ..defaults
        };
        options.validate()?;
        Ok(options)
    }
}

impl LockerOptions {
    pub fn with_poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }
    pub fn with_operation_timeout(mut self, d: Duration) -> Self {
        self.operation_timeout = d;
        self
    }
    pub fn with_metrics(mut self, on: bool) -> Self {
        self.metrics = on;
        self
    }
    /// Measurements go to `sink` (see [`LockerOptions::metrics_sink`]).
    pub fn with_metrics_sink(
        mut self,
        sink: std::sync::Arc<dyn crate::metrics::MetricsSink>,
    ) -> Self {
        self.metrics_sink = Some(crate::metrics::MetricsSinkHandle(sink));
        self
    }
    pub fn with_tracing(mut self, on: bool) -> Self {
        self.tracing = on;
        self
    }
    /// Spans go to `sink` (see [`LockerOptions::span_sink`]).
    pub fn with_span_sink(mut self, sink: std::sync::Arc<dyn crate::spans::SpanSink>) -> Self {
        self.span_sink = Some(crate::spans::SpanSinkHandle(sink));
        self
    }
    pub fn with_language(mut self, language: impl Into<String>) -> Self {
        self.language = language.into();
        self
    }
    pub fn validate(&self) -> Result<()> {
        if self.poll_interval < Duration::from_millis(1)
            || self.poll_interval > Duration::from_secs(60)
        {
            return Err(Error::invalid(
                "poll_interval must be between 1 ms and 60 s",
            ));
        }
        if self.operation_timeout < Duration::from_millis(10)
            || self.operation_timeout > Duration::from_secs(600)
        {
            return Err(Error::invalid(
                "operation_timeout must be between 10 ms and 10 min",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_design() {
        let o = LockOptions::default();
        assert_eq!(o.ttl, Duration::from_secs(30));
        assert_eq!(o.wait, None);
        assert!(o.auto_renew);
        assert!(!o.reentrant);
        o.validate().unwrap();
    }

    #[test]
    fn bad_values_are_refused() {
        let zero = LockOptions::default()
            .with_ttl(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert!(zero.message().contains("too short"));
        let huge = LockOptions::default()
            .with_ttl(Duration::from_secs(u64::MAX))
            .validate();
        assert!(huge.unwrap_err().message().contains("too long"));
        let wait = LockOptions::default().with_wait(Some(Duration::from_secs(u64::MAX)));
        assert!(wait.validate().is_err());
        assert!(
            LockOptions::default()
                .with_max_hold(Some(Duration::ZERO))
                .validate()
                .is_err()
        );
    }

    #[test]
    fn overrides_apply_to_the_defaults_and_are_checked() {
        assert_eq!(
            LockOptions::from_overrides(LockOptionOverrides::default()).unwrap(),
            LockOptions::default()
        );
        let given = LockOptionOverrides {
            ttl: Some(Duration::from_secs(5)),
            wait: Some(Duration::ZERO),
            auto_renew: Some(false),
            holder: Some("nightly".into()),
            ..Default::default()
        };
        let o = LockOptions::from_overrides(given).unwrap();
        assert_eq!(
            (o.ttl, o.wait, o.auto_renew, o.holder.as_deref()),
            (
                Duration::from_secs(5),
                Some(Duration::ZERO),
                false,
                Some("nightly")
            )
        );
        let short = LockOptionOverrides {
            ttl: Some(Duration::from_millis(1)),
            ..Default::default()
        };
        assert!(
            LockOptions::from_overrides(short)
                .unwrap_err()
                .message()
                .contains("too short")
        );

        let l = LockerOptions::from_overrides("jvm", LockerOptionOverrides::default()).unwrap();
        assert_eq!(
            (l.language.as_str(), l.poll_interval),
            ("jvm", LockerOptions::default().poll_interval)
        );
        let zero = LockerOptionOverrides {
            operation_timeout: Some(Duration::ZERO),
            ..Default::default()
        };
        assert!(LockerOptions::from_overrides("node", zero).is_err());
    }
}
