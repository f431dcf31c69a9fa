//! The backend kinds, and the URL schemes that select them.

use super::redact::unparsed;
use crate::error::{Error, Result};

/// Which algorithm and server family a URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Redis,
    RedisCluster,
    Redlock,
    ZooKeeper,
    Postgres,
    MySql,
    Sqlite,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Redis => "redis",
            BackendKind::RedisCluster => "redis-cluster",
            BackendKind::Redlock => "redlock",
            BackendKind::ZooKeeper => "zookeeper",
            BackendKind::Postgres => "postgres",
            BackendKind::MySql => "mysql",
            BackendKind::Sqlite => "sqlite",
        }
    }

    /// The kind the lowercased `scheme` of `url` selects, and whether the scheme itself means
    /// TLS (`rediss`, `rediss+cluster`).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an unknown scheme; the message shows `url` redacted.
    pub(super) fn from_scheme(scheme: &str, url: &str) -> Result<(Self, bool)> {
        Ok(match scheme {
            "redis" => (BackendKind::Redis, false),
            "rediss" => (BackendKind::Redis, true),
            "redis+cluster" => (BackendKind::RedisCluster, false),
            "rediss+cluster" => (BackendKind::RedisCluster, true),
            "redlock" => (BackendKind::Redlock, false),
            "zk" | "zookeeper" => (BackendKind::ZooKeeper, false),
            "postgres" | "postgresql" => (BackendKind::Postgres, false),
            "mysql" | "mariadb" => (BackendKind::MySql, false),
            "sqlite" => (BackendKind::Sqlite, false),
            other => {
                return Err(Error::invalid(format!(
                    "unknown URL scheme {other:?} in {}; expected one of redis, rediss, \
                     redis+cluster, redlock, zk, postgres, mysql, mariadb, sqlite",
                    unparsed(url)
                )));
            }
        })
    }
}
