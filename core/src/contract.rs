//! What every language must agree on, defined once (docs/design.md §9.3): the error codes, the
//! lifecycle event kinds, the options with the operations that accept each, and the URL schemes.
//!
//! This is the list the bindings test themselves against. Python's `_native._contract()`,
//! Node's test hooks, the JVM's `coreContract()` and the command's tests read it at run time and
//! compare it with what their language offers, so a code, kind or option added here fails every binding's test until
//! that binding has it too, and an option cannot mean one thing in one language and another
//! elsewhere. The error codes and event kinds are the enums' own lists ([`ErrorCode::ALL`],
//! [`LockEventKind::ALL`]); the option table is tied to [`LockOptions`], [`LockerOptions`] and
//! their overrides by the tests at the end of this file.
//!
//! Option names are spelled in snake_case, as in Rust and Python; Node and the JVM spell them in
//! camelCase (`max_hold` is `maxHold`), which the bindings' tests derive from these names.
//!
//! [`LockOptions`]: crate::LockOptions
//! [`LockerOptions`]: crate::LockerOptions

use std::fmt;

use crate::error::ErrorCode;
use crate::events::LockEventKind;
use crate::url::BackendKind;

/// Every error code, in documentation order (docs/design.md §6.1).
pub const ERROR_CODES: &[ErrorCode] = &ErrorCode::ALL;

/// Every lifecycle event kind, in lifecycle order (docs/design.md §7.1).
pub const EVENT_KINDS: &[LockEventKind] = &LockEventKind::ALL;

/// The error codes as every language spells them (`"NOT_HELD"`).
pub fn error_code_names() -> Vec<&'static str> {
    ERROR_CODES.iter().map(|code| code.as_str()).collect()
}

/// The event kinds as every language spells them (`"renewal_retried"`).
pub fn event_kind_names() -> Vec<&'static str> {
    EVENT_KINDS.iter().map(|kind| kind.as_str()).collect()
}

/// An operation that takes options: what a binding's function with those keyword arguments or
/// option object does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Connecting a Locker: [`crate::Locker::connect_with`] (Python `connect`, Node `connect`,
    /// JVM `Locker.connect`).
    Connect,
    /// Acquiring a lock in a scope: [`crate::Locker::acquire_in`] (Python `lock`, `acquire`,
    /// Node `acquire`, `withLock`, JVM `acquire`, `withLock`).
    Acquire,
    /// Trying once: [`crate::Locker::try_acquire_in`], which sets `wait` to zero itself, so it
    /// takes the lock options except `wait`.
    TryAcquire,
    /// Campaigning for leadership: [`crate::Locker::campaign`], which takes the lock options
    /// except `reentrant` (a leader never campaigns again).
    Campaign,
    /// Opening a fence: [`crate::Fence::open_with`].
    OpenFence,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 5] = [
        Operation::Connect,
        Operation::Acquire,
        Operation::TryAcquire,
        Operation::Campaign,
        Operation::OpenFence,
    ];

    /// The stable spelling the bindings' tests use to name it: `connect`, `acquire`,
    /// `try_acquire`, `campaign`, `open_fence`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Connect => "connect",
            Operation::Acquire => "acquire",
            Operation::TryAcquire => "try_acquire",
            Operation::Campaign => "campaign",
            Operation::OpenFence => "open_fence",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an option's value is, in every language's own form (docs/design.md §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OptionKind {
    /// A duration: `Duration` in Rust, seconds or a `timedelta` in Python, milliseconds in
    /// Node, `java.time.Duration` on the JVM. Where the default is none or forever, also absent.
    Duration,
    /// On or off.
    Flag,
    /// Text.
    Text,
}

impl OptionKind {
    /// `duration`, `flag` or `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            OptionKind::Duration => "duration",
            OptionKind::Flag => "flag",
            OptionKind::Text => "text",
        }
    }
}

/// One option: its name, what it holds, its default and the operations that accept it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OptionSpec {
    /// The name in snake_case (`max_hold`).
    pub name: &'static str,
    pub kind: OptionKind,
    /// The default, as docs/design.md §4 writes it: `30s`, `50ms`, `forever`, `none`, `true`,
    /// `false`, or a text.
    pub default: &'static str,
    /// The operations that accept it.
    pub operations: &'static [Operation],
    /// The binding fills it in itself and does not offer it to its users (`language`, the
    /// binding's own name); the bindings' tests leave these out.
    pub set_by_binding: bool,
}

impl OptionSpec {
    /// Whether `operation` accepts this option.
    pub fn accepted_by(&self, operation: Operation) -> bool {
        self.operations.contains(&operation)
    }
}

const LOCK: &[Operation] = &[
    Operation::Acquire,
    Operation::TryAcquire,
    Operation::Campaign,
];
const LOCKER: &[Operation] = &[Operation::Connect, Operation::OpenFence];

/// Every option, lock options (docs/design.md §4.1) first, then Locker options (§4.2).
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "ttl",
        kind: OptionKind::Duration,
        default: "30s",
        operations: LOCK,
        set_by_binding: false,
    },
    OptionSpec {
        name: "wait",
        kind: OptionKind::Duration,
        default: "forever",
        operations: &[Operation::Acquire, Operation::Campaign],
        set_by_binding: false,
    },
    OptionSpec {
        name: "auto_renew",
        kind: OptionKind::Flag,
        default: "true",
        operations: LOCK,
        set_by_binding: false,
    },
    OptionSpec {
        name: "max_hold",
        kind: OptionKind::Duration,
        default: "none",
        operations: LOCK,
        set_by_binding: false,
    },
    OptionSpec {
        name: "reentrant",
        kind: OptionKind::Flag,
        default: "false",
        operations: &[Operation::Acquire, Operation::TryAcquire],
        set_by_binding: false,
    },
    OptionSpec {
        name: "holder",
        kind: OptionKind::Text,
        default: "none",
        operations: LOCK,
        set_by_binding: false,
    },
    OptionSpec {
        name: "pipelined_release",
        kind: OptionKind::Flag,
        default: "false",
        operations: LOCK,
        set_by_binding: false,
    },
    // A fence never waits, but Fence::open_with checks the whole LockerOptions it is given, so
    // poll_interval is accepted (and range-checked) there like at connect.
    OptionSpec {
        name: "poll_interval",
        kind: OptionKind::Duration,
        default: "50ms",
        operations: LOCKER,
        set_by_binding: false,
    },
    OptionSpec {
        name: "operation_timeout",
        kind: OptionKind::Duration,
        default: "10s",
        operations: LOCKER,
        set_by_binding: false,
    },
    // Not OpenFence: a fence takes no locks, so it records no metrics.
    OptionSpec {
        name: "metrics",
        kind: OptionKind::Flag,
        default: "false",
        operations: &[Operation::Connect],
        set_by_binding: false,
    },
    // A fence's writes are spans too.
    OptionSpec {
        name: "tracing",
        kind: OptionKind::Flag,
        default: "false",
        operations: LOCKER,
        set_by_binding: false,
    },
    OptionSpec {
        name: "language",
        kind: OptionKind::Text,
        default: "rust",
        operations: &[Operation::Connect],
        set_by_binding: true,
    },
];

/// The options `operation` accepts, in table order, including those a binding sets itself.
pub fn options_for(operation: Operation) -> impl Iterator<Item = &'static OptionSpec> {
    OPTIONS
        .iter()
        .filter(move |spec| spec.accepted_by(operation))
}

/// The names a binding offers its users for `operation`: every option it accepts except those
/// the binding sets itself. What each binding's test compares its own names with.
pub fn offered_option_names(operation: Operation) -> Vec<&'static str> {
    options_for(operation)
        .filter(|spec| !spec.set_by_binding)
        .map(|spec| spec.name)
        .collect()
}

/// The option named `name`, if there is one.
pub fn option(name: &str) -> Option<&'static OptionSpec> {
    OPTIONS.iter().find(|spec| spec.name == name)
}

/// One URL scheme and the backend it selects (docs/design.md §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct UrlScheme {
    /// Lower case, without `://`.
    pub scheme: &'static str,
    pub backend: BackendKind,
}

const fn scheme(scheme: &'static str, backend: BackendKind) -> UrlScheme {
    UrlScheme { scheme, backend }
}

/// Every URL scheme [`crate::LockerUrl::parse`] accepts, by backend (docs/design.md §5.1).
pub const URL_SCHEMES: &[UrlScheme] = &[
    scheme("redis", BackendKind::Redis),
    scheme("rediss", BackendKind::Redis),
    scheme("redis+cluster", BackendKind::RedisCluster),
    scheme("rediss+cluster", BackendKind::RedisCluster),
    scheme("redlock", BackendKind::Redlock),
    scheme("zk", BackendKind::ZooKeeper),
    scheme("zookeeper", BackendKind::ZooKeeper),
    scheme("postgres", BackendKind::Postgres),
    scheme("postgresql", BackendKind::Postgres),
    scheme("mysql", BackendKind::MySql),
    scheme("mariadb", BackendKind::MySql),
    scheme("sqlite", BackendKind::Sqlite),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;
    use crate::options::{LockOptionOverrides, LockOptions, LockerOptionOverrides, LockerOptions};
    use crate::url::LockerUrl;

    /// How the table writes a duration default.
    fn shown(d: Duration) -> String {
        if d.subsec_nanos() == 0 {
            format!("{}s", d.as_secs())
        } else {
            format!("{}ms", d.as_millis())
        }
    }

    fn flag(on: bool) -> String {
        on.to_string()
    }

    /// Sets the override called `name` to a value other than the default; false when the
    /// overrides have no such field.
    fn set_lock_override(given: &mut LockOptionOverrides, name: &str) -> bool {
        match name {
            "ttl" => given.ttl = Some(Duration::from_secs(7)),
            "wait" => given.wait = Some(Duration::from_secs(7)),
            "auto_renew" => given.auto_renew = Some(false),
            "max_hold" => given.max_hold = Some(Duration::from_secs(7)),
            "reentrant" => given.reentrant = Some(true),
            "holder" => given.holder = Some("contract".into()),
            "pipelined_release" => given.pipelined_release = Some(true),
            _ => return false,
        }
        true
    }

    /// The lock options' fields by name. The destructuring names every field, so a field added
    /// to LockOptions does not compile here until it is in the table.
    fn lock_fields(o: &LockOptions) -> Vec<(&'static str, String)> {
        let LockOptions {
            ttl,
            wait,
            auto_renew,
            max_hold,
            reentrant,
            holder,
            pipelined_release,
        } = o;
        vec![
            ("ttl", shown(*ttl)),
            ("wait", wait.map_or("forever".into(), shown)),
            ("auto_renew", flag(*auto_renew)),
            ("max_hold", max_hold.map_or("none".into(), shown)),
            ("reentrant", flag(*reentrant)),
            ("holder", holder.clone().unwrap_or_else(|| "none".into())),
            ("pipelined_release", flag(*pipelined_release)),
        ]
    }

    /// The Locker options' fields by name, as [`lock_fields`]. `metrics_sink`, `span_sink` and
    /// `test_hook` are left out on purpose: the sinks are how a binding implements `metrics` and
    /// `tracing` (objects, not options a user spells), and the hook exists for the core's own
    /// tests.
    fn locker_fields(o: &LockerOptions) -> Vec<(&'static str, String)> {
        let LockerOptions {
            poll_interval,
            operation_timeout,
            language,
            metrics,
            metrics_sink: _,
            tracing,
            span_sink: _,
            test_hook: _,
        } = o;
        vec![
            ("poll_interval", shown(*poll_interval)),
            ("operation_timeout", shown(*operation_timeout)),
            ("metrics", flag(*metrics)),
            ("tracing", flag(*tracing)),
            ("language", language.clone()),
        ]
    }

    fn names(specs: impl Iterator<Item = &'static OptionSpec>) -> BTreeSet<&'static str> {
        specs.map(|spec| spec.name).collect()
    }

    #[test]
    fn the_lists_are_the_enums_lists() {
        assert_eq!(error_code_names().len(), ErrorCode::ALL.len());
        assert_eq!(error_code_names()[2], "NOT_HELD");
        assert_eq!(event_kind_names().len(), LockEventKind::ALL.len());
        assert!(event_kind_names().contains(&"renewal_retried"));
    }

    #[test]
    fn names_are_unique_and_snake_case() {
        let mut seen = BTreeSet::new();
        for spec in OPTIONS {
            assert!(seen.insert(spec.name), "{} is listed twice", spec.name);
            assert!(
                spec.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_'),
                "{} is not snake_case",
                spec.name
            );
            assert!(
                !spec.operations.is_empty(),
                "{} has no operation",
                spec.name
            );
        }
        let operations: BTreeSet<_> = Operation::ALL.iter().map(|op| op.as_str()).collect();
        assert_eq!(operations.len(), Operation::ALL.len());
        for operation in Operation::ALL {
            assert!(
                options_for(operation).next().is_some(),
                "{operation} takes no option"
            );
        }
    }

    /// Every lock option is in the table with its real default, and every name the table gives
    /// a lock operation sets a field of LockOptionOverrides that from_overrides carries into
    /// LockOptions (so the name is the field's, not a look-alike).
    #[test]
    fn the_lock_options_are_the_structs() {
        let defaults = LockOptions::default();
        let fields = lock_fields(&defaults);
        for (name, default) in &fields {
            let spec = option(name).unwrap_or_else(|| panic!("LockOptions::{name} is not listed"));
            assert_eq!(spec.default, default, "the default of {name}");
        }
        let field_names: BTreeSet<_> = fields.iter().map(|(name, _)| *name).collect();
        for operation in [
            Operation::Acquire,
            Operation::TryAcquire,
            Operation::Campaign,
        ] {
            for spec in options_for(operation) {
                assert!(
                    field_names.contains(spec.name),
                    "{operation} takes {}",
                    spec.name
                );
                let mut given = LockOptionOverrides::default();
                assert!(set_lock_override(&mut given, spec.name), "{}", spec.name);
                let options = LockOptions::from_overrides(given).unwrap();
                let changed: Vec<_> = lock_fields(&options)
                    .into_iter()
                    .zip(&fields)
                    .filter(|(now, before)| now != *before)
                    .map(|(now, _)| now.0)
                    .collect();
                assert_eq!(changed, [spec.name]);
            }
        }
        // Acquire takes every lock option; the other two leave out one each, as their docs say.
        assert_eq!(names(options_for(Operation::Acquire)), field_names);
        let without = |name| {
            let mut all = field_names.clone();
            all.remove(name);
            all
        };
        assert_eq!(names(options_for(Operation::TryAcquire)), without("wait"));
        assert_eq!(
            names(options_for(Operation::Campaign)),
            without("reentrant")
        );
    }

    /// As above for the Locker options, which connect and Fence::open take.
    #[test]
    fn the_locker_options_are_the_structs() {
        let defaults = LockerOptions::default();
        let fields = locker_fields(&defaults);
        for (name, default) in &fields {
            let spec =
                option(name).unwrap_or_else(|| panic!("LockerOptions::{name} is not listed"));
            assert_eq!(spec.default, default, "the default of {name}");
        }
        let field_names: BTreeSet<_> = fields.iter().map(|(name, _)| *name).collect();
        assert_eq!(names(options_for(Operation::Connect)), field_names);
        assert!(names(options_for(Operation::OpenFence)).is_subset(&field_names));

        // What a binding passes through the overrides: the options it offers at both connect
        // and Fence.open.
        for name in offered_option_names(Operation::OpenFence) {
            let mut given = LockerOptionOverrides::default();
            match name {
                "poll_interval" => given.poll_interval = Some(Duration::from_millis(7)),
                "operation_timeout" => given.operation_timeout = Some(Duration::from_millis(70)),
                // Set outside the overrides, as metrics: by the binding's span sink (or
                // with_tracing).
                "tracing" => continue,
                other => panic!("{other} is not a field of LockerOptionOverrides"),
            }
            let options = LockerOptions::from_overrides("contract", given).unwrap();
            let changed: Vec<_> = locker_fields(&options)
                .into_iter()
                .zip(&fields)
                .filter(|(now, before)| now != *before && now.0 != "language")
                .map(|(now, _)| now.0)
                .collect();
            assert_eq!(changed, [name]);
        }
        // The rest are set outside the overrides: language by the binding, metrics and tracing
        // by the binding's sinks (or with_metrics, with_tracing).
        let set_by_binding: Vec<_> = options_for(Operation::Connect)
            .filter(|spec| spec.set_by_binding)
            .map(|spec| spec.name)
            .collect();
        assert_eq!(set_by_binding, ["language"]);
        let with_language = LockerOptions::from_overrides("jvm", LockerOptionOverrides::default());
        assert_eq!(with_language.unwrap().language, "jvm");
    }

    /// What the table says of campaign and try_acquire is what the Locker does: a campaign
    /// refuses exactly the lock options the table leaves out of Campaign, and try_acquire does
    /// not wait whatever `wait` says.
    #[tokio::test]
    async fn the_operations_take_what_the_table_says() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("locks.db").display());
        let locker = crate::locker::Locker::connect(&url).await.unwrap();
        let scope = crate::lease::reentry::Scope::new(1);
        for (name, _) in lock_fields(&LockOptions::default()) {
            let mut given = LockOptionOverrides::default();
            assert!(set_lock_override(&mut given, name));
            let options = LockOptions::from_overrides(given).unwrap();

            let lease = locker.acquire_in(scope, "contract", &options).await;
            assert!(lease.is_ok(), "acquire with {name}: {lease:?}");
            lease.unwrap().release().await.unwrap();

            match locker.campaign("contract", &options).await {
                Ok(leadership) => {
                    assert!(
                        option(name).unwrap().accepted_by(Operation::Campaign),
                        "{name}"
                    );
                    leadership.resign().await.unwrap();
                }
                Err(e) => {
                    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{name}: {e}");
                    assert!(
                        !option(name).unwrap().accepted_by(Operation::Campaign),
                        "{name}"
                    );
                }
            }
        }

        let rival = crate::locker::Locker::connect(&url).await.unwrap();
        let held = rival
            .acquire("contract", &LockOptions::default())
            .await
            .unwrap();
        let waiting = LockOptions::default().with_wait(Some(Duration::from_secs(3600)));
        let tried = tokio::time::timeout(
            Duration::from_secs(60),
            locker.try_acquire_in(scope, "contract", &waiting),
        )
        .await
        .expect("try_acquire waited");
        assert!(tried.unwrap().is_none());
        held.release().await.unwrap();
        locker.close().await;
        rival.close().await;
    }

    #[test]
    fn every_scheme_selects_its_backend_and_every_backend_has_one() {
        for UrlScheme { scheme, backend } in URL_SCHEMES {
            let url = match backend {
                BackendKind::Sqlite => format!("{scheme}:///tmp/contract.db"),
                _ => format!("{scheme}://127.0.0.1:7001/1"),
            };
            let parsed = LockerUrl::parse(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(parsed.kind, *backend, "{url}");
            assert_eq!(*scheme, scheme.to_ascii_lowercase());
        }
        // No wildcard: a new backend does not compile here until it is in `kinds` below too.
        let has_a_scheme = |kind: BackendKind| match kind {
            BackendKind::Redis
            | BackendKind::RedisCluster
            | BackendKind::Redlock
            | BackendKind::ZooKeeper
            | BackendKind::Postgres
            | BackendKind::MySql
            | BackendKind::Sqlite => URL_SCHEMES.iter().any(|s| s.backend == kind),
        };
        let kinds = [
            BackendKind::Redis,
            BackendKind::RedisCluster,
            BackendKind::Redlock,
            BackendKind::ZooKeeper,
            BackendKind::Postgres,
            BackendKind::MySql,
            BackendKind::Sqlite,
        ];
        for kind in kinds {
            assert!(has_a_scheme(kind), "{kind:?} has no URL scheme");
        }
        assert!(LockerUrl::parse("memcached://127.0.0.1:1").is_err());
    }
}
