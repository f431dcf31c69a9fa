//! Renewing several mutexes of one Locker in one statement: the leases that came due together
//! ([`crate::backend::Backend::renew_many`]) and share a ttl. Each is renewed as the single
//! renewal does (`expires_at = now + ttl` where the name and owner match and the lease has not
//! expired); the rows renewed are read back by name and owner: `RETURNING` on SQLite and
//! PostgreSQL, a `SELECT` in the same transaction on MySQL/MariaDB (which has no `RETURNING`),
//! where only the rows this transaction just renewed are ours and unexpired.

use std::collections::HashSet;
use std::time::Duration;

use super::dialect::{Args, Flavor, P, RowsStmt, compile_rows, words};
use super::mutex_sql::LockSql;
use super::retry::OpError;
use super::session::SqlPool;
use super::session::{Col, text};
use crate::backend::{RenewRequest, Renewal};
use crate::clock::unix_micros;
use crate::error::Result;
use crate::sql_value::SqlValue;

/// One row per lease: its name and owner.
const ROW: &str = "(name = ? AND owner = ?)";

/// The statements that renew `rows` mutexes of table `t`: the renewal (answering the renewed
/// rows' names and owners in hex where the database has `RETURNING`), and on MySQL the read of
/// the renewed rows.
fn statements(flavor: Flavor, t: &str, rows: usize) -> Result<(RowsStmt, Option<RowsStmt>)> {
    let w = words(flavor);
    let (now, expiry) = (w.now, w.expiry);
    let head = format!("UPDATE {t} SET expires_at = {expiry} WHERE expires_at >= {now} AND (");
    let renewed = [Col::Text, Col::Text];
    let hex = match flavor {
        Flavor::Postgres => "encode(owner, 'hex')",
        Flavor::Sqlite | Flavor::MySql => "hex(owner)",
    };
    let returning = format!(") RETURNING name, {hex}");
    Ok(match flavor {
        Flavor::Sqlite | Flavor::Postgres => (
            compile_rows(flavor, &head, ROW, " OR ", rows, &returning, &renewed)?,
            None,
        ),
        Flavor::MySql => (
            compile_rows(flavor, &head, ROW, " OR ", rows, ")", &[])?,
            Some(compile_rows(
                flavor,
                &format!("SELECT name, {hex} FROM {t} WHERE expires_at >= {now} AND ("),
                ROW,
                " OR ",
                rows,
                ")",
                &renewed,
            )?),
        ),
    })
}

/// Renews `leases` (mutexes of lease table `sql`, all with the same `ttl`) in one statement:
/// one answer each.
pub(super) async fn renew_mutexes(
    pool: &dyn SqlPool,
    sql: &LockSql,
    leases: &[RenewRequest<'_>],
    ttl: Duration,
) -> std::result::Result<Vec<Renewal>, OpError> {
    let (renew, read_back) = statements(sql.flavor, &sql.table, leases.len())?;
    let rows: Vec<SqlValue> = leases
        .iter()
        .flat_map(|lease| {
            [
                SqlValue::Bytes(lease.name.as_str().as_bytes().to_vec()),
                SqlValue::Bytes(lease.owner.as_bytes().to_vec()),
            ]
        })
        .collect();
    let in_tx = sql.writes_in_tx || read_back.is_some();
    let mut s = if in_tx {
        pool.begin().await?
    } else {
        pool.connection().await?
    };
    // SQLite's clock is read inside its write transaction, as the single renewal's is.
    let args = Args::new()
        .with(P::Ttl, SqlValue::Int(micros(ttl)))
        .with(P::Now, SqlValue::Int(unix_micros()));
    let renewed = match &read_back {
        None => {
            s.fetch_all(&renew.sql, renew.bind(&args, rows)?, &renew.cols)
                .await?
        }
        Some(read) => {
            s.execute(&renew.sql, renew.bind(&args, rows.clone())?)
                .await?;
            s.fetch_all(&read.sql, read.bind(&args, rows)?, &read.cols)
                .await?
        }
    };
    s.commit().await?;
    let renewed: HashSet<(String, String)> = renewed
        .iter()
        .filter_map(|row| Some((text(row, 0)?, text(row, 1)?.to_ascii_lowercase())))
        .collect();
    Ok(leases
        .iter()
        .map(|lease| {
            let key = (lease.name.as_str().to_string(), lease.owner.to_hex());
            if renewed.contains(&key) {
                Renewal::Renewed
            } else {
                Renewal::NotOurs
            }
        })
        .collect())
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_database_numbers_the_rows_after_the_head() {
        let (sqlite, none) = statements(Flavor::Sqlite, "t", 2).unwrap();
        assert!(none.is_none());
        assert!(
            sqlite.sql.ends_with(
                "expires_at >= ?1 AND ((name = ?3 AND owner = ?4) OR (name = ?5 AND owner = ?6)) \
                 RETURNING name, hex(owner)"
            ),
            "{}",
            sqlite.sql
        );
        let (pg, _) = statements(Flavor::Postgres, "t", 1).unwrap();
        assert!(pg.sql.contains("(name = $2 AND owner = $3)"), "{}", pg.sql);
        let (my, read) = statements(Flavor::MySql, "t", 2).unwrap();
        assert_eq!(my.sql.matches('?').count(), 5, "{}", my.sql);
        assert_eq!(read.unwrap().sql.matches('?').count(), 4);
    }
}
