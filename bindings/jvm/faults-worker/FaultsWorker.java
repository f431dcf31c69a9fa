// The JVM worker of the fault-injection suite (protocol: tests/faults/README.md).
//
// Reads commands as JSON lines on stdin; answers and records its critical sections as JSON lines
// on stdout. Plain Java against the library's public API (the same calls a Java user makes), so
// it compiles with javac alone in a second; run.sh builds and runs it.
//
// Like the Rust worker (tests/faults/worker-rs, the reference), it takes semaphore permits and
// read or write leases (`acquire` with a `mode`) and records their critical sections as
// `section_start`/`section_end`; every `deadline` is the lease's `validUntil` in wall-clock microseconds.
//
// The lost signal is a `Lease.onLost` listener: it runs on a fencelock thread of its own, so it
// fires while the main thread is busy (in a hold, a write, a sleep). Records from that thread and
// from the main one go through one lock on stdout.

import dev.fencelock.ConnectOptions;
import dev.fencelock.Fence;
import dev.fencelock.FenceOptions;
import dev.fencelock.FencelockException;
import dev.fencelock.Lease;
import dev.fencelock.LockMode;
import dev.fencelock.LockOptions;
import dev.fencelock.Locker;
import dev.fencelock.MultiLease;
import dev.fencelock.Statement;

import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

public final class FaultsWorker {
    static final String INSERT_WRITE =
        "INSERT INTO fault_writes (write_id, cs, token, worker, lang, mode, t_sent) VALUES (?, ?, ?, ?, ?, ?, ?)";

    /** Errors a retry cannot cure: a cycle ends instead of spinning. */
    static final Set<String> FATAL = Set.of("INVALID_ARGUMENT", "AUTH", "CLOSED", "INTERNAL", "WORKER");

    static final String LANG = "jvm";

    // ------------------------------------------------------------------ output

    private static final Object OUT_LOCK = new Object();
    private static final OutputStream OUT = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);

    static void emit(Map<String, Object> obj) {
        byte[] line = (Json.write(obj) + "\n").getBytes(StandardCharsets.UTF_8);
        synchronized (OUT_LOCK) {
            try {
                OUT.write(line);
                OUT.flush();
            } catch (IOException e) {
                // The harness went away: nothing left to tell.
                Runtime.getRuntime().halt(1);
            }
        }
    }

    static long nowUs() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    static long micros(Instant at) {
        return at.getEpochSecond() * 1_000_000L + at.getNano() / 1_000;
    }

    static Long expiresAtUs(Lease lease) {
        Instant at = lease.getExpiresAt();
        return at == null ? null : micros(at);
    }

    /** The lease's client deadline on the wall clock, read now, in microseconds (Rust: `Lease::deadline()`). */
    static long deadlineUs(Lease lease) {
        return micros(lease.getValidUntil());
    }

    /** A lease's mode as the protocol spells it: exclusive, permit, read or write. */
    static String modeName(LockMode mode) {
        return mode.name().toLowerCase(Locale.ROOT);
    }

    /** A map literal for records and replies, keeping the order given. */
    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static void sleepMs(long ms) {
        if (ms <= 0) return;
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ------------------------------------------------------------------ commands

    /** A failed command's answer: a fencelock code, or WORKER for a bug here. */
    static final class Failure extends RuntimeException {
        final String code;

        Failure(String code, String message) {
            super(message);
            this.code = code;
        }
    }

    static String codeOf(Throwable e) {
        return e instanceof FencelockException ? ((FencelockException) e).getCode().name() : "WORKER";
    }

    static Duration ms(Map<String, Object> cmd, String key, Duration dflt) {
        Object v = cmd.get(key);
        return v == null ? dflt : Duration.ofNanos(Math.round(((Number) v).doubleValue() * 1_000_000));
    }

    static Long longOf(Map<String, Object> cmd, String key) {
        Object v = cmd.get(key);
        return v == null ? null : ((Number) v).longValue();
    }

    /**
     * The mode a command asks for: `mode` (exclusive, permit, read, write; exclusive when absent)
     * and, for a permit, `permits` (checked by the library, as Rust's `LockMode::permit`).
     */
    static final class Requested {
        final LockMode mode;
        final Integer permits;

        Requested(LockMode mode, Integer permits) {
            this.mode = mode;
            this.permits = permits;
        }

        static Requested of(Object mode, Map<String, Object> cmd) {
            // As in Rust, anything but a string is no mode: exclusive.
            String m = mode instanceof String ? (String) mode : "exclusive";
            switch (m) {
                case "exclusive":
                    return new Requested(LockMode.EXCLUSIVE, null);
                case "permit": {
                    Object n = cmd.get("permits");
                    if (!(n instanceof Long) || (Long) n < 0 || (Long) n > Integer.MAX_VALUE) {
                        throw new Failure("INVALID_ARGUMENT", "a permit needs permits: a number");
                    }
                    return new Requested(LockMode.PERMIT, (int) (long) (Long) n);
                }
                case "read":
                    return new Requested(LockMode.READ, null);
                case "write":
                    return new Requested(LockMode.WRITE, null);
                default:
                    throw new Failure("INVALID_ARGUMENT", "unknown mode \"" + m + "\"");
            }
        }
    }

    final String name;
    final Locker locker;
    final Fence fence;
    final String lock;
    /**
     * Names taken with `lock` as one multi-name lock by every exclusive acquire (`also` at init);
     * the worker's lease is then the multi-lock's part for `lock`.
     */
    final List<String> also = new ArrayList<>();
    MultiLease multi;
    Lease lease;
    /** The current lease's semaphore permits (null unless it is a permit). */
    Integer leasePermits;
    String lastCs;
    long lastToken;
    boolean hasLast;
    int sections;
    int writes;
    /** The open critical section of a permit, read or write lease (its id), or null. */
    String openSection;
    /** Sections begun by this worker, so their ids are unique. */
    long begun;

    FaultsWorker(Map<String, Object> cmd) throws InterruptedException {
        name = (String) cmd.get("worker");
        Duration opTimeout = ms(cmd, "op_timeout_ms", Duration.ofSeconds(3));
        locker = Locker.connect(
            (String) cmd.get("lock_url"), ConnectOptions.builder().operationTimeout(opTimeout).build());
        fence = Fence.open(
            (String) cmd.get("fence_url"),
            (String) cmd.get("resource"),
            FenceOptions.builder().operationTimeout(opTimeout).build());
        lock = (String) cmd.get("lock");
        if (cmd.get("also") instanceof List<?> names) {
            for (Object n : names) also.add((String) n);
        }
    }

    void rec(String kind, Object... fields) {
        Map<String, Object> m = obj("rec", kind, "worker", name, "lang", LANG);
        m.putAll(obj(fields));
        emit(m);
    }

    String cs() {
        return name + "#" + sections;
    }

    Map<String, Object> acquire(Map<String, Object> cmd, Requested requested) throws InterruptedException {
        // A new lease ends the work done under the previous one.
        endSection();
        LockOptions options = LockOptions.builder()
            .ttl(ms(cmd, "ttl_ms", Duration.ofSeconds(10)))
            .wait(ms(cmd, "wait_ms", null))
            .build();
        multi = null;
        long tReq = nowUs();
        Lease acquired;
        switch (requested.mode) {
            case PERMIT:
                acquired = locker.semaphore(lock, requested.permits).acquireBlocking(options);
                break;
            case READ:
                acquired = locker.readLock(lock).acquireBlocking(options);
                break;
            case WRITE:
                acquired = locker.writeLock(lock).acquireBlocking(options);
                break;
            default:
                if (also.isEmpty()) {
                    acquired = locker.acquireBlocking(lock, options);
                } else {
                    List<String> names = new ArrayList<>(also);
                    names.add(0, lock);
                    multi = locker.lockManyBlocking(names, options);
                    acquired = multi.part(lock);
                }
        }
        long t = nowUs();
        sections += 1;
        String cs = cs();
        String token = Long.toString(acquired.getToken());
        LockMode mode = acquired.getMode();
        Integer permits = mode == LockMode.PERMIT ? requested.permits : null;
        rec("acquired", "cs", cs, "token", token, "t_req", tReq, "t", t, "mode", modeName(mode), "permits", permits,
            "expires_at", expiresAtUs(acquired), "deadline", deadlineUs(acquired));
        // A multi-lock is lost when any part is: the holder hears the whole's signal.
        if (multi != null) {
            multi.onLost((reason, message) -> rec("lost_signal", "cs", cs, "t", nowUs(), "reason", reason.name()));
        } else {
            acquired.onLost((reason, message) -> rec("lost_signal", "cs", cs, "t", nowUs(), "reason", reason.name()));
        }
        lease = acquired;
        leasePermits = permits;
        lastCs = cs;
        lastToken = acquired.getToken();
        hasLast = true;
        return obj("token", token);
    }

    Map<String, Object> probe() {
        if (lease == null) return obj("lost", null);
        long t = nowUs();
        boolean lost = multi != null ? multi.isLost() : lease.isLost();
        rec("probe", "cs", cs(), "t", t, "lost", lost, "expires_at", expiresAtUs(lease), "deadline", deadlineUs(lease));
        return obj("lost", lost);
    }

    /**
     * Begins a critical section of a permit, read or write lease (they are judged by their
     * sections, since permits and reads cannot fence): `t` is read before the lease is checked,
     * so the section really began after it; a lease found lost or released begins nothing.
     */
    Map<String, Object> beginSection() {
        Lease current = lease;
        if (current == null) return obj("started", false, "code", "NO_LEASE");
        if (openSection != null) return obj("started", true, "code", null);
        begun += 1;
        String id = cs() + "/s" + begun;
        long t = nowUs();
        String code = null;
        try {
            current.ensureHeld();
        } catch (FencelockException e) {
            code = e.getCode().name();
        }
        long deadline = deadlineUs(current);
        Long expiresAt = expiresAtUs(current);
        boolean started = code == null;
        rec("section_start", "cs", cs(), "section", id, "mode", modeName(current.getMode()), "permits", leasePermits,
            "t", t, "started", started, "code", code, "deadline", deadline, "expires_at", expiresAt);
        if (started) openSection = id;
        return obj("started", started, "code", code);
    }

    /**
     * Ends the open section: `t` is the work's last moment; `lost`, the deadline and the expiry
     * are read after it (the checker ends the section at the earlier of `t` and them).
     */
    Map<String, Object> endSection() {
        String id = openSection;
        Lease current = lease;
        openSection = null;
        if (id == null || current == null) return obj("ended", false);
        long t = nowUs();
        boolean lost = current.isLost();
        long deadline = deadlineUs(current);
        Long expiresAt = expiresAtUs(current);
        rec("section_end", "cs", cs(), "section", id, "mode", modeName(current.getMode()), "t", t, "lost", lost,
            "deadline", deadline, "expires_at", expiresAt);
        return obj("ended", true, "lost", lost);
    }

    /**
     * Whether the current lease is a semaphore's or a read-write lock's, whose holders the
     * checker judges by their critical sections.
     */
    boolean judgedBySections() {
        Lease current = lease;
        return current != null && current.getMode() != LockMode.EXCLUSIVE;
    }

    Map<String, Object> write(String mode) throws InterruptedException {
        if (!hasLast) return obj("accepted", false, "code", "NO_LEASE");
        String cs = lastCs;
        long token = lastToken;
        writes += 1;
        String writeId = cs + "/" + writes;
        long t = nowUs();
        Lease current = lease;
        Boolean lostBefore = current == null ? null : current.isLost();
        Long expiresAt = current == null ? null : expiresAtUs(current);
        Long deadline = current == null ? null : deadlineUs(current);
        List<Statement> statements = List.of(Statement.of(INSERT_WRITE, writeId, cs, token, name, LANG, mode, t));
        boolean accepted = true;
        String code = null;
        try {
            if (mode.equals("lease") && current != null) fence.fencedExecuteBlocking(current, statements);
            else fence.fencedExecuteBlocking(token, statements);
        } catch (FencelockException e) {
            accepted = false;
            code = e.getCode().name();
        }
        rec("write", "cs", cs, "write_id", writeId, "token", Long.toString(token), "mode", mode, "t", t,
            "t_end", nowUs(), "lost_before", lostBefore, "expires_at", expiresAt, "deadline", deadline,
            "accepted", accepted, "code", code);
        return obj("accepted", accepted, "code", code);
    }

    Map<String, Object> release() throws InterruptedException {
        endSection();
        Lease current = lease;
        MultiLease whole = multi;
        lease = null;
        multi = null;
        leasePermits = null;
        if (current == null) return obj();
        String code = null;
        try {
            if (whole != null) whole.releaseBlocking();
            else current.releaseBlocking();
        } catch (FencelockException e) {
            code = e.getCode().name();
        }
        rec("released", "cs", cs(), "t", nowUs(), "code", code);
        if (code != null) throw new Failure(code, "release: " + code);
        return obj();
    }

    Map<String, Object> hold(Map<String, Object> cmd) throws InterruptedException {
        long total = ms(cmd, "ms", Duration.ofSeconds(1)).toNanos();
        long probeEvery = ms(cmd, "probe_ms", Duration.ofMillis(50)).toMillis();
        Duration writeEvery = ms(cmd, "write_ms", null);
        Long afterLost = longOf(cmd, "stop_after_lost");
        // A permit, read or write holder works for the whole hold: one section, which ends when a
        // probe finds the lease lost (the holder stops working) or when the hold ends.
        boolean opened = judgedBySections() && openSection == null
            && Boolean.TRUE.equals(beginSection().get("started"));
        long start = System.nanoTime();
        long nextWrite = start;
        boolean lost = false;
        long lostProbes = 0;
        while (System.nanoTime() - start < total) {
            lost = Boolean.TRUE.equals(probe().get("lost"));
            if (lost) {
                endSection();
                lostProbes += 1;
                if (afterLost != null && lostProbes > afterLost) break;
            }
            if (writeEvery != null && System.nanoTime() >= nextWrite) {
                write("lease");
                nextWrite += writeEvery.toNanos();
            }
            sleepMs(probeEvery);
        }
        if (opened) endSection();
        return obj("lost", lost);
    }

    Map<String, Object> cycle(Map<String, Object> cmd) throws InterruptedException {
        Duration duration = ms(cmd, "duration_ms", null);
        Long until = duration == null ? null : System.nanoTime() + duration.toNanos();
        Long count = longOf(cmd, "count");
        Long writesPer = longOf(cmd, "writes");
        long perSection = writesPer == null ? 1 : writesPer;
        long hold = ms(cmd, "hold_ms", Duration.ZERO).toMillis();
        // `modes`: the modes of successive cycles, in turn (else `mode`, else exclusive).
        List<Object> modes = new ArrayList<>();
        Object given = cmd.get("modes");
        if (given instanceof List && !((List<?>) given).isEmpty()) modes.addAll((List<?>) given);
        else modes.add(cmd.get("mode"));
        long done = 0;
        int turn = 0;
        while (!((count != null && done >= count) || (until != null && System.nanoTime() - until >= 0))) {
            Requested requested;
            try {
                requested = Requested.of(modes.get(turn % modes.size()), cmd);
            } catch (Failure e) {
                return obj("cycles", done, "error", e.code);
            }
            try {
                acquire(cmd, requested);
            } catch (RuntimeException e) {
                String code = codeOf(e);
                rec("error", "op", "acquire", "t", nowUs(), "code", code, "message", String.valueOf(e.getMessage()));
                if (FATAL.contains(code)) return obj("cycles", done, "error", code);
                sleepMs(100);
                continue;
            }
            turn += 1;
            // A permit, read or write lease's work is one section from acquire to release; only a
            // mutex's or a write lease's token can fence.
            if (judgedBySections()) beginSection();
            for (long i = 0; i < perSection; i++) {
                probe();
                if (requested.mode.isExclusive()) write("lease");
            }
            sleepMs(hold);
            try {
                release();
            } catch (Failure e) {
                // recorded in the history
            }
            done += 1;
        }
        return obj("cycles", done);
    }

    Map<String, Object> run(Map<String, Object> cmd) throws InterruptedException {
        Object op = cmd.get("op");
        if ("acquire".equals(op)) return acquire(cmd, Requested.of(cmd.get("mode"), cmd));
        if ("begin".equals(op)) return beginSection();
        if ("end".equals(op)) return endSection();
        if ("write".equals(op)) return write(cmd.get("mode") == null ? "lease" : (String) cmd.get("mode"));
        if ("probe".equals(op)) return probe();
        if ("hold".equals(op)) return hold(cmd);
        if ("release".equals(op)) return release();
        if ("cycle".equals(op)) return cycle(cmd);
        throw new Failure("INVALID_ARGUMENT", "unknown op " + op);
    }

    public static void main(String[] args) throws IOException, InterruptedException {
        FaultsWorker worker = null;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            Map<String, Object> cmd;
            try {
                cmd = Json.parseObject(line);
            } catch (IllegalArgumentException e) {
                emit(obj("reply", null, "ok", false, "code", "INVALID_ARGUMENT", "message", "not a JSON line"));
                continue;
            }
            Object id = cmd.get("id");
            try {
                Map<String, Object> result;
                Object op = cmd.get("op");
                if ("init".equals(op)) {
                    worker = new FaultsWorker(cmd);
                    result = obj("pid", ProcessHandle.current().pid(), "broken_build", false);
                } else if ("exit".equals(op)) {
                    String code = null;
                    try {
                        if (worker != null) worker.locker.close();
                    } catch (RuntimeException e) {
                        code = codeOf(e);
                    }
                    emit(code == null ? obj("reply", id, "ok", true) : obj("reply", id, "ok", false, "code", code));
                    break;
                } else if (worker == null) {
                    throw new Failure("INVALID_ARGUMENT", "send init first");
                } else {
                    result = worker.run(cmd);
                }
                Map<String, Object> reply = obj("reply", id, "ok", true);
                reply.putAll(result);
                emit(reply);
            } catch (Failure e) {
                emit(obj("reply", id, "ok", false, "code", e.code, "message", e.getMessage()));
            } catch (RuntimeException e) {
                // A fencelock error, or a bug in the worker: report it, keep serving.
                emit(obj("reply", id, "ok", false, "code", codeOf(e), "message", String.valueOf(e)));
            }
        }
        // Native runtime threads must not keep a finished worker alive.
        System.exit(0);
    }

    // ------------------------------------------------------------------ JSON

    /** Just enough JSON for the protocol: objects, arrays, strings, numbers, true/false/null. */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        static Map<String, Object> parseObject(String text) {
            Json p = new Json(text);
            p.space();
            Object v = p.value();
            p.space();
            if (p.i != p.s.length() || !(v instanceof Map)) throw new IllegalArgumentException("not a JSON object");
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) v;
            return m;
        }

        private void space() {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
        }

        private IllegalArgumentException bad() {
            return new IllegalArgumentException("bad JSON at " + i);
        }

        private char peek() {
            if (i >= s.length()) throw bad();
            return s.charAt(i);
        }

        private void expect(String word) {
            if (!s.startsWith(word, i)) throw bad();
            i += word.length();
        }

        private Object value() {
            char c = peek();
            switch (c) {
                case '{': {
                    i++;
                    Map<String, Object> m = new LinkedHashMap<>();
                    space();
                    if (peek() == '}') {
                        i++;
                        return m;
                    }
                    while (true) {
                        space();
                        if (peek() != '"') throw bad();
                        String key = string();
                        space();
                        expect(":");
                        space();
                        m.put(key, value());
                        space();
                        char n = peek();
                        i++;
                        if (n == '}') return m;
                        if (n != ',') throw bad();
                    }
                }
                case '[': {
                    i++;
                    List<Object> list = new ArrayList<>();
                    space();
                    if (peek() == ']') {
                        i++;
                        return list;
                    }
                    while (true) {
                        space();
                        list.add(value());
                        space();
                        char n = peek();
                        i++;
                        if (n == ']') return list;
                        if (n != ',') throw bad();
                    }
                }
                case '"':
                    return string();
                case 't':
                    expect("true");
                    return Boolean.TRUE;
                case 'f':
                    expect("false");
                    return Boolean.FALSE;
                case 'n':
                    expect("null");
                    return null;
                default:
                    return number();
            }
        }

        private String string() {
            i++; // the opening quote
            StringBuilder b = new StringBuilder();
            while (true) {
                char c = peek();
                i++;
                if (c == '"') return b.toString();
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                char e = peek();
                i++;
                switch (e) {
                    case '"': case '\\': case '/': b.append(e); break;
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'n': b.append('\n'); break;
                    case 'r': b.append('\r'); break;
                    case 't': b.append('\t'); break;
                    case 'u':
                        if (i + 4 > s.length()) throw bad();
                        try {
                            b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                        } catch (NumberFormatException x) {
                            throw bad();
                        }
                        i += 4;
                        break;
                    default: throw bad();
                }
            }
        }

        private Number number() {
            int start = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            String n = s.substring(start, i);
            if (n.isEmpty()) throw bad();
            try {
                if (n.contains(".") || n.contains("e") || n.contains("E")) return Double.parseDouble(n);
                return Long.parseLong(n);
            } catch (NumberFormatException x) {
                throw bad();
            }
        }

        static String write(Object v) {
            StringBuilder b = new StringBuilder();
            write(b, v);
            return b.toString();
        }

        private static void write(StringBuilder b, Object v) {
            if (v == null) {
                b.append("null");
            } else if (v instanceof String) {
                quote(b, (String) v);
            } else if (v instanceof Boolean || v instanceof Long || v instanceof Integer) {
                b.append(v);
            } else if (v instanceof Number) {
                double d = ((Number) v).doubleValue();
                b.append(Double.isFinite(d) ? Double.toString(d) : "null");
            } else if (v instanceof Map) {
                b.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                    if (!first) b.append(',');
                    first = false;
                    quote(b, String.valueOf(e.getKey()));
                    b.append(':');
                    write(b, e.getValue());
                }
                b.append('}');
            } else if (v instanceof List) {
                b.append('[');
                boolean first = true;
                for (Object x : (List<?>) v) {
                    if (!first) b.append(',');
                    first = false;
                    write(b, x);
                }
                b.append(']');
            } else {
                quote(b, String.valueOf(v));
            }
        }

        private static void quote(StringBuilder b, String s) {
            b.append('"');
            for (int k = 0; k < s.length(); k++) {
                char c = s.charAt(k);
                switch (c) {
                    case '"': b.append("\\\""); break;
                    case '\\': b.append("\\\\"); break;
                    case '\n': b.append("\\n"); break;
                    case '\r': b.append("\\r"); break;
                    case '\t': b.append("\\t"); break;
                    default:
                        if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                        else b.append(c);
                }
            }
            b.append('"');
        }
    }
}
