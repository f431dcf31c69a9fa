// The Node worker of the fault-injection suite (protocol: tests/faults/README.md).
//
// Reads commands as JSON lines on stdin; answers and records its critical sections as JSON
// lines on stdout. Runs with the package in node/ (built by node/run-tests.sh or
// `node node/scripts/build.mjs --profile dev`). The lost signal is `lease.signal`, an
// AbortSignal whose listener runs on this JS thread: it fires as soon as the thread is free.
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

class Worker {
  static async create(cmd) {
    const w = new Worker();
    w.name = cmd.worker;
    w.lang = 'node';
    const opts = { operationTimeout: cmd.op_timeout_ms ?? 3000 };
    w.locker = await fencelock.connect(cmd.lock_url, opts);
    w.fence = await fencelock.Fence.open(cmd.fence_url, cmd.resource, opts);
    w.lock = cmd.lock;
    w.lease = null;
    w.last = null;
    w.sections = 0;
    w.writes = 0;
    return w;
  }

  rec(kind, fields) {
    emit({ rec: kind, worker: this.name, lang: this.lang, ...fields });
  }

  cs() {
    return `${this.name}#${this.sections}`;
  }

  async acquire(cmd) {
    const tReq = nowUs();
    const lease = await this.locker.acquire(this.lock, {
      ttl: cmd.ttl_ms ?? 10000,
      wait: cmd.wait_ms ?? null,
    });
    const t = nowUs();
    this.sections += 1;
    const cs = this.cs();
    this.rec('acquired', {
      cs,
      token: lease.token.toString(),
      t_req: tReq,
      t,
      expires_at: expiresAtUs(lease),
      deadline: null,
    });
    const onLost = () =>
      this.rec('lost_signal', {
        cs,
        t: nowUs(),
        reason: String(lease.signal.reason?.message ?? ''),
      });
    if (lease.signal.aborted) onLost();
    else lease.signal.addEventListener('abort', onLost, { once: true });
    this.lease = lease;
    this.last = { cs, token: lease.token };
    return { token: lease.token.toString() };
  }

  probe() {
    if (!this.lease) return { lost: null };
    const t = nowUs();
    const lost = this.lease.isLost;
    this.rec('probe', {
      cs: this.cs(),
      t,
      lost,
      expires_at: expiresAtUs(this.lease),
      deadline: null,
    });
    return { lost };
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
      deadline: null,
      accepted,
      code,
    });
    return { accepted, code };
  }

  async release() {
    const lease = this.lease;
    this.lease = null;
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
    const start = performance.now();
    let nextWrite = start;
    let lost = false;
    let lostProbes = 0;
    while (performance.now() - start < total) {
      lost = Boolean(this.probe().lost);
      if (lost) {
        lostProbes += 1;
        if (afterLost !== null && lostProbes > afterLost) break;
      }
      if (writeEvery !== null && performance.now() >= nextWrite) {
        await this.write('lease');
        nextWrite += writeEvery;
      }
      await sleep(probeEvery);
    }
    return { lost };
  }

  async cycle(cmd) {
    const until = cmd.duration_ms != null ? performance.now() + cmd.duration_ms : null;
    const count = cmd.count ?? null;
    const writes = cmd.writes ?? 1;
    const hold = cmd.hold_ms ?? 0;
    let done = 0;
    while (!((count !== null && done >= count) || (until !== null && performance.now() >= until))) {
      try {
        await this.acquire(cmd);
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
      for (let i = 0; i < writes; i++) {
        this.probe();
        await this.write('lease');
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
        return this.acquire(cmd);
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
