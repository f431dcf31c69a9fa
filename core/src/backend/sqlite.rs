//! The SQL lease table on SQLite: the embedded default, needing no server.
//!
//! Several processes on one machine share one file safely: WAL journal, a busy timeout, and
//! every write in a `BEGIN IMMEDIATE` transaction (a read-then-write in a deferred
//! transaction can fail with a busy snapshot under WAL whatever the timeout). The "server
//! clock" is this machine's wall clock, read inside the write transaction, in microseconds.
//! Waiting polls with jitter (SQLite has no notifications across processes).

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Row};

use super::sql::{self, map_sqlx_error};
use super::{AcquireRequest, Attempt, Backend, LockInfo, Renewal};
use crate::clock::unix_micros;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;
use crate::options::LockerOptions;
use crate::url::{BackendKind, LockerUrl};

/// SQL text for one table name, built once at connect.
struct Statements {
    acquire: Arc<str>,
    expires_in: Arc<str>,
    renew: Arc<str>,
    release: Arc<str>,
    inspect: Arc<str>,
}

impl Statements {
    fn new(t: &str) -> Self {
        Statements {
            // Takes the row when it is free or expired, minting max(counter + 1, now).
            acquire: format!(
                "INSERT INTO {t} (name, owner, token, expires_at, holder) \
                 VALUES (?1, ?2, ?3, ?3 + ?4, ?5) \
                 ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, \
                   token = MAX({t}.token + 1, ?3), expires_at = excluded.expires_at, \
                   holder = excluded.holder \
                 WHERE {t}.owner IS NULL OR {t}.expires_at < ?3 \
                 RETURNING token"
            )
            .into(),
            expires_in: format!("SELECT expires_at - ?2 FROM {t} WHERE name = ?1").into(),
            renew: format!(
                "UPDATE {t} SET expires_at = ?3 + ?4 \
                 WHERE name = ?1 AND owner = ?2 AND expires_at >= ?3"
            )
            .into(),
            release: format!(
                "UPDATE {t} SET owner = NULL, expires_at = NULL, holder = NULL \
                 WHERE name = ?1 AND owner = ?2"
            )
            .into(),
            inspect: format!(
                "SELECT owner IS NOT NULL AND expires_at >= ?2, token, holder, expires_at - ?2 \
                 FROM {t} WHERE name = ?1"
            )
            .into(),
        }
    }
}

pub struct SqliteBackend {
    pool: SqlitePool,
    statements: Statements,
    deployment_id: String,
}

/// Opens (and unless told otherwise creates) a SQLite database for fencelock's tables:
/// shared by the lock backend and the SQLite fence.
pub(crate) async fn open_pool(url: &LockerUrl, options: &LockerOptions) -> Result<SqlitePool> {
    let path = url.sqlite_path().ok_or_else(|| Error::internal("not a sqlite URL"))?;
    let read_only = match url.query.get("mode").map(String::as_str) {
        None | Some("rwc") | Some("rw") => false,
        Some("ro") => true,
        Some(other) => {
            return Err(Error::invalid(format!("sqlite mode must be ro, rw or rwc, not {other:?}")));
        }
    };
    let busy_timeout = match url.query.get("busy_timeout_ms") {
        None => Duration::from_secs(5),
        Some(ms) => Duration::from_millis(ms.parse::<u64>().ok().filter(|ms| *ms <= 600_000).ok_or_else(
            || Error::invalid(format!("busy_timeout_ms must be 0-600000, not {ms:?}")),
        )?),
    };
    check_folder(&path)?;
    if read_only && !path.exists() {
        return Err(Error::invalid(format!(
            "sqlite database {} does not exist (mode=ro does not create it)",
            path.display()
        )));
    }
    let mut connect = SqliteConnectOptions::from_str("sqlite://")
        .map_err(|e| Error::internal(format!("sqlite options: {e}")))?
        .filename(&path)
        .create_if_missing(!read_only)
        .read_only(read_only)
        .busy_timeout(busy_timeout)
        .synchronous(SqliteSynchronous::Normal);
    if !read_only {
        connect = connect.journal_mode(SqliteJournalMode::Wal);
    }
    SqlitePoolOptions::new()
        .max_connections(2)
        .acquire_timeout(options.operation_timeout)
        .connect_with(connect)
        .await
        .map_err(|e| map_sqlx_error(&format!("opening sqlite database {}", path.display()), e))
}

fn check_folder(path: &Path) -> Result<()> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => return Ok(()),
    };
    if !folder.is_dir() {
        return Err(Error::invalid(format!(
            "the folder {} of sqlite database {} does not exist; create it first",
            folder.display(),
            path.display()
        )));
    }
    Ok(())
}

impl SqliteBackend {
    pub(crate) async fn connect(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let table = url.query.get("table").map(String::as_str).unwrap_or(sql::DEFAULT_TABLE);
        sql::validate_table_name(table)?;
        let create = sql::create_table_option(url.query.get("create_table"))?;
        let pool = open_pool(url, options).await?;
        if create {
            create_tables(&pool, table).await?;
        }
        let deployment_id = read_meta(&pool, table).await?;
        Ok(SqliteBackend { pool, statements: Statements::new(table), deployment_id })
    }

    async fn begin_immediate(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| map_sqlx_error("sqlite begin", e))
    }
}

async fn create_tables(pool: &SqlitePool, t: &str) -> Result<()> {
    let ddl = format!(
        "CREATE TABLE IF NOT EXISTS {t} (\
           name BLOB NOT NULL PRIMARY KEY, owner BLOB, token INTEGER NOT NULL, \
           expires_at INTEGER, holder TEXT) WITHOUT ROWID; \
         CREATE TABLE IF NOT EXISTS {t}_meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL);"
    );
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(|e| map_sqlx_error("creating the lease table", e))?;
    sqlx::raw_sql(AssertSqlSafe(ddl))
        .execute(&mut *tx)
        .await
        .map_err(|e| map_sqlx_error("creating the lease table", e))?;
    let seed = format!("INSERT OR IGNORE INTO {t}_meta (key, value) VALUES ('schema_version', ?1), ('deployment_id', ?2)");
    sqlx::query(AssertSqlSafe(seed))
        .bind(sql::SCHEMA_VERSION.to_string())
        .bind(OwnerId::random()?.to_uuid_string())
        .execute(&mut *tx)
        .await
        .map_err(|e| map_sqlx_error("creating the lease table", e))?;
    tx.commit().await.map_err(|e| map_sqlx_error("creating the lease table", e))
}

async fn read_meta(pool: &SqlitePool, t: &str) -> Result<String> {
    let rows = sqlx::query(AssertSqlSafe(format!("SELECT key, value FROM {t}_meta")))
        .fetch_all(pool)
        .await
        .map_err(|e| {
            let err = map_sqlx_error("reading the lease table's version", e);
            if err.message().contains("no such table") {
                Error::backend(format!(
                    "the lease table {t} (and {t}_meta) does not exist and create_table=false; \
                     create it or allow fencelock to"
                ))
            } else {
                err
            }
        })?;
    let mut version = None;
    let mut deployment = None;
    for row in rows {
        let key: String = row.get(0);
        let value: String = row.get(1);
        match key.as_str() {
            "schema_version" => version = value.parse::<i64>().ok(),
            "deployment_id" => deployment = Some(value),
            _ => {}
        }
    }
    let version = version.ok_or_else(|| Error::backend(format!("{t}_meta has no schema_version row")))?;
    sql::check_schema_version(version, t)?;
    deployment.ok_or_else(|| Error::backend(format!("{t}_meta has no deployment_id row")))
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn duration_from_micros(us: i64) -> Duration {
    Duration::from_micros(us.max(0) as u64)
}

#[async_trait]
impl Backend for SqliteBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn deployment_id(&self) -> &str {
        &self.deployment_id
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let ctx = "sqlite acquire";
        let mut tx = self.begin_immediate().await?;
        let now = unix_micros();
        let row = sqlx::query(AssertSqlSafe(self.statements.acquire.clone()))
            .bind(req.name.as_str().as_bytes())
            .bind(&req.owner.as_bytes()[..])
            .bind(now)
            .bind(micros(req.ttl))
            .bind(req.holder)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(ctx, e))?;
        let attempt = match row {
            Some(row) => {
                let token: i64 = row.try_get(0).map_err(|e| map_sqlx_error(ctx, e))?;
                Attempt::Acquired { token: token as u64 }
            }
            None => {
                let left: Option<i64> = sqlx::query_scalar(AssertSqlSafe(self.statements.expires_in.clone()))
                    .bind(req.name.as_str().as_bytes())
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| map_sqlx_error(ctx, e))?
                    .flatten();
                Attempt::Held { expires_in: left.map(duration_from_micros) }
            }
        };
        tx.commit().await.map_err(|e| map_sqlx_error(ctx, e))?;
        Ok(attempt)
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<Renewal> {
        let ctx = "sqlite renew";
        let mut tx = self.begin_immediate().await?;
        let now = unix_micros();
        let done = sqlx::query(AssertSqlSafe(self.statements.renew.clone()))
            .bind(name.as_str().as_bytes())
            .bind(&owner.as_bytes()[..])
            .bind(now)
            .bind(micros(ttl))
            .execute(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(ctx, e))?;
        tx.commit().await.map_err(|e| map_sqlx_error(ctx, e))?;
        Ok(if done.rows_affected() == 1 { Renewal::Renewed } else { Renewal::NotOurs })
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
        let ctx = "sqlite release";
        let mut tx = self.begin_immediate().await?;
        let done = sqlx::query(AssertSqlSafe(self.statements.release.clone()))
            .bind(name.as_str().as_bytes())
            .bind(&owner.as_bytes()[..])
            .execute(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(ctx, e))?;
        tx.commit().await.map_err(|e| map_sqlx_error(ctx, e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        let ctx = "sqlite inspect";
        let row = sqlx::query(AssertSqlSafe(self.statements.inspect.clone()))
            .bind(name.as_str().as_bytes())
            .bind(unix_micros())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_sqlx_error(ctx, e))?;
        let Some(row) = row else {
            return Ok(LockInfo { name: name.to_string(), held: false, token: None, holder: None, time_left: None });
        };
        let held: Option<bool> = row.try_get(0).map_err(|e| map_sqlx_error(ctx, e))?;
        let held = held.unwrap_or(false);
        let token: i64 = row.try_get(1).map_err(|e| map_sqlx_error(ctx, e))?;
        let holder: Option<String> = row.try_get(2).map_err(|e| map_sqlx_error(ctx, e))?;
        let left: Option<i64> = row.try_get(3).map_err(|e| map_sqlx_error(ctx, e))?;
        Ok(LockInfo {
            name: name.to_string(),
            held,
            token: Some(token as u64),
            holder: if held { holder } else { None },
            time_left: if held { left.map(duration_from_micros) } else { None },
        })
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
