// docs/rust.md's semaphore and read-write lock example, shown there verbatim
// and run by the test suite (the `examples` module of core/tests/it).
use fencelock::{LockOptions, Locker};

#[tokio::main]
async fn main() -> fencelock::Result<()> {
    let locker = Locker::connect("sqlite://fencelock-example.db").await?;
    let options = LockOptions::default();
    // At most 3 report jobs at once, fleet-wide; each permit has its own token.
    let reports = locker.semaphore("nightly-reports", 3)?;
    let permit = reports.acquire(&options).await?;
    println!("permit {} of 3", permit.token());
    permit.release().await?;
    // Many readers or one writer; only the writer's token may guard a fence.
    let reading = locker.read_lock("config")?.acquire(&options).await?;
    reading.release().await?;
    let writing = locker.write_lock("config")?.acquire(&options).await?;
    println!("write token {}", writing.token());
    writing.release().await
}
