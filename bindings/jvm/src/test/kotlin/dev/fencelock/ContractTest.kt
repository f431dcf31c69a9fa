package dev.fencelock

import dev.fencelock.ffi.NativeContractOption
import dev.fencelock.ffi.NativeErrorCode
import dev.fencelock.ffi.NativeLockEventKind
import dev.fencelock.ffi.contractError
import dev.fencelock.ffi.coreContract
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.lang.reflect.Modifier
import java.time.Duration

/**
 * What every language must agree on (docs/design.md §9.3), compared with the core's own lists.
 *
 * The core's error codes, event kinds and option table come from the native library at run time
 * (`coreContract()`), never from a copy here, so a code, kind or option the core gains fails
 * these tests until the JVM has it too. Option names are the core's in camelCase.
 */
class ContractTest {
    private val core = coreContract()

    /** The option class each core operation takes: its properties are the options. */
    private val optionClasses: Map<String, Class<*>> =
        mapOf(
            "connect" to ConnectOptions::class.java,
            "acquire" to LockOptions::class.java,
            "try_acquire" to LockOptions::class.java,
            "campaign" to CampaignOptions::class.java,
            "open_fence" to FenceOptions::class.java,
        )

    /** Properties an operation's class has beyond the core's options for it, each with its reason. */
    private val jvmOnly: Map<String, Map<String, String>> =
        mapOf(
            "try_acquire" to mapOf(
                "wait" to "LockOptions is acquire's class too; tryAcquire refuses a wait (tested below)",
            ),
            "connect" to mapOf(
                "metricsRecorder" to "where the measurements go instead of OpenTelemetry (Micrometer's binder): " +
                    "a JVM object, not a core option; none by default",
            ),
        )

    private fun camel(snake: String): String =
        snake.split('_').mapIndexed { i, word -> if (i == 0) word else word.replaceFirstChar(Char::uppercase) }
            .joinToString("")

    /** The core's options for [operation] that a binding offers (not those it sets itself), in camelCase. */
    private fun offered(operation: String): Set<String> =
        core.options.filter { operation in it.operations && !it.setByBinding }.map { camel(it.name) }.toSet()

    private fun properties(cls: Class<*>): Map<String, java.lang.reflect.Field> =
        cls.declaredFields.filterNot { Modifier.isStatic(it.modifiers) }.associateBy { it.name }

    @Test
    fun `every core operation has its option class`() {
        assertEquals(core.operations.toSet(), optionClasses.keys)
    }

    @Test
    fun `the JVM's error codes are exactly the core's, each thrown as a class of its own`() {
        assertEquals(core.errorCodes, NativeErrorCode.entries.map { it.name }, "NativeErrorCode (src/error.rs)")
        assertEquals(core.errorCodes, ErrorCode.entries.map { it.name }, "ErrorCode (Errors.kt)")
        val classes =
            core.errorCodes.map { code ->
                val thrown = assertThrows(FencelockException::class.java) { ffi { contractError(code) } }
                assertEquals(code, thrown.code.name)
                thrown.javaClass
            }
        assertEquals(classes.size, classes.toSet().size, "two codes share an exception class: $classes")
        val sealed = FencelockException::class.java.permittedSubclasses
        assertNotNull(sealed, "FencelockException is compiled as a sealed class")
        assertEquals(sealed.toSet(), classes.toSet(), "FencelockException's subclasses (Errors.kt)")
    }

    @Test
    fun `the JVM's event kinds are exactly the core's`() {
        assertEquals(core.eventKinds, LockEventKind.entries.map { it.spelling }, "LockEventKind (Events.kt)")
        assertEquals(core.eventKinds, LockEventKind.ALL.map { it.spelling }, "LockEventKind.ALL")
        assertEquals(
            core.eventKinds,
            NativeLockEventKind.entries.map { it.name.lowercase() },
            "NativeLockEventKind (src/observe.rs)",
        )
    }

    @Test
    fun `each operation's option class has exactly the core's options`() {
        for ((operation, cls) in optionClasses) {
            val expected = offered(operation) + jvmOnly[operation].orEmpty().keys
            assertEquals(expected, properties(cls).keys, "${cls.simpleName}, what $operation takes")
        }
    }

    @Test
    fun `the option classes' defaults are the core's`() {
        val defaults: Map<Class<*>, Any> =
            mapOf(
                ConnectOptions::class.java to ConnectOptions.DEFAULTS,
                LockOptions::class.java to LockOptions.DEFAULTS,
                CampaignOptions::class.java to CampaignOptions.DEFAULTS,
                FenceOptions::class.java to FenceOptions.DEFAULTS,
            )
        var compared = 0
        for ((cls, instance) in defaults) {
            for ((name, field) in properties(cls)) {
                if (name == "metricsRecorder") {
                    field.isAccessible = true
                    assertNull(field.get(instance), "${cls.simpleName}.$name is none by default")
                    continue
                }
                val spec = core.options.single { camel(it.name) == name }
                field.isAccessible = true
                assertDefault(spec, field.get(instance), "${cls.simpleName}.$name")
                compared += 1
            }
        }
        assertTrue(compared >= core.options.count { !it.setByBinding }, "compared $compared")
    }

    private fun assertDefault(spec: NativeContractOption, value: Any?, where: String) {
        val default = spec.defaultValue
        val message = "$where = $value, the core's default is $default"
        when {
            spec.kind == "flag" -> assertEquals(default == "true", value, message)

            default == "none" || default == "forever" -> assertNull(value, message)

            // null stands for the core's default; a value must be that default.
            spec.kind == "duration" -> assertTrue(value == null || value == duration(default), message)

            else -> assertTrue(value == null || value == default, message)
        }
    }

    private fun duration(text: String): Duration = when {
        text.endsWith("ms") -> Duration.ofMillis(text.removeSuffix("ms").toLong())
        text.endsWith("s") -> Duration.ofSeconds(text.removeSuffix("s").toLong())
        else -> error("not a duration: $text")
    }

    @Test
    fun `a campaign passes its options to the core, and tryAcquire refuses a wait`() {
        Backends.connect("sqlite").use { locker ->
            val name = Backends.uniqueName("contract")
            val options =
                CampaignOptions(
                    ttl = Duration.ofSeconds(20),
                    wait = Duration.ofSeconds(20),
                    autoRenew = false,
                    maxHold = Duration.ofSeconds(20),
                    holder = "contract test",
                    pipelinedRelease = true,
                )
            locker.campaignBlocking(name, options).use { leadership ->
                assertTrue(leadership.isLeader)
                assertEquals("contract test", locker.leaderBlocking(name)?.holder?.text)
            }

            val waiting = LockOptions(wait = Duration.ofSeconds(1))
            val blocking = assertThrows(LockInvalidArgumentException::class.java) {
                locker.tryAcquireBlocking(name, waiting)
            }
            assertTrue(blocking.message!!.contains("wait"), blocking.message)
            assertThrows(LockInvalidArgumentException::class.java) { runBlocking { locker.tryAcquire(name, waiting) } }
            // A name of its own: the campaign's pipelined release returns before the store has
            // applied it, so its name may still be held for a moment.
            val lease = locker.tryAcquireBlocking(Backends.uniqueName("contract-try"))
            assertNotNull(lease, "a try without a wait takes the free lock")
            lease!!.close()
        }
    }
}
