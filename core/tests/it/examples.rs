//! The README's examples work as written.

mod quickstart {
    include!("../../examples/quickstart.rs");

    pub fn run() -> fencelock::Result<()> {
        main()
    }
}

mod primitives {
    include!("../../examples/primitives.rs");

    pub fn run() -> fencelock::Result<()> {
        main()
    }
}

mod many {
    include!("../../examples/many.rs");

    pub fn run() -> fencelock::Result<()> {
        main()
    }
}

#[test]
fn readme_example_runs() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/quickstart.rs"
    ))
    .unwrap();
    // The README shows the example's body verbatim.
    let body = example.split_once("use std::time::Duration;").unwrap().1;
    assert!(
        readme.contains(body.trim()),
        "README's Rust example drifted from examples/quickstart.rs"
    );
    quickstart::run().unwrap();

    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/primitives.rs"
    ))
    .unwrap();
    let body = example
        .split_once("use fencelock::{LockOptions, Locker};")
        .unwrap()
        .1;
    assert!(
        readme.contains(body.trim()),
        "README's semaphore example drifted from examples/primitives.rs"
    );
    primitives::run().unwrap();

    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/many.rs")).unwrap();
    let body = example
        .split_once("use fencelock::{LockOptions, Locker};")
        .unwrap()
        .1;
    assert!(
        readme.contains(body.trim()),
        "README's multi-name lock example drifted from examples/many.rs"
    );
    many::run().unwrap();
}
