//! Caller-driven connections: the lock scripts of a call made on a blocking caller's thread or
//! on a host event loop's thread, sent and answered there.
//!
//! The shared connection is driven by a task on the Locker's runtime, so a call that uses it
//! hands its request to a runtime thread and gets the reply handed back: two thread wake-ups
//! per round trip on top of the socket's own, which cost more than the round trip on loopback
//! (bench/RESULTS.md, "Caller-driven I/O"). Where the future is polled on the caller's own
//! thread ([`crate::caller`]) the scripts go out on one of these plain connections instead,
//! taken for the one round trip and given back after it:
//! - a blocking caller's thread (Python, the JVM's blocking API, Rust's `*_blocking`) sleeps in
//!   `read()` until Redis answers, as redis-py's own calls do;
//! - an event loop's thread (Node's) never blocks: the socket is non-blocking, and a reply not
//!   there yet makes the future return pending with the socket to watch, which the binding's
//!   executor hands to its loop ([`crate::event_loop`]).
//!
//! At most [`MAX_DIRECT`] per Locker, opened on first use (by a blocking caller in place; for an
//! event loop, in the background, the call in hand going on the shared connection), one per
//! call in flight at the same moment; a call that finds them all busy uses the shared
//! connection, as calls polled on the runtime and renewals always do. Plain TCP only (a
//! `rediss://` Locker keeps every call on the shared connection). Each speaks RESP2, after
//! `AUTH` and `SELECT` as the URL says.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, RedisError, RedisResult, Value};

use crate::caller::{Caller, caller};
use crate::sync::unpoisoned;

/// The most caller-driven connections one Locker opens.
pub(crate) const MAX_DIRECT: usize = 4;

pub(crate) struct DirectConnections {
    pool: Arc<Pool>,
}

struct Pool {
    host: String,
    port: u16,
    info: ConnectionInfo,
    timeout: Duration,
    idle: Mutex<Vec<RespConnection>>,
    /// Connections open or being opened, idle or in use: at most [`MAX_DIRECT`].
    open: AtomicUsize,
}

/// What a round trip on a caller-driven connection came to.
pub(crate) enum Direct<T> {
    /// Send it on the shared connection instead: this future is not polled on a caller's
    /// thread, no connection was free, none could be opened, or the one taken turned out closed
    /// (an idle connection the server dropped). The lock scripts answer a second run as they
    /// answered the first, so sending again is safe even if the request had gone out.
    Unused,
    /// The replies, or a timeout or broken reply: the request may have gone out and its outcome
    /// is unknown, as with a timeout on the shared connection.
    Answered(RedisResult<T>),
}

impl DirectConnections {
    /// `None` where the URL is not plain TCP (a Unix socket, TLS).
    pub(crate) fn new(client: &redis::Client, tls: bool, timeout: Duration) -> Option<Self> {
        let info = client.get_connection_info().clone();
        let ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
            return None;
        };
        if tls {
            return None;
        }
        Some(DirectConnections {
            pool: Arc::new(Pool {
                host,
                port,
                info,
                timeout,
                idle: Mutex::new(Vec::new()),
                open: AtomicUsize::new(0),
            }),
        })
    }

    /// Whether the future being polled runs where a caller-driven connection can serve it
    /// (a blocking caller's thread, or an event loop's where the platform has one), so a
    /// caller on the runtime does not build a request it would not send here.
    pub(crate) fn usable_here(&self) -> bool {
        match caller() {
            Caller::Runtime => false,
            Caller::Blocking => true,
            Caller::EventLoop => cfg!(unix),
        }
    }

    /// Sends `request` (a packed pipeline of `replies` commands) on a connection of its own
    /// and returns the replies (server errors among them as values). After a timeout, or when
    /// the future is dropped while the replies are owed, `after_timeout` is sent on that same
    /// connection and the connection is closed: a reply still owed is never read as the answer
    /// to a later request, and a request that must reach the server after the unanswered one
    /// (an acquire's clean-up: on another connection it could overtake the acquire) does.
    pub(crate) async fn round_trip(
        &self,
        request: &[u8],
        replies: usize,
        after_timeout: Option<Vec<u8>>,
    ) -> Direct<Vec<Value>> {
        if !self.usable_here() {
            return Direct::Unused;
        }
        let mode = caller();
        let Some(conn) = self.pool.take(mode) else {
            return Direct::Unused;
        };
        let mut taken = Taken {
            pool: &self.pool,
            conn: Some(conn),
            after_timeout,
            owed: false,
        };
        let deadline = Instant::now() + self.pool.timeout;
        if taken.conn().send(request, mode, deadline).is_err() {
            // Not sent whole, so not run: a partial command is dropped with the connection.
            taken.close();
            return Direct::Unused;
        }
        taken.owed = true;
        let read = std::future::poll_fn(|_| taken.conn().poll_replies(replies, mode, deadline));
        match read.await {
            Ok(values) => {
                taken.owed = false;
                Direct::Answered(Ok(values))
            }
            Err(ReadError::TimedOut) => {
                drop(taken);
                Direct::Answered(Err(RedisError::from(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no reply from Redis within the operation timeout",
                ))))
            }
            Err(ReadError::Closed) => {
                // A connection the server closed while it was idle answers nothing: run the
                // request elsewhere (it ran at most once here, and the scripts answer a
                // second run as the first).
                taken.owed = false;
                taken.close();
                Direct::Unused
            }
            Err(ReadError::Protocol(e)) => {
                taken.owed = false;
                taken.close();
                Direct::Answered(Err(e))
            }
        }
    }
}

impl Pool {
    /// An idle connection, or, while fewer than [`MAX_DIRECT`] are open, a new one: opened here
    /// for a blocking caller, in the background for an event loop (whose thread must not wait
    /// for a connect; this call then goes on the shared connection).
    fn take(self: &Arc<Self>, mode: Caller) -> Option<RespConnection> {
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
        if mode == Caller::EventLoop {
            let pool = self.clone();
            let opening = tokio::task::spawn_blocking(move || {
                if let Some(conn) = pool.connect() {
                    unpoisoned(&pool.idle).push(conn);
                }
            });
            drop(opening);
            return None;
        }
        self.connect()
    }

    /// A new connection, counted in `open` already; `None` (and uncounted) when it fails.
    fn connect(&self) -> Option<RespConnection> {
        match RespConnection::connect(&self.host, self.port, &self.info, self.timeout) {
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
}

/// A connection taken for one round trip: given back when its replies were read, else
/// ([`Taken::owed`]: a timeout, or the future dropped while waiting) closed after
/// `after_timeout` is sent on it.
struct Taken<'a> {
    pool: &'a Pool,
    conn: Option<RespConnection>,
    after_timeout: Option<Vec<u8>>,
    owed: bool,
}

impl Taken<'_> {
    fn conn(&mut self) -> &mut RespConnection {
        self.conn
            .as_mut()
            .expect("a taken connection is held until dropped")
    }

    fn close(&mut self) {
        if self.conn.take().is_some() {
            self.pool.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if !self.owed {
            unpoisoned(&self.pool.idle).push(conn);
            return;
        }
        if let Some(after) = self.after_timeout.take() {
            // Best effort and never blocking: the connection is closed right after.
            let _ = conn.stream.set_nonblocking(true);
            let _ = conn.stream.write(&after);
        }
        drop(conn);
        self.pool.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why no replies came.
enum ReadError {
    TimedOut,
    /// The server closed the connection, or the socket failed.
    Closed,
    /// Bytes that are not RESP2: the connection is out of step.
    Protocol(RedisError),
}

/// One RESP2 connection on a plain socket.
struct RespConnection {
    stream: TcpStream,
    /// Bytes read and not yet parsed.
    unread: Vec<u8>,
    nonblocking: bool,
}

impl RespConnection {
    fn connect(
        host: &str,
        port: u16,
        info: &ConnectionInfo,
        timeout: Duration,
    ) -> RedisResult<Self> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the host has no address");
        let mut stream = None;
        for addr in (host, port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let stream = stream.ok_or(last)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut conn = RespConnection {
            stream,
            unread: Vec::new(),
            nonblocking: false,
        };
        let settings = info.redis_settings();
        let mut handshake = redis::pipe();
        if let Some(password) = settings.password() {
            let auth = handshake.cmd("AUTH");
            if let Some(username) = settings.username() {
                auth.arg(username);
            }
            auth.arg(password);
        }
        if settings.db() != 0 {
            handshake.cmd("SELECT").arg(settings.db());
        }
        let count = handshake.cmd_iter().count();
        if count > 0 {
            let deadline = Instant::now() + timeout;
            conn.send(&handshake.get_packed_pipeline(), Caller::Blocking, deadline)?;
            let replies = match conn.poll_replies(count, Caller::Blocking, deadline) {
                std::task::Poll::Ready(Ok(replies)) => replies,
                std::task::Poll::Ready(Err(ReadError::Protocol(e))) => return Err(e),
                _ => {
                    return Err(RedisError::from(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no answer to the connection's AUTH or SELECT",
                    )));
                }
            };
            for reply in replies {
                reply.extract_error()?;
            }
        }
        Ok(conn)
    }

    fn set_mode(&mut self, mode: Caller) -> io::Result<()> {
        let nonblocking = mode == Caller::EventLoop;
        if nonblocking != self.nonblocking {
            self.stream.set_nonblocking(nonblocking)?;
            self.nonblocking = nonblocking;
        }
        Ok(())
    }

    /// Writes all of `bytes`. On an event loop's thread the socket is non-blocking; a request
    /// that does not fit the socket's buffer at once (never one lock script on an idle
    /// connection) waits for room until `deadline`.
    fn send(&mut self, bytes: &[u8], mode: Caller, deadline: Instant) -> io::Result<()> {
        self.set_mode(mode)?;
        let mut at = 0;
        while at < bytes.len() {
            match self.stream.write(&bytes[at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.nonblocking => {
                    wait_writable(&self.stream, deadline)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next `count` replies, once they have all arrived. Pending only on an event loop's
    /// thread, after asking the loop to watch the socket.
    fn poll_replies(
        &mut self,
        count: usize,
        mode: Caller,
        deadline: Instant,
    ) -> std::task::Poll<Result<Vec<Value>, ReadError>> {
        use std::task::Poll;
        let mut chunk = [0u8; 4096];
        loop {
            match replies_end(&self.unread, count) {
                Err(e) => return Poll::Ready(Err(ReadError::Protocol(e))),
                Ok(Some(end)) => return Poll::Ready(self.parse(count, end)),
                Ok(None) => {}
            }
            if Instant::now() >= deadline {
                return Poll::Ready(Err(ReadError::TimedOut));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Poll::Ready(Err(ReadError::Closed)),
                Ok(n) => self.unread.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && mode == Caller::EventLoop => {
                    #[cfg(unix)]
                    crate::caller::wait_readable(
                        std::os::fd::AsRawFd::as_raw_fd(&self.stream),
                        deadline,
                    );
                    return Poll::Pending;
                }
                // The socket's read timeout (a blocking caller's).
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Poll::Ready(Err(ReadError::TimedOut));
                }
                Err(_) => return Poll::Ready(Err(ReadError::Closed)),
            }
        }
    }

    /// Parses the `count` complete replies in the first `end` unread bytes.
    fn parse(&mut self, count: usize, end: usize) -> Result<Vec<Value>, ReadError> {
        let mut parser = redis::Parser::new();
        let mut bytes = &self.unread[..end];
        let mut replies = Vec::with_capacity(count);
        for _ in 0..count {
            replies.push(
                parser
                    .parse_value(&mut bytes)
                    .map_err(ReadError::Protocol)?,
            );
        }
        self.unread.drain(..end);
        Ok(replies)
    }
}

/// Waits (blocking, on a non-blocking socket) until `stream` can take more bytes, or fails at
/// `deadline`.
#[cfg(unix)]
fn wait_writable(stream: &TcpStream, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    let mut fds = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(stream),
        events: libc::POLLOUT,
        revents: 0,
    };
    let millis = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd, for the call's duration.
    match unsafe { libc::poll(&mut fds, 1, millis) } {
        n if n > 0 => Ok(()),
        0 => Err(io::ErrorKind::TimedOut.into()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(not(unix))]
fn wait_writable(_stream: &TcpStream, _deadline: Instant) -> io::Result<()> {
    Err(io::ErrorKind::WouldBlock.into())
}

/// Where the first `count` RESP2 replies in `bytes` end, once all have arrived.
fn replies_end(bytes: &[u8], count: usize) -> RedisResult<Option<usize>> {
    let mut at = 0;
    for _ in 0..count {
        match value_end(bytes, at)? {
            Some(end) => at = end,
            None => return Ok(None),
        }
    }
    Ok(Some(at))
}

/// Where the RESP2 value starting at `at` ends; `None` while it is incomplete.
fn value_end(bytes: &[u8], at: usize) -> RedisResult<Option<usize>> {
    let Some(&kind) = bytes.get(at) else {
        return Ok(None);
    };
    let Some(line) = bytes[at..].windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let (header, after_line) = (&bytes[at + 1..at + line], at + line + 2);
    let number = || -> RedisResult<i64> {
        std::str::from_utf8(header)
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| protocol_error("a length that is not a number"))
    };
    match kind {
        b'+' | b'-' | b':' => Ok(Some(after_line)),
        b'$' => {
            let len = number()?;
            if len < 0 {
                return Ok(Some(after_line));
            }
            let end = after_line + len as usize + 2;
            Ok((bytes.len() >= end).then_some(end))
        }
        b'*' => {
            let mut end = after_line;
            for _ in 0..number()?.max(0) {
                match value_end(bytes, end)? {
                    Some(next) => end = next,
                    None => return Ok(None),
                }
            }
            Ok(Some(end))
        }
        _ => Err(protocol_error("a reply of a type RESP2 does not have")),
    }
}

fn protocol_error(what: &str) -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("caller-driven Redis connection: {what}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_complete_only_when_every_byte_arrived() {
        let whole = b"*2\r\n:1\r\n$3\r\nabc\r\n+OK\r\n$-1\r\n-ERR x\r\n";
        for cut in 0..whole.len() {
            let end = replies_end(&whole[..cut], 4).unwrap();
            assert_eq!(end, None, "complete at {cut} of {}", whole.len());
        }
        assert_eq!(replies_end(whole, 4).unwrap(), Some(whole.len()));
        assert_eq!(replies_end(whole, 2).unwrap(), Some(22));
        assert!(replies_end(b"%1\r\n", 1).is_err());
        assert!(replies_end(b"$x\r\n", 1).is_err());
    }
}
