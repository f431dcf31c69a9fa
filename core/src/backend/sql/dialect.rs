//! Every difference between SQLite, PostgreSQL and MySQL/MariaDB that fencelock's SQL code
//! meets, in one place: the table below, and the words and placeholders that spell it. The
//! algorithm (`table.rs`, `fence/sql.rs`) never spells SQL itself: it runs the statements
//! built from these, the lease table's in `mutex_sql.rs` and the fence table's in
//! `fence/sql_statements.rs`.
//!
//! | | SQLite | PostgreSQL | MySQL / MariaDB |
//! |---|---|---|---|
//! | name column | `BLOB` | `BYTEA` | `VARBINARY(255)` (binary: case- and space-sensitive) |
//! | expiry column | `INTEGER` µs since the epoch | `TIMESTAMPTZ` | `DATETIME(6)`, UTC |
//! | clock | this machine's, read inside `BEGIN IMMEDIATE` | `clock_timestamp()` | `UTC_TIMESTAMP(6)` |
//! | acquire | one upsert `RETURNING` | one upsert `RETURNING` (+ time left, same statement) | one `UPDATE` of a free row, minting with `LAST_INSERT_ID(…)`; else a transaction with `SELECT … FOR UPDATE` |
//! | missing row | inserted by the upsert | inserted by the upsert | `INSERT IGNORE`, autocommit, before the transaction |
//! | writes | in `BEGIN IMMEDIATE` | single statements | single statements |
//! | release | `UPDATE` | `UPDATE` + `pg_notify` in one statement | `UPDATE` |
//! | concurrent table creation | `BEGIN IMMEDIATE` | `pg_advisory_xact_lock` | `GET_LOCK` |
//! | semaphores, read-write locks | `BEGIN IMMEDIATE` transaction | transaction, name's row `FOR UPDATE` first | the same, sessions in READ COMMITTED |
//! | their token | `UPDATE … RETURNING` | `UPDATE … RETURNING` | `UPDATE`, then `SELECT` |
//!
//! Statements are written with named parameters (`:name`, `:ttl`, …) and compiled per
//! database into its placeholders (`?1`, `$1`, `?`) and the order to bind them in.
//!
//! MySQL/MariaDB takes the row in a short transaction because it has no `RETURNING` on an
//! upsert. The row must exist before `SELECT … FOR UPDATE` (on a missing row that statement
//! takes a gap lock, and two sessions that then insert deadlock), so a missing row is first
//! inserted with `INSERT IGNORE` in its own autocommit statement: inside the transaction, the
//! shared lock `INSERT IGNORE` takes on an existing row would deadlock with the other
//! session's `FOR UPDATE`. The token is minted by the `UPDATE`, whose `UTC_TIMESTAMP(6)` is
//! read after the row lock is held, so the time floor is later than every token minted on a
//! previous, deleted incarnation of the row.

use std::sync::Arc;
use std::time::Duration;

use super::fnv1a64;
use super::session::Col;
use crate::error::{Error, Result};
use crate::sql_value::SqlValue;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    Sqlite,
    Postgres,
    MySql,
}

/// The named parameters statements may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum P {
    Name,
    Owner,
    Ttl,
    Holder,
    Now,
    Channel,
    Table,
    Meta,
    Version,
    Deployment,
    Guard,
    GuardTimeout,
    Resource,
    Token,
    LockKey,
    /// A fence's record of token origins (`fence::origins`).
    Origins,
    /// The exclusive upper bound of a range of names (`list`).
    Upper,
    /// The mark a name's row carries in `owner` while it is a semaphore or read-write lock in
    /// use (`semaphore_rwlock_sql::SHARED_OWNER`).
    Shared,
    /// What a name is used as (`LockKind::as_str`).
    Kind,
    /// A semaphore's N, NULL for the other kinds.
    Permits,
    /// How a shared lease holds its name (`LockMode::as_str`).
    Mode,
}

const P_COUNT: usize = 21;

impl P {
    fn from_name(name: &str) -> Option<P> {
        Some(match name {
            "name" => P::Name,
            "owner" => P::Owner,
            "ttl" => P::Ttl,
            "holder" => P::Holder,
            "now" => P::Now,
            "channel" => P::Channel,
            "table" => P::Table,
            "meta" => P::Meta,
            "version" => P::Version,
            "deployment" => P::Deployment,
            "guard" => P::Guard,
            "guard_timeout" => P::GuardTimeout,
            "resource" => P::Resource,
            "token" => P::Token,
            "lock_key" => P::LockKey,
            "origins" => P::Origins,
            "upper" => P::Upper,
            "shared" => P::Shared,
            "kind" => P::Kind,
            "permits" => P::Permits,
            "mode" => P::Mode,
            _ => return None,
        })
    }
}

/// The values of one operation's named parameters.
#[derive(Debug, Clone, Default)]
pub(crate) struct Args([Option<SqlValue>; P_COUNT]);

impl Args {
    pub fn new() -> Self {
        Args::default()
    }

    pub fn with(mut self, p: P, value: SqlValue) -> Self {
        self.0[p as usize] = Some(value);
        self
    }

    pub fn set(&mut self, p: P, value: SqlValue) {
        self.0[p as usize] = Some(value);
    }
}

/// One statement compiled for one database.
#[derive(Debug, Clone)]
pub(crate) struct Stmt {
    pub sql: Arc<str>,
    pub(super) params: Vec<P>,
    /// What its result columns are read as.
    pub cols: Vec<Col>,
}

impl Stmt {
    /// The parameter values in the order this database binds them.
    pub fn bind(&self, args: &Args) -> Result<Vec<SqlValue>, sqlx::Error> {
        self.params
            .iter()
            .map(|p| {
                args.0[*p as usize].clone().ok_or_else(|| {
                    sqlx::Error::Protocol(format!("fencelock bug: no value for parameter {p:?}"))
                })
            })
            .collect()
    }
}

/// Compiles `template`'s `:name` parameters into `flavor`'s placeholders. A `:` followed by a
/// lowercase letter and not preceded by `:` starts a parameter (so `$1::bigint` casts and
/// `'00:00:00'` literals are left alone).
pub(crate) fn compile(flavor: Flavor, template: &str, cols: &[Col]) -> Result<Stmt> {
    let bytes = template.as_bytes();
    let mut sql = String::with_capacity(template.len());
    let mut params: Vec<P> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_param = bytes[i] == b':'
            && (i == 0 || bytes[i - 1] != b':')
            && bytes.get(i + 1).is_some_and(|c| c.is_ascii_lowercase());
        if !starts_param {
            let ch = template[i..].chars().next().unwrap_or(' ');
            sql.push(ch);
            i += ch.len_utf8();
            continue;
        }
        let end = template[i + 1..]
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .map_or(template.len(), |n| i + 1 + n);
        let name = &template[i + 1..end];
        let p = P::from_name(name)
            .ok_or_else(|| Error::internal(format!("unknown SQL parameter :{name}")))?;
        match flavor {
            Flavor::MySql => {
                sql.push('?');
                params.push(p);
            }
            Flavor::Sqlite | Flavor::Postgres => {
                let n = match params.iter().position(|q| *q == p) {
                    Some(at) => at + 1,
                    None => {
                        params.push(p);
                        params.len()
                    }
                };
                sql.push(if flavor == Flavor::Postgres { '$' } else { '?' });
                sql.push_str(&n.to_string());
            }
        }
        i = end;
    }
    Ok(Stmt {
        sql: sql.into(),
        params,
        cols: cols.to_vec(),
    })
}

/// A statement whose middle is one piece repeated per row (`(name = ? AND owner = ?) OR …`):
/// the named parameters of its head, then the rows' values in order ([`compile_rows`]).
#[derive(Debug, Clone)]
pub(crate) struct RowsStmt {
    pub sql: Arc<str>,
    head: Vec<P>,
    pub cols: Vec<Col>,
}

impl RowsStmt {
    /// The head's values from `args`, then `rows` (the values of every row, in order).
    pub fn bind(&self, args: &Args, rows: Vec<SqlValue>) -> Result<Vec<SqlValue>, sqlx::Error> {
        let head = Stmt {
            sql: self.sql.clone(),
            params: self.head.clone(),
            cols: Vec::new(),
        };
        let mut values = head.bind(args)?;
        values.extend(rows);
        Ok(values)
    }
}

/// Compiles `head` (named parameters, as [`compile`]), then `row` `rows` times joined by `join`
/// (each `?` in it a positional parameter, numbered on after the head's where the database
/// numbers them), then `tail` (no parameters).
pub(super) fn compile_rows(
    flavor: Flavor,
    head: &str,
    row: &str,
    join: &str,
    rows: usize,
    tail: &str,
    cols: &[Col],
) -> Result<RowsStmt> {
    let head = compile(flavor, head, &[])?;
    let mut sql = head.sql.to_string();
    let mut n = head.params.len();
    for i in 0..rows {
        if i > 0 {
            sql.push_str(join);
        }
        for piece in row.split_inclusive('?') {
            match piece.strip_suffix('?') {
                Some(text) => {
                    sql.push_str(text);
                    n += 1;
                    match flavor {
                        Flavor::MySql => sql.push('?'),
                        Flavor::Sqlite => sql.push_str(&format!("?{n}")),
                        Flavor::Postgres => sql.push_str(&format!("${n}")),
                    }
                }
                None => sql.push_str(piece),
            }
        }
    }
    sql.push_str(tail);
    Ok(RowsStmt {
        sql: sql.into(),
        head: head.params,
        cols: cols.to_vec(),
    })
}

/// The pieces of SQL text that differ by database.
pub(crate) struct Words {
    /// The database clock, as a value comparable with `expires_at`.
    pub(crate) now: &'static str,
    /// The database clock in microseconds since the epoch (the token's time floor).
    pub(crate) now_us: &'static str,
    /// The expiry of a lease taken or renewed now: now + :ttl (µs).
    pub(crate) expiry: &'static str,
    /// Microseconds from now until `expires_at`.
    pub(crate) left_us: &'static str,
    pub(crate) for_update: &'static str,
    /// An `INSERT` that does nothing when the key exists is `{insert_ignore} t (…) VALUES (…){on_conflict_nothing}`.
    pub(crate) insert_ignore: &'static str,
    pub(crate) on_conflict_nothing: &'static str,
    /// The meta table's key column (a reserved word in MySQL).
    pub(crate) key: &'static str,
    pub(crate) bin_name: &'static str,
    pub(crate) bin_owner: &'static str,
    pub(crate) int: &'static str,
    pub(crate) time: &'static str,
    pub(crate) text: &'static str,
    pub(crate) short_text: &'static str,
    pub(crate) table_options: &'static str,
}

pub(crate) fn words(flavor: Flavor) -> Words {
    match flavor {
        Flavor::Sqlite => Words {
            now: ":now",
            now_us: ":now",
            expiry: ":now + :ttl",
            left_us: "expires_at - :now",
            for_update: "",
            insert_ignore: "INSERT INTO",
            on_conflict_nothing: " ON CONFLICT DO NOTHING",
            key: "key",
            bin_name: "BLOB",
            bin_owner: "BLOB",
            int: "INTEGER",
            time: "INTEGER",
            text: "TEXT",
            short_text: "TEXT",
            table_options: " WITHOUT ROWID",
        },
        Flavor::Postgres => Words {
            now: "clock_timestamp()",
            now_us: "(extract(epoch from clock_timestamp()) * 1000000)::bigint",
            expiry: "clock_timestamp() + :ttl::bigint * interval '1 microsecond'",
            left_us: "(extract(epoch from (expires_at - clock_timestamp())) * 1000000)::bigint",
            for_update: " FOR UPDATE",
            insert_ignore: "INSERT INTO",
            on_conflict_nothing: " ON CONFLICT DO NOTHING",
            key: "key",
            bin_name: "BYTEA",
            bin_owner: "BYTEA",
            int: "BIGINT",
            time: "TIMESTAMPTZ",
            text: "TEXT",
            short_text: "TEXT",
            table_options: "",
        },
        Flavor::MySql => Words {
            now: "UTC_TIMESTAMP(6)",
            now_us: "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
            expiry: "TIMESTAMPADD(MICROSECOND, :ttl, UTC_TIMESTAMP(6))",
            left_us: "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)",
            for_update: " FOR UPDATE",
            insert_ignore: "INSERT IGNORE INTO",
            on_conflict_nothing: "",
            key: "`key`",
            bin_name: "VARBINARY(255)",
            bin_owner: "VARBINARY(16)",
            int: "BIGINT",
            time: "DATETIME(6)",
            text: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            short_text: "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            table_options: " ENGINE=InnoDB",
        },
    }
}

/// Creating tables safely when several processes start at once.
#[derive(Debug)]
pub(crate) struct SchemaSql {
    /// The tables, for messages.
    pub tables: Vec<String>,
    /// How many of `tables` exist (one row, one column).
    pub exists: Stmt,
    /// Run the creation in one transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: with the
    /// advisory lock). MySQL commits each DDL statement by itself.
    pub in_tx: bool,
    /// Serializes creators: `pg_advisory_xact_lock`, or MySQL's `GET_LOCK`.
    pub guard: Option<Stmt>,
    pub unguard: Option<Stmt>,
    pub guard_key: SqlValue,
    pub guard_timeout: i64,
    /// DDL, then the rows a new table starts with.
    pub create: Vec<Stmt>,
}

pub(crate) fn schema(
    flavor: Flavor,
    tables: Vec<String>,
    create: Vec<Stmt>,
    timeout: Duration,
) -> Result<SchemaSql> {
    let first = tables.first().cloned().unwrap_or_default();
    let slots = if tables.len() == 2 {
        vec![":table", ":meta"]
    } else {
        vec![":table"]
    };
    let exists = match flavor {
        Flavor::Sqlite => format!(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND lower(name) IN ({})",
            slots
                .iter()
                .map(|s| format!("lower({s})"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Flavor::Postgres => format!(
            "SELECT count(*) FROM (VALUES {}) AS v(n) WHERE to_regclass(v.n) IS NOT NULL",
            slots
                .iter()
                .map(|s| format!("({s}::text)"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Flavor::MySql => format!(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN ({})",
            slots.join(", ")
        ),
    };
    let (guard, unguard, guard_key) = match flavor {
        Flavor::Sqlite => (None, None, SqlValue::Null),
        Flavor::Postgres => (
            Some(compile(
                flavor,
                "SELECT pg_advisory_xact_lock(:guard)",
                &[],
            )?),
            None,
            SqlValue::Int(
                fnv1a64(&[b"fencelock-create", first.to_ascii_lowercase().as_bytes()]) as i64,
            ),
        ),
        Flavor::MySql => (
            Some(compile(
                flavor,
                "SELECT GET_LOCK(:guard, :guard_timeout)",
                &[Col::Int],
            )?),
            Some(compile(flavor, "SELECT RELEASE_LOCK(:guard)", &[Col::Int])?),
            SqlValue::Text(mysql_lock_name(&first)),
        ),
    };
    Ok(SchemaSql {
        tables,
        exists: compile(flavor, &exists, &[Col::Int])?,
        in_tx: flavor != Flavor::MySql,
        guard,
        unguard,
        guard_key,
        guard_timeout: timeout.as_secs().max(1) as i64,
        create,
    })
}

/// The `GET_LOCK` name that serializes the creators of `table`: MySQL refuses names longer
/// than 64 characters, which `<table>_leases` of a 48-character table name would make, so a
/// long one is hashed.
fn mysql_lock_name(table: &str) -> String {
    let name = format!("fencelock:{table}");
    if name.len() <= 64 {
        return name;
    }
    format!("fencelock:{:016x}", fnv1a64(&[table.as_bytes()]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sql::mutex_sql::{AcquireSql, LockSql};
    use crate::backend::sql::semaphore_rwlock_sql::SharedSql;
    use crate::fence::sql_statements::FenceSql;

    #[test]
    fn named_parameters_compile_to_each_databases_placeholders() {
        let t = "UPDATE t SET a = :ttl::bigint, b = '00:00:00' WHERE name = :name AND c = :ttl";
        let pg = compile(Flavor::Postgres, t, &[]).unwrap();
        assert_eq!(
            &*pg.sql,
            "UPDATE t SET a = $1::bigint, b = '00:00:00' WHERE name = $2 AND c = $1"
        );
        assert_eq!(pg.params, vec![P::Ttl, P::Name]);
        let lite = compile(Flavor::Sqlite, t, &[]).unwrap();
        assert_eq!(
            &*lite.sql,
            "UPDATE t SET a = ?1::bigint, b = '00:00:00' WHERE name = ?2 AND c = ?1"
        );
        let my = compile(Flavor::MySql, t, &[]).unwrap();
        assert_eq!(
            &*my.sql,
            "UPDATE t SET a = ?::bigint, b = '00:00:00' WHERE name = ? AND c = ?"
        );
        assert_eq!(my.params, vec![P::Ttl, P::Name, P::Ttl]);
        assert!(compile(Flavor::MySql, "SELECT :nope", &[]).is_err());
    }

    #[test]
    fn creation_lock_names_fit_mysqls_limit() {
        assert_eq!(
            mysql_lock_name("fencelock_locks"),
            "fencelock:fencelock_locks"
        );
        let longest = format!("{}_leases", "t".repeat(48));
        assert!(mysql_lock_name(&longest).len() <= 64);
        assert_ne!(
            mysql_lock_name(&longest),
            mysql_lock_name(&format!("{}_leases", "u".repeat(48)))
        );
    }

    #[test]
    fn every_statement_gets_all_its_parameters() {
        let all = Args::new()
            .with(P::Name, SqlValue::Bytes(b"n".to_vec()))
            .with(P::Owner, SqlValue::Bytes(vec![0; 16]))
            .with(P::Ttl, SqlValue::Int(1))
            .with(P::Holder, SqlValue::Text("h".into()))
            .with(P::Now, SqlValue::Int(1))
            .with(P::Channel, SqlValue::Text("c".into()))
            .with(P::Table, SqlValue::Text("t".into()))
            .with(P::Meta, SqlValue::Text("t_meta".into()))
            .with(P::Version, SqlValue::Text("1".into()))
            .with(P::Deployment, SqlValue::Text("d".into()))
            .with(P::Guard, SqlValue::Int(1))
            .with(P::GuardTimeout, SqlValue::Int(1))
            .with(P::Resource, SqlValue::Bytes(b"r".to_vec()))
            .with(P::Token, SqlValue::Int(1))
            .with(P::LockKey, SqlValue::Text("k".into()))
            .with(P::Origins, SqlValue::Text("o".into()))
            .with(P::Upper, SqlValue::Bytes(b"o".to_vec()))
            .with(P::Shared, SqlValue::Bytes(b"shared".to_vec()))
            .with(P::Kind, SqlValue::Text("semaphore".into()))
            .with(P::Permits, SqlValue::Int(2))
            .with(P::Mode, SqlValue::Text("permit".into()));
        for (flavor, kind_columns) in [Flavor::Sqlite, Flavor::Postgres, Flavor::MySql]
            .into_iter()
            .flat_map(|f| [(f, true), (f, false)])
        {
            let lock = LockSql::new(flavor, "t", Duration::from_secs(10), kind_columns).unwrap();
            let shared = SharedSql::new(flavor, "t", Duration::from_secs(10)).unwrap();
            let fence = FenceSql::new(flavor, "f", Duration::from_secs(10), true).unwrap();
            let placeholders = |s: &Stmt| match flavor {
                Flavor::MySql => s.sql.matches('?').count(),
                _ => s.params.len(),
            };
            let mut stmts = vec![
                &lock.renew,
                &lock.release,
                &lock.inspect,
                &lock.list,
                &lock.force_release,
                &lock.read_meta,
                &lock.seed_meta,
                &lock.schema.exists,
            ];
            stmts.extend(lock.schema.create.iter());
            match &lock.acquire {
                AcquireSql::Upsert { upsert, left } => {
                    stmts.extend([upsert].into_iter().chain(left))
                }
                AcquireSql::LockRow {
                    take_free,
                    seed,
                    lock,
                    take,
                    token,
                } => stmts.extend([take_free, seed, lock, take, token]),
            }
            stmts.extend(shared.all());
            stmts.extend([
                &fence.lock,
                &fence.read,
                &fence.seed,
                &fence.set_lock,
                &fence.advance,
                fence.set_origins.as_ref().unwrap(),
                &fence.probe_origins,
                &fence.add_origins,
                &fence.schema.exists,
            ]);
            for s in stmts {
                let bound = s.bind(&all).unwrap();
                assert_eq!(bound.len(), placeholders(s), "{flavor:?}: {}", s.sql);
            }
        }
    }
}
