//! Change notifications for a SQLite database's files (Linux's inotify), so a waiter learns of
//! a commit by another process as it happens instead of at its next poll.
//!
//! The folder is watched rather than the files: the write-ahead log is deleted when the last
//! connection to the database closes and made again by the next one, and a watch on the file
//! would end with it. Events for the folder's other files are read and dropped.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A watch on some files of one folder.
pub(super) struct FileWatch {
    fd: AsyncFd<OwnedFd>,
    files: Vec<OsString>,
}

/// The size of `struct inotify_event` before its name.
const EVENT_HEADER: usize = 16;

impl FileWatch {
    /// Watches `files` (names, not paths) in `folder` for writes, creation and renames.
    pub fn new(folder: &Path, files: Vec<OsString>) -> io::Result<Self> {
        let folder = CString::new(folder.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
        // SAFETY: inotify_init1 takes flags only and returns a new descriptor or -1.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just returned to us, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mask = libc::IN_MODIFY | libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_CLOSE_WRITE;
        // SAFETY: `fd` is an inotify descriptor and `folder` a NUL-terminated path that lives
        // across the call.
        if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), folder.as_ptr(), mask) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the descriptor stays open, the same one, for as long as the AsyncFd owns the
        // OwnedFd (it closes only when dropped with it).
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(FileWatch { fd, files })
    }

    /// Returns once one of the files changed, after reading every event queued so far: a
    /// change made after this returns is reported by the next call.
    pub async fn changed(&mut self) -> io::Result<()> {
        // Large enough for many events at once, and for one with the longest name.
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let mut guard = self.fd.readable().await?;
            let mut hit = false;
            loop {
                // SAFETY: reads at most `buffer.len()` bytes into `buffer`, which outlives the
                // call; the descriptor is non-blocking.
                let n = unsafe {
                    libc::read(
                        guard.get_inner().as_raw_fd(),
                        buffer.as_mut_ptr().cast(),
                        buffer.len(),
                    )
                };
                if n < 0 {
                    let error = io::Error::last_os_error();
                    if error.kind() == io::ErrorKind::WouldBlock {
                        guard.clear_ready();
                        break;
                    }
                    if error.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(error);
                }
                hit |= self.concerns_us(&buffer[..n as usize]);
            }
            if hit {
                return Ok(());
            }
        }
    }

    /// Whether any event in `events` is about one of the files (or says events were lost).
    fn concerns_us(&self, mut events: &[u8]) -> bool {
        let mut hit = false;
        while events.len() >= EVENT_HEADER {
            let field = |at: usize| {
                u32::from_ne_bytes([events[at], events[at + 1], events[at + 2], events[at + 3]])
            };
            let (mask, len) = (field(4), field(12) as usize);
            let name = events
                .get(EVENT_HEADER..EVENT_HEADER + len)
                .unwrap_or_default();
            let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
            hit |= mask & libc::IN_Q_OVERFLOW != 0
                || self
                    .files
                    .iter()
                    .any(|file| file.as_os_str() == OsStr::from_bytes(name));
            events = events.get(EVENT_HEADER + len..).unwrap_or_default();
        }
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A write to a watched file is reported; one to another file of the folder is not.
    #[tokio::test]
    async fn reports_writes_to_the_watched_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut watch = FileWatch::new(dir.path(), vec!["locks.db-wal".into()]).unwrap();
        std::fs::write(dir.path().join("other"), b"x").unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(200), watch.changed()).await;
        assert!(quiet.is_err(), "woken by another file");
        std::fs::write(dir.path().join("locks.db-wal"), b"x").unwrap();
        tokio::time::timeout(Duration::from_secs(10), watch.changed())
            .await
            .expect("no event for the watched file")
            .unwrap();
    }
}
