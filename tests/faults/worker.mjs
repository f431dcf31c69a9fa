// The Node worker of the fault-injection suite (protocol: tests/faults/README.md).
//
// Reads commands as JSON lines on stdin; answers and records its critical sections as JSON
// lines on stdout. Runs with the package in node/ (built by node/run-tests.sh or
// `node node/scripts/build.mjs --profile dev`). The lost signal is `lease.signal`, an
// AbortSignal whose listener runs on this JS thread: it fires as soon as the thread is free.
// Like the Rust worker (worker-rs/src/main.rs), it takes semaphore permits and read or write
// leases (`acquire` with a `mode`), whose critical sections it records as
// `section_start`/`section_end` (permits and reads cannot fence).
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const fencelock = require(
  join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'node', 'index.js'),
);

const INSERT_WRITE =
  'INSERT INTO fault_writes (write_id, cs, token, worker, lang, mode, t_sent) VALUES (?, ?, ?, ?, ?, ?, ?)';

// Errors a retry cannot cure: a cycle ends instead of spinning.
const FATAL = new Set(['INVALID_ARGUMENT', 'AUTH', 'CLOSED', 'INTERNAL', 'WORKER']);

const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const emit = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const expiresAtUs = (lease) => (lease.expiresAt ? lease.expiresAt.getTime() * 1000 : null);
// The lease's client deadline (`validUntil`, read now), so the checker can bound each record by
// the deadline itself rather than by expires_at. Whole ms: within the checker's tolerance.
const deadlineUs = (lease) => lease.validUntil.getTime() * 1000;

const invalid = (message) => Object.assign(new Error(message), { code: 'INVALID_ARGUMENT' });

/**
 * The mode a command asks for: `mode` (exclusive, permit, read, write; exclusive when absent)
 * and, for a permit, `permits`. Throws INVALID_ARGUMENT as the Rust worker answers.
 */
function requestedMode(mode, cmd) {
  switch (mode ?? 'exclusive') {
    case 'exclusive':
    case 'read':
    case 'write':
      return { mode: mode ?? 'exclusive', permits: null };
    case 'permit':
      if (!Number.isInteger(cmd.permits) || cmd.permits < 0)
        throw invalid('a permit needs permits: a number');
      return { mode, permits: cmd.permits };
    default:
      throw invalid(`unknown mode ${JSON.stringify(mode)}`);
  }
}

// Only a mutex's or a write lease's token can fence: the others' work is judged by sections.
const writesFenced = (mode) => mode === 'exclusive' || mode === 'write';

class Worker {
  static async create(cmd) {
    const w = new Worker();
    w.name = cmd.worker;
    w.lang = 'node';
    const opts = { operationTimeout: cmd.op_timeout_ms ?? 3000 };
    w.locker = await fencelock.connect(cmd.lock_url, opts);
    w.fence = await fencelock.Fence.open(cmd.fence_url, cmd.resource, opts);
    w.lock = cmd.lock;
    // Names taken with `lock` as one multi-name lock by every exclusive acquire (`also` at
    // init); the worker's lease is then the multi-lock's part for `lock`.
    w.also = Array.isArray(cmd.also) ? cmd.also : [];
    w.multi = null;
    w.lease = null;
    w.last = null;
    w.sections = 0;
    w.writes = 0;
    // The permits of the current lease when it is a semaphore's (the lease does not say them).
    w.permits = null;
    // The open critical section of a permit, read or write lease (its id).
    w.openSection = null;
    // Sections begun by this worker, so their ids are unique.
    w.begun = 0;
    return w;
  }

  rec(kind, fields) {
    emit({ rec: kind, worker: this.name, lang: this.lang, ...fields });
  }

  cs() {
    return `${this.name}#${this.sections}`;
  }

  /** Takes `this.lock` in `mode` ({ mode, permits } from requestedMode). */
  take(cmd, { mode, permits }) {
    const opts = { ttl: cmd.ttl_ms ?? 10000, wait: cmd.wait_ms ?? null };
    switch (mode) {
      case 'permit':
        return this.locker.semaphore(this.lock, { ...opts, permits });
      case 'read':
        return this.locker.readLock(this.lock, opts);
      case 'write':
        return this.locker.writeLock(this.lock, opts);
      default:
        return this.also.length ? this.takeMany(opts) : this.locker.acquire(this.lock, opts);
    }
  }

  /** The lock and `also` as one multi-name lock; the lease is its part for the lock. */
  async takeMany(opts) {
    this.multi = await this.locker.lockMany([this.lock, ...this.also], opts);
    return this.multi.part(this.lock);
  }

  async acquire(cmd, requested) {
    // A new lease ends the work done under the previous one.
    this.endSection();
    this.multi = null;
    const tReq = nowUs();
    const lease = await this.take(cmd, requested);
    const t = nowUs();
    this.sections += 1;
    const cs = this.cs();
    const permits = lease.mode === 'permit' ? requested.permits : null;
    this.rec('acquired', {
      cs,
      token: lease.token.toString(),
      t_req: tReq,
      t,
      mode: lease.mode,
      permits,
      expires_at: expiresAtUs(lease),
      deadline: deadlineUs(lease),
    });
    // A multi-lock is lost when any part is: the holder hears the whole's signal.
    const signal = (this.multi ?? lease).signal;
    const onLost = () =>
      this.rec('lost_signal', {
        cs,
        t: nowUs(),
        reason: String(signal.reason?.message ?? ''),
      });
    if (signal.aborted) onLost();
    else signal.addEventListener('abort', onLost, { once: true });
    this.lease = lease;
    this.permits = permits;
    this.last = { cs, token: lease.token };
    return { token: lease.token.toString() };
  }

  probe() {
    if (!this.lease) return { lost: null };
    const t = nowUs();
    const lost = (this.multi ?? this.lease).isLost;
    this.rec('probe', {
      cs: this.cs(),
      t,
      lost,
      expires_at: expiresAtUs(this.lease),
      deadline: deadlineUs(this.lease),
    });
    return { lost };
  }

  /**
   * Begins a critical section of a permit, read or write lease (they are judged by their
   * sections, since permits and reads cannot fence): `t` is read before the lease is checked,
   * so the section really began after it; a lease found lost or released begins nothing.
   */
  beginSection() {
    const lease = this.lease;
    if (!lease) return { started: false, code: 'NO_LEASE' };
    if (this.openSection !== null) return { started: true, code: null };
    this.begun += 1;
    const id = `${this.cs()}/s${this.begun}`;
    const t = nowUs();
    let code = null;
    try {
      lease.throwIfLost();
    } catch (e) {
      if (!(e instanceof fencelock.LockError)) throw e;
      code = e.code;
    }
    const deadline = deadlineUs(lease);
    const expiresAt = expiresAtUs(lease);
    const started = code === null;
    this.rec('section_start', {
      cs: this.cs(),
      section: id,
      mode: lease.mode,
      permits: this.permits,
      t,
      started,
      code,
      deadline,
      expires_at: expiresAt,
    });
    if (started) this.openSection = id;
    return { started, code };
  }

  /**
   * Ends the open section: `t` is the work's last moment; `lost`, the deadline and the expiry
   * are read after it (the checker ends the section at the earlier of `t` and them).
   */
  endSection() {
    const id = this.openSection;
    const lease = this.lease;
    this.openSection = null;
    if (id === null || !lease) return { ended: false };
    const t = nowUs();
    const lost = lease.isLost;
    const deadline = deadlineUs(lease);
    const expiresAt = expiresAtUs(lease);
    this.rec('section_end', {
      cs: this.cs(),
      section: id,
      mode: lease.mode,
      t,
      lost,
      deadline,
      expires_at: expiresAt,
    });
    return { ended: true, lost };
  }

  /**
   * Whether the current lease is a semaphore's or a read-write lock's, whose holders the
   * checker judges by their critical sections.
   */
  judgedBySections() {
    return this.lease !== null && this.lease.mode !== 'exclusive';
  }

  async write(mode) {
    if (!this.last) return { accepted: false, code: 'NO_LEASE' };
    const { cs, token } = this.last;
    this.writes += 1;
    const writeId = `${cs}/${this.writes}`;
    const t = nowUs();
    const lease = this.lease;
    const lostBefore = lease ? lease.isLost : null;
    const expiresAt = lease ? expiresAtUs(lease) : null;
    const deadline = lease ? deadlineUs(lease) : null;
    const statement = [INSERT_WRITE, [writeId, cs, token, this.name, this.lang, mode, BigInt(t)]];
    let accepted = true;
    let code = null;
    try {
      await this.fence.fencedExecute(mode === 'lease' && lease ? lease : token, [statement]);
    } catch (e) {
      if (!(e instanceof fencelock.LockError)) throw e;
      accepted = false;
      code = e.code;
    }
    this.rec('write', {
      cs,
      write_id: writeId,
      token: token.toString(),
      mode,
      t,
      t_end: nowUs(),
      lost_before: lostBefore,
      expires_at: expiresAt,
      deadline,
      accepted,
      code,
    });
    return { accepted, code };
  }

  async release() {
    this.endSection();
    const lease = this.multi ?? this.lease;
    this.lease = null;
    this.multi = null;
    if (!lease) return {};
    let code = null;
    try {
      await lease.release();
    } catch (e) {
      if (!(e instanceof fencelock.LockError)) throw e;
      code = e.code;
    }
    this.rec('released', { cs: this.cs(), t: nowUs(), code });
    if (code) throw Object.assign(new Error(`release: ${code}`), { code });
    return {};
  }

  async hold(cmd) {
    const total = cmd.ms ?? 1000;
    const probeEvery = cmd.probe_ms ?? 50;
    const writeEvery = cmd.write_ms ?? null;
    const afterLost = cmd.stop_after_lost ?? null;
    // A permit, read or write holder works for the whole hold: one section, which ends when a
    // probe finds the lease lost (the holder stops working) or when the hold ends.
    const opened =
      this.judgedBySections() && this.openSection === null && this.beginSection().started;
    const start = performance.now();
    let nextWrite = start;
    let lost = false;
    let lostProbes = 0;
    while (performance.now() - start < total) {
      lost = Boolean(this.probe().lost);
      if (lost) {
        this.endSection();
        lostProbes += 1;
        if (afterLost !== null && lostProbes > afterLost) break;
      }
      if (writeEvery !== null && performance.now() >= nextWrite) {
        await this.write('lease');
        nextWrite += writeEvery;
      }
      await sleep(probeEvery);
    }
    if (opened) this.endSection();
    return { lost };
  }

  /**
   * Acquire, write, release, again: the contention and soak load. Errors are recorded and the
   * loop goes on, so a fault in the middle does not end the run.
   */
  async cycle(cmd) {
    const until = cmd.duration_ms != null ? performance.now() + cmd.duration_ms : null;
    const count = cmd.count ?? null;
    const writes = cmd.writes ?? 1;
    const hold = cmd.hold_ms ?? 0;
    // `modes`: the modes of successive cycles, in turn (else `mode`, else exclusive).
    const modes = Array.isArray(cmd.modes) && cmd.modes.length > 0 ? cmd.modes : [cmd.mode];
    let done = 0;
    let turn = 0;
    while (!((count !== null && done >= count) || (until !== null && performance.now() >= until))) {
      let requested;
      try {
        requested = requestedMode(modes[turn % modes.length], cmd);
      } catch (e) {
        return { cycles: done, error: e.code };
      }
      try {
        await this.acquire(cmd, requested);
      } catch (e) {
        this.rec('error', {
          op: 'acquire',
          t: nowUs(),
          code: e.code ?? 'WORKER',
          message: String(e.message),
        });
        if (FATAL.has(e.code)) return { cycles: done, error: e.code };
        await sleep(100);
        continue;
      }
      turn += 1;
      // A permit, read or write lease's work is one section from acquire to release.
      if (this.judgedBySections()) this.beginSection();
      for (let i = 0; i < writes; i++) {
        this.probe();
        if (writesFenced(requested.mode)) await this.write('lease');
      }
      if (hold) await sleep(hold);
      try {
        await this.release();
      } catch {
        // recorded in the history
      }
      done += 1;
    }
    return { cycles: done };
  }

  async run(cmd) {
    switch (cmd.op) {
      case 'acquire':
        return this.acquire(cmd, requestedMode(cmd.mode, cmd));
      case 'begin':
        return this.beginSection();
      case 'end':
        return this.endSection();
      case 'write':
        return this.write(cmd.mode ?? 'lease');
      case 'probe':
        return this.probe();
      case 'hold':
        return this.hold(cmd);
      case 'release':
        return this.release();
      case 'cycle':
        return this.cycle(cmd);
      default:
        throw Object.assign(new Error(`unknown op ${cmd.op}`), { code: 'INVALID_ARGUMENT' });
    }
  }
}

async function main() {
  let worker = null;
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    let cmd;
    try {
      cmd = JSON.parse(line);
    } catch {
      emit({ reply: null, ok: false, code: 'INVALID_ARGUMENT', message: 'not a JSON line' });
      continue;
    }
    const id = cmd.id ?? null;
    try {
      let result;
      if (cmd.op === 'init') {
        worker = await Worker.create(cmd);
        result = { pid: process.pid, broken_build: false };
      } else if (cmd.op === 'exit') {
        if (worker) await worker.locker.close();
        emit({ reply: id, ok: true });
        process.exit(0);
      } else if (!worker) {
        throw Object.assign(new Error('send init first'), { code: 'INVALID_ARGUMENT' });
      } else {
        result = await worker.run(cmd);
      }
      emit({ reply: id, ok: true, ...result });
    } catch (e) {
      emit({ reply: id, ok: false, code: e.code ?? 'WORKER', message: String(e.message ?? e) });
    }
  }
}

main();
