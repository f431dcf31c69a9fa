package dev.fencelock

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.DynamicTest
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestFactory
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.api.io.TempDir
import java.nio.file.Files
import java.nio.file.Path
import java.time.Duration

/**
 * No fragment of a URL's password appears in an exception (tests/vectors/leaky-urls.json, shared
 * with every language), no bound SQL parameter in a Statement's text, and text that cannot be
 * UTF-8 is refused as Python and Node refuse it.
 */
class SecretsTest {
    private data class Vector(val url: String, val password: String)

    /** The vectors, read with a pattern: the file is flat JSON, and the tests take no JSON library. */
    private fun vectors(): List<Vector> {
        val file = Path.of(System.getProperty("user.dir"), "..", "..", "tests", "vectors", "leaky-urls.json")
        val text = Files.readString(file.normalize())
        val string = """"((?:[^"\\]|\\.)*)""""
        val pattern = Regex("""\{\s*"url":\s*$string,\s*"password":\s*$string\s*\}""")
        return pattern.findAll(text).map { Vector(unescape(it.groupValues[1]), unescape(it.groupValues[2])) }.toList()
    }

    private fun unescape(text: String): String = text.replace("\\\"", "\"").replace("\\\\", "\\")

    private fun fragments(password: String): List<String> =
        password.split(Regex("[^A-Za-z0-9]")).filter { it.length >= 2 }

    @TestFactory
    fun `no fragment of a password appears in an exception`(): List<DynamicTest> {
        val vectors = vectors()
        assertTrue(vectors.size >= 12, "read ${vectors.size} vectors")
        val options = ConnectOptions(operationTimeout = Duration.ofSeconds(3))
        return vectors.map { vector ->
            DynamicTest.dynamicTest(vector.url) {
                val error = assertThrows<FencelockException> { Locker.connect(vector.url, options).close() }
                val shown = "${error.message} $error"
                for (fragment in fragments(vector.password)) {
                    assertTrue(fragment !in shown, "$fragment in $shown")
                }
            }
        }
    }

    @Test
    fun `a lone surrogate in a name or a URL is INVALID_ARGUMENT, never the same lock as another`(@TempDir dir: Path) {
        Locker.connect("sqlite://${dir.resolve("locks.db")}").use { locker ->
            for (name in listOf("a\uD800", "a\uDC00")) {
                assertThrows<LockInvalidArgumentException> { locker.acquireBlocking(name) }
                assertThrows<LockInvalidArgumentException> { runBlocking { locker.acquire(name) } }
                assertThrows<LockInvalidArgumentException> { runBlocking { locker.inspect(name) } }
            }
            // A surrogate pair is fine.
            locker.acquireBlocking("a\uD83D\uDE00").close()
        }
        assertThrows<LockInvalidArgumentException> { Locker.connect("sqlite://$dir/\uD800.db") }
    }

    @Test
    fun `a Statement's text shows its SQL and how many parameters, never their values`() {
        val sql = "UPDATE accounts SET api_key = ?, pin = ?, photo = ? WHERE id = ?"
        val statement = Statement.of(sql, "sk-live-4f9a", 918273, byteArrayOf(0x5e, 0x5e), null)
        // Logged alone, or inside the list handed to fencedExecute.
        for (shown in listOf(statement.toString(), listOf(statement).toString(), "$statement")) {
            for (value in listOf("sk-live-4f9a", "918273", "[94, 94]", "[B@")) {
                assertTrue(value !in shown, "$value in $shown")
            }
            assertTrue(sql in shown, shown)
        }
        assertEquals("Statement($sql, 4 parameters)", statement.toString())
        assertEquals("Statement(SELECT 1, 1 parameter)", Statement.of("SELECT 1", 1).toString())
        assertEquals("Statement(SELECT 1, no parameters)", Statement.of("SELECT 1").toString())
    }
}
