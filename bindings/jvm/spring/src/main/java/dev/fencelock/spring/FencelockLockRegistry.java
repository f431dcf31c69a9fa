package dev.fencelock.spring;

import dev.fencelock.Lease;
import dev.fencelock.LockOptions;
import dev.fencelock.LockTimeoutException;
import dev.fencelock.Locker;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;
import org.springframework.integration.support.locks.ExpirableLockRegistry;
import org.springframework.integration.support.locks.LockRegistry;
import org.springframework.integration.support.locks.RenewableLockRegistry;

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
 * by hand ({@link #renewLock} pushes the deadline out now, and tells a lost lock); its lease,
 * with the fencing token for a {@code Fence}, is {@link FencelockLock#currentLease()}. Keys are
 * lock names: strings only. {@code unlock()} by a thread that does not hold the lock throws
 * {@link IllegalMonitorStateException}; after the lock was lost (expired or taken over), it
 * throws fencelock's {@code LockLostException}: the work it guarded may have overlapped another
 * holder's. {@code tryLock(Long.MAX_VALUE, unit)}, or any wait longer than fencelock's longest
 * finite wait (a year), waits forever.
 *
 * <p>The registry caches one {@link FencelockLock} per key, as Spring's registries do: at most
 * {@link #setCacheCapacity cacheCapacity} locks that no thread holds or waits for (the least
 * recently obtained go first), plus those in use, which stay whatever the bound or {@link
 * #expireUnusedOlderThan} say, so {@code obtain} gives a held key's own object. A lock kept from
 * an earlier {@code obtain} still works after its entry went: a thread's leases are kept by name,
 * not in the object (bindings/jvm/README.md, "Spring").
 */
public final class FencelockLockRegistry implements ExpirableLockRegistry, RenewableLockRegistry {
    /** How many idle locks the cache keeps unless told otherwise: Spring's registries' default. */
    public static final int DEFAULT_CACHE_CAPACITY = 100_000;

    /**
     * The longest finite wait fencelock accepts (docs/design.md §4.1: a year, 366 days); a longer
     * one is how {@link Lock} users say "forever", so it becomes fencelock's wait forever.
     */
    private static final long LONGEST_FINITE_WAIT_NANOS = TimeUnit.DAYS.toNanos(366);

    private final Locker locker;
    private final LockOptions options;

    /** Guards the two maps, cacheCapacity and each lock's users; never held across a wait. */
    private final ReentrantLock cacheLock = new ReentrantLock();
    /** Cached locks no thread holds or waits for, least recently obtained first: what the bound evicts. */
    private final LinkedHashMap<String, FencelockLock> idle = new LinkedHashMap<>(16, 0.75f, true);
    /** Cached locks some thread holds or waits for: never evicted, so obtain gives the one in use. */
    private final Map<String, FencelockLock> inUse = new HashMap<>();

    private int cacheCapacity = DEFAULT_CACHE_CAPACITY;

    /**
     * This thread's leases by lock name, innermost last: one per lock() not yet unlocked. Kept by
     * name rather than in each FencelockLock, so that any object of a name, even one obtained
     * before its entry was evicted, unlocks what another of the same name locked.
     */
    private final ThreadLocal<Map<String, Deque<Hold>>> held = new ThreadLocal<>();

    /** One lease of this thread, and the cached lock it keeps in use until unlocked. */
    private record Hold(Lease lease, FencelockLock entry) {}

    /** Locks through [locker] (which the application keeps open, and closes) with a 30 s ttl. */
    public FencelockLockRegistry(Locker locker) {
        this(locker, Duration.ofSeconds(30));
    }

    /** Locks through [locker] with leases of [ttl], renewed while held. */
    public FencelockLockRegistry(Locker locker, Duration ttl) {
        this.locker = Objects.requireNonNull(locker, "locker");
        this.options = LockOptions.builder().ttl(ttl).reentrant(true).build();
    }

    /** The lock of [lockKey], a lock name; the same object for the same key while it is cached. */
    @Override
    public FencelockLock obtain(Object lockKey) {
        String name = nameOf(lockKey);
        cacheLock.lock();
        try {
            FencelockLock lock = idle.get(name); // also makes it the most recently obtained
            if (lock == null) {
                lock = inUse.get(name);
            }
            if (lock == null) {
                lock = new FencelockLock(name);
                idle.put(name, lock);
                evictBeyondCapacity();
            }
            return lock;
        } finally {
            cacheLock.unlock();
        }
    }

    /**
     * Keeps at most [cacheCapacity] (positive; {@value #DEFAULT_CACHE_CAPACITY} by default) cached
     * locks that no thread holds or waits for, evicting the least recently obtained beyond it.
     */
    public void setCacheCapacity(int cacheCapacity) {
        if (cacheCapacity <= 0) {
            throw new IllegalArgumentException("cacheCapacity must be positive, got " + cacheCapacity);
        }
        cacheLock.lock();
        try {
            this.cacheCapacity = cacheCapacity;
            evictBeyondCapacity();
        } finally {
            cacheLock.unlock();
        }
    }

    /**
     * Evicts the cached locks that no thread holds or waits for and that have been idle (since
     * made, or since their last unlock or wait) for [age] milliseconds or more: 0 evicts every
     * idle lock. Spring's registries expect it called now and then, from a scheduled task.
     */
    @Override
    public void expireUnusedOlderThan(long age) {
        long now = System.nanoTime();
        long ageNanos = TimeUnit.MILLISECONDS.toNanos(Math.max(0, age));
        cacheLock.lock();
        try {
            idle.values().removeIf(lock -> now - lock.lastUsedNanos >= ageNanos);
        } finally {
            cacheLock.unlock();
        }
    }

    /**
     * Renews the calling thread's lease of [lockKey] now, for its current ttl (the registry's,
     * unless {@link #renewLock(Object, Duration)} changed it): the lease renews itself every ttl/3
     * anyway, so this only moves the deadline out sooner, and tells whether the lock is still ours. Throws {@link IllegalMonitorStateException} when this
     * thread does not hold it, and fencelock's {@code LockLostException} once it was lost.
     */
    @Override
    public void renewLock(Object lockKey) {
        renew(lockKey, null);
    }

    /**
     * {@link #renewLock(Object)} with a new ttl from now, which later renewals keep
     * (docs/design.md §2.2); the overload Spring Integration 7 adds to {@link
     * RenewableLockRegistry}.
     */
    public void renewLock(Object lockKey, Duration ttl) {
        renew(lockKey, Objects.requireNonNull(ttl, "ttl"));
    }

    private void renew(Object lockKey, Duration ttl) {
        String name = nameOf(lockKey);
        Lease lease = innermostLease(name);
        if (lease == null) {
            throw new IllegalMonitorStateException(
                    "this thread does not hold the lock " + name + ", so it cannot renew it");
        }
        try {
            lease.extendBlocking(ttl);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(
                    "interrupted while renewing the lock " + name + "; it keeps renewing itself", e);
        }
    }

    /** How many locks the cache holds, idle and in use. */
    int size() {
        cacheLock.lock();
        try {
            return idle.size() + inUse.size();
        } finally {
            cacheLock.unlock();
        }
    }

    @Override
    public String toString() {
        return "FencelockLockRegistry(" + locker.getUrl() + ")";
    }

    private static String nameOf(Object lockKey) {
        if (!(lockKey instanceof String name)) {
            throw new IllegalArgumentException("fencelock's lock keys are lock names, strings; got "
                    + (lockKey == null ? "null" : lockKey.getClass().getName()));
        }
        return name;
    }

    /** Called with cacheLock held. */
    private void evictBeyondCapacity() {
        Iterator<FencelockLock> leastRecent = idle.values().iterator();
        while (idle.size() > cacheCapacity) {
            leastRecent.next();
            leastRecent.remove();
        }
    }

    /**
     * Marks [lock]'s name in use before a wait, so no eviction drops it while a thread waits for
     * it or holds it. Returns the cached lock so marked: [lock] itself unless it was evicted since
     * it was obtained and another object of its name is cached now.
     */
    private FencelockLock pin(FencelockLock lock) {
        cacheLock.lock();
        try {
            FencelockLock entry = inUse.get(lock.name);
            if (entry == null) {
                entry = idle.remove(lock.name);
                if (entry == null) {
                    entry = lock; // cached again, so that obtain gives the object in use
                }
                inUse.put(lock.name, entry);
            }
            entry.users++;
            return entry;
        } finally {
            cacheLock.unlock();
        }
    }

    /** Undoes one pin: the last one makes the lock idle, most recently used, and evictable. */
    private void unpin(FencelockLock entry) {
        cacheLock.lock();
        try {
            if (--entry.users == 0) {
                inUse.remove(entry.name);
                entry.lastUsedNanos = System.nanoTime();
                idle.put(entry.name, entry);
                evictBeyondCapacity();
            }
        } finally {
            cacheLock.unlock();
        }
    }

    private Lease innermostLease(String name) {
        Map<String, Deque<Hold>> mine = held.get();
        Deque<Hold> holds = mine == null ? null : mine.get(name);
        return holds == null ? null : holds.getLast().lease();
    }

    /** One acquisition of a lease: null when the lock was not free in time. */
    @FunctionalInterface
    private interface Acquisition {
        Lease acquire() throws InterruptedException;
    }

    /** Takes [lock]'s name for this thread through [acquisition], keeping its lock cached meanwhile. */
    private boolean take(FencelockLock lock, Acquisition acquisition) throws InterruptedException {
        FencelockLock entry = pin(lock);
        Lease lease = null;
        try {
            lease = acquisition.acquire();
        } finally {
            if (lease == null) {
                unpin(entry);
            }
        }
        if (lease == null) {
            return false;
        }
        Map<String, Deque<Hold>> mine = held.get();
        if (mine == null) {
            mine = new HashMap<>();
            held.set(mine);
        }
        mine.computeIfAbsent(lock.name, name -> new ArrayDeque<>()).addLast(new Hold(lease, entry));
        return true;
    }

    /**
     * Lock's wait as fencelock's: negative tries once, and beyond fencelock's longest finite wait
     * is forever (null), so {@code tryLock(Long.MAX_VALUE, unit)} waits as long as it takes.
     */
    private static Duration lockWait(long time, TimeUnit unit) {
        if (time <= 0) {
            return Duration.ZERO;
        }
        long nanos = unit.toNanos(time); // Long.MAX_VALUE on overflow, never a wrap to negative
        return nanos > LONGEST_FINITE_WAIT_NANOS ? null : Duration.ofNanos(nanos);
    }

    /** One name's lock; each thread that takes it holds a lease of its own. */
    public final class FencelockLock implements Lock {
        private final String name;
        /** Threads holding or waiting for the name through this cached lock; guarded by cacheLock. */
        private int users;
        /** When it was created or last stopped being in use (System.nanoTime); guarded by cacheLock. */
        private long lastUsedNanos = System.nanoTime();

        private FencelockLock(String name) {
            this.name = name;
        }

        /** The lock name. */
        public String getName() {
            return name;
        }

        /** The calling thread's lease of this lock (its fencing token), while it holds it. */
        public Optional<Lease> currentLease() {
            return Optional.ofNullable(innermostLease(name));
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
            take(this, () -> locker.acquireBlocking(name, options));
        }

        @Override
        public boolean tryLock() {
            try {
                return take(this, () -> locker.tryAcquireBlocking(name, options));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }

        /** Waits up to [time]; {@code Long.MAX_VALUE}, or more than a year, waits forever. */
        @Override
        public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
            LockOptions waiting = options.toBuilder().wait(lockWait(time, unit)).build();
            return take(this, () -> {
                try {
                    return locker.acquireBlocking(name, waiting);
                } catch (LockTimeoutException e) {
                    return null;
                }
            });
        }

        @Override
        public void unlock() {
            Map<String, Deque<Hold>> mine = held.get();
            Deque<Hold> holds = mine == null ? null : mine.get(name);
            Hold hold = holds == null ? null : holds.pollLast();
            if (hold == null) {
                throw new IllegalMonitorStateException(
                        "this thread does not hold the lock " + name + " (unlock without lock, or twice)");
            }
            if (holds.isEmpty()) {
                mine.remove(name);
                if (mine.isEmpty()) {
                    held.remove();
                }
            }
            try {
                hold.lease().releaseBlocking();
            } finally {
                unpin(hold.entry());
            }
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
