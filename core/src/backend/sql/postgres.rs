//! PostgreSQL: from a fencelock URL to a small statement pool, and the one LISTEN
//! connection per Locker that wakes waiters.
//!
//! URL: `postgres://user:password@host:5432/database?sslmode=verify-full&sslrootcert=ca.pem`
//! (`postgresql://` too). TLS options are libpq's: `sslmode` (`disable`, `allow`, `prefer`,
//! the default, `require`, `verify-ca`, `verify-full`; `tls=true` alone means `verify-full`),
//! `sslrootcert`, `sslcert`, `sslkey`. As in libpq, only `verify-ca` and `verify-full` check
//! the server's certificate. Trusted roots are the system's plus `sslrootcert`; rustls with
//! the `ring` provider, the one the Redis backend uses.
//!
//! Waking: a release runs `pg_notify(channel, '')` in the same statement as its `UPDATE` (the
//! notification is delivered at commit, only when a row was released). Each Locker has one
//! listening connection, opened on its first wait, shared by every waiter: a waiter's `LISTEN` is
//! confirmed before it retries, so a release between its failed attempt and its subscription is
//! caught by that retry, and a release after it wakes it. Every waiter of a name is woken and they
//! race once (docs/design.md §3.1). When the listening connection drops, every waiter is woken
//! (notifications may have been lost) and the connection is made again, with back-off, re-listening
//! to every channel that still has waiters; meanwhile waiters poll.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgNotification, PgPoolOptions, PgSslMode};
use tokio::sync::{Notify, mpsc, oneshot};

use super::SqlSettings;
use super::conn_pool::{ConnPool, PoolSettings};
use super::session::Pooled;
use crate::backend::ReleaseWatch;
use crate::error::{Error, Result};
use crate::options::LockerOptions;
use crate::sync::unpoisoned;
use crate::url::LockerUrl;

/// The PostgreSQL URL options besides the shared ones (`table`, `create_table`, `pool_size`).
pub(crate) const OPTIONS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
    "tls",
];

/// A pooled connection idle for longer than this is pinged before use, so a server restart
/// costs a ping, not a failed statement.
const IDLE_PING: Duration = Duration::from_secs(1);

fn existing_file(url: &LockerUrl, key: &str) -> Result<Option<String>> {
    match url.query.get(key) {
        None => Ok(None),
        Some(path) if std::path::Path::new(path).is_file() => Ok(Some(path.clone())),
        Some(path) => Err(Error::invalid(format!("{key}={path}: no such file"))),
    }
}

/// The TLS mode the URL asks for: `sslmode=`, or verify-full for `tls=true`; `None` when it
/// says nothing, so that libpq's `PGSSLMODE` (read by sqlx) applies, else sqlx's default, prefer.
/// Never a mode weaker than the environment's without the URL saying so.
fn ssl_mode(url: &LockerUrl) -> Result<Option<PgSslMode>> {
    match url.query.get("sslmode").map(|m| m.to_ascii_lowercase()) {
        None if url.tls => Ok(Some(PgSslMode::VerifyFull)),
        None => Ok(None),
        Some(m) => Ok(Some(match m.as_str() {
            "disable" => PgSslMode::Disable,
            "allow" => PgSslMode::Allow,
            "prefer" => PgSslMode::Prefer,
            "require" => PgSslMode::Require,
            "verify-ca" => PgSslMode::VerifyCa,
            "verify-full" => PgSslMode::VerifyFull,
            other => {
                return Err(Error::invalid(format!(
                    "sslmode must be disable, allow, prefer, require, verify-ca or verify-full, not {other:?}"
                )));
            }
        })),
    }
}

/// Connection settings from the URL. Settings the URL leaves out (user, password, database,
/// root certificate) fall back to libpq's environment variables (`PGUSER`, `PGPASSWORD`,
/// `PGDATABASE`, `PGSSLROOTCERT`, …), as psql does; `~/.pgpass` is not read.
pub(crate) fn connect_options(
    url: &LockerUrl,
    options: &LockerOptions,
) -> Result<PgConnectOptions> {
    let host = url
        .hosts
        .first()
        .ok_or_else(|| Error::invalid("a postgres URL needs a host"))?;
    let mut o = PgConnectOptions::new_without_pgpass()
        .host(&host.host)
        .port(host.port.unwrap_or(5432));
    if let Some(user) = &url.user {
        o = o.username(user);
    }
    if let Some(password) = url.password() {
        o = o.password(password);
    }
    let database = url.path.trim_matches('/');
    if !database.is_empty() {
        o = o.database(database);
    }
    if let Some(mode) = ssl_mode(url)? {
        o = o.ssl_mode(mode);
    }
    if let Some(ca) = existing_file(url, "sslrootcert")? {
        o = o.ssl_root_cert(ca);
    }
    match (
        existing_file(url, "sslcert")?,
        existing_file(url, "sslkey")?,
    ) {
        (Some(cert), Some(key)) => o = o.ssl_client_cert(cert).ssl_client_key(key),
        (None, None) => {}
        _ => {
            return Err(Error::invalid(
                "a TLS client certificate needs both sslcert= and sslkey=",
            ));
        }
    }
    o = o.application_name(
        url.query
            .get("application_name")
            .map_or("fencelock", String::as_str),
    );
    // A session stalled inside a transaction (a paused client) must not hold row locks for
    // ever, and nobody waits for a row lock longer than an operation may take.
    let ms = options.operation_timeout.as_millis().max(1);
    o = o.options([
        ("lock_timeout", format!("{ms}ms")),
        (
            "idle_in_transaction_session_timeout",
            format!("{}ms", ms * 2),
        ),
    ]);
    Ok(o)
}

/// The statement pool: small, connected lazily (the first statement connects), pinging
/// connections that sat idle.
pub(crate) fn open_pool(
    url: &LockerUrl,
    options: &LockerOptions,
    settings: &SqlSettings,
) -> Result<Pooled<sqlx::Postgres>> {
    let connect = connect_options(url, options)?;
    let pool = ConnPool::new(PoolSettings {
        connect,
        setup: Vec::new(),
        size: settings.pool_size,
        acquire_timeout: options.operation_timeout,
        ping_after: Some(IDLE_PING),
    });
    Ok(Pooled {
        pool,
        begin_sql: None,
    })
}

/// What waiters of one channel share.
#[derive(Default)]
struct Channel {
    /// Changed only with the hub's map locked.
    waiters: AtomicUsize,
    generation: AtomicU64,
    notify: Notify,
}

fn bump(channel: &Channel) {
    channel.generation.fetch_add(1, Ordering::AcqRel);
    channel.notify.notify_waiters();
}

#[derive(Default)]
struct Hub {
    channels: Mutex<HashMap<String, Arc<Channel>>>,
}

impl Hub {
    fn wake(&self, channel: &str) {
        if let Some(state) = unpoisoned(&self.channels).get(channel) {
            bump(state);
        }
    }

    fn wake_all(&self) {
        for state in unpoisoned(&self.channels).values() {
            bump(state);
        }
    }
}

enum Command {
    /// One more waiter on the channel; answered once the server confirmed LISTEN (or it failed).
    Listen(String, oneshot::Sender<bool>),
    /// One waiter fewer.
    Unlisten(String),
}

/// The Locker's LISTEN connection and the waiters it wakes.
pub(crate) struct Notifier {
    hub: Arc<Hub>,
    commands: Mutex<Option<mpsc::UnboundedSender<Command>>>,
    connect: PgConnectOptions,
    timeout: Duration,
    /// The Locker's runtime, which runs the listening task.
    runtime: tokio::runtime::Handle,
}

impl Notifier {
    pub fn new(
        connect: PgConnectOptions,
        timeout: Duration,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Notifier {
            hub: Arc::default(),
            commands: Mutex::new(None),
            connect,
            timeout,
            runtime,
        }
    }

    /// The command queue of the listening task, started on first use.
    fn sender(&self) -> mpsc::UnboundedSender<Command> {
        let mut commands = unpoisoned(&self.commands);
        if let Some(tx) = commands.as_ref().filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        self.runtime.spawn(listen_task(
            self.hub.clone(),
            rx,
            self.connect.clone(),
            self.timeout,
        ));
        *commands = Some(tx.clone());
        tx
    }

    /// Subscribes one waiter to `channel`. When LISTEN cannot be confirmed (the server is
    /// unreachable) the waiter polls, and is subscribed once the connection is back.
    pub async fn watch(&self, channel: String) -> Box<dyn ReleaseWatch> {
        let state = {
            let mut channels = unpoisoned(&self.hub.channels);
            let state = channels.entry(channel.clone()).or_default().clone();
            state.waiters.fetch_add(1, Ordering::AcqRel);
            state
        };
        let tx = self.sender();
        let (reply, confirmed) = oneshot::channel();
        let listening = tx.send(Command::Listen(channel.clone(), reply)).is_ok()
            && matches!(
                tokio::time::timeout(self.timeout, confirmed).await,
                Ok(Ok(true))
            );
        if !listening {
            flog!(
                debug,
                "LISTEN {channel} not confirmed; this waiter polls until it is"
            );
        }
        let seen = state.generation.load(Ordering::Acquire);
        Box::new(PgWatch {
            hub: Arc::downgrade(&self.hub),
            tx,
            channel,
            state,
            seen,
        })
    }

    /// Stops the listening task (it closes its connection once the last waiter is gone) and
    /// wakes every waiter, so each finds the Locker closed at once.
    pub fn close(&self) {
        unpoisoned(&self.commands).take();
        self.hub.wake_all();
    }
}

struct PgWatch {
    hub: Weak<Hub>,
    tx: mpsc::UnboundedSender<Command>,
    channel: String,
    state: Arc<Channel>,
    seen: u64,
}

#[async_trait]
impl ReleaseWatch for PgWatch {
    async fn wait(&mut self, max: Duration) {
        let notified = self.state.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.state.generation.load(Ordering::Acquire) == self.seen {
            let _ = tokio::time::timeout(max, notified).await;
        }
        self.seen = self.state.generation.load(Ordering::Acquire);
    }
}

impl Drop for PgWatch {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            let mut channels = unpoisoned(&hub.channels);
            if self.state.waiters.fetch_sub(1, Ordering::AcqRel) == 1
                && channels
                    .get(&self.channel)
                    .is_some_and(|s| Arc::ptr_eq(s, &self.state))
            {
                channels.remove(&self.channel);
            }
        }
        let _ = self
            .tx
            .send(Command::Unlisten(std::mem::take(&mut self.channel)));
    }
}

enum Event {
    Command(Option<Command>),
    Message(std::result::Result<Option<PgNotification>, sqlx::Error>),
    Reconnect,
}

async fn next_message(
    listener: &mut Option<PgListener>,
) -> std::result::Result<Option<PgNotification>, sqlx::Error> {
    match listener {
        Some(l) => l.try_recv().await,
        None => std::future::pending().await,
    }
}

/// Opens the listening connection and LISTENs to `channels`. Each connection gets a pool of
/// its own: a connection given up on (hung, or failed) is dropped with its pool, so it can
/// never hold the slot its successor needs.
async fn open_listener(
    connect: &PgConnectOptions,
    channels: Vec<&str>,
    timeout: Duration,
) -> Option<PgListener> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(timeout)
        .test_before_acquire(false)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(connect.clone());
    let open = async {
        let mut listener = PgListener::connect_with(&pool).await?;
        // A lost connection is reported (Ok(None)) and made again here, not inside sqlx,
        // so every waiter hears of it.
        listener.eager_reconnect(false);
        listener.ignore_pool_close_event(true);
        if !channels.is_empty() {
            listener.listen_all(channels).await?;
        }
        Ok::<_, sqlx::Error>(listener)
    };
    match tokio::time::timeout(timeout, open).await {
        Ok(Ok(listener)) => Some(listener),
        Ok(Err(e)) => {
            let e = super::error::map_sqlx_error("postgres listen", e);
            flog!(debug, "the LISTEN connection failed: {e}");
            None
        }
        Err(_) => None,
    }
}

/// Owns the listening connection: runs LISTEN/UNLISTEN in the order waiters come and go,
/// dispatches notifications, and reconnects. Ends when the Locker closes or is dropped.
async fn listen_task(
    hub: Arc<Hub>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    connect: PgConnectOptions,
    timeout: Duration,
) {
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut listener: Option<PgListener> = None;
    let mut backoff = Duration::from_millis(100);
    let mut reconnect_at: Option<tokio::time::Instant> = None;
    loop {
        let event = tokio::select! {
            command = commands.recv() => Event::Command(command),
            message = next_message(&mut listener) => Event::Message(message),
            _ = async {
                match reconnect_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => Event::Reconnect,
        };
        match event {
            Event::Command(None) => break,
            Event::Command(Some(Command::Listen(channel, reply))) => {
                let count = counts.entry(channel.clone()).or_insert(0);
                *count += 1;
                let first = *count == 1;
                let confirmed = match listener.as_mut() {
                    Some(_) if !first => true,
                    Some(l) => match tokio::time::timeout(timeout, l.listen(&channel)).await {
                        Ok(Ok(())) => true,
                        _ => {
                            listener = None;
                            hub.wake_all();
                            reconnect_at = Some(tokio::time::Instant::now());
                            false
                        }
                    },
                    // The last attempt failed and the next is scheduled: poll until then.
                    None if reconnect_at.is_some() => false,
                    None => {
                        // Not connected: try now (the waiter is waiting for the answer).
                        listener = open_listener(
                            &connect,
                            counts.keys().map(String::as_str).collect(),
                            timeout,
                        )
                        .await;
                        match listener {
                            Some(_) => {
                                backoff = Duration::from_millis(100);
                                reconnect_at = None;
                                hub.wake_all();
                                true
                            }
                            None => {
                                reconnect_at = Some(tokio::time::Instant::now() + backoff);
                                false
                            }
                        }
                    }
                };
                let _ = reply.send(confirmed);
            }
            Event::Command(Some(Command::Unlisten(channel))) => {
                let last = match counts.get_mut(&channel) {
                    Some(n) if *n > 1 => {
                        *n -= 1;
                        false
                    }
                    Some(_) => {
                        counts.remove(&channel);
                        true
                    }
                    None => false,
                };
                if last
                    && let Some(l) = listener.as_mut()
                    && !matches!(
                        tokio::time::timeout(timeout, l.unlisten(&channel)).await,
                        Ok(Ok(()))
                    )
                {
                    listener = None;
                    hub.wake_all();
                    reconnect_at = Some(tokio::time::Instant::now());
                }
                if counts.is_empty() && listener.is_none() {
                    reconnect_at = None;
                }
            }
            Event::Message(Ok(Some(notification))) => hub.wake(notification.channel()),
            Event::Message(result) => {
                // The connection dropped (Ok(None)) or failed: notifications may be lost, so
                // everybody retries, and the connection is made again.
                if let Err(e) = result {
                    let e = super::error::map_sqlx_error("postgres listen", e);
                    flog!(debug, "the LISTEN connection failed: {e}");
                }
                listener = None;
                hub.wake_all();
                reconnect_at = Some(tokio::time::Instant::now());
            }
            Event::Reconnect => {
                reconnect_at = None;
                if counts.is_empty() {
                    continue;
                }
                listener = open_listener(
                    &connect,
                    counts.keys().map(String::as_str).collect(),
                    timeout,
                )
                .await;
                if listener.is_some() {
                    backoff = Duration::from_millis(100);
                    hub.wake_all();
                } else {
                    reconnect_at = Some(tokio::time::Instant::now() + backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
    drop(listener);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> LockerUrl {
        LockerUrl::parse(url).unwrap()
    }

    #[test]
    fn tls_options_are_libpqs() {
        // Nothing in the URL: the environment's PGSSLMODE, else sqlx's default (prefer).
        assert!(ssl_mode(&parse("postgres://h/db")).unwrap().is_none());
        assert!(matches!(
            ssl_mode(&parse("postgres://h/db?sslmode=verify-full")).unwrap(),
            Some(PgSslMode::VerifyFull)
        ));
        assert!(matches!(
            ssl_mode(&parse("postgres://h/db?sslmode=DISABLE")).unwrap(),
            Some(PgSslMode::Disable)
        ));
        assert!(matches!(
            ssl_mode(&parse("postgres://h/db?tls=true")).unwrap(),
            Some(PgSslMode::VerifyFull)
        ));
        assert!(ssl_mode(&parse("postgres://h/db?sslmode=sometimes")).is_err());
        let opts = LockerOptions::default();
        let err = connect_options(&parse("postgres://h/db?sslrootcert=/no/such/ca.pem"), &opts)
            .unwrap_err();
        assert!(err.message().contains("/no/such/ca.pem"), "{err}");
        let o = connect_options(&parse("postgres://bob:pw@db.example:6543/app"), &opts).unwrap();
        assert_eq!(
            (
                o.get_host(),
                o.get_port(),
                o.get_username(),
                o.get_database()
            ),
            ("db.example", 6543, "bob", Some("app"))
        );
    }
}
