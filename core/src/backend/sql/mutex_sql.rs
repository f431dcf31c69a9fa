//! The lease table's statements ([`LockSql`]) for each database, built from the words and
//! placeholders of `dialect.rs`, whose table says why they differ (MySQL/MariaDB's acquire is
//! explained there). Apart from the fence table's (`fence/sql_statements.rs`): the two tables share only
//! how they are created.
//!
//! These are the mutex's. A name in use as a semaphore or read-write lock (`semaphore_rwlock.rs`) has
//! the mark `:shared` in `owner` and its latest lease's expiry in `expires_at`, so the mutex's
//! acquire never takes it; where it takes nothing, it also reads the name's `kind` to answer
//! INVALID_ARGUMENT rather than `Held`. A table made before the `kind` column existed, which
//! fencelock could not alter, is read without it (a name in use as another kind is then
//! `Held`, as earlier versions see it).

use std::time::Duration;

use super::dialect::{Flavor, SchemaSql, Stmt, compile, schema, words};
use super::fnv1a64;
use super::session::Col;
use crate::error::Result;

/// How a lock is taken.
#[derive(Debug)]
pub(crate) enum AcquireSql {
    /// One upsert that takes a free or expired row and returns its new token; when it takes
    /// nothing, the time left and the kind of a name in shared use come from its second and
    /// third columns (PostgreSQL) or from `left`.
    Upsert { upsert: Stmt, left: Option<Stmt> },
    /// First `take_free`, one autocommit statement that takes the row when it is free and
    /// reports the token it minted as its `LAST_INSERT_ID`; when it takes nothing (the row is
    /// held, missing, or never taken), a transaction: `seed` (autocommit) makes sure the row
    /// exists, `lock` locks it and says whether it is held, for how long and, when in shared
    /// use, as what kind; `take` mints the token, `token` reads it back.
    LockRow {
        take_free: Stmt,
        seed: Stmt,
        lock: Stmt,
        take: Stmt,
        token: Stmt,
    },
}

/// `inspect`: held, token, holder, µs left, marked as shared, kind, permits.
const INSPECT_COLS: [Col; 7] = [
    Col::Int,
    Col::Int,
    Col::Text,
    Col::Int,
    Col::Int,
    Col::Text,
    Col::Int,
];
/// `list`: name, token, holder, µs left, marked as shared, kind, permits.
const LIST_COLS: [Col; 7] = [
    Col::Text,
    Col::Int,
    Col::Text,
    Col::Int,
    Col::Int,
    Col::Text,
    Col::Int,
];

/// The lease table's statements for one database and table name.
#[derive(Debug)]
pub(crate) struct LockSql {
    pub flavor: Flavor,
    pub table: String,
    pub acquire: AcquireSql,
    pub renew: Stmt,
    pub release: Stmt,
    pub inspect: Stmt,
    /// The held locks in the range of names `[:name, :upper)`, by name (`list`).
    pub list: Stmt,
    /// An operator's release: frees the row whoever holds it, if it is held.
    pub force_release: Stmt,
    /// Every write runs in a write transaction, with the clock read inside it (SQLite).
    pub writes_in_tx: bool,
    pub schema: SchemaSql,
    pub read_meta: Stmt,
    /// Writes the meta table's rows unless they are there (also the last statement of
    /// `schema.create`).
    pub seed_meta: Stmt,
}

impl LockSql {
    /// The statements of lease table `t`; `kind_columns` says whether it has the `kind` and
    /// `permits` columns (see the module header).
    pub fn new(flavor: Flavor, t: &str, timeout: Duration, kind_columns: bool) -> Result<Self> {
        let w = words(flavor);
        let c = |sql: &str, cols: &[Col]| compile(flavor, sql, cols);
        let (now, now_us, expiry, left_us) = (w.now, w.now_us, w.expiry, w.left_us);
        let held = format!("CASE WHEN owner IS NOT NULL AND expires_at >= {now} THEN 1 ELSE 0 END");
        let (kind, permits) = if kind_columns {
            ("kind", "permits")
        } else {
            ("NULL", "NULL")
        };
        // The kind a name is in use as, while it is a semaphore or read-write lock in use.
        let shared_kind =
            format!("CASE WHEN owner = :shared AND expires_at >= {now} THEN {kind} END");
        let shared = "CASE WHEN owner = :shared THEN 1 ELSE 0 END";
        let acquire = match flavor {
            Flavor::Sqlite => AcquireSql::Upsert {
                upsert: c(
                    &format!(
                        "INSERT INTO {t} (name, owner, token, expires_at, holder) \
                         VALUES (:name, :owner, :now, {expiry}, :holder) \
                         ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, \
                           token = MAX({t}.token + 1, :now), expires_at = excluded.expires_at, \
                           holder = excluded.holder \
                         WHERE {t}.owner IS NULL OR {t}.expires_at < :now \
                         RETURNING token"
                    ),
                    &[Col::Int],
                )?,
                left: Some(c(
                    &format!("SELECT {left_us}, {shared_kind} FROM {t} WHERE name = :name"),
                    &[Col::Int, Col::Text],
                )?),
            },
            Flavor::Postgres => AcquireSql::Upsert {
                // The token's floor and the expiry are read again in DO UPDATE, after the row
                // lock is held; the outer SELECT sees the row as it was before the statement
                // (the holder's time left, when nothing was taken).
                upsert: c(
                    &format!(
                        "WITH taken AS ( \
                           INSERT INTO {t} AS l (name, owner, token, expires_at, holder) \
                           VALUES (:name, :owner, {now_us}, {expiry}, :holder) \
                           ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, \
                             token = GREATEST(l.token + 1, {now_us}), expires_at = {expiry}, \
                             holder = excluded.holder \
                           WHERE l.owner IS NULL OR l.expires_at < {now} \
                           RETURNING l.token) \
                         SELECT (SELECT token FROM taken), (SELECT {left_us} FROM {t} WHERE name = :name), \
                           (SELECT {shared_kind} FROM {t} WHERE name = :name)"
                    ),
                    &[Col::Int, Col::Int, Col::Text],
                )?,
                left: None,
            },
            Flavor::MySql => AcquireSql::LockRow {
                // Only a row taken before (token > 0): a row's first token is minted by `take`,
                // whose clock is read once the row is locked, so it exceeds every token of a
                // deleted earlier row of the name; this statement's clock is read when it
                // starts, possibly before such a row was deleted and seeded again. Every later
                // token also exceeds the row's last one.
                take_free: c(
                    &format!(
                        "UPDATE {t} SET owner = :owner, \
                         token = LAST_INSERT_ID(GREATEST(token + 1, {now_us})), \
                         expires_at = {expiry}, holder = :holder \
                         WHERE name = :name AND token > 0 AND (owner IS NULL OR expires_at < {now})"
                    ),
                    &[],
                )?,
                seed: c(
                    &format!(
                        "INSERT IGNORE INTO {t} (name, owner, token, expires_at, holder) \
                         VALUES (:name, NULL, 0, NULL, NULL)"
                    ),
                    &[],
                )?,
                lock: c(
                    &format!(
                        "SELECT {held}, {left_us}, {shared_kind} FROM {t} WHERE name = :name FOR UPDATE"
                    ),
                    &[Col::Int, Col::Int, Col::Text],
                )?,
                take: c(
                    &format!(
                        "UPDATE {t} SET owner = :owner, token = GREATEST(token + 1, {now_us}), \
                         expires_at = {expiry}, holder = :holder WHERE name = :name"
                    ),
                    &[],
                )?,
                token: c(
                    &format!("SELECT token FROM {t} WHERE name = :name"),
                    &[Col::Int],
                )?,
            },
        };
        let free_row = format!(
            "UPDATE {t} SET owner = NULL, expires_at = NULL, holder = NULL WHERE name = :name AND owner = :owner"
        );
        let release = match flavor {
            // The NOTIFY is sent only when a row was released, and delivered at its commit.
            Flavor::Postgres => format!(
                "WITH released AS ({free_row} RETURNING 1) SELECT pg_notify(:channel, '') FROM released"
            ),
            _ => free_row,
        };
        // The token column is left alone: the next holder's token still exceeds it. A name in
        // shared use is freed by `semaphore_rwlock.rs`, with its leases.
        let force_row = format!(
            "UPDATE {t} SET owner = NULL, expires_at = NULL, holder = NULL \
             WHERE name = :name AND owner IS NOT NULL AND owner <> :shared AND expires_at >= {now}"
        );
        let force_release = match flavor {
            Flavor::Postgres => format!(
                "WITH released AS ({force_row} RETURNING 1) SELECT pg_notify(:channel, '') FROM released"
            ),
            _ => force_row,
        };
        let meta = format!("{t}_meta");
        let key = w.key;
        let mut create = vec![
            c(
                &format!(
                    "CREATE TABLE IF NOT EXISTS {t} (name {} NOT NULL PRIMARY KEY, owner {}, \
                     token {} NOT NULL, expires_at {}, holder {}, kind {}, permits {}){}",
                    w.bin_name,
                    w.bin_owner,
                    w.int,
                    w.time,
                    w.text,
                    w.short_text,
                    w.int,
                    w.table_options
                ),
                &[],
            )?,
            c(
                &format!(
                    "CREATE TABLE IF NOT EXISTS {meta} ({key} {} NOT NULL PRIMARY KEY, value {} NOT NULL){}",
                    if flavor == Flavor::MySql {
                        "VARCHAR(64) CHARACTER SET ascii"
                    } else {
                        w.short_text
                    },
                    w.short_text,
                    if flavor == Flavor::Sqlite {
                        ""
                    } else {
                        w.table_options
                    }
                ),
                &[],
            )?,
        ];
        let seed_meta = c(
            &format!(
                "{} {meta} ({key}, value) VALUES ('schema_version', :version), ('deployment_id', :deployment){}",
                w.insert_ignore, w.on_conflict_nothing
            ),
            &[],
        )?;
        create.push(seed_meta.clone());
        Ok(LockSql {
            flavor,
            table: t.to_string(),
            acquire,
            renew: c(
                &format!(
                    "UPDATE {t} SET expires_at = {expiry} WHERE name = :name AND owner = :owner AND expires_at >= {now}"
                ),
                &[],
            )?,
            release: c(&release, &[])?,
            inspect: c(
                &format!(
                    "SELECT {held}, token, holder, {left_us}, {shared}, {kind}, {permits} \
                     FROM {t} WHERE name = :name"
                ),
                &INSPECT_COLS,
            )?,
            list: c(
                &format!(
                    "SELECT name, token, holder, {left_us}, {shared}, {kind}, {permits} FROM {t} \
                     WHERE name >= :name AND name < :upper AND owner IS NOT NULL AND expires_at >= {now} \
                     ORDER BY name LIMIT {}",
                    crate::backend::LIST_LIMIT + 1
                ),
                &LIST_COLS,
            )?,
            force_release: c(&force_release, &[])?,
            writes_in_tx: flavor == Flavor::Sqlite,
            schema: schema(flavor, vec![t.to_string(), meta.clone()], create, timeout)?,
            read_meta: c(
                &format!(
                    "SELECT (SELECT value FROM {meta} WHERE {key} = 'schema_version'), \
                            (SELECT value FROM {meta} WHERE {key} = 'deployment_id')"
                ),
                &[Col::Text, Col::Text],
            )?,
            seed_meta,
        })
    }

    /// What a waiter watches on a name's row ([`super::wake`]): the last token (a lease taken),
    /// whether the row is free or expired, and, when the table has `{t}_leases`, the number of
    /// the name's shared leases and registered waiters (one given back; a writer that stopped
    /// waiting lets readers in). A waiter refreshing its registration changes none of them.
    pub fn watch_state(&self, leases_table: bool) -> Result<Stmt> {
        let (t, now) = (&self.table, words(self.flavor).now);
        let leases = if leases_table {
            format!("(SELECT COUNT(*) FROM {t}_leases WHERE name = :name)")
        } else {
            "0".to_string()
        };
        compile(
            self.flavor,
            &format!(
                "SELECT token, CASE WHEN owner IS NULL OR expires_at < {now} THEN 1 ELSE 0 END, \
                 {leases} FROM {t} WHERE name = :name"
            ),
            &[Col::Int, Col::Int, Col::Int],
        )
    }

    /// The PostgreSQL channel that releases of `name` are announced on: NOTIFY channels are
    /// identifiers of at most 63 bytes, so the table and name are hashed (a collision wakes
    /// a waiter for nothing, once).
    pub fn channel(&self, name: &str) -> Option<String> {
        (self.flavor == Flavor::Postgres).then(|| {
            let hash = fnv1a64(&[self.table.to_ascii_lowercase().as_bytes(), name.as_bytes()]);
            format!("fencelock_{hash:016x}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sql::dialect::P;

    #[test]
    fn sqlite_keeps_its_original_acquire_statement() {
        let sql = LockSql::new(
            Flavor::Sqlite,
            "fencelock_locks",
            Duration::from_secs(10),
            true,
        )
        .unwrap();
        let AcquireSql::Upsert { upsert, .. } = &sql.acquire else {
            panic!("sqlite upserts")
        };
        assert!(
            upsert.sql.contains("VALUES (?1, ?2, ?3, ?3 + ?4, ?5)"),
            "{}",
            upsert.sql
        );
        assert_eq!(
            upsert.params,
            vec![P::Name, P::Owner, P::Now, P::Ttl, P::Holder]
        );
    }

    #[test]
    fn postgres_release_channels_are_short_and_ignore_table_case() {
        let pg = LockSql::new(Flavor::Postgres, "Locks", Duration::from_secs(10), true).unwrap();
        let channel = pg.channel("job").unwrap();
        assert!(channel.len() <= 63 && channel.starts_with("fencelock_"));
        assert_eq!(
            LockSql::new(Flavor::Postgres, "locks", Duration::from_secs(1), true)
                .unwrap()
                .channel("job"),
            Some(channel)
        );
        assert_eq!(
            LockSql::new(Flavor::MySql, "t", Duration::from_secs(1), true)
                .unwrap()
                .channel("job"),
            None
        );
    }
}
