//! Shared by the command's tests: a sandbox folder with its own SQLite file, and waits on
//! real processes.
#![allow(dead_code)]

pub mod pty;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_fencelock");

pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path("locks.db").display())
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    pub fn command(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env("FENCELOCK_URL", self.url())
            .current_dir(self.dir.path());
        c
    }
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// The command with no URL but the per-user default, its home at `home`.
pub fn with_default_url(home: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("FENCELOCK_URL")
        .env_remove("XDG_STATE_HOME")
        .env("HOME", home);
    c
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn wait_for_file(path: &Path, within: Duration) -> String {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(
            started.elapsed() < within,
            "{} did not appear within {within:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Alive and not a zombie.
pub fn is_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit_once(") ")
                .map(|(_, rest)| rest.chars().next().unwrap_or('?'));
            !matches!(state, Some('Z') | Some('X') | None)
        }
    }
}

pub fn wait_until_gone(pid: i32, within: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if !is_running(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !is_running(pid)
}

pub fn wait_child(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > within {
            let _ = child.kill();
            panic!("fencelock did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn token_of(status_output: &str) -> u64 {
    status_output
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("token:")
                .or_else(|| l.trim().strip_prefix("last token:"))
        })
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no token in {status_output:?}"))
}
