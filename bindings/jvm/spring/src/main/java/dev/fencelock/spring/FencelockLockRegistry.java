package dev.fencelock.spring;

import dev.fencelock.Lease;
import dev.fencelock.LockOptions;
import dev.fencelock.LockTimeoutException;
import dev.fencelock.Locker;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import org.springframework.integration.support.locks.LockRegistry;

/**
 * A Spring Integration {@link LockRegistry} on any fencelock backend: {@code obtain(key)} gives a
 * {@link Lock} that one thread of the whole fleet holds at a time (a name's lock in the backend),
 * re-entrant for the thread that holds it, as Spring's own registries are.
 *
 * <pre>{@code
 * LockRegistry registry = new FencelockLockRegistry(locker);
 * registry.executeLocked("orders-export", () -> export());
 * }</pre>
 *
 * <p>A held lock renews itself every ttl/3 (ttl 30 s unless given), so there is nothing to renew
 * by hand; its lease, with the fencing token for a {@code Fence}, is {@link
 * FencelockLock#currentLease()}. Keys are lock names: strings only. {@code unlock()} by a thread
 * that does not hold the lock throws {@link IllegalMonitorStateException}; after the lock was
 * lost (expired or taken over), it throws fencelock's {@code LockLostException}: the work it
 * guarded may have overlapped another holder's.
 */
public final class FencelockLockRegistry implements LockRegistry {
    private final Locker locker;
    private final LockOptions options;
    private final Map<String, FencelockLock> locks = new ConcurrentHashMap<>();

    /** Locks through [locker] (which the application keeps open, and closes) with a 30 s ttl. */
    public FencelockLockRegistry(Locker locker) {
        this(locker, Duration.ofSeconds(30));
    }

    /** Locks through [locker] with leases of [ttl], renewed while held. */
    public FencelockLockRegistry(Locker locker, Duration ttl) {
        this.locker = Objects.requireNonNull(locker, "locker");
        this.options = LockOptions.builder().ttl(ttl).reentrant(true).build();
    }

    /** The lock of [lockKey], a lock name; the same object for the same key. */
    @Override
    public FencelockLock obtain(Object lockKey) {
        if (!(lockKey instanceof String name)) {
            throw new IllegalArgumentException("fencelock's lock keys are lock names, strings; got "
                    + (lockKey == null ? "null" : lockKey.getClass().getName()));
        }
        return locks.computeIfAbsent(name, FencelockLock::new);
    }

    @Override
    public String toString() {
        return "FencelockLockRegistry(" + locker.getUrl() + ")";
    }

    /** One name's lock; each thread that takes it holds a lease of its own. */
    public final class FencelockLock implements Lock {
        private final String name;
        /** This thread's leases of the name, innermost last: one per lock() not yet unlocked. */
        private final ThreadLocal<Deque<Lease>> held = ThreadLocal.withInitial(ArrayDeque::new);

        private FencelockLock(String name) {
            this.name = name;
        }

        /** The lock name. */
        public String getName() {
            return name;
        }

        /** The calling thread's lease of this lock (its fencing token), while it holds it. */
        public Optional<Lease> currentLease() {
            return Optional.ofNullable(held.get().peekLast());
        }

        /** Waits as long as it takes; an interrupt meanwhile is kept for later, as Lock requires. */
        @Override
        public void lock() {
            boolean interrupted = false;
            try {
                while (true) {
                    try {
                        lockInterruptibly();
                        return;
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
            } finally {
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
        }

        @Override
        public void lockInterruptibly() throws InterruptedException {
            held.get().addLast(locker.acquireBlocking(name, options));
        }

        @Override
        public boolean tryLock() {
            try {
                Lease lease = locker.tryAcquireBlocking(name, options);
                if (lease == null) {
                    return false;
                }
                held.get().addLast(lease);
                return true;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }

        @Override
        public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
            Duration wait = Duration.ofNanos(Math.max(0, unit.toNanos(time)));
            try {
                held.get()
                        .addLast(locker.acquireBlocking(
                                name, options.toBuilder().wait(wait).build()));
                return true;
            } catch (LockTimeoutException e) {
                return false;
            }
        }

        @Override
        public void unlock() {
            Deque<Lease> leases = held.get();
            Lease lease = leases.pollLast();
            if (lease == null) {
                throw new IllegalMonitorStateException(
                        "this thread does not hold the lock " + name + " (unlock without lock, or twice)");
            }
            if (leases.isEmpty()) {
                held.remove();
            }
            lease.releaseBlocking();
        }

        /** Not offered: a distributed lock has no condition variables. */
        @Override
        public Condition newCondition() {
            throw new UnsupportedOperationException("fencelock's locks have no conditions");
        }

        @Override
        public String toString() {
            return "FencelockLock(" + name + ")";
        }
    }
}
