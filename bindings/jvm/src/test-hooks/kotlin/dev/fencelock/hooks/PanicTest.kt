package dev.fencelock.hooks

import dev.fencelock.ErrorCode
import dev.fencelock.LockInternalException
import dev.fencelock.blocking
import dev.fencelock.ffi
import dev.fencelock.ffi.testPanic
import dev.fencelock.ffi.testPanicAsync
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * A panic in Rust never crosses into the JVM. This calls the test-only entry points of a native
 * library built with the cargo feature `test-hooks`, which only that library's generated Kotlin
 * has: this folder is compiled only then (the pom's profile test-hooks, which run-tests.sh turns
 * on), so that a plain `mvn test`, on the library as users get it, compiles; and this package is
 * left out of its runs, so that a class compiled by an earlier hooks build does not run there.
 */
class PanicTest {
    @Test
    fun `a Rust panic surfaces as LockInternalException, from blocking and from suspend calls`() {
        val sync = assertThrows(LockInternalException::class.java) { ffi { testPanic() } }
        assertTrue(sync.message!!.contains("testPanic"), sync.message)
        assertEquals(ErrorCode.INTERNAL, sync.code)
        val async = assertThrows(LockInternalException::class.java) { blocking { ffi { testPanicAsync() } } }
        assertTrue(async.message!!.contains("testPanicAsync"), async.message)
    }
}
