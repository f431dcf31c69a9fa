//! Scratch probe: the cost of reaching the runtime from a plain thread.
use std::time::{Duration, Instant};
use fencelock::{LockOptions, Locker};

fn report(label: &str, mut took: Vec<Duration>, total: Duration) {
    took.sort();
    let n = took.len();
    println!("{label}: {:.0} ops/s p50 {:.3} ms p99 {:.3} ms", n as f64 / total.as_secs_f64(), took[n / 2].as_secs_f64() * 1e3, took[n * 99 / 100].as_secs_f64() * 1e3);
}

fn main() {
    let url = std::env::args().nth(1).unwrap_or("redis://127.0.0.1:7001".into());
    let workers: usize = std::env::var("WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap();
    let locker = rt.block_on(Locker::connect(&url)).unwrap();
    let options = LockOptions::default().with_ttl(Duration::from_secs(30));
    let name = format!("probe-{}", std::process::id());
    let only = std::env::var("ONLY").unwrap_or_default();
    for round in 0..3 {
        for renew in [true, false] {
        let (l, o, n) = (locker.clone(), options.clone().with_auto_renew(renew), name.clone());
        rt.block_on(async move { tokio::spawn(async move {
            let mut took = Vec::new();
            let s = Instant::now();
            for _ in 0..3000 { let t = Instant::now(); let lease = l.acquire(&n, &o).await.unwrap(); lease.release().await.unwrap(); took.push(t.elapsed()); }
            report(&format!("r{round} in-runtime renew={renew}"), took, s.elapsed());
        }).await.unwrap() });
        }
        if only == "runtime" { continue; }
        // Handle::block_on per call
        let mut took = Vec::new();
        let s = Instant::now();
        for _ in 0..3000 {
            let t = Instant::now();
            let lease = rt.block_on(locker.acquire(&name, &options)).unwrap();
            rt.block_on(lease.release()).unwrap();
            took.push(t.elapsed());
        }
        report(&format!("r{round} block_on"), took, s.elapsed());
        // spawn + channel per call
        let mut took = Vec::new();
        let s = Instant::now();
        for _ in 0..3000 {
            let t = Instant::now();
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let (l, o, n) = (locker.clone(), options.clone(), name.clone());
            rt.spawn(async move { let _ = tx.send(l.acquire(&n, &o).await); });
            let lease = rx.recv().unwrap().unwrap();
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            rt.spawn(async move { let _ = tx.send(lease.release().await); });
            rx.recv().unwrap().unwrap();
            took.push(t.elapsed());
        }
        report(&format!("r{round} spawn+channel"), took, s.elapsed());
    }
}
