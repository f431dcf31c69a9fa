// The README's Rust example, shown there verbatim and run by the test suite (`cargo test` builds
// examples; the `examples` module of core/tests/it runs it).
use std::time::Duration;

use fencelock::{LockOptions, Locker};

#[tokio::main]
async fn main() -> fencelock::Result<()> {
    let locker = Locker::connect("sqlite://fencelock-example.db").await?;
    let options = LockOptions::default()
        .with_ttl(Duration::from_secs(30))
        .with_wait(Some(Duration::from_secs(10)));
    let lease = locker.acquire("nightly-report", &options).await?;
    // Send the token with every write: the resource refuses older ones.
    println!("holding {} with token {}", lease.name(), lease.token());
    lease.release().await
}
