//! The command never prints a password, never falls back silently from a FENCELOCK_URL that
//! came out empty, keeps its default files private, and escapes what other participants wrote.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

#[path = "../../../tests/vectors/leaky_urls.rs"]
mod leaky_urls;

use crate::support::*;
use leaky_urls::{Vector, assert_hidden, vectors};

fn assert_not_shown(output: &std::process::Output, vector: &Vector) {
    let shown = format!(
        "{}{}",
        stderr(output),
        String::from_utf8_lossy(&output.stdout)
    );
    assert_hidden("the command", &shown, vector);
}

#[test]
fn no_fragment_of_a_password_is_printed_from_url_or_environment() {
    let sandbox = Sandbox::new();
    let vectors = vectors();
    std::thread::scope(|scope| {
        for vector in &vectors {
            let sandbox = &sandbox;
            let url = vector.url.as_str();
            scope.spawn(move || {
                let by_flag = sandbox.run(&["run", "--url", url, "job", "--", "true"]);
                assert_eq!(code(&by_flag), 125, "{url}: {}", stderr(&by_flag));
                assert_not_shown(&by_flag, vector);
                let by_env = sandbox
                    .command()
                    .env("FENCELOCK_URL", url)
                    .args(["status", "job"])
                    .output()
                    .unwrap();
                assert_eq!(code(&by_env), 125, "{url}: {}", stderr(&by_env));
                assert_not_shown(&by_env, vector);
            });
        }
    });
}

#[test]
fn a_fencelock_url_set_but_empty_or_not_utf8_is_an_error_not_the_local_default() {
    let sandbox = Sandbox::new();
    for value in ["", "  "] {
        let out = sandbox
            .command()
            .env("FENCELOCK_URL", value)
            .env("HOME", sandbox.path(""))
            .args(["run", "job", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 125, "{value:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("FENCELOCK_URL is set but empty"),
            "{}",
            stderr(&out)
        );
    }
    let out = sandbox
        .command()
        .env(
            "FENCELOCK_URL",
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"redis://h\xff"),
        )
        .args(["status", "job"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(stderr(&out).contains("not valid UTF-8"), "{}", stderr(&out));
    assert!(!sandbox.path(".local").exists(), "the default was used");
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_default_folder_and_database_are_private_whatever_the_umask() {
    let sandbox = Sandbox::new();
    let home = sandbox.path("home");
    std::fs::create_dir(&home).unwrap();
    let folder = home.join(".local/state/fencelock");
    let listing = sandbox.path("listing");
    // While CMD runs the database is open: its -wal and -shm files exist.
    let script = format!(
        "for f in {dir}/*; do stat -c '%n %a' \"$f\"; done > {out}",
        dir = folder.display(),
        out = listing.display()
    );
    let out = Command::new("sh")
        .args([
            "-c",
            "umask 000; exec \"$@\"",
            "sh",
            BIN,
            "run",
            "job",
            "--",
            "sh",
            "-c",
        ])
        .arg(&script)
        .env_remove("FENCELOCK_URL")
        .env_remove("XDG_STATE_HOME")
        .env("HOME", &home)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(mode(&folder), 0o700);
    let listed = std::fs::read_to_string(&listing).unwrap();
    assert!(listed.contains("locks.db "), "{listed}");
    for line in listed.lines() {
        assert!(line.ends_with(" 600"), "not private: {line}");
    }
    // An existing folder of an older version is narrowed.
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = with_default_url(&home)
        .args(["run", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(mode(&folder), 0o700);
}

#[test]
fn a_symbolic_link_in_place_of_the_default_database_is_refused() {
    let sandbox = Sandbox::new();
    let home = sandbox.path("home");
    let folder = home.join(".local/state/fencelock");
    std::fs::create_dir_all(&folder).unwrap();
    let elsewhere = sandbox.path("elsewhere.db");
    std::os::unix::fs::symlink(&elsewhere, folder.join("locks.db")).unwrap();
    let out = with_default_url(&home)
        .args(["run", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert!(!elsewhere.exists());
}

#[test]
fn status_and_list_escape_control_characters_in_what_holders_wrote() {
    let sandbox = Sandbox::new();
    let url = sandbox.url();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _lease = rt.block_on(async {
        let options = fencelock::LockerOptions::default().with_language("evil\u{1b}]0;owned\u{7}");
        let locker = fencelock::Locker::connect_with(&url, options)
            .await
            .unwrap();
        let lease = locker
            .acquire(
                "job",
                &fencelock::LockOptions::default().with_holder("text\u{1b}[2J"),
            )
            .await
            .unwrap();
        (locker, lease)
    });
    for args in [&["status", "job"][..], &["list"][..]] {
        let out = sandbox.run(args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.contains("evil"), "{shown}");
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "{shown:?}"
        );
    }
}

#[test]
fn pgsslmode_in_the_environment_is_honoured_unless_the_url_says_otherwise() {
    let Ok(postgres) = std::env::var("FENCELOCK_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() != Ok("1"),
            "FENCELOCK_TEST_POSTGRES_URL is not set"
        );
        return;
    };
    let status = |url: &str, sslmode: Option<&str>| {
        let mut command = Command::new(BIN);
        command.args(["status", "--url", url, "pgsslmode-probe"]);
        command.env_remove("PGSSLMODE");
        if let Some(mode) = sslmode {
            command.env("PGSSLMODE", mode);
        }
        command.output().unwrap()
    };
    // The test server speaks no TLS: verify-full from the environment must refuse it, where
    // the URL's silence once meant `prefer` and a plaintext connection.
    let out = status(&postgres, None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = status(&postgres, Some("verify-full"));
    assert_ne!(code(&out), 0, "PGSSLMODE=verify-full was downgraded");
    let separator = if postgres.contains('?') { '&' } else { '?' };
    let explicit = format!("{postgres}{separator}sslmode=disable");
    let out = status(&explicit, Some("verify-full"));
    assert_eq!(code(&out), 0, "the URL's sslmode wins: {}", stderr(&out));
}

#[test]
fn a_sqlite_path_is_a_file_never_an_sqlite_uri() {
    let sandbox = Sandbox::new();
    // As a URI this would be a private in-memory database, locking nothing for anyone else.
    let url = "sqlite://file:locks.db%3Fmode%3Dmemory%26cache%3Dshared";
    let out = sandbox.run(&["run", "--url", url, "job", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        sandbox
            .path("file:locks.db?mode=memory&cache=shared")
            .exists(),
        "no file of that name: the path was read as an SQLite URI"
    );
    // fencelock's own options still work.
    let out = sandbox.run(&["status", "--url", "sqlite://plain.db?mode=rwc", "job"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
