//! Makes another owner the holder of a lock behind fencelock's back, as an operator's forced
//! release followed by another client's acquisition would, on any backend: the holder hears of
//! it at its next renewal (SQL, Redis) or at once from the watch on its node (ZooKeeper).

use zookeeper_client as zk;

use crate::sql_support::{Kind, by_name};

const OTHER_OWNER_SQLITE: &str = "x'0000000000000000000000000000000F'";

pub async fn take_over(url: &str, name: &str) {
    let scheme = url.split("://").next().unwrap_or_default();
    match scheme {
        "sqlite" => {
            let pool = sqlx::SqlitePool::connect(url.split('?').next().unwrap())
                .await
                .unwrap();
            let sql = format!(
                "UPDATE fencelock_locks SET owner = {OTHER_OWNER_SQLITE}, token = token + 1 WHERE name = ?1"
            );
            let changed = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(name.as_bytes())
                .execute(&pool)
                .await
                .unwrap();
            assert_eq!(changed.rows_affected(), 1, "no lock row for {name:?}");
            pool.close().await;
        }
        "postgres" | "mariadb" => {
            let db = by_name(scheme);
            let (owner, placeholder) = match db.kind {
                Kind::Postgres => ("'\\x0000000000000000000000000000000F'::bytea", "$1"),
                Kind::MariaDb => ("x'0000000000000000000000000000000F'", "?"),
            };
            let raw = db.raw().await;
            let sql = format!(
                "UPDATE fencelock_locks SET owner = {owner}, token = token + 1 WHERE name = {placeholder}"
            );
            assert_eq!(
                raw.exec_bytes(&sql, name.as_bytes()).await,
                1,
                "no lock row for {name:?}"
            );
        }
        "redis" => {
            let mut conn = crate::support::raw_redis(url).await;
            let key = format!("fencelock:{{{}}}", fencelock::name::encode(name));
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg("owner")
                .arg("somebody-else")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        "zk" => {
            let hosts = url
                .trim_start_matches("zk://")
                .split(['/', '?'])
                .next()
                .unwrap();
            let client = zk::Client::connect(hosts).await.unwrap();
            let folder = format!("/fencelock/{}", fencelock::name::encode(name));
            let children = client.list_children(&folder).await.unwrap();
            assert!(!children.is_empty(), "no node under {folder}");
            for child in children {
                client
                    .delete(&format!("{folder}/{child}"), None)
                    .await
                    .unwrap();
            }
        }
        other => panic!("no take-over for {other}://"),
    }
}
