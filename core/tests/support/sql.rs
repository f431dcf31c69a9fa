//! Shared by the PostgreSQL and MariaDB tests: the servers' URLs, unique table names, and a
//! plain sqlx pool for setting up and inspecting state by hand.
#![allow(dead_code)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx::{AssertSqlSafe, Row};

use crate::support::url;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    MariaDb,
}

#[derive(Debug, Clone)]
pub struct Db {
    pub kind: Kind,
    /// The owner role (may create tables).
    pub url: String,
    /// The least-privilege role: SELECT, INSERT, UPDATE, DELETE only.
    pub app_url: String,
}

pub fn postgres() -> Db {
    Db {
        kind: Kind::Postgres,
        url: url(
            "POSTGRES",
            "postgres://fencelock:fencelock-test@127.0.0.1:5432/fencelock_test",
        ),
        app_url: url(
            "POSTGRES_APP",
            "postgres://fencelock_app:fencelock-app@127.0.0.1:5432/fencelock_test",
        ),
    }
}

pub fn mariadb() -> Db {
    Db {
        kind: Kind::MariaDb,
        url: url(
            "MARIADB",
            "mariadb://fencelock:fencelock-test@127.0.0.1:3306/fencelock_test",
        ),
        app_url: url(
            "MARIADB_APP",
            "mariadb://fencelock_app:fencelock-app@127.0.0.1:3306/fencelock_test",
        ),
    }
}

pub fn by_name(name: &str) -> Db {
    match name {
        "postgres" => postgres(),
        _ => mariadb(),
    }
}

/// A table name no other test (or earlier run) uses: a plain identifier of at most 48 bytes.
pub fn table(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 10_000_000_000;
    format!("fl_{prefix}_{}_{nanos}", std::process::id())
}

/// `url` with `query` (`a=b&c=d`) added.
pub fn with(url: &str, query: &str) -> String {
    if url.contains('?') {
        format!("{url}&{query}")
    } else {
        format!("{url}?{query}")
    }
}

impl Db {
    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::Postgres => "postgres",
            Kind::MariaDb => "mariadb",
        }
    }

    /// The owner URL with fencelock options added.
    pub fn with(&self, query: &str) -> String {
        with(&self.url, query)
    }

    /// The `n`th placeholder (1-based) in this database's SQL.
    pub fn p(&self, n: usize) -> String {
        match self.kind {
            Kind::Postgres => format!("${n}"),
            Kind::MariaDb => "?".to_string(),
        }
    }

    pub async fn raw(&self) -> Raw {
        match self.kind {
            Kind::Postgres => Raw::Pg(sqlx::PgPool::connect(&self.url).await.unwrap()),
            Kind::MariaDb => Raw::My(
                sqlx::MySqlPool::connect(&self.url.replacen("mariadb://", "mysql://", 1))
                    .await
                    .unwrap(),
            ),
        }
    }

    /// Waits (up to a minute) until the server answers again after a restart.
    pub async fn wait_until_answers(&self) {
        let started = Instant::now();
        loop {
            let ok = match self.kind {
                Kind::Postgres => sqlx::PgPool::connect(&self.url).await.map(|_| ()).is_ok(),
                Kind::MariaDb => {
                    sqlx::MySqlPool::connect(&self.url.replacen("mariadb://", "mysql://", 1))
                        .await
                        .map(|_| ())
                        .is_ok()
                }
            };
            if ok {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{} did not come back",
                self.name()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A plain connection pool to one of the test servers.
pub enum Raw {
    Pg(sqlx::PgPool),
    My(sqlx::MySqlPool),
}

impl Raw {
    pub async fn exec(&self, sql: &str) -> u64 {
        match self {
            Raw::Pg(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .execute(p)
                .await
                .unwrap()
                .rows_affected(),
            Raw::My(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .execute(p)
                .await
                .unwrap()
                .rows_affected(),
        }
    }

    /// Runs `sql` with one binary parameter.
    pub async fn exec_bytes(&self, sql: &str, value: &[u8]) -> u64 {
        match self {
            Raw::Pg(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .bind(value)
                .execute(p)
                .await
                .unwrap()
                .rows_affected(),
            Raw::My(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .bind(value)
                .execute(p)
                .await
                .unwrap()
                .rows_affected(),
        }
    }

    /// The first column of the first row, as an integer.
    pub async fn int(&self, sql: &str) -> Option<i64> {
        match self {
            Raw::Pg(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .fetch_optional(p)
                .await
                .unwrap()
                .and_then(|r| r.try_get::<Option<i64>, _>(0).unwrap()),
            Raw::My(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .fetch_optional(p)
                .await
                .unwrap()
                .and_then(|r| r.try_get::<Option<i64>, _>(0).unwrap()),
        }
    }

    /// Every row of two integer columns.
    pub async fn pairs(&self, sql: &str) -> Vec<(i64, i64)> {
        match self {
            Raw::Pg(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .fetch_all(p)
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
                .collect(),
            Raw::My(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .fetch_all(p)
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
                .collect(),
        }
    }

    /// Every value of one binary column.
    pub async fn bytes(&self, sql: &str) -> Vec<Vec<u8>> {
        match self {
            Raw::Pg(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .fetch_all(p)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<Vec<u8>, _>(0))
                .collect(),
            Raw::My(p) => sqlx::query(AssertSqlSafe(sql.to_string()))
                .fetch_all(p)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<Vec<u8>, _>(0))
                .collect(),
        }
    }

    /// Drops a lease table and its meta table, or any tables, if they exist.
    pub async fn drop_tables(&self, tables: &[&str]) {
        for t in tables {
            self.exec(&format!("DROP TABLE IF EXISTS {t}")).await;
        }
    }

    pub async fn close(self) {
        match self {
            Raw::Pg(p) => p.close().await,
            Raw::My(p) => p.close().await,
        }
    }
}
