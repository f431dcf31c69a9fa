//! What connecting does for semaphores and read-write locks (`semaphore_rwlock.rs`): make the table of
//! shared leases, and add the `kind` and `permits` columns to a lease table made before they
//! existed (as the fence adds its `origins` column). Neither may stop a Locker from connecting:
//! a role that may not create tables, a read-only database or `create_table=false` on tables
//! made by hand keep their mutexes, and semaphores and read-write locks then fail with the
//! reason and the way out.

use super::dialect::Args;
use super::error::{is_missing_column, map_sqlx_error};
use super::schema::ensure_tables;
use super::semaphore_rwlock_sql::SharedSql;
use super::session::SqlPool;
use crate::error::{Error, Result};

/// What connecting found.
pub(crate) struct SharedSchema {
    /// The lease table has the `kind` and `permits` columns: the mutex's statements read them.
    pub columns: bool,
    /// Why semaphores and read-write locks cannot be used on this table, if they cannot.
    pub unavailable: Option<String>,
}

impl SharedSchema {
    /// The error of a semaphore or read-write lock operation on a table that cannot hold them.
    pub fn check(&self) -> Result<()> {
        match &self.unavailable {
            None => Ok(()),
            Some(why) => Err(Error::backend(why.clone())),
        }
    }
}

/// Makes sure of the columns and the table (creating what is missing when `create`).
pub(crate) async fn prepare(
    pool: &dyn SqlPool,
    sql: &SharedSql,
    table: &str,
    create: bool,
) -> Result<SharedSchema> {
    let columns = kind_columns(pool, sql, create).await?;
    let leases = ensure_tables(
        pool,
        &sql.schema,
        create,
        Args::new(),
        "table of shared leases",
    )
    .await;
    let unavailable = match (columns, leases) {
        (true, Ok(())) => None,
        (false, _) => Some(format!(
            "semaphores and read-write locks need the columns kind and permits of the lease \
             table {table}, which it lacks (made before they existed) and which could not be \
             added (create_table=false, or a role that may not alter it): add them (docs/sql.md)"
        )),
        (true, Err(e)) => Some(format!(
            "semaphores and read-write locks need the table {}: {}",
            sql.leases_table,
            e.message()
        )),
    };
    if let Some(why) = &unavailable {
        flog!(warn, "{why}");
    }
    Ok(SharedSchema {
        columns,
        unavailable,
    })
}

/// Whether the lease table has the `kind` and `permits` columns, adding them when fencelock may
/// change the table. Two processes may add them at once: the loser's error is ignored, and the
/// probe after it answers.
async fn kind_columns(pool: &dyn SqlPool, sql: &SharedSql, may_add: bool) -> Result<bool> {
    let context = "reading the lease table's columns";
    let probe = || async {
        let mut conn = pool.connection().await?;
        conn.execute(
            &sql.probe_columns.sql,
            sql.probe_columns.bind(&Args::new())?,
        )
        .await
    };
    match probe().await {
        Ok(_) => return Ok(true),
        Err(e) if is_missing_column(&e) => {}
        Err(e) => return Err(map_sqlx_error(context, e)),
    }
    if !may_add {
        return Ok(false);
    }
    for add in &sql.add_columns {
        let added = async {
            let mut conn = pool.connection().await?;
            conn.execute(&add.sql, add.bind(&Args::new())?).await
        };
        if let Err(e) = added.await {
            let e = map_sqlx_error(context, e);
            flog!(debug, "adding a column to the lease table: {e}");
        }
    }
    match probe().await {
        Ok(_) => Ok(true),
        Err(e) if is_missing_column(&e) => Ok(false),
        Err(e) => Err(map_sqlx_error(context, e)),
    }
}

#[cfg(test)]
mod tests {
    use crate::error::ErrorCode;
    use crate::locker::Locker;
    use crate::options::LockOptions;

    /// The lease table as fencelock made it before semaphores and read-write locks.
    const EARLIER_LAYOUT: [&str; 3] = [
        "CREATE TABLE fencelock_locks (name BLOB NOT NULL PRIMARY KEY, owner BLOB, \
         token INTEGER NOT NULL, expires_at INTEGER, holder TEXT) WITHOUT ROWID",
        "CREATE TABLE fencelock_locks_meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
        "INSERT INTO fencelock_locks_meta VALUES ('schema_version', '1'), ('deployment_id', 'd')",
    ];

    /// A table made by an earlier fencelock keeps its mutexes with `create_table=false`, and
    /// semaphores then fail saying what is missing; a Locker that may change the table adds
    /// what they need, after which the earlier Locker sees a semaphore in use as held.
    #[tokio::test]
    async fn an_earlier_table_gets_the_columns_and_the_leases_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("earlier.db");
        let earlier = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=rwc", path.display()))
            .await
            .unwrap();
        for statement in EARLIER_LAYOUT {
            sqlx::query(statement).execute(&earlier).await.unwrap();
        }
        earlier.close().await;
        let url = format!("sqlite://{}", path.display());
        let options = LockOptions::default();

        let unchanged = Locker::connect(&format!("{url}?create_table=false"))
            .await
            .unwrap();
        let mutex = unchanged.try_acquire("m", &options).await.unwrap();
        mutex.expect("a free mutex").release().await.unwrap();
        let refused = unchanged
            .semaphore("s", 2)
            .unwrap()
            .try_acquire(&options)
            .await;
        let err = refused.expect_err("a semaphore on a table without its columns");
        assert_eq!(err.code(), ErrorCode::Backend, "{err}");
        assert!(err.message().contains("kind and permits"), "{err}");

        let upgraded = Locker::connect(&url).await.unwrap();
        let permit = upgraded
            .semaphore("s", 2)
            .unwrap()
            .try_acquire(&options)
            .await;
        let permit = permit.unwrap().expect("a free semaphore");
        let as_mutex = upgraded.try_acquire("s", &options).await;
        assert_eq!(
            as_mutex.expect_err("a mutex of a semaphore").code(),
            ErrorCode::InvalidArgument
        );
        // Built without the kind column, the earlier Locker cannot name the kind: held.
        let old_view = unchanged.try_acquire("s", &options).await.unwrap();
        assert!(old_view.is_none(), "a mutex beside a permit");
        let info = unchanged.inspect("s").await.unwrap();
        assert!(info.held, "{info:?}");
        permit.release().await.unwrap();
        let mutex = unchanged.try_acquire("s", &options).await.unwrap();
        mutex
            .expect("free once the permit is released")
            .release()
            .await
            .unwrap();
        for locker in [unchanged, upgraded] {
            locker.close().await;
        }
    }
}
