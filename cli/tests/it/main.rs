//! The command's tests: real processes of the built `fencelock` binary, on SQLite files of their
//! own (and on Redis where tests/servers.sh's environment names it), in one test binary so that
//! it is linked once. One module: `cargo test -p fencelock-cli --test it supervisor::`.

mod support;

mod admin;
mod elect;
mod primitives;
mod run;
mod secrets;
mod supervisor;
mod zookeeper;
