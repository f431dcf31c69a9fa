//! The Rust examples of the docs work as written: the README's (examples/quickstart.rs) and
//! docs/rust.md's (examples/fence.rs, primitives.rs, many.rs). Each doc shows its example's
//! file verbatim, but for the file's opening comment, in a ```rust block; the test compiles the
//! file and runs it.

mod quickstart {
    include!("../../examples/quickstart.rs");

    pub fn run() -> fencelock::Result<()> {
        main()
    }
}

mod fence {
    include!("../../examples/fence.rs");

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

/// Fails unless `doc` (a path from the repository's root) shows `example` (a file of
/// core/examples/) in a ```rust block, from its first line after the opening comment to its end.
fn assert_shown(doc: &str, example: &str) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
    let code = std::fs::read_to_string(format!("{root}/core/examples/{example}")).unwrap();
    let body: String = code
        .lines()
        .skip_while(|line| line.starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(
        text.contains(&format!("```rust\n{body}```\n")),
        "{doc} does not show core/examples/{example} as it is: copy the file (without its \
         opening comment) into the doc's ```rust block"
    );
}

#[test]
fn readme_example_runs() {
    assert_shown("README.md", "quickstart.rs");
    quickstart::run().unwrap();
}

#[test]
fn rust_doc_examples_run() {
    assert_shown("docs/rust.md", "fence.rs");
    fence::run().unwrap();
    assert_shown("docs/rust.md", "primitives.rs");
    primitives::run().unwrap();
    assert_shown("docs/rust.md", "many.rs");
    many::run().unwrap();
}
