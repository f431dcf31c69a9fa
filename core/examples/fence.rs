// docs/rust.md's example of a write through a fence, shown there verbatim and run by the test
// suite (`cargo test` builds examples; the `examples` module of core/tests/it runs it).
use std::time::Duration;

use fencelock::{Fence, LockOptions, Locker, SqlValue, Statement};

#[tokio::main]
async fn main() -> fencelock::Result<()> {
    let url = "sqlite://fencelock-example.db";
    let locker = Locker::connect(url).await?;
    let options = LockOptions::default().with_ttl(Duration::from_secs(10));
    let lease = locker.acquire("nightly-report", &options).await?;
    let fence = Fence::open(url, "report-output").await?;
    let token = SqlValue::Int(lease.token() as i64);
    let writes = [
        Statement::new("CREATE TABLE IF NOT EXISTS report (run INTEGER)"),
        Statement::new("INSERT INTO report VALUES (?1)").bind(token),
    ];
    fence.fenced_execute(&lease, &writes).await?;
    lease.release().await
}
