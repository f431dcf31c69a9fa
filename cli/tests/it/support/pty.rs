//! An interactive bash on a pseudo-terminal, with job control, for the tests where a terminal
//! matters: keys are sent to it as a user types them, and what it prints is collected.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Shell {
    writer: std::fs::File,
    output: Arc<Mutex<String>>,
    child: Child,
}

impl Shell {
    /// `bash -i` on a new pty, in `dir`, with `env` set, the prompt "$ ".
    pub fn start(dir: &std::path::Path, env: &[(&str, String)]) -> Shell {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty fills the two descriptors we pass; the rest are optional.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: we own both descriptors from here on.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let mut command = Command::new("bash");
        command
            .args(["--norc", "--noprofile", "-i"])
            .current_dir(dir)
            .env("PS1", "$ ")
            .env("TERM", "dumb")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        for (key, value) in env {
            command.env(key, value);
        }
        // SAFETY: setsid and TIOCSCTTY are async-signal-safe; they make the pty bash's
        // controlling terminal, so bash runs job control on it.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let output = Arc::new(Mutex::new(String::new()));
        let mut reader = std::fs::File::from(master.try_clone().unwrap());
        let collected = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                collected
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let shell = Shell {
            writer: std::fs::File::from(master),
            output,
            child,
        };
        shell.expect("$ ", Duration::from_secs(20));
        shell
    }

    /// Types `keys` (a command ends with "\n"; Ctrl-Z is "\x1a").
    pub fn send(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
    }

    /// Everything printed so far.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Waits until `text` has been printed (anywhere in the output), failing after `within`.
    pub fn expect(&self, text: &str, within: Duration) {
        let started = Instant::now();
        while !self.output().contains(text) {
            assert!(
                started.elapsed() < within,
                "the terminal did not show {text:?} within {within:?}; it shows:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How often `text` has been printed so far.
    pub fn count(&self, text: &str) -> usize {
        self.output().matches(text).count()
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
