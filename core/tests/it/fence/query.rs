//! `Fence::query`: the read path of a SQL fence's database, so a process that writes through a
//! fence never needs a second SQLite library to read its data. Read-only (a write is refused by
//! the database and lands nowhere), outside any fenced write, each value as the database typed
//! it; on SQLite, PostgreSQL and MariaDB.

use crate::support::sql::{Db, Kind, mariadb, postgres, table};
use crate::support::{redis_url, unique};
use fencelock::{ErrorCode, Fence, LockOptions, Locker, SqlValue, Statement};

/// Where the scenario's data lives, and how its statements spell a parameter.
struct Store {
    fence: Fence,
    locker: Locker,
    data: String,
    kind: Option<Kind>,
    /// The server and the tables to drop at the end.
    server: Option<(Db, Vec<String>)>,
    _dir: Option<tempfile::TempDir>,
}

impl Store {
    fn p(&self, n: usize) -> String {
        match self.kind {
            None => format!("?{n}"),
            Some(Kind::Postgres) => format!("${n}"),
            Some(Kind::MariaDb) => "?".to_string(),
        }
    }
}

async fn sqlite_store() -> Store {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("data.db").display());
    let fence = Fence::open(&url, "rows").await.unwrap();
    let locker = Locker::connect(&url).await.unwrap();
    let lease = locker
        .acquire("writer", &LockOptions::default())
        .await
        .unwrap();
    let data = "data".to_string();
    fence
        .fenced_execute(
            &lease,
            &[Statement::new(format!(
                "CREATE TABLE {data} (i INTEGER, f REAL, t TEXT, b BLOB, z TEXT)"
            ))],
        )
        .await
        .unwrap();
    lease.release().await.unwrap();
    Store {
        fence,
        locker,
        data,
        kind: None,
        server: None,
        _dir: Some(dir),
    }
}

async fn server_store(db: &Db) -> Store {
    let (locks, fences, data) = (table("ql"), table("qf"), table("qdata"));
    let fences_table = fences.clone();
    let fence = Fence::open(&db.with(&format!("table={fences}")), "rows")
        .await
        .unwrap();
    let locker = Locker::connect(&db.with(&format!("table={locks}")))
        .await
        .unwrap();
    let (float, bytes) = match db.kind {
        Kind::Postgres => ("DOUBLE PRECISION", "BYTEA"),
        Kind::MariaDb => ("DOUBLE", "BLOB"),
    };
    db.raw()
        .await
        .exec(&format!(
            "CREATE TABLE {data} (i BIGINT, f {float}, t TEXT, b {bytes}, z TEXT)"
        ))
        .await;
    Store {
        fence,
        locker,
        data: data.clone(),
        kind: Some(db.kind),
        server: Some((
            db.clone(),
            vec![locks.clone(), format!("{locks}_meta"), fences_table, data],
        )),
        _dir: None,
    }
}

async fn reads_what_fenced_writes_wrote_and_refuses_to_write(store: Store) {
    let (fence, data) = (&store.fence, &store.data);
    let lease = store
        .locker
        .acquire("writer", &LockOptions::default())
        .await
        .unwrap();
    let insert = Statement::new(format!(
        "INSERT INTO {data} (i, f, t, b, z) VALUES ({}, {}, {}, {}, {})",
        store.p(1),
        store.p(2),
        store.p(3),
        store.p(4),
        store.p(5)
    ))
    .bind(SqlValue::Int(7))
    .bind(SqlValue::Float(2.5))
    .bind(SqlValue::Text("it's \"quoted\"".into()))
    .bind(SqlValue::Bytes(vec![0, 1, 255]))
    .bind(SqlValue::Null);
    fence.fenced_execute(&lease, &[insert]).await.unwrap();

    let select = format!("SELECT i, f, t, b, z FROM {data} WHERE i = {}", store.p(1));
    let rows = fence.query(&select, &[SqlValue::Int(7)]).await.unwrap();
    assert_eq!(
        rows,
        vec![vec![
            SqlValue::Int(7),
            SqlValue::Float(2.5),
            SqlValue::Text("it's \"quoted\"".into()),
            SqlValue::Bytes(vec![0, 1, 255]),
            SqlValue::Null,
        ]]
    );
    let none = fence.query(&select, &[SqlValue::Int(8)]).await.unwrap();
    assert!(none.is_empty(), "{none:?}");
    let count = fence
        .query(&format!("SELECT COUNT(*) FROM {data}"), &[])
        .await
        .unwrap();
    assert_eq!(count, vec![vec![SqlValue::Int(1)]]);

    // A write is refused by the database, and nothing of it lands.
    for write in [
        format!("UPDATE {data} SET i = 8"),
        format!("DELETE FROM {data}"),
        format!("INSERT INTO {data} (i) VALUES (9)"),
    ] {
        let err = fence.query(&write, &[]).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{write}: {err}");
        assert!(err.message().contains("fenced_execute"), "{err}");
    }
    let after = fence
        .query(&format!("SELECT i FROM {data} ORDER BY i"), &[])
        .await
        .unwrap();
    assert_eq!(after, vec![vec![SqlValue::Int(7)]]);
    // Fenced writes go on as before: the read took nothing with it.
    let more = Statement::new(format!("UPDATE {data} SET i = i + 1"));
    assert_eq!(
        fence.fenced_execute(&lease, &[more]).await.unwrap(),
        vec![1]
    );
    assert_eq!(
        fence
            .query(&select, &[SqlValue::Int(8)])
            .await
            .unwrap()
            .len(),
        1
    );

    // The database's own refusals are typed errors.
    let err = fence
        .query("SELECT * FROM no_such_table_here", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Backend, "{err}");
    if let Some(kind) = store.kind {
        // A type none of the values reads: the message says to CAST it.
        let now = match kind {
            Kind::Postgres => "SELECT now()",
            Kind::MariaDb => "SELECT NOW()",
        };
        let err = fence.query(now, &[]).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Backend, "{err}");
        assert!(err.message().contains("CAST"), "{err}");
        let cast = match kind {
            Kind::Postgres => "SELECT CAST(DATE '2026-12-07' AS TEXT)",
            Kind::MariaDb => "SELECT CAST(DATE '2026-12-07' AS CHAR)",
        };
        let rows = fence.query(cast, &[]).await.unwrap();
        assert_eq!(rows, vec![vec![SqlValue::Text("2026-12-07".into())]]);
    }
    lease.release().await.unwrap();
    store.fence.close().await;
    store.locker.close().await;
    if let Some((db, tables)) = store.server {
        let tables: Vec<&str> = tables.iter().map(String::as_str).collect();
        db.raw().await.drop_tables(&tables).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    reads_what_fenced_writes_wrote_and_refuses_to_write(sqlite_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_server() {
    reads_what_fenced_writes_wrote_and_refuses_to_write(server_store(&postgres()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_server() {
    reads_what_fenced_writes_wrote_and_refuses_to_write(server_store(&mariadb()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_fence_has_no_query() {
    let fence = Fence::open(&redis_url(), &unique("query")).await.unwrap();
    let err = fence.query("GET x", &[]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    fence.close().await;
}
