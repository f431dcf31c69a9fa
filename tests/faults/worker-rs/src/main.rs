//! The Rust worker of the fault-injection suite: reads commands as JSON lines on stdin, answers
//! and records its critical sections as JSON lines on stdout. The protocol is in
//! tests/faults/README.md; the Python, Node and JVM workers speak the same one. Semaphore
//! permits and read or write leases (`acquire` with a `mode`) record their critical sections as
//! `section_start`/`section_end` (permits and reads cannot fence).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::{
    BootInstant, Error, Fence, Lease, LockKind, LockMode, LockOptions, Locker, LockerOptions,
    MultiLease, SqlValue, Statement,
};
use serde_json::{Value, json};

const INSERT_WRITE: &str = "INSERT INTO fault_writes (write_id, cs, token, worker, lang, mode, t_sent) VALUES (?, ?, ?, ?, ?, ?, ?)";

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Wall-clock microseconds of a point on CLOCK_BOOTTIME, so the checker can compare it with
/// every other process's wall-clock records (one machine, one clock).
fn boot_to_wall_us(at: BootInstant) -> i64 {
    let (now_b, now_w) = (BootInstant::now(), now_us());
    if at >= now_b {
        now_w + now_b.until(at).as_micros() as i64
    } else {
        now_w - at.until(now_b).as_micros() as i64
    }
}

fn expires_at_us(lease: &Lease) -> Value {
    match lease.expires_at() {
        Some(t) => json!(
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_micros() as i64)
                .unwrap_or(0)
        ),
        None => Value::Null,
    }
}

fn emit(line: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The mode a command asks for: `mode` (exclusive, permit, read, write; exclusive when absent)
/// and, for a permit, `permits`.
fn requested_mode(mode: Option<&str>, cmd: &Value) -> Result<LockMode, Error> {
    match mode.unwrap_or("exclusive") {
        "exclusive" => Ok(LockMode::Exclusive),
        "permit" => {
            let permits = cmd
                .get("permits")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| Error::invalid("a permit needs permits: a number"))?;
            LockMode::permit(permits)
        }
        "read" => Ok(LockMode::Read),
        "write" => Ok(LockMode::Write),
        other => Err(Error::invalid(format!("unknown mode {other:?}"))),
    }
}

fn permits_of(mode: LockMode) -> Value {
    match mode {
        LockMode::Permit { permits } => json!(permits),
        _ => Value::Null,
    }
}

/// The lease's client deadline and its server expiry estimate, read now.
fn bounds(lease: &Lease) -> (Value, Value) {
    (
        json!(boot_to_wall_us(lease.deadline())),
        expires_at_us(lease),
    )
}

fn ms(v: &Value, key: &str) -> Option<Duration> {
    v.get(key)
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
}

struct Worker {
    name: String,
    lang: String,
    locker: Locker,
    fence: Fence,
    lock: String,
    /// Names taken with `lock` as one multi-name lock by every exclusive acquire (`also` at
    /// init); the worker's lease is then the multi-lock's part for `lock`.
    also: Vec<String>,
    multi: Option<MultiLease>,
    lease: Option<Lease>,
    last_token: Option<(String, u64)>,
    sections: u64,
    writes: u64,
    /// The open critical section of a permit, read or write lease (its id).
    open_section: Option<String>,
    /// Sections begun by this worker, so their ids are unique.
    begun: u64,
}

impl Worker {
    fn rec(&self, kind: &str, mut fields: Value) -> Value {
        let obj = fields.as_object_mut().expect("records are objects");
        obj.insert("rec".into(), json!(kind));
        obj.insert("worker".into(), json!(self.name));
        obj.insert("lang".into(), json!(self.lang));
        fields
    }

    fn cs(&self) -> String {
        format!("{}#{}", self.name, self.sections)
    }

    async fn acquire(&mut self, cmd: &Value, mode: LockMode) -> Result<Value, Error> {
        // A new lease ends the work done under the previous one.
        self.end_section();
        let mut options =
            LockOptions::default().with_ttl(ms(cmd, "ttl_ms").unwrap_or(Duration::from_secs(10)));
        options = options.with_wait(ms(cmd, "wait_ms"));
        let t_req = now_us();
        self.multi = None;
        let lease = match mode {
            LockMode::Exclusive if !self.also.is_empty() => {
                let mut names = vec![self.lock.as_str()];
                names.extend(self.also.iter().map(String::as_str));
                let multi = self.locker.acquire_many(&names, &options).await?;
                let part = multi.part(&self.lock).cloned();
                self.multi = Some(multi);
                part.ok_or_else(|| Error::invalid("the multi-lock has no part for the lock"))?
            }
            LockMode::Exclusive => self.locker.acquire(&self.lock, &options).await?,
            LockMode::Permit { permits } => {
                self.locker
                    .semaphore(&self.lock, permits)?
                    .acquire(&options)
                    .await?
            }
            LockMode::Read => self.locker.read_lock(&self.lock)?.acquire(&options).await?,
            LockMode::Write => {
                self.locker
                    .write_lock(&self.lock)?
                    .acquire(&options)
                    .await?
            }
        };
        let t = now_us();
        self.sections += 1;
        let cs = self.cs();
        emit(self.rec(
            "acquired",
            json!({"cs": cs, "token": lease.token().to_string(), "t_req": t_req, "t": t,
                   "mode": lease.mode().as_str(), "permits": permits_of(lease.mode()),
                   "expires_at": expires_at_us(&lease), "deadline": boot_to_wall_us(lease.deadline())}),
        ));
        // A multi-lock is lost when any part is: the holder hears the whole's signal.
        let signal = match &self.multi {
            Some(multi) => multi.lost_signal(),
            None => lease.lost_signal(),
        };
        let (name, lang) = (self.name.clone(), self.lang.clone());
        tokio::spawn(async move {
            let reason = signal.wait().await;
            emit(
                json!({"rec": "lost_signal", "worker": name, "lang": lang, "cs": cs, "t": now_us(),
                        "reason": format!("{reason:?}")}),
            );
        });
        self.last_token = Some((self.cs(), lease.token()));
        self.lease = Some(lease.clone());
        Ok(json!({"token": lease.token().to_string()}))
    }

    fn probe(&self) -> Value {
        let Some(lease) = &self.lease else {
            return json!({"lost": Value::Null});
        };
        let t = now_us();
        let lost = match &self.multi {
            Some(multi) => multi.is_lost(),
            None => lease.is_lost(),
        };
        let rec = self.rec(
            "probe",
            json!({"cs": self.cs(), "t": t, "lost": lost, "expires_at": expires_at_us(lease),
                   "deadline": boot_to_wall_us(lease.deadline())}),
        );
        emit(rec);
        json!({"lost": lost})
    }

    /// Begins a critical section of a permit, read or write lease (they are judged by their
    /// sections, since permits and reads cannot fence): `t` is read before the lease is checked,
    /// so the section really began after it; a lease found lost or released begins nothing.
    fn begin_section(&mut self) -> Value {
        let Some(lease) = self.lease.clone() else {
            return json!({"started": false, "code": "NO_LEASE"});
        };
        if self.open_section.is_some() {
            return json!({"started": true, "code": Value::Null});
        }
        self.begun += 1;
        let id = format!("{}/s{}", self.cs(), self.begun);
        let t = now_us();
        let checked = lease.ensure_held();
        let (deadline, expires_at) = bounds(&lease);
        let code = checked.as_ref().err().map(|e| e.code().as_str());
        emit(self.rec(
            "section_start",
            json!({"cs": self.cs(), "section": id, "mode": lease.mode().as_str(),
                   "permits": permits_of(lease.mode()), "t": t, "started": checked.is_ok(),
                   "code": code, "deadline": deadline, "expires_at": expires_at}),
        ));
        if checked.is_ok() {
            self.open_section = Some(id);
        }
        json!({"started": checked.is_ok(), "code": code})
    }

    /// Ends the open section: `t` is the work's last moment; `lost`, the deadline and the
    /// expiry are read after it (the checker ends the section at the earlier of `t` and them).
    fn end_section(&mut self) -> Value {
        let (Some(id), Some(lease)) = (self.open_section.take(), self.lease.clone()) else {
            return json!({"ended": false});
        };
        let t = now_us();
        let lost = lease.is_lost();
        let (deadline, expires_at) = bounds(&lease);
        emit(self.rec(
            "section_end",
            json!({"cs": self.cs(), "section": id, "mode": lease.mode().as_str(), "t": t,
                   "lost": lost, "deadline": deadline, "expires_at": expires_at}),
        ));
        json!({"ended": true, "lost": lost})
    }

    /// Whether the current lease is a semaphore's or a read-write lock's, whose holders the
    /// checker judges by their critical sections.
    fn judged_by_sections(&self) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|l| l.mode().kind() != LockKind::Mutex)
    }

    /// One fenced write: with the lease (the fence checks its deadline before sending) or with
    /// its bare token (only the fence's stored token decides).
    async fn write(&mut self, mode: &str) -> Value {
        let Some((cs, token)) = self.last_token.clone() else {
            return json!({"accepted": false, "code": "NO_LEASE"});
        };
        self.writes += 1;
        let write_id = format!("{}/{}", cs, self.writes);
        let t = now_us();
        let (lost_before, expires_at, deadline) = match &self.lease {
            Some(l) => (
                json!(l.is_lost()),
                expires_at_us(l),
                json!(boot_to_wall_us(l.deadline())),
            ),
            None => (Value::Null, Value::Null, Value::Null),
        };
        let statement = Statement::new(INSERT_WRITE)
            .bind(SqlValue::Text(write_id.clone()))
            .bind(SqlValue::Text(cs.clone()))
            .bind(SqlValue::Int(token as i64))
            .bind(SqlValue::Text(self.name.clone()))
            .bind(SqlValue::Text(self.lang.clone()))
            .bind(SqlValue::Text(mode.to_string()))
            .bind(SqlValue::Int(t));
        let result = match (mode, &self.lease) {
            ("lease", Some(lease)) => self.fence.fenced_execute(lease, &[statement]).await,
            _ => self.fence.fenced_execute(token, &[statement]).await,
        };
        let t_end = now_us();
        let (accepted, code) = match &result {
            Ok(_) => (true, Value::Null),
            Err(e) => (false, json!(e.code().as_str())),
        };
        emit(self.rec(
            "write",
            json!({"cs": cs, "write_id": write_id, "token": token.to_string(), "mode": mode, "t": t,
                   "t_end": t_end, "lost_before": lost_before, "expires_at": expires_at,
                   "deadline": deadline, "accepted": accepted, "code": code}),
        ));
        json!({"accepted": accepted, "code": code})
    }

    async fn release(&mut self) -> Result<Value, Error> {
        self.end_section();
        let Some(lease) = self.lease.take() else {
            return Ok(json!({}));
        };
        let result = match self.multi.take() {
            Some(multi) => multi.release().await,
            None => lease.release().await,
        };
        let code = result.as_ref().err().map(|e| e.code().as_str());
        emit(self.rec(
            "released",
            json!({"cs": self.cs(), "t": now_us(), "code": code}),
        ));
        result.map(|_| json!({}))
    }

    async fn hold(&mut self, cmd: &Value) -> Value {
        let total = ms(cmd, "ms").unwrap_or(Duration::from_secs(1));
        let probe_every = ms(cmd, "probe_ms").unwrap_or(Duration::from_millis(50));
        let write_every = ms(cmd, "write_ms");
        // Ends early this many probes after the first one that finds the lease lost.
        let after_lost = cmd.get("stop_after_lost").and_then(Value::as_u64);
        // A permit, read or write holder works for the whole hold: one section, which ends
        // when a probe finds the lease lost (the holder stops working) or when the hold ends.
        let opened = self.judged_by_sections()
            && self.open_section.is_none()
            && self.begin_section()["started"] == json!(true);
        let start = tokio::time::Instant::now();
        let mut next_write = start;
        let mut lost = false;
        let mut lost_probes = 0u64;
        while start.elapsed() < total {
            lost = self.probe()["lost"].as_bool().unwrap_or(false);
            if lost {
                self.end_section();
                lost_probes += 1;
                if after_lost.is_some_and(|n| lost_probes > n) {
                    break;
                }
            }
            if let Some(every) = write_every
                && tokio::time::Instant::now() >= next_write
            {
                self.write("lease").await;
                next_write += every;
            }
            tokio::time::sleep(probe_every).await;
        }
        if opened {
            self.end_section();
        }
        json!({"lost": lost})
    }

    /// Acquire, write, release, again: the contention and soak load. Errors are recorded and
    /// the loop goes on, so a fault in the middle does not end the run.
    async fn cycle(&mut self, cmd: &Value) -> Value {
        let until = ms(cmd, "duration_ms").map(|d| tokio::time::Instant::now() + d);
        let count = cmd.get("count").and_then(Value::as_u64);
        let writes = cmd.get("writes").and_then(Value::as_u64).unwrap_or(1);
        let hold = ms(cmd, "hold_ms").unwrap_or(Duration::ZERO);
        // `modes`: the modes of successive cycles, in turn (else `mode`, else exclusive).
        let modes: Vec<Option<&str>> = match cmd.get("modes").and_then(Value::as_array) {
            Some(list) if !list.is_empty() => list.iter().map(Value::as_str).collect(),
            _ => vec![cmd.get("mode").and_then(Value::as_str)],
        };
        let mut done = 0u64;
        let mut turn = 0usize;
        loop {
            if count.is_some_and(|c| done >= c)
                || until.is_some_and(|u| tokio::time::Instant::now() >= u)
            {
                break;
            }
            let mode = match requested_mode(modes[turn % modes.len()], cmd) {
                Ok(mode) => mode,
                Err(e) => return json!({"cycles": done, "error": e.code().as_str()}),
            };
            match self.acquire(cmd, mode).await {
                Ok(_) => {
                    turn += 1;
                    // A permit, read or write lease's work is one section from acquire to release;
                    // only a mutex's or a write lease's token can fence.
                    if self.judged_by_sections() {
                        self.begin_section();
                    }
                    for _ in 0..writes {
                        self.probe();
                        if mode.is_exclusive() {
                            self.write("lease").await;
                        }
                    }
                    if !hold.is_zero() {
                        tokio::time::sleep(hold).await;
                    }
                    let _ = self.release().await;
                    done += 1;
                }
                Err(e) => {
                    emit(self.rec("error", json!({"op": "acquire", "t": now_us(), "code": e.code().as_str(), "message": e.message()})));
                    if fatal(e.code().as_str()) {
                        return json!({"cycles": done, "error": e.code().as_str()});
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        json!({"cycles": done})
    }

    async fn run(&mut self, cmd: &Value) -> Result<Value, Error> {
        match cmd["op"].as_str().unwrap_or("") {
            "acquire" => {
                let mode = requested_mode(cmd.get("mode").and_then(Value::as_str), cmd)?;
                self.acquire(cmd, mode).await
            }
            "begin" => Ok(self.begin_section()),
            "end" => Ok(self.end_section()),
            "write" => Ok(self.write(cmd["mode"].as_str().unwrap_or("lease")).await),
            "probe" => Ok(self.probe()),
            "hold" => Ok(self.hold(cmd).await),
            "release" => self.release().await,
            "cycle" => Ok(self.cycle(cmd).await),
            other => Err(Error::invalid(format!("unknown op {other:?}"))),
        }
    }
}

/// Errors a retry cannot cure: the cycle ends instead of spinning.
fn fatal(code: &str) -> bool {
    matches!(code, "INVALID_ARGUMENT" | "AUTH" | "CLOSED" | "INTERNAL")
}

fn reply(id: &Value, result: Result<Value, Error>) {
    let line = match result {
        Ok(mut v) => {
            v["reply"] = id.clone();
            v["ok"] = json!(true);
            v
        }
        Err(e) => {
            json!({"reply": id, "ok": false, "code": e.code().as_str(), "message": e.message()})
        }
    };
    emit(line);
}

async fn init(cmd: &Value) -> Result<Worker, Error> {
    let s = |k: &str| cmd[k].as_str().unwrap_or("").to_string();
    let op_timeout = ms(cmd, "op_timeout_ms").unwrap_or(Duration::from_secs(3));
    let options = LockerOptions::default()
        .with_language("rust")
        .with_operation_timeout(op_timeout);
    let locker = Locker::connect_with(&s("lock_url"), options.clone()).await?;
    let fence = Fence::open_with(&s("fence_url"), &s("resource"), options).await?;
    Ok(Worker {
        name: s("worker"),
        lang: "rust".into(),
        locker,
        fence,
        lock: s("lock"),
        also: cmd["also"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        multi: None,
        lease: None,
        last_token: None,
        sections: 0,
        writes: 0,
        open_section: None,
        begun: 0,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // stdin is read on a thread of its own (tokio's io-std would change the workspace's tokio
    // features, and so rebuild every crate depending on it, just for this worker).
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut worker: Option<Worker> = None;
    let broken = Arc::new(cfg!(feature = "broken-fencing"));
    while let Some(line) = lines.recv().await {
        let Ok(cmd) = serde_json::from_str::<Value>(&line) else {
            reply(&Value::Null, Err(Error::invalid("not a JSON line")));
            continue;
        };
        let id = cmd.get("id").cloned().unwrap_or(Value::Null);
        match (cmd["op"].as_str(), worker.as_mut()) {
            (Some("init"), _) => match init(&cmd).await {
                Ok(w) => {
                    worker = Some(w);
                    reply(
                        &id,
                        Ok(json!({"pid": std::process::id(), "broken_build": *broken})),
                    );
                }
                Err(e) => reply(&id, Err(e)),
            },
            (Some("exit"), w) => {
                if let Some(w) = w {
                    w.locker.close().await;
                }
                reply(&id, Ok(json!({})));
                return;
            }
            (_, Some(w)) => {
                let result = w.run(&cmd).await;
                reply(&id, result);
            }
            (_, None) => reply(&id, Err(Error::invalid("send init first"))),
        }
    }
}
