//! From a fencelock URL to redis-rs clients.

use std::time::Duration;

use redis::{
    ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo,
};

use super::error::map_error;
use crate::error::{Error, Result};
use crate::url::{HostPort, LockerUrl};

/// Settings read from the URL's query.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub prefix: String,
    /// Follow acquires and renewals with `WAIT 1` when the master reports replicas.
    pub replica_ack: bool,
    /// Accept a `maxmemory-policy` that may evict lock keys.
    pub allow_eviction: bool,
    /// Treat a NOPERM answer to a connect-time check as an error, not a warning.
    pub strict_checks: bool,
    /// How far a replica's clock may run ahead of its master's: a replica promoted after a
    /// failover expires keys by its own clock, so the client deadline comes this much earlier.
    /// Zero says no replica is ever promoted.
    pub max_skew: Duration,
}

/// The default `max_skew`: enough for replicas whose clocks NTP keeps close, small enough that
/// a ttl of 600 ms keeps most of itself.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_millis(100);

const KNOWN: [&str; 9] = [
    "prefix",
    "max_skew",
    "replica_ack",
    "allow_eviction",
    "strict_checks",
    "ca",
    "cert",
    "key",
    "tls",
];

impl RedisSettings {
    pub fn from_url(url: &LockerUrl) -> Result<Self> {
        url.refuse_unknown_options("Redis", &KNOWN)?;
        let prefix = url
            .query
            .get("prefix")
            .cloned()
            .unwrap_or_else(|| super::keys::DEFAULT_PREFIX.to_string());
        super::keys::validate_prefix(&prefix)?;
        Ok(RedisSettings {
            prefix,
            replica_ack: url.bool_option("replica_ack", true)?,
            allow_eviction: url.bool_option("allow_eviction", false)?,
            strict_checks: url.bool_option("strict_checks", false)?,
            max_skew: max_skew(url)?,
        })
    }
}

fn max_skew(url: &LockerUrl) -> Result<Duration> {
    let skew = url.duration_option("max_skew", DEFAULT_MAX_SKEW)?;
    if skew > Duration::from_secs(60) {
        return Err(Error::invalid(format!(
            "max_skew of {skew:?} is longer than a minute"
        )));
    }
    Ok(skew)
}

/// The database index from the URL's path (`redis://h:6379/2`).
fn database(url: &LockerUrl) -> Result<i64> {
    let path = url.path.trim_matches('/');
    if path.is_empty() {
        return Ok(0);
    }
    path.parse::<i64>()
        .ok()
        .filter(|db| (0..=100_000).contains(db))
        .ok_or_else(|| {
            // The path is not quoted: a mistyped URL can put part of a password there.
            Error::invalid(
                "the Redis database index (the URL's path, as in redis://host:6379/2) must be a \
                 number from 0 to 100000",
            )
        })
}

/// Connection info for one host of `url`, speaking RESP3 (pub/sub on the shared connection).
pub fn connection_info(url: &LockerUrl, host: &HostPort) -> Result<ConnectionInfo> {
    let port = host.port.unwrap_or(6379);
    let addr = if url.tls {
        ConnectionAddr::TcpTls {
            host: host.host.clone(),
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.host.clone(), port)
    };
    let mut redis = RedisConnectionInfo::default()
        .set_db(database(url)?)
        .set_protocol(ProtocolVersion::RESP3);
    if let Some(user) = &url.user {
        redis = redis.set_username(user);
    }
    if let Some(password) = url.password() {
        redis = redis.set_password(password);
    }
    let info = addr
        .into_connection_info()
        .map_err(|e| map_error("redis address", e))?;
    Ok(info.set_redis_settings(redis))
}

fn read_pem(url: &LockerUrl, key: &str) -> Result<Option<Vec<u8>>> {
    match url.query.get(key) {
        None => Ok(None),
        Some(path) => std::fs::read(path)
            .map(Some)
            .map_err(|e| Error::invalid(format!("cannot read the TLS file {key}={path}: {e}"))),
    }
}

/// A client for one host, with TLS files from `?ca=`, `?cert=` and `?key=`.
pub fn client(url: &LockerUrl, host: &HostPort) -> Result<redis::Client> {
    let info = connection_info(url, host)?;
    let ca = read_pem(url, "ca")?;
    let cert = read_pem(url, "cert")?;
    let key = read_pem(url, "key")?;
    if !url.tls && (ca.is_some() || cert.is_some()) {
        return Err(Error::invalid(
            "TLS files were given for a plain redis:// URL; use rediss://",
        ));
    }
    if url.tls {
        install_crypto_provider();
        let client_tls = match (cert, key) {
            (Some(client_cert), Some(client_key)) => Some(redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::invalid(
                    "a TLS client certificate needs both cert= and key=",
                ));
            }
        };
        redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls,
                root_cert: ca,
            },
        )
        .map_err(|e| map_error("redis TLS setup", e))
    } else {
        redis::Client::open(info).map_err(|e| map_error("redis client", e))
    }
}

/// rustls needs one process-wide crypto provider; with more than one compiled in (other
/// dependencies bring aws-lc-rs) it cannot pick by itself, so fencelock picks ring unless the
/// application installed one first.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A Cluster client over every seed host of `url` (RESP3, sharded pub/sub), with `sink`
/// receiving push messages.
pub fn cluster_client(
    url: &LockerUrl,
    timeout: Duration,
    sink: impl redis::aio::AsyncPushSender,
) -> Result<redis::cluster::ClusterClient> {
    let mut seeds = Vec::new();
    for host in &url.hosts {
        seeds.push(connection_info(url, host)?);
    }
    if database(url)? != 0 {
        return Err(Error::invalid("a Redis Cluster has only database 0"));
    }
    let mut builder = redis::cluster::ClusterClientBuilder::new(seeds)
        .use_protocol(ProtocolVersion::RESP3)
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(2)
        .push_sender(sink);
    if let Some(user) = &url.user {
        builder = builder.username(user);
    }
    if let Some(password) = url.password() {
        builder = builder.password(password);
    }
    if url.tls {
        install_crypto_provider();
        let client_tls = match (read_pem(url, "cert")?, read_pem(url, "key")?) {
            (Some(client_cert), Some(client_key)) => Some(redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::invalid(
                    "a TLS client certificate needs both cert= and key=",
                ));
            }
        };
        builder = builder.certs(redis::TlsCertificates {
            client_tls,
            root_cert: read_pem(url, "ca")?,
        });
    }
    builder
        .build()
        .map_err(|e| map_error("redis cluster client", e))
}

pub fn manager_config(timeout: Duration) -> redis::aio::ConnectionManagerConfig {
    redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}
