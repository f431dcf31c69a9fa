//! MySQL and MariaDB: from a fencelock URL to a small statement pool.
//!
//! URL: `mariadb://user:password@host:3306/database?ssl-mode=VERIFY_IDENTITY&ssl-ca=ca.pem`
//! (`mysql://` too). TLS options are the MySQL client's: `ssl-mode` (`DISABLED`,
//! `PREFERRED`, the default, `REQUIRED`, `VERIFY_CA`, `VERIFY_IDENTITY`; `tls=true` alone
//! means `VERIFY_IDENTITY`), `ssl-ca`, `ssl-cert`, `ssl-key` (`_` works for `-`). Only the
//! `VERIFY_*` modes check the server's certificate.
//!
//! Every session runs with `time_zone = '+00:00'` (the expiry column is a UTC `DATETIME(6)`,
//! written with `UTC_TIMESTAMP(6)`), and waits for a row lock no longer than an operation may
//! take (`innodb_lock_wait_timeout`); the lease table's sessions run in READ COMMITTED
//! (`SqlSettings::read_committed` says why). MariaDB 10.11 is what the tests run; MySQL 8 speaks the
//! same SQL but is not tested.

use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};

use super::SqlSettings;
use super::conn_pool::{ConnPool, PoolSettings};
use super::session::Pooled;
use crate::error::{Error, Result};
use crate::options::LockerOptions;
use crate::url::LockerUrl;

/// The MySQL URL options besides the shared ones (`table`, `create_table`, `pool_size`).
pub(crate) const OPTIONS: &[&str] = &[
    "ssl-mode", "ssl_mode", "ssl-ca", "ssl_ca", "ssl-cert", "ssl_cert", "ssl-key", "ssl_key", "tls",
];

const IDLE_PING: Duration = Duration::from_secs(1);

fn option<'a>(url: &'a LockerUrl, key: &str) -> Option<&'a String> {
    url.query
        .get(key)
        .or_else(|| url.query.get(&key.replace('-', "_")))
}

fn existing_file(url: &LockerUrl, key: &str) -> Result<Option<String>> {
    match option(url, key) {
        None => Ok(None),
        Some(path) if std::path::Path::new(path).is_file() => Ok(Some(path.clone())),
        Some(path) => Err(Error::invalid(format!("{key}={path}: no such file"))),
    }
}

fn ssl_mode(url: &LockerUrl) -> Result<MySqlSslMode> {
    match option(url, "ssl-mode").map(|m| m.to_ascii_uppercase().replace('-', "_")) {
        None if url.tls => Ok(MySqlSslMode::VerifyIdentity),
        None => Ok(MySqlSslMode::Preferred),
        Some(m) => Ok(match m.as_str() {
            "DISABLED" => MySqlSslMode::Disabled,
            "PREFERRED" => MySqlSslMode::Preferred,
            "REQUIRED" => MySqlSslMode::Required,
            "VERIFY_CA" => MySqlSslMode::VerifyCa,
            "VERIFY_IDENTITY" => MySqlSslMode::VerifyIdentity,
            other => {
                return Err(Error::invalid(format!(
                    "ssl-mode must be DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY, not {other:?}"
                )));
            }
        }),
    }
}

pub(crate) fn connect_options(url: &LockerUrl) -> Result<MySqlConnectOptions> {
    let host = url
        .hosts
        .first()
        .ok_or_else(|| Error::invalid("a mysql URL needs a host"))?;
    let mut o = MySqlConnectOptions::new()
        .host(&host.host)
        .port(host.port.unwrap_or(3306));
    if let Some(user) = &url.user {
        o = o.username(user);
    }
    if let Some(password) = url.password() {
        o = o.password(password);
    }
    let database = url.path.trim_matches('/');
    if database.is_empty() {
        return Err(Error::invalid(format!(
            "{} names no database: add /DATABASE",
            url.redacted()
        )));
    }
    o = o
        .database(database)
        .ssl_mode(ssl_mode(url)?)
        .timezone(Some("+00:00".to_string()))
        .charset("utf8mb4");
    if let Some(ca) = existing_file(url, "ssl-ca")? {
        o = o.ssl_ca(ca);
    }
    match (
        existing_file(url, "ssl-cert")?,
        existing_file(url, "ssl-key")?,
    ) {
        (Some(cert), Some(key)) => o = o.ssl_client_cert(cert).ssl_client_key(key),
        (None, None) => {}
        _ => {
            return Err(Error::invalid(
                "a TLS client certificate needs both ssl-cert= and ssl-key=",
            ));
        }
    }
    Ok(o)
}

/// The statement pool: small, connected lazily, pinging connections that sat idle.
pub(crate) fn open_pool(
    url: &LockerUrl,
    options: &LockerOptions,
    settings: &SqlSettings,
) -> Result<Pooled<sqlx::MySql>> {
    let connect = connect_options(url)?;
    let lock_wait = options.operation_timeout.as_secs().max(1);
    let mut setup = vec![format!(
        "SET SESSION innodb_lock_wait_timeout = {lock_wait}"
    )];
    if settings.read_committed {
        setup.push("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".to_string());
    }
    let pool = ConnPool::new(PoolSettings {
        connect,
        setup,
        size: settings.pool_size,
        acquire_timeout: options.operation_timeout,
        ping_after: Some(IDLE_PING),
    });
    Ok(Pooled {
        pool,
        begin_sql: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> LockerUrl {
        LockerUrl::parse(url).unwrap()
    }

    #[test]
    fn tls_options_are_the_mysql_clients() {
        assert!(matches!(
            ssl_mode(&parse("mariadb://h/db")).unwrap(),
            MySqlSslMode::Preferred
        ));
        assert!(matches!(
            ssl_mode(&parse("mariadb://h/db?ssl-mode=VERIFY_IDENTITY")).unwrap(),
            MySqlSslMode::VerifyIdentity
        ));
        assert!(matches!(
            ssl_mode(&parse("mysql://h/db?ssl_mode=required")).unwrap(),
            MySqlSslMode::Required
        ));
        assert!(matches!(
            ssl_mode(&parse("mysql://h/db?ssl-mode=verify-ca")).unwrap(),
            MySqlSslMode::VerifyCa
        ));
        assert!(matches!(
            ssl_mode(&parse("mysql://h/db?tls=true")).unwrap(),
            MySqlSslMode::VerifyIdentity
        ));
        assert!(ssl_mode(&parse("mysql://h/db?ssl-mode=maybe")).is_err());
        let err = connect_options(&parse("mysql://h/db?ssl-ca=/no/such/ca.pem")).unwrap_err();
        assert!(err.message().contains("/no/such/ca.pem"), "{err}");
        assert!(
            connect_options(&parse("mysql://u:pw@h"))
                .unwrap_err()
                .message()
                .contains("no database")
        );
        let o = connect_options(&parse("mariadb://bob:pw@db.example:3307/app")).unwrap();
        assert_eq!(
            (
                o.get_host(),
                o.get_port(),
                o.get_username(),
                o.get_database()
            ),
            ("db.example", 3307, "bob", Some("app"))
        );
    }
}
