//! Fault scenarios of the core against real servers: they restart, stop or reconfigure the
//! shared test servers (tests/servers.sh), cut connections through proxies of their own, or run
//! servers of their own. So this binary runs alone, never beside the `it` binary's tests, which
//! use the same servers.
//!
//! Within a module the scenarios run one at a time (each module's `serial()` lock: they disturb
//! the same server); the modules disturb different servers and run beside each other. Every test
//! starts at once and waits for its module's lock, so tests/run-all.sh gives the binary as many
//! test threads as it has tests. One module: `cargo test -p fencelock --test faults redis::`.

#[path = "../support/mod.rs"]
mod support;

mod redis;
mod redlock;
mod sql;
mod zookeeper;
mod zookeeper_follower;
