//! The statements of semaphores and read-write locks ([`SharedSql`]) for each database, built
//! like the mutex's (`mutex_sql.rs`) from the words and placeholders of `dialect.rs`, and run by
//! `semaphore_rwlock.rs`, whose header explains the design.
//!
//! `{t}` is the lease table (one row per name), `{t}_leases` the table of shared leases and
//! registered waiters, one row per (name, owner). Every statement that writes `{t}_leases`
//! runs in a transaction that first locked the name's row of `{t}` (`lock`), so the leases of
//! one name change one transaction at a time on every database.

use std::time::Duration;

use super::dialect::{Flavor, SchemaSql, Stmt, compile, schema, words};
use super::session::Col;
use crate::error::Result;

/// The layout of a row of `{t}_leases`, stored in each row (`layout`): a row of a newer
/// layout is refused rather than misread.
pub(crate) const LEASE_LAYOUT: i64 = 1;

/// What the name's row of `{t}` holds in `owner` while the name is a semaphore or read-write
/// lock in use: never a 16-byte owner id, so no mutex holder matches it, and every fencelock,
/// this one and earlier versions alike, sees the row as held until `expires_at`.
pub(crate) const SHARED_OWNER: &[u8] = b"shared";

/// The statements of semaphores and read-write locks for one database and lease table.
#[derive(Debug)]
pub(crate) struct SharedSql {
    /// `{t}_leases`, for messages.
    pub leases_table: String,
    /// Creates `{t}_leases`.
    pub schema: SchemaSql,
    /// Fails when `{t}` has no `kind` and `permits` columns (a table made before they existed).
    pub probe_columns: Stmt,
    /// Add them (one column per statement: SQLite adds one at a time).
    pub add_columns: Vec<Stmt>,
    /// Creates the name's row of `{t}` when it is missing (autocommit, as the mutex does).
    pub seed: Stmt,
    /// Locks the name's row for the transaction: (held by a mutex, marked as shared).
    pub lock: Stmt,
    /// What the name's rows of `{t}_leases` say ([`Tally`](super::semaphore_rwlock::Tally)).
    pub tally: Stmt,
    /// Deletes the name's expired leases and registrations.
    pub purge: Stmt,
    /// Marks the row as shared, stores kind and N, mints the next token: returns it
    /// (PostgreSQL, SQLite), or `read_token` reads it (MySQL has no `UPDATE … RETURNING`).
    pub mint: Stmt,
    pub read_token: Option<Stmt>,
    /// A lease for an owner with no row / for the owner's registration.
    pub grant_insert: Stmt,
    pub grant_update: Stmt,
    /// A waiter's registration, made / refreshed.
    pub register_insert: Stmt,
    pub register_update: Stmt,
    /// Sets the name's row to what its leases say: `expires_at` = the latest expiry among
    /// them, `owner` = the shared mark while there are any, NULL when there are none. Leaves
    /// a row a mutex holds alone.
    pub refresh: Stmt,
    /// `refresh`, then NOTIFY the name's channel when it changed the row (PostgreSQL; the
    /// others poll, and this is `refresh`).
    pub refresh_notify: Stmt,
    pub renew: Stmt,
    /// Deletes the owner's lease (never a registration).
    pub release: Stmt,
    /// Deletes the owner's registration.
    pub unregister: Stmt,
    /// Deletes every live lease of the name (an operator's release).
    pub force_free: Stmt,
    /// The name's live leases and registrations, leases first (`inspect`).
    pub leases_of: Stmt,
    /// The live leases of the names in `[:name, :upper)` (`list`).
    pub leases_in_range: Stmt,
}

/// `leases_of`: mode, permits, waiting, token, holder, µs left, owner id in hex.
const LEASES_OF_COLS: [Col; 7] = [
    Col::Text,
    Col::Int,
    Col::Int,
    Col::Int,
    Col::Text,
    Col::Int,
    Col::Text,
];
/// `leases_in_range`: name, mode, permits, token, holder, µs left.
const LEASES_IN_RANGE_COLS: [Col; 6] = [
    Col::Text,
    Col::Text,
    Col::Int,
    Col::Int,
    Col::Text,
    Col::Int,
];

impl SharedSql {
    /// The statements for lease table `t` (already validated as a plain identifier).
    pub fn new(flavor: Flavor, t: &str, timeout: Duration) -> Result<Self> {
        let w = words(flavor);
        let c = |sql: &str, cols: &[Col]| compile(flavor, sql, cols);
        let (now, now_us, expiry, left_us) = (w.now, w.now_us, w.expiry, w.left_us);
        let l = format!("{t}_leases");
        let greatest = if flavor == Flavor::Sqlite {
            "MAX"
        } else {
            "GREATEST"
        };
        let create = c(
            &format!(
                "CREATE TABLE IF NOT EXISTS {l} (name {} NOT NULL, owner {} NOT NULL, \
                 mode {} NOT NULL, permits {}, waiting {} NOT NULL, token {}, \
                 expires_at {} NOT NULL, holder {}, layout {} NOT NULL, \
                 PRIMARY KEY (name, owner)){}",
                w.bin_name,
                w.bin_owner,
                w.short_text,
                w.int,
                w.int,
                w.int,
                w.time,
                w.text,
                w.int,
                w.table_options
            ),
            &[],
        )?;
        let live = format!("expires_at >= {now}");
        // Counted with COUNT(CASE …): MySQL's SUM of integers is a DECIMAL.
        let tally = format!(
            "SELECT \
               COUNT(CASE WHEN {live} THEN 1 END), \
               COUNT(CASE WHEN {live} AND waiting = 0 THEN 1 END), \
               COUNT(CASE WHEN {live} AND waiting = 0 AND mode = 'write' THEN 1 END), \
               COUNT(CASE WHEN {live} AND waiting = 1 AND mode = 'write' AND owner <> :owner THEN 1 END), \
               COUNT(CASE WHEN {live} AND mode = 'permit' THEN 1 END), \
               COUNT(CASE WHEN {live} AND mode <> 'permit' THEN 1 END), \
               MIN(CASE WHEN {live} AND mode = 'permit' THEN permits END), \
               MAX(CASE WHEN {live} AND mode = 'permit' THEN permits END), \
               MIN(CASE WHEN {live} AND waiting = 0 THEN {left_us} END), \
               MAX(CASE WHEN {live} AND owner = :owner THEN 2 - waiting END), \
               MAX(CASE WHEN {live} AND owner = :owner AND waiting = 0 THEN token END), \
               COUNT(CASE WHEN expires_at < {now} THEN 1 END), \
               MAX(layout) \
             FROM {l} WHERE name = :name"
        );
        let (mint, read_token) = match flavor {
            Flavor::MySql => (
                c(
                    &format!(
                        "UPDATE {t} SET owner = :shared, kind = :kind, permits = :permits, \
                         holder = NULL, token = GREATEST(token + 1, {now_us}) WHERE name = :name"
                    ),
                    &[],
                )?,
                Some(c(
                    &format!("SELECT token FROM {t} WHERE name = :name"),
                    &[Col::Int],
                )?),
            ),
            _ => (
                c(
                    &format!(
                        "UPDATE {t} SET owner = :shared, kind = :kind, permits = :permits, \
                         holder = NULL, token = {greatest}(token + 1, {now_us}) \
                         WHERE name = :name RETURNING token"
                    ),
                    &[Col::Int],
                )?,
                None,
            ),
        };
        let refresh = format!(
            "UPDATE {t} SET \
               expires_at = (SELECT MAX(x.expires_at) FROM {l} x WHERE x.name = :name), \
               owner = CASE WHEN EXISTS (SELECT 1 FROM {l} x WHERE x.name = :name) \
                 THEN :shared ELSE NULL END \
             WHERE name = :name AND (owner IS NULL OR owner = :shared)"
        );
        let refresh_notify = match flavor {
            // Delivered at commit, and only when the name's row was refreshed.
            Flavor::Postgres => format!(
                "WITH refreshed AS ({refresh} RETURNING 1) \
                 SELECT pg_notify(:channel, '') FROM refreshed"
            ),
            _ => refresh.clone(),
        };
        let owner_hex = match flavor {
            Flavor::Postgres => "encode(owner, 'hex')",
            _ => "LOWER(HEX(owner))",
        };
        let columns = "name, owner, mode, permits, waiting, token, expires_at, holder, layout";
        Ok(SharedSql {
            leases_table: l.clone(),
            schema: schema(flavor, vec![l.clone()], vec![create], timeout)?,
            probe_columns: c(&format!("SELECT kind, permits FROM {t} WHERE 1 = 0"), &[])?,
            add_columns: vec![
                c(
                    &format!("ALTER TABLE {t} ADD COLUMN kind {}", w.short_text),
                    &[],
                )?,
                c(
                    &format!("ALTER TABLE {t} ADD COLUMN permits {}", w.int),
                    &[],
                )?,
            ],
            seed: c(
                &format!(
                    "{} {t} (name, owner, token, expires_at, holder) \
                     VALUES (:name, NULL, 0, NULL, NULL){}",
                    w.insert_ignore, w.on_conflict_nothing
                ),
                &[],
            )?,
            lock: c(
                &format!(
                    "SELECT CASE WHEN owner IS NOT NULL AND owner <> :shared AND expires_at >= {now} \
                       THEN 1 ELSE 0 END, \
                     CASE WHEN owner = :shared THEN 1 ELSE 0 END \
                     FROM {t} WHERE name = :name{}",
                    w.for_update
                ),
                &[Col::Int, Col::Int],
            )?,
            tally: c(&tally, &[Col::Int; 13])?,
            purge: c(
                &format!("DELETE FROM {l} WHERE name = :name AND expires_at < {now}"),
                &[],
            )?,
            mint,
            read_token,
            grant_insert: c(
                &format!(
                    "INSERT INTO {l} ({columns}) \
                     VALUES (:name, :owner, :mode, :permits, 0, :token, {expiry}, :holder, {LEASE_LAYOUT})"
                ),
                &[],
            )?,
            grant_update: c(
                &format!(
                    "UPDATE {l} SET mode = :mode, permits = :permits, waiting = 0, token = :token, \
                     expires_at = {expiry}, holder = :holder, layout = {LEASE_LAYOUT} \
                     WHERE name = :name AND owner = :owner"
                ),
                &[],
            )?,
            register_insert: c(
                &format!(
                    "INSERT INTO {l} ({columns}) \
                     VALUES (:name, :owner, :mode, :permits, 1, NULL, {expiry}, :holder, {LEASE_LAYOUT})"
                ),
                &[],
            )?,
            register_update: c(
                &format!(
                    "UPDATE {l} SET mode = :mode, permits = :permits, expires_at = {expiry}, \
                     holder = :holder, layout = {LEASE_LAYOUT} \
                     WHERE name = :name AND owner = :owner AND waiting = 1"
                ),
                &[],
            )?,
            refresh: c(&refresh, &[])?,
            refresh_notify: c(&refresh_notify, &[])?,
            renew: c(
                &format!(
                    "UPDATE {l} SET expires_at = {expiry} WHERE name = :name AND owner = :owner \
                     AND mode = :mode AND waiting = 0 AND {live}"
                ),
                &[],
            )?,
            release: c(
                &format!(
                    "DELETE FROM {l} WHERE name = :name AND owner = :owner AND mode = :mode \
                     AND waiting = 0"
                ),
                &[],
            )?,
            unregister: c(
                &format!("DELETE FROM {l} WHERE name = :name AND owner = :owner AND waiting = 1"),
                &[],
            )?,
            force_free: c(
                &format!("DELETE FROM {l} WHERE name = :name AND waiting = 0 AND {live}"),
                &[],
            )?,
            leases_of: c(
                &format!(
                    "SELECT mode, permits, waiting, token, holder, {left_us}, {owner_hex} FROM {l} \
                     WHERE name = :name AND {live} ORDER BY waiting, token, owner LIMIT {}",
                    crate::mode::MAX_PERMITS as usize + crate::backend::MAX_WAITERS_SHOWN
                ),
                &LEASES_OF_COLS,
            )?,
            leases_in_range: c(
                &format!(
                    "SELECT name, mode, permits, token, holder, {left_us} FROM {l} \
                     WHERE name >= :name AND name < :upper AND waiting = 0 AND {live} \
                     ORDER BY name, token"
                ),
                &LEASES_IN_RANGE_COLS,
            )?,
        })
    }

    /// Every statement, for the tests that check their parameters.
    #[cfg(test)]
    pub(crate) fn all(&self) -> Vec<&Stmt> {
        let mut all = vec![
            &self.schema.exists,
            &self.probe_columns,
            &self.seed,
            &self.lock,
            &self.tally,
            &self.purge,
            &self.mint,
            &self.grant_insert,
            &self.grant_update,
            &self.register_insert,
            &self.register_update,
            &self.refresh,
            &self.refresh_notify,
            &self.renew,
            &self.release,
            &self.unregister,
            &self.force_free,
            &self.leases_of,
            &self.leases_in_range,
        ];
        all.extend(self.read_token.iter());
        all.extend(self.add_columns.iter());
        all.extend(self.schema.create.iter());
        all
    }
}
