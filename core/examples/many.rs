// docs/rust.md's example of several names as one lock, shown there verbatim
// and run by the test suite (the `examples` module of core/tests/it).
use fencelock::{LockOptions, Locker};

#[tokio::main]
async fn main() -> fencelock::Result<()> {
    let locker = Locker::connect("sqlite://fencelock-example.db").await?;
    // Both accounts or neither, taken in one order whoever asks, so transfers never deadlock.
    let accounts = ["account-42", "account-7"];
    let lease = locker
        .acquire_many(&accounts, &LockOptions::default())
        .await?;
    for (name, token) in lease.tokens() {
        println!("{name}: token {token}");
    }
    // Each part guards writes to its own resource: fence.fenced_execute(part, ...).
    let part = lease.part("account-42").expect("a part of the lease");
    println!("account-42 is fenced with {}", part.token());
    lease.release().await
}
