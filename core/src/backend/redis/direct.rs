//! Caller-driven connections: the lock scripts of a blocking call, sent and answered on the
//! caller's own thread.
//!
//! The shared connection is driven by a task on the Locker's runtime, so a blocking call that
//! uses it hands its request to a runtime thread and gets the reply handed back: two thread
//! wake-ups per round trip on top of the socket's own, which cost more than the round trip on
//! loopback (bench/RESULTS.md, "Caller-driven I/O"). A blocking call's first poll runs on the
//! caller's thread ([`crate::caller::on_caller_thread`]); there the scripts go out on one of
//! these plain blocking connections, taken for the one round trip and given back after it, and
//! the caller sleeps in `read()` until Redis answers, as redis-py's own calls do.
//!
//! At most [`MAX_DIRECT`] per Locker, opened on first use, one per thread that runs a call at
//! the same moment; a call that finds them all busy uses the shared connection, as async calls
//! and renewals always do. Plain TCP only (a `rediss://` Locker keeps every call on the shared
//! connection), and only while no replica acknowledgement is needed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::{Connection, RedisResult};

use crate::sync::unpoisoned;

/// The most caller-driven connections one Locker opens.
pub(crate) const MAX_DIRECT: usize = 4;

pub(crate) struct DirectConnections {
    client: redis::Client,
    timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    /// Connections open now, idle or in use: at most [`MAX_DIRECT`].
    open: AtomicUsize,
}

/// What a round trip on a caller-driven connection came to.
pub(crate) enum Direct<T> {
    /// Send it on the shared connection instead: no connection was free, none could be opened,
    /// or the one taken turned out closed (an idle connection the server dropped). The lock
    /// scripts answer a second run as they answered the first, so sending again is safe even
    /// if the request had gone out.
    Unused,
    /// The reply, a server error, or a timeout: the request may have gone out and its outcome
    /// is unknown, as with a timeout on the shared connection.
    Answered(RedisResult<T>),
}

impl DirectConnections {
    pub(crate) fn new(client: redis::Client, timeout: Duration) -> Self {
        DirectConnections {
            client,
            timeout,
            idle: Mutex::new(Vec::new()),
            open: AtomicUsize::new(0),
        }
    }

    /// Runs `request` on a connection of its own, blocking this thread. After a timeout the
    /// connection is closed, so a reply still owed can never be read as the answer to a later
    /// request; `on_timeout` runs first, on that same connection, for a request that must reach
    /// the server after the unanswered one (an acquire's clean-up: on another connection it
    /// could overtake the acquire).
    pub(crate) fn run<T>(
        &self,
        request: impl FnOnce(&mut Connection) -> RedisResult<T>,
        on_timeout: impl FnOnce(&mut Connection),
    ) -> Direct<T> {
        let Some(mut conn) = self.take() else {
            return Direct::Unused;
        };
        let reply = request(&mut conn);
        match &reply {
            Err(e) if e.is_timeout() => {
                on_timeout(&mut conn);
                self.close(conn);
            }
            Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                self.close(conn);
                return Direct::Unused;
            }
            // A reply, or an error the server answered with: the connection is in step.
            _ => self.give_back(conn),
        }
        Direct::Answered(reply)
    }

    /// An idle connection, or a new one while fewer than [`MAX_DIRECT`] are open.
    fn take(&self) -> Option<Connection> {
        if let Some(conn) = unpoisoned(&self.idle).pop() {
            return Some(conn);
        }
        let opened = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_DIRECT).then_some(n + 1)
            });
        if opened.is_err() {
            return None;
        }
        match self.connect() {
            Ok(conn) => Some(conn),
            Err(e) => {
                self.open.fetch_sub(1, Ordering::AcqRel);
                // The shared connection answers instead, and says what is wrong if it is.
                flog!(
                    debug,
                    "cannot open a caller-driven Redis connection: {}",
                    crate::url::redact_secrets(&e.to_string())
                );
                None
            }
        }
    }

    fn connect(&self) -> RedisResult<Connection> {
        let conn = self.client.get_connection_with_timeout(self.timeout)?;
        conn.set_read_timeout(Some(self.timeout))?;
        conn.set_write_timeout(Some(self.timeout))?;
        Ok(conn)
    }

    fn give_back(&self, conn: Connection) {
        unpoisoned(&self.idle).push(conn);
    }

    fn close(&self, conn: Connection) {
        drop(conn);
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}
