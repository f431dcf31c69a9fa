//! `fencelock list`, `fencelock release --force` and `status` against a held lock, with real
//! processes of the built command on one SQLite file.

use std::time::{Duration, Instant};

use crate::support;

use crate::support::*;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn list_status_and_a_forced_release_that_stops_the_holder() {
    let sandbox = Sandbox::new();
    let started = sandbox.path("started");
    let script = format!("echo $FENCELOCK_TOKEN > {}; sleep 60", started.display());
    let mut holder = sandbox.spawn(&[
        "run",
        "--ttl",
        "3s",
        "--holder",
        "nightly",
        "jobs/report",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let token = wait_for_file(&started, Duration::from_secs(20))
        .trim()
        .to_string();

    let listed = sandbox.run(&["list", "jobs/"]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let text = stdout(&listed);
    assert!(
        text.contains("\"jobs/report\"") && text.contains(&format!("token {token}")),
        "{text}"
    );
    assert!(text.contains("nightly") && text.contains("cli"), "{text}");
    // The prefix is plain text: a wildcard matches nothing.
    let wildcard = stdout(&sandbox.run(&["list", "jobs/*"]));
    assert!(!wildcard.contains("jobs/report"), "{wildcard}");
    let status = stdout(&sandbox.run(&["status", "jobs/report"]));
    assert!(
        status.contains("held") && status.contains(&token),
        "{status}"
    );

    // Without --force: refused, with the way to do it.
    let refused = sandbox.run(&["release", "jobs/report"]);
    assert_eq!(code(&refused), 125);
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
    assert!(support::is_running(holder.id() as i32));

    let forced_at = Instant::now();
    let forced = sandbox.run(&["release", "--force", "jobs/report"]);
    assert_eq!(code(&forced), 0, "{}", stderr(&forced));
    // The holder hears it at its next renewal (ttl/3 = 1 s) and stops CMD: exit code 122.
    let exit = loop {
        if let Some(status) = holder.try_wait().unwrap() {
            break status;
        }
        assert!(
            forced_at.elapsed() < Duration::from_secs(15),
            "the holder kept running after the force release"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(exit.code(), Some(122), "exit {exit:?}");
    let free = sandbox.run(&["release", "--force", "jobs/report"]);
    assert_eq!(code(&free), 1, "{}", stderr(&free));
    assert!(stderr(&free).contains("not held"), "{}", stderr(&free));
    let empty = stdout(&sandbox.run(&["list"]));
    assert!(empty.contains(": 0"), "{empty}");
}

#[test]
fn bad_inputs_and_the_warning_in_help() {
    let sandbox = Sandbox::new();
    let long = "x".repeat(300);
    let out = sandbox.run(&["list", &long]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("INVALID_ARGUMENT"),
        "{}",
        stderr(&out)
    );
    let out = sandbox.run(&["release", "--force", ""]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("INVALID_ARGUMENT"),
        "{}",
        stderr(&out)
    );
    let help = stdout(&sandbox.run(&["release", "--help"]));
    assert!(help.contains("DANGEROUS"), "{help}");
    let top = stdout(&sandbox.run(&["--help"]));
    assert!(top.contains("list") && top.contains("DANGEROUS"), "{top}");
}

/// The top-level help names every URL scheme the core accepts (its list, read at run time from
/// `fencelock::contract`, docs/design.md §9.3), so a backend cannot be missing from it.
#[test]
fn help_names_every_url_scheme() {
    let sandbox = Sandbox::new();
    let help = stdout(&sandbox.run(&["--help"]));
    // Unfolded, since clap wraps long help at the terminal's width.
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for scheme in fencelock::contract::URL_SCHEMES {
        let spelled = format!("{}://", scheme.scheme);
        let named = help.match_indices(&spelled).any(|(at, _)| {
            // Whole: `redis://` must not be found inside `rediss://` or `redis+cluster://`.
            !help[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '+')
        });
        assert!(named, "--help does not name {spelled}: {help}");
    }
    let url_help = stdout(&sandbox.run(&["run", "--help"]));
    assert!(url_help.contains("redlock://"), "{url_help}");
}
