//! From a fencelock URL to redis-rs clients, and the one place Redis errors are mapped.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::{
    ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo,
};

use crate::error::{Error, Result};
use crate::url::{HostPort, LockerUrl, redact_secrets};

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

fn flag(query: &BTreeMap<String, String>, key: &str, default: bool) -> Result<bool> {
    match query.get(key).map(|v| v.to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v == "true" || v == "1" || v == "yes" => Ok(true),
        Some(v) if v == "false" || v == "0" || v == "no" => Ok(false),
        Some(v) => Err(Error::invalid(format!(
            "{key} must be true or false, not {v:?}"
        ))),
    }
}

impl RedisSettings {
    pub fn from_url(url: &LockerUrl) -> Result<Self> {
        for key in url.query.keys() {
            if !KNOWN.contains(&key.as_str()) {
                return Err(Error::invalid(format!(
                    "unknown Redis URL option {key:?}; known: {}",
                    KNOWN.join(", ")
                )));
            }
        }
        let prefix = url
            .query
            .get("prefix")
            .cloned()
            .unwrap_or_else(|| super::keys::DEFAULT_PREFIX.to_string());
        super::keys::validate_prefix(&prefix)?;
        Ok(RedisSettings {
            prefix,
            replica_ack: flag(&url.query, "replica_ack", true)?,
            allow_eviction: flag(&url.query, "allow_eviction", false)?,
            strict_checks: flag(&url.query, "strict_checks", false)?,
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

/// Converts a redis-rs error: retryable when the connection failed, AUTH when credentials or
/// permissions were refused, secrets stripped from every message.
pub fn map_error(context: &str, err: redis::RedisError) -> Error {
    let text = redact_secrets(&err.to_string());
    let code = err.code().unwrap_or("").to_string();
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code.as_str(), "NOPERM" | "WRONGPASS" | "NOAUTH")
    {
        return Error::auth(format!("{context}: {text}"));
    }
    if err.is_io_error()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_connection_dropped()
    {
        return Error::unavailable(format!("{context}: {text}"));
    }
    if matches!(
        code.as_str(),
        "LOADING"
            | "BUSY"
            | "TRYAGAIN"
            | "CLUSTERDOWN"
            | "MASTERDOWN"
            | "READONLY"
            | "MOVED"
            | "ASK"
    ) {
        return Error::unavailable(format!("{context}: {text}"));
    }
    if text.contains("DB index is out of range") {
        return Error::invalid(format!(
            "{context}: the database index is out of range for this server"
        ));
    }
    Error::backend(format!("{context}: {text}"))
}
