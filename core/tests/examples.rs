//! The README's examples work as written.

#[test]
fn readme_example_runs() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.rs")).unwrap();
    // The README shows the example's body verbatim.
    let body = example.split_once("use std::time::Duration;").unwrap().1;
    assert!(readme.contains(body.trim()), "README's Rust example drifted from examples/quickstart.rs");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["run", "-q", "-p", "fencelock", "--example", "quickstart"])
        .status()
        .unwrap();
    assert!(status.success());
}
