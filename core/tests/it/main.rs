//! The core's integration tests against real servers (tests/servers.sh), in one test binary so
//! that the dependency tree is linked once: the lock contract on every backend
//! ([`conformance`]), then what is specific to one backend, the fence, telemetry and the
//! examples. Nothing here stops, restarts or reconfigures a shared server, so every test may run
//! beside every other (tests/run-all.sh runs them four at a time); scenarios that do are in the
//! `faults` binary (core/tests/faults), which runs alone.
//!
//! One module: `cargo test -p fencelock --test it redis::lock::`; one scenario on one backend:
//! `cargo test -p fencelock --test it conformance::tokens::tokens_are_floored_by_the_servers_clock::redis`.

#[path = "../support/mod.rs"]
mod support;

mod bookkeeping;
mod conformance;
mod examples;
mod fence {
    mod identity;
    mod origins;
    mod query;
}
mod metrics;
mod redis {
    mod blocking;
    mod event_loop;
    mod lock;
}
mod redlock;
mod reentrant;
mod secrets;
mod spans;
mod sql {
    mod servers;
    mod sqlite;
}
mod zookeeper {
    mod curator;
    mod lock;
}
