//! One small interface over the three sqlx drivers: a pool hands out plain connections
//! (autocommit) and transactions, and both run statements with [`SqlValue`] parameters and
//! return rows of [`SqlValue`]s. The lease table and the fence are written once against it.
//!
//! The impls are stamped out per driver by a macro because sqlx's types differ per driver
//! (argument buffers, rows); nothing in them is specific to one database except how a
//! typeless NULL is bound.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{Arguments, AssertSqlSafe, Row as _};

use super::conn_pool::{ConnPool, Lent};
use crate::sql_value::SqlValue;

/// What a statement's result column is read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Col {
    /// Any integer (or boolean, as 0/1), or NULL.
    Int,
    /// Text (or bytes, read as UTF-8), or NULL.
    Text,
}

pub(crate) type Row = Vec<SqlValue>;

pub(crate) fn int(row: &Row, i: usize) -> Option<i64> {
    match row.get(i) {
        Some(SqlValue::Int(v)) => Some(*v),
        _ => None,
    }
}

pub(crate) fn text(row: &Row, i: usize) -> Option<String> {
    match row.get(i) {
        Some(SqlValue::Text(v)) => Some(v.clone()),
        _ => None,
    }
}

/// A pooled connection (each statement commits by itself) or a transaction.
#[async_trait]
pub(crate) trait Session: Send {
    /// Runs a statement; the rows it affected (or returned, for a PostgreSQL `SELECT`).
    async fn execute(&mut self, sql: &Arc<str>, params: Vec<SqlValue>) -> Result<u64, sqlx::Error> {
        Ok(self.execute_with_id(sql, params).await?.0)
    }
    /// Runs a statement; the rows it affected and the id its answer carries: MySQL's
    /// `LAST_INSERT_ID` (which `LAST_INSERT_ID(expr)` in an `UPDATE` sets), SQLite's last
    /// rowid, none on PostgreSQL.
    async fn execute_with_id(
        &mut self,
        sql: &Arc<str>,
        params: Vec<SqlValue>,
    ) -> Result<(u64, Option<u64>), sqlx::Error>;
    /// Runs a statement and reads its first row as `cols`.
    async fn fetch_optional(
        &mut self,
        sql: &Arc<str>,
        params: Vec<SqlValue>,
        cols: &[Col],
    ) -> Result<Option<Row>, sqlx::Error>;
    /// Runs a statement and reads every row as `cols`.
    async fn fetch_all(
        &mut self,
        sql: &Arc<str>,
        params: Vec<SqlValue>,
        cols: &[Col],
    ) -> Result<Vec<Row>, sqlx::Error>;
    /// Runs a caller's statement and reads every row whole, each value as the type the
    /// database gave it (an integer, a float, text, bytes or NULL): [`Fence::query`].
    ///
    /// [`Fence::query`]: crate::Fence::query
    async fn fetch_all_values(
        &mut self,
        sql: &Arc<str>,
        params: Vec<SqlValue>,
    ) -> Result<Vec<Row>, sqlx::Error>;
    /// Commits a transaction (nothing to do for a plain connection).
    async fn commit(self: Box<Self>) -> Result<(), sqlx::Error>;
    /// Rolls a transaction back (nothing to do for a plain connection).
    async fn rollback(self: Box<Self>) -> Result<(), sqlx::Error>;
}

#[async_trait]
pub(crate) trait SqlPool: Send + Sync {
    /// A connection whose statements commit one by one.
    async fn connection(&self) -> Result<Box<dyn Session>, sqlx::Error>;
    /// A write transaction (`BEGIN IMMEDIATE` on SQLite, so the write lock is taken first).
    async fn begin(&self) -> Result<Box<dyn Session>, sqlx::Error>;
    /// A connection of its own, with the pool's settings but outside it: for work that runs
    /// often and long (the wake-up poll), which would otherwise take a pooled connection from
    /// the statements and pay the pool's ping at every check-in. Its statements commit one by
    /// one; it closes when dropped.
    async fn detached(&self) -> Result<Box<dyn Session>, sqlx::Error>;
    /// A session in which the database refuses writes: a read-only transaction on the servers,
    /// a connection of its own with `PRAGMA query_only` on SQLite (a pragma is not
    /// transactional, so no pooled connection ever carries it). Roll it back when done.
    async fn read_only(&self) -> Result<Box<dyn Session>, sqlx::Error>;
    async fn close(&self);
}

/// The statement pool of one driver ([`ConnPool`]), and how its write transactions begin.
pub(crate) struct Pooled<DB: sqlx::Database>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    pub pool: Arc<ConnPool<DB>>,
    pub begin_sql: Option<&'static str>,
}

/// A lent connection whose statements commit one by one.
pub(crate) struct Conn<DB: sqlx::Database>(Lent<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>;
/// A lent connection inside a transaction.
pub(crate) struct Tx<DB: sqlx::Database>(Lent<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>;
/// A connection of its own, outside the pool (see [`SqlPool::detached`]).
pub(crate) struct Detached<DB: sqlx::Database>(DB::Connection);

/// PostgreSQL types every parameter; a NULL with no type lets the server infer it from the
/// statement, as it does for a literal NULL (sqlx would otherwise send whatever type the
/// Rust `None` had, and `INSERT … VALUES ($1)` into a text column would fail).
#[cfg(feature = "postgres")]
struct UntypedNull;

#[cfg(feature = "postgres")]
impl sqlx::Type<sqlx::Postgres> for UntypedNull {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        sqlx::postgres::PgTypeInfo::with_oid(sqlx::postgres::types::Oid(0))
    }
}

#[cfg(feature = "postgres")]
impl sqlx::Encode<'_, sqlx::Postgres> for UntypedNull {
    fn encode_by_ref(
        &self,
        _buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        Ok(sqlx::encode::IsNull::Yes)
    }
}

/// The [`Session`] impl of one wrapper of a `$db` connection, the same for each: the wrapper's
/// inherent `start()` reaches the connection for a statement, `ended(&outcome)` records how the
/// statement ended (a lent connection goes back to its pool only after statements that ran to
/// their end), and `end(commit)` ends the transaction (nothing to do for a plain connection).
macro_rules! session {
    ($wrapper:ident, $db:ty, $reported_id:expr) => {
        impl $wrapper<$db> {
            /// Every row of a statement, undecoded: `fetch_all` and `fetch_all_values` decode.
            async fn fetch_rows(
                &mut self,
                sql: &Arc<str>,
                params: Vec<SqlValue>,
            ) -> Result<Vec<<$db as sqlx::Database>::Row>, sqlx::Error> {
                let args = Pooled::<$db>::bind(params)?;
                let rows = sqlx::query_with(AssertSqlSafe(sql.clone()), args)
                    .fetch_all(self.start())
                    .await;
                self.ended(&rows);
                rows
            }
        }

        #[async_trait]
        impl Session for $wrapper<$db> {
            async fn fetch_all(
                &mut self,
                sql: &Arc<str>,
                params: Vec<SqlValue>,
                cols: &[Col],
            ) -> Result<Vec<Row>, sqlx::Error> {
                self.fetch_rows(sql, params)
                    .await?
                    .iter()
                    .map(|r| Pooled::<$db>::decode(r, cols))
                    .collect()
            }

            async fn execute_with_id(
                &mut self,
                sql: &Arc<str>,
                params: Vec<SqlValue>,
            ) -> Result<(u64, Option<u64>), sqlx::Error> {
                let reported_id: fn(&<$db as sqlx::Database>::QueryResult) -> Option<u64> =
                    $reported_id;
                let args = Pooled::<$db>::bind(params)?;
                let done = sqlx::query_with(AssertSqlSafe(sql.clone()), args)
                    .execute(self.start())
                    .await;
                self.ended(&done);
                let done = done?;
                Ok((done.rows_affected(), reported_id(&done)))
            }

            async fn fetch_optional(
                &mut self,
                sql: &Arc<str>,
                params: Vec<SqlValue>,
                cols: &[Col],
            ) -> Result<Option<Row>, sqlx::Error> {
                let args = Pooled::<$db>::bind(params)?;
                let row = sqlx::query_with(AssertSqlSafe(sql.clone()), args)
                    .fetch_optional(self.start())
                    .await;
                self.ended(&row);
                let row = row?;
                row.map(|r| Pooled::<$db>::decode(&r, cols)).transpose()
            }

            async fn fetch_all_values(
                &mut self,
                sql: &Arc<str>,
                params: Vec<SqlValue>,
            ) -> Result<Vec<Row>, sqlx::Error> {
                self.fetch_rows(sql, params)
                    .await?
                    .iter()
                    .map(Pooled::<$db>::decode_values)
                    .collect()
            }

            async fn commit(mut self: Box<Self>) -> Result<(), sqlx::Error> {
                self.end(true).await
            }

            async fn rollback(mut self: Box<Self>) -> Result<(), sqlx::Error> {
                self.end(false).await
            }
        }
    };
}

macro_rules! driver {
    ($db:ty, $args:ty, $null:expr, $reported_id:expr, $read_only_begin:expr, $unsigned:expr) => {
        impl Conn<$db> {
            fn start(&mut self) -> &mut <$db as sqlx::Database>::Connection {
                self.0.start()
            }

            fn ended<T>(&mut self, outcome: &Result<T, sqlx::Error>) {
                self.0.ended(outcome)
            }

            async fn end(&mut self, _commit: bool) -> Result<(), sqlx::Error> {
                Ok(())
            }
        }

        impl Detached<$db> {
            fn start(&mut self) -> &mut <$db as sqlx::Database>::Connection {
                &mut self.0
            }

            fn ended<T>(&mut self, _outcome: &Result<T, sqlx::Error>) {}

            async fn end(&mut self, _commit: bool) -> Result<(), sqlx::Error> {
                Ok(())
            }
        }

        impl Tx<$db> {
            fn start(&mut self) -> &mut <$db as sqlx::Database>::Connection {
                self.0.start()
            }

            fn ended<T>(&mut self, outcome: &Result<T, sqlx::Error>) {
                self.0.ended(outcome)
            }

            async fn end(&mut self, commit: bool) -> Result<(), sqlx::Error> {
                self.0.end(commit).await
            }
        }

        session!(Conn, $db, $reported_id);
        session!(Detached, $db, $reported_id);
        session!(Tx, $db, $reported_id);

        impl Pooled<$db> {
            fn bind(params: Vec<SqlValue>) -> Result<$args, sqlx::Error> {
                let mut args = <$args>::default();
                for value in params {
                    let added = match value {
                        SqlValue::Null => args.add($null),
                        SqlValue::Int(v) => args.add(v),
                        SqlValue::Float(v) => args.add(v),
                        SqlValue::Text(v) => args.add(v),
                        SqlValue::Bytes(v) => args.add(v),
                    };
                    added.map_err(sqlx::Error::Encode)?;
                }
                Ok(args)
            }

            fn decode(
                row: &<$db as sqlx::Database>::Row,
                cols: &[Col],
            ) -> Result<Row, sqlx::Error> {
                let mut out = Vec::with_capacity(cols.len());
                for (i, col) in cols.iter().enumerate() {
                    let value = match col {
                        Col::Int => {
                            if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
                                v.map(SqlValue::Int)
                            } else if let Ok(v) = row.try_get::<Option<i32>, _>(i) {
                                v.map(|v| SqlValue::Int(v.into()))
                            } else if let Ok(v) = row.try_get::<Option<i16>, _>(i) {
                                v.map(|v| SqlValue::Int(v.into()))
                            } else if let Ok(v) = row.try_get::<Option<bool>, _>(i) {
                                v.map(|v| SqlValue::Int(v.into()))
                            } else {
                                row.try_get::<Option<i64>, _>(i)?.map(SqlValue::Int)
                            }
                        }
                        Col::Text => {
                            if let Ok(v) = row.try_get::<Option<String>, _>(i) {
                                v.map(SqlValue::Text)
                            } else {
                                row.try_get::<Option<Vec<u8>>, _>(i)?.map(|b| {
                                    SqlValue::Text(String::from_utf8_lossy(&b).into_owned())
                                })
                            }
                        }
                    };
                    out.push(value.unwrap_or(SqlValue::Null));
                }
                Ok(out)
            }
        }

        impl Pooled<$db> {
            /// Every column of `row` as the type the database gave it.
            fn decode_values(row: &<$db as sqlx::Database>::Row) -> Result<Row, sqlx::Error> {
                use sqlx::{TypeInfo as _, ValueRef as _};
                let unsigned: fn(&<$db as sqlx::Database>::Row, usize) -> Option<SqlValue> =
                    $unsigned;
                let mut out = Vec::with_capacity(row.len());
                for i in 0..row.len() {
                    let raw = row.try_get_raw(i)?;
                    if raw.is_null() {
                        out.push(SqlValue::Null);
                        continue;
                    }
                    let type_name = raw.type_info().name().to_ascii_uppercase();
                    let binary = ["BLOB", "BINARY", "BYTEA"]
                        .iter()
                        .any(|kind| type_name.contains(kind));
                    let bytes = || row.try_get::<Vec<u8>, _>(i).ok().map(SqlValue::Bytes);
                    let value = row
                        .try_get::<i64, _>(i)
                        .ok()
                        .or_else(|| row.try_get::<i32, _>(i).ok().map(i64::from))
                        .or_else(|| row.try_get::<i16, _>(i).ok().map(i64::from))
                        .or_else(|| row.try_get::<bool, _>(i).ok().map(i64::from))
                        .map(SqlValue::Int)
                        .or_else(|| unsigned(row, i))
                        .or_else(|| row.try_get::<f64, _>(i).ok().map(SqlValue::Float))
                        .or_else(|| {
                            row.try_get::<f32, _>(i)
                                .ok()
                                .map(|v| SqlValue::Float(v.into()))
                        })
                        .or_else(|| if binary { bytes() } else { None })
                        .or_else(|| row.try_get::<String, _>(i).ok().map(SqlValue::Text))
                        .or_else(bytes);
                    match value {
                        Some(value) => out.push(value),
                        None => {
                            return Err(sqlx::Error::ColumnDecode {
                                index: format!("{}", i + 1),
                                source: format!(
                                    "its type {type_name} is none of an integer, a float, \
                                     text or bytes: CAST it to one in the query"
                                )
                                .into(),
                            });
                        }
                    }
                }
                Ok(out)
            }
        }

        #[async_trait]
        impl SqlPool for Pooled<$db> {
            async fn connection(&self) -> Result<Box<dyn Session>, sqlx::Error> {
                Ok(Box::new(Conn(self.pool.lend().await?)))
            }

            async fn begin(&self) -> Result<Box<dyn Session>, sqlx::Error> {
                // A BEGIN cut short (a timeout, a cancelled acquire) leaves the connection
                // unknown to its pool, which closes it rather than lend it again.
                let mut lent = self.pool.lend().await?;
                lent.begin(self.begin_sql.unwrap_or("BEGIN")).await?;
                Ok(Box::new(Tx(lent)))
            }

            async fn detached(&self) -> Result<Box<dyn Session>, sqlx::Error> {
                Ok(Box::new(Detached::<$db>(self.pool.open().await?)))
            }

            async fn read_only(&self) -> Result<Box<dyn Session>, sqlx::Error> {
                let begin: Option<&'static str> = $read_only_begin;
                if let Some(begin) = begin {
                    let mut lent = self.pool.lend().await?;
                    lent.begin(begin).await?;
                    return Ok(Box::new(Tx(lent)));
                }
                let mut own = Detached::<$db>(self.pool.open().await?);
                let pragma: Arc<str> = Arc::from("PRAGMA query_only = ON");
                own.execute(&pragma, Vec::new()).await?;
                Ok(Box::new(own))
            }

            async fn close(&self) {
                self.pool.close().await;
            }
        }
    };
}

#[cfg(feature = "sqlite")]
driver!(
    sqlx::Sqlite,
    sqlx::sqlite::SqliteArguments,
    Option::<i64>::None,
    |done| u64::try_from(done.last_insert_rowid()).ok(),
    None,
    |_, _| None
);
#[cfg(feature = "postgres")]
driver!(
    sqlx::Postgres,
    sqlx::postgres::PgArguments,
    UntypedNull,
    |_| None,
    Some("BEGIN READ ONLY"),
    |_, _| None
);
#[cfg(feature = "mysql")]
driver!(
    sqlx::MySql,
    sqlx::mysql::MySqlArguments,
    Option::<i64>::None,
    |done| Some(done.last_insert_id()),
    Some("START TRANSACTION READ ONLY"),
    |row, i| {
        // An UNSIGNED column: above i64's range only as text.
        let v = row.try_get::<u64, _>(i).ok()?;
        Some(i64::try_from(v).map_or_else(|_| SqlValue::Text(v.to_string()), SqlValue::Int))
    }
);
