//! One process holding many leases with auto-renew: what renewing them costs the server and the
//! process. One Locker acquires `BENCH_LEASES` mutexes (default 10,000; distinct names, ttl
//! `BENCH_TTL_S`, default 30 s, so each renews every 10 s), holds them for `BENCH_SECONDS`
//! (default 60), then releases them. Reported per backend, for the hold only:
//!
//! - the requests the server received: Redis `INFO commandstats`, script calls (EVAL, EVALSHA,
//!   FCALL) and PINGs (the commands a script runs count there too, and are not requests),
//!   PostgreSQL's transaction ids (each renewal statement is one write transaction; every
//!   write transaction takes one), MariaDB `Com_update` (each renewal statement), ZooKeeper `mntr`'s
//!   `zk_packets_received` (session pings included);
//! - those requests per renewal period (ttl/3): one request per lease would be the lease count;
//! - the process's CPU (user + system) as a share of one core, and its resident memory at the
//!   end of the hold (VmRSS) and at its peak (VmHWM).
//!
//! Usage: `cargo run --release -p fencelock-bench --bin many_leases [redis] [postgres]
//! [zookeeper] [mariadb] [sqlite]` (default: redis, postgres, zookeeper), on the servers of
//! `bash tests/servers.sh start redis zookeeper postgres mariadb`, their URLs from the same
//! `FENCELOCK_TEST_*_URL` variables as the tests.

use std::str::FromStr;
use std::time::{Duration, Instant};

use fencelock::{LockOptions, Locker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_url(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

/// User + system CPU time of this process so far.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after its ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / per_second)
}

/// A `/proc/self/status` line's value in MB (`VmRSS`, `VmHWM`).
fn memory_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// How many requests the server has received so far, by its own count.
async fn server_requests(backend: &str, url: &str) -> u64 {
    match backend {
        "redis" => {
            let client = redis::Client::open(url).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut conn)
                .await
                .unwrap();
            // The commands scripts run inside count in commandstats too (and in
            // total_commands_processed): the requests are the script calls and the pings.
            info.lines()
                .filter(|line| {
                    ["cmdstat_eval", "cmdstat_fcall", "cmdstat_ping"]
                        .iter()
                        .any(|request| line.starts_with(request))
                })
                .filter_map(|line| line.split_once("calls=")?.1.split(',').next())
                .filter_map(|calls| calls.parse::<u64>().ok())
                .sum()
        }
        "postgres" => {
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
                .await
                .unwrap();
            // Each write transaction takes a transaction id, this read too (so the count is one
            // more than the writes in between). pg_stat_database's counters would trail: a
            // backend reports them up to 10 s late.
            let (id,): (i64,) = sqlx::query_as("SELECT txid_current()")
                .fetch_one(&mut conn)
                .await
                .unwrap();
            id as u64
        }
        "mariadb" => {
            let options = sqlx::mysql::MySqlConnectOptions::from_str(url).unwrap();
            let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect_with(&options)
                .await
                .unwrap();
            let (_, updates): (String, String) =
                sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Com_update'")
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
            updates.parse().unwrap_or(0)
        }
        "zookeeper" => {
            let address = url
                .trim_start_matches("zk://")
                .split(['/', ','])
                .next()
                .unwrap_or("127.0.0.1:2181")
                .to_string();
            let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
            stream.write_all(b"mntr").await.unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).await.unwrap();
            text.lines()
                .find_map(|line| line.strip_prefix("zk_packets_received"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        }
        // SQLite has no server.
        _ => 0,
    }
}

async fn measure(backend: &str, url: &str, leases: usize, ttl: Duration, hold: Duration) {
    let locker = Locker::connect(url).await.unwrap();
    let options = LockOptions::default().with_ttl(ttl);
    let started = Instant::now();
    let mut held = Vec::with_capacity(leases);
    for i in 0..leases {
        held.push(
            locker
                .acquire(&format!("bench-many-{i}"), &options)
                .await
                .unwrap(),
        );
    }
    let acquired_in = started.elapsed();
    let (requests_before, cpu_before) = (server_requests(backend, url).await, cpu_time());
    let hold_started = Instant::now();
    tokio::time::sleep(hold).await;
    let held_for = hold_started.elapsed();
    let (requests_after, cpu_after) = (server_requests(backend, url).await, cpu_time());
    let (rss, peak) = (memory_mb("VmRSS"), memory_mb("VmHWM"));
    let lost = held.iter().filter(|lease| !lease.is_held()).count();
    for lease in held {
        let _ = lease.release().await;
    }
    locker.close().await;
    let requests = requests_after.saturating_sub(requests_before);
    let periods = held_for.as_secs_f64() / (ttl / 3).as_secs_f64();
    let cpu = (cpu_after.saturating_sub(cpu_before)).as_secs_f64() / held_for.as_secs_f64();
    println!(
        "| {backend} | {leases} | {:.1} s | {requests} | {:.0} | {:.2}% | {rss:.0} MB | {peak:.0} MB | {lost} |",
        acquired_in.as_secs_f64(),
        requests as f64 / periods,
        cpu * 100.0,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut which: Vec<String> = std::env::args().skip(1).collect();
    if which.is_empty() {
        which = vec!["redis".into(), "postgres".into(), "zookeeper".into()];
    }
    let leases = env_u64("BENCH_LEASES", 10_000) as usize;
    let ttl = Duration::from_secs(env_u64("BENCH_TTL_S", 30));
    let hold = Duration::from_secs(env_u64("BENCH_SECONDS", 60));
    println!(
        "{leases} leases, ttl {ttl:?} (a renewal every {:?}), held {hold:?}, one Locker, 2 runtime workers",
        ttl / 3
    );
    println!(
        "| backend | leases | acquired in | server requests while held | per renewal period | CPU (one core) | RSS | peak RSS | lost |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let dir = std::env::temp_dir().join(format!("fencelock-many-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for backend in which {
        let url = match backend.as_str() {
            "redis" => env_url("FENCELOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379"),
            "postgres" => env_url(
                "FENCELOCK_TEST_POSTGRES_URL",
                "postgres://fencelock:fencelock-test@127.0.0.1:5432/fencelock_test",
            ),
            "mariadb" => env_url(
                "FENCELOCK_TEST_MARIADB_URL",
                "mariadb://fencelock:fencelock-test@127.0.0.1:3306/fencelock_test",
            ),
            "zookeeper" => env_url("FENCELOCK_TEST_ZK_URL", "zk://127.0.0.1:2181"),
            "sqlite" => format!("sqlite://{}", dir.join("many.db").display()),
            other => panic!("unknown backend {other:?}"),
        };
        measure(&backend, &url, leases, ttl, hold).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
