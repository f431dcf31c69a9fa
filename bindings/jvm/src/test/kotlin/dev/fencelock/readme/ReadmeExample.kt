// The README's Kotlin example: everything after the package line is the README's ```kotlin block,
// verbatim (ReadmeExampleTest checks it and runs `main` in a JVM of its own, in an empty folder).
package dev.fencelock.readme

import dev.fencelock.LockOptions
import dev.fencelock.Locker
import kotlinx.coroutines.runBlocking
import java.time.Duration

fun main() = runBlocking {
    Locker.connect("sqlite://fencelock-example.db").use { locker ->
        val options = LockOptions(ttl = Duration.ofSeconds(30), wait = Duration.ofSeconds(10))
        locker.withLock("nightly-report", options) { lease ->
            // Send the token with every write: the resource refuses older ones.
            println("holding ${lease.name} with token ${lease.token}")
        }
    }
}
