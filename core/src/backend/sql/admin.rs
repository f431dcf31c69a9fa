//! Inspect, list and force release on the SQL lease table: the operations that see a name
//! whatever it is used as. A name's row says which (`mutex_sql.rs`: held by a mutex, or marked
//! as a semaphore or read-write lock in use); the leases and registered waiters of the latter
//! are read here from `<table>_leases` (`semaphore_rwlock.rs` writes them).

use std::collections::HashMap;

use super::dialect::{Args, P};
use super::retry::OpError;
use super::semaphore_rwlock::{self, left, name_args};
use super::semaphore_rwlock_sql::SharedSql;
use super::session::{Row, Session, int, text};
use super::table::{SqlBackend, duration_from_micros};
use crate::backend::{LeaseInfo, LockInfo, Waiter};
use crate::clock::unix_micros;
use crate::mode::{LockKind, LockMode};
use crate::name::LockName;
use crate::sql_value::SqlValue;

/// What the name's row says: columns 4-6 of `inspect` and `list` (marked as shared, kind,
/// permits) and the token.
struct SharedRow {
    marked: bool,
    kind: LockKind,
    permits: Option<u32>,
    token: Option<u64>,
}

impl SharedRow {
    /// From a row whose token is column `token_at` and whose shared columns start at 4.
    fn of(row: &Row, token_at: usize) -> SharedRow {
        let kind = text(row, 5)
            .as_deref()
            .and_then(LockKind::parse)
            .unwrap_or(LockKind::Mutex);
        SharedRow {
            marked: int(row, 4) == Some(1),
            kind,
            permits: int(row, 6)
                .filter(|_| kind == LockKind::Semaphore)
                .and_then(|n| u32::try_from(n).ok()),
            token: int(row, token_at).filter(|t| *t > 0).map(|t| t as u64),
        }
    }

    /// `leases`: `None` when this Locker cannot read them (its table of shared leases is
    /// missing): the name is then shown held, as far as its row says.
    fn info(self, name: String, leases: Option<Vec<LeaseInfo>>, waiters: Vec<Waiter>) -> LockInfo {
        let held = leases.as_ref().is_none_or(|leases| !leases.is_empty());
        let leases = leases.unwrap_or_default();
        LockInfo {
            name,
            held,
            token: self.token,
            holder: None,
            time_left: None,
            waiters,
            kind: self.kind,
            permits: self.permits,
            leases,
        }
    }
}

fn waiter(registered: Registered) -> Waiter {
    Waiter {
        node: format!(
            "{} waiter {}",
            registered.mode.as_str(),
            registered.owner_prefix
        ),
        holder: registered.holder,
    }
}

impl SqlBackend {
    pub(super) async fn inspect_once(
        &self,
        name: &LockName,
    ) -> std::result::Result<LockInfo, OpError> {
        let store = self.store.as_ref();
        let mut conn = store.pool.connection().await?;
        let args = name_args(name);
        let stmt = &store.sql.inspect;
        let row = conn
            .fetch_optional(&stmt.sql, stmt.bind(&args)?, &stmt.cols)
            .await?;
        let Some(row) = row else {
            return Ok(LockInfo::free(name, None));
        };
        let held = int(&row, 0) == Some(1);
        let shared_row = SharedRow::of(&row, 1);
        if shared_row.marked {
            if !held {
                // Every lease and waiter has expired: nobody uses the name.
                return Ok(LockInfo::free(name, shared_row.token));
            }
            let (leases, waiters) = match store.shared() {
                Ok(sql) => {
                    let (leases, waiters) = leases_of(conn.as_mut(), sql, name).await?;
                    (Some(leases), waiters.into_iter().map(waiter).collect())
                }
                Err(_) => (None, Vec::new()),
            };
            return Ok(shared_row.info(name.to_string(), leases, waiters));
        }
        Ok(LockInfo {
            name: name.to_string(),
            held,
            token: shared_row.token,
            holder: if held { text(&row, 2) } else { None },
            time_left: if held {
                int(&row, 3).map(duration_from_micros)
            } else {
                None
            },
            ..LockInfo::free(name, None)
        })
    }

    /// A range of the primary key: every name starting with `prefix` lies in
    /// `[prefix, prefix + 0xFF)`, since no byte of UTF-8 is 0xFF; no other name does. A
    /// semaphore or read-write lock whose rows are only waiters is not held, so not listed.
    pub(super) async fn list_once(
        &self,
        prefix: &str,
        limit: usize,
    ) -> std::result::Result<Vec<LockInfo>, OpError> {
        let store = self.store.as_ref();
        let mut conn = store.pool.connection().await?;
        let mut upper = prefix.as_bytes().to_vec();
        upper.push(0xFF);
        let args = Args::new()
            .with(P::Name, SqlValue::Bytes(prefix.as_bytes().to_vec()))
            .with(P::Upper, SqlValue::Bytes(upper))
            .with(
                P::Shared,
                SqlValue::Bytes(super::semaphore_rwlock_sql::SHARED_OWNER.to_vec()),
            )
            .with(P::Now, SqlValue::Int(unix_micros()));
        let stmt = &store.sql.list;
        let rows = conn
            .fetch_all(&stmt.sql, stmt.bind(&args)?, &stmt.cols)
            .await?;
        let any_shared = rows.iter().any(|row| int(row, 4) == Some(1));
        let mut leases = match store.shared() {
            Ok(sql) if any_shared => Some(leases_in_range(conn.as_mut(), sql, &args).await?),
            Ok(_) => Some(Default::default()),
            Err(_) => None,
        };
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let name = text(&row, 0)?;
                let shared_row = SharedRow::of(&row, 1);
                if shared_row.marked {
                    let of_name = leases
                        .as_mut()
                        .map(|leases| leases.remove(&name).unwrap_or_default());
                    let info = shared_row.info(name, of_name, Vec::new());
                    return info.held.then_some(info);
                }
                Some(LockInfo {
                    name,
                    held: true,
                    token: shared_row.token,
                    holder: text(&row, 2),
                    time_left: int(&row, 3).map(duration_from_micros),
                    waiters: Vec::new(),
                    kind: LockKind::Mutex,
                    permits: None,
                    leases: Vec::new(),
                })
            })
            .take(limit)
            .collect())
    }

    /// Frees the mutex's holder, or else every lease of a semaphore or read-write lock.
    pub(super) async fn force_release_once(
        &self,
        name: &LockName,
    ) -> std::result::Result<bool, OpError> {
        let store = self.store.as_ref();
        let (pool, sql) = (store.pool.as_ref(), &store.sql);
        let mut s = if sql.writes_in_tx {
            pool.begin().await?
        } else {
            pool.connection().await?
        };
        let channel = sql.channel(name.as_str());
        // SQLite's clock, read once the write lock is held.
        let mut args = name_args(name);
        if let Some(channel) = &channel {
            args.set(P::Channel, SqlValue::Text(channel.clone()));
        }
        let n = s
            .execute(&sql.force_release.sql, sql.force_release.bind(&args)?)
            .await?;
        s.commit().await?;
        if n == 1 {
            return Ok(true);
        }
        match store.shared() {
            Ok(statements) => {
                semaphore_rwlock::force_release(pool, statements, name, channel).await
            }
            Err(_) => Ok(false),
        }
    }
}

/// A stored mode, with its N for a permit; `None` for a spelling this version does not know.
fn mode_of(spelling: &str, permits: Option<i64>) -> Option<LockMode> {
    match spelling {
        "permit" => Some(LockMode::Permit {
            permits: u32::try_from(permits?).ok()?,
        }),
        "read" => Some(LockMode::Read),
        "write" => Some(LockMode::Write),
        _ => None,
    }
}

/// One registered waiter, as `inspect` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Registered {
    pub mode: LockMode,
    pub holder: Option<String>,
    /// The first 8 hex digits of its owner id: tells waiters apart, and is not enough to
    /// release or renew anything.
    pub owner_prefix: String,
}

/// The name's live leases (by token) and registered waiters.
async fn leases_of(
    conn: &mut dyn Session,
    sql: &SharedSql,
    name: &LockName,
) -> std::result::Result<(Vec<LeaseInfo>, Vec<Registered>), OpError> {
    let args = name_args(name);
    let stmt = &sql.leases_of;
    let rows = conn
        .fetch_all(&stmt.sql, stmt.bind(&args)?, &stmt.cols)
        .await?;
    let (mut leases, mut waiters) = (Vec::new(), Vec::new());
    for row in rows {
        let Some(mode) = text(&row, 0).and_then(|m| mode_of(&m, int(&row, 1))) else {
            continue;
        };
        if int(&row, 2) == Some(1) {
            if waiters.len() < crate::backend::MAX_WAITERS_SHOWN {
                let owner = text(&row, 6).unwrap_or_default();
                waiters.push(Registered {
                    mode,
                    holder: text(&row, 4),
                    owner_prefix: owner.chars().take(8).collect(),
                });
            }
        } else {
            leases.push(LeaseInfo {
                mode,
                token: int(&row, 3).filter(|t| *t > 0).map(|t| t as u64),
                holder: text(&row, 4),
                time_left: left(int(&row, 5)),
            });
        }
    }
    Ok((leases, waiters))
}

/// The live leases of the names in `[prefix, upper)`, by name.
async fn leases_in_range(
    conn: &mut dyn Session,
    sql: &SharedSql,
    args: &Args,
) -> std::result::Result<HashMap<String, Vec<LeaseInfo>>, OpError> {
    let stmt = &sql.leases_in_range;
    let rows = conn
        .fetch_all(&stmt.sql, stmt.bind(args)?, &stmt.cols)
        .await?;
    let mut by_name: HashMap<String, Vec<LeaseInfo>> = HashMap::new();
    for row in rows {
        let (Some(name), Some(mode)) = (
            text(&row, 0),
            text(&row, 1).and_then(|m| mode_of(&m, int(&row, 2))),
        ) else {
            continue;
        };
        by_name.entry(name).or_default().push(LeaseInfo {
            mode,
            token: int(&row, 3).filter(|t| *t > 0).map(|t| t as u64),
            holder: text(&row, 4),
            time_left: left(int(&row, 5)),
        });
    }
    Ok(by_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_modes_round_trip() {
        for mode in [
            LockMode::Permit { permits: 7 },
            LockMode::Read,
            LockMode::Write,
        ] {
            let permits = match mode {
                LockMode::Permit { permits } => Some(i64::from(permits)),
                _ => None,
            };
            assert_eq!(mode_of(mode.as_str(), permits), Some(mode));
        }
        assert_eq!(mode_of("exclusive", None), None);
        assert_eq!(mode_of("permit", None), None);
    }
}
