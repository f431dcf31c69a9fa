// The README's Rust example, run by the test suite (`cargo test` builds examples; the
// `readme_example_runs` test in core/tests runs it).
use fencelock::{Fence, LockOptions, Locker, SqlValue, Statement};
use std::time::Duration;

#[tokio::main]
async fn main() -> fencelock::Result<()> {
    let locker = Locker::connect("sqlite:///tmp/fencelock-example.db").await?;
    let lease = locker
        .acquire(
            "nightly-report",
            &LockOptions::default().with_ttl(Duration::from_secs(10)),
        )
        .await?;
    let fence = Fence::open("sqlite:///tmp/fencelock-example.db", "report-output").await?;
    fence
        .fenced_execute(
            &lease,
            &[
                Statement::new("CREATE TABLE IF NOT EXISTS report (run INTEGER)"),
                Statement::new("INSERT INTO report VALUES (?1)")
                    .bind(SqlValue::Int(lease.token() as i64)),
            ],
        )
        .await?;
    lease.release().await
}
