package dev.fencelock

import jdk.jfr.Recording
import jdk.jfr.consumer.RecordingFile
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.nio.file.Files
import java.time.Duration
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.atomic.AtomicReference

/**
 * Virtual threads (JDK 21 and later) that wait in fencelock park, leaving their carrier thread to
 * other virtual threads. bindings/jvm/run-tests.sh runs this class a second time on a JDK 21+
 * with a single carrier thread (`-Djdk.virtualThreadScheduler.parallelism=1`): a waiter that held
 * its carrier while it waits would keep the holder from ever releasing, and time out. The JFR
 * event `jdk.VirtualThreadPinned` is recorded meanwhile, and none may come from fencelock. On
 * JDK 17, which has no virtual threads, the class is skipped.
 */
class VirtualThreadTest {
    private fun assumeVirtualThreads() =
        assumeTrue(java.lang.Runtime.version().feature() >= 21, "virtual threads need JDK 21 or later")

    /** `Thread.startVirtualThread(body)`, through reflection: the tests compile for JDK 17. */
    private fun startVirtual(body: () -> Unit): Thread =
        Thread::class.java.getMethod("startVirtualThread", Runnable::class.java).invoke(null, Runnable(body)) as Thread

    private val tenSeconds = LockOptions(ttl = Duration.ofSeconds(10))

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    fun `a virtual thread waiting for a lock leaves its carrier to the holder`(backend: String) {
        assumeVirtualThreads()
        withoutPinning {
            Backends.connect(backend).use { holderSide ->
                Backends.connect(backend).use { waiterSide ->
                    val name = Backends.uniqueName("virtual")
                    val acquired = CountDownLatch(1)
                    val waiting = CountDownLatch(1)
                    val holder = startVirtual {
                        holderSide.acquireBlocking(name, tenSeconds).use {
                            acquired.countDown()
                            waiting.await()
                            // The waiter is in its wait by now; this sleep ends only if the carrier is free.
                            Thread.sleep(300)
                        }
                    }
                    val outcome = AtomicReference<Result<Long>>()
                    val waiter = startVirtual {
                        acquired.await()
                        waiting.countDown()
                        outcome.set(
                            runCatching {
                                val options = tenSeconds.copy(wait = Duration.ofMillis(Backends.MARGIN_MS))
                                waiterSide.acquireBlocking(name, options).use { it.token }
                            },
                        )
                    }
                    waiter.join(3 * Backends.MARGIN_MS)
                    holder.join(Backends.MARGIN_MS)
                    val token = outcome.get()?.getOrThrow()
                    assertTrue(token != null && token > 0, "the waiter got the lock once the holder let go: $token")

                    // The same for several names at once.
                    val many = AtomicReference<Result<Int>>()
                    val manyHolder = holderSide.acquireBlocking(name, tenSeconds)
                    val manyWaiter = startVirtual {
                        many.set(
                            runCatching {
                                val options = tenSeconds.copy(wait = Duration.ofMillis(Backends.MARGIN_MS))
                                waiterSide.lockManyBlocking(listOf(name, "$name-b"), options).use { it.tokens.size }
                            },
                        )
                    }
                    val releaser = startVirtual {
                        Thread.sleep(300)
                        manyHolder.releaseBlocking()
                    }
                    manyWaiter.join(3 * Backends.MARGIN_MS)
                    releaser.join(Backends.MARGIN_MS)
                    assertEquals(2, many.get()?.getOrThrow(), "lockMany on a virtual thread got both names")
                }
            }
        }
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    fun `a virtual thread in waitLost leaves its carrier to others`(backend: String) {
        assumeVirtualThreads()
        withoutPinning {
            Backends.connect(backend).use { locker ->
                val lease = locker.acquireBlocking(Backends.uniqueName("virtual-lost"), tenSeconds)
                val waitEnded = AtomicLong()
                val otherRan = AtomicLong()
                val started = CountDownLatch(1)
                val watcher = startVirtual {
                    started.countDown()
                    lease.waitLost(Duration.ofSeconds(2))
                    waitEnded.set(System.nanoTime())
                }
                started.await(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)
                val other = startVirtual {
                    Thread.sleep(100)
                    otherRan.set(System.nanoTime())
                }
                watcher.join(Backends.MARGIN_MS)
                other.join(Backends.MARGIN_MS)
                assertTrue(otherRan.get() != 0L && waitEnded.get() != 0L, "both virtual threads finished")
                assertTrue(
                    otherRan.get() < waitEnded.get(),
                    "another virtual thread ran while waitLost waited (one carrier thread)",
                )
                lease.releaseBlocking()
            }
        }
    }

    /** Runs [block] under a JFR recording of `jdk.VirtualThreadPinned`; fails on any from fencelock. */
    private fun withoutPinning(block: () -> Unit) {
        val file = Files.createTempFile("fencelock-pinned", ".jfr")
        try {
            Recording().use { recording ->
                recording.enable("jdk.VirtualThreadPinned").withThreshold(Duration.ZERO).withStackTrace()
                recording.start()
                block()
                recording.stop()
                recording.dump(file)
            }
            val pinned = RecordingFile.readAllEvents(file).filter { event ->
                event.eventType.name == "jdk.VirtualThreadPinned" &&
                    event.stackTrace?.frames.orEmpty().any { it.method.type.name.startsWith("dev.fencelock") }
            }
            assertTrue(pinned.isEmpty(), "virtual threads pinned in fencelock: ${pinned.map { it.stackTrace }}")
        } finally {
            Files.deleteIfExists(file)
        }
    }
}
