package dev.fencelock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;

/**
 * The Java examples of bindings/jvm/README.md, compiled as written against this library, and the Kotlin example of the
 * repository's README, compiled with the tests (src/test/kotlin/dev/fencelock/readme/ReadmeExample.kt); each run in a JVM
 * of its own, as a user would.
 */
class ReadmeExampleTest {
    @Test
    void theReadmeKotlinExampleIsTheCompiledOneAndRuns() throws Exception {
        Path readme =
                Path.of(System.getProperty("user.dir"), "..", "..", "README.md").normalize();
        Matcher block = Pattern.compile("```kotlin\\n([\\s\\S]*?)```").matcher(Files.readString(readme));
        assertTrue(block.find(), readme + " has a ```kotlin example");
        String example = block.group(1);
        assertFalse(block.find(), readme + " has one ```kotlin example");
        Path compiled = Path.of(System.getProperty("user.dir"))
                .resolve("src/test/kotlin/dev/fencelock/readme/ReadmeExample.kt");
        assertTrue(
                Files.readString(compiled).endsWith("\n\n" + example),
                compiled + " must end with the README's ```kotlin block, verbatim: copy one into the other");
        String out = run(
                Files.createTempDirectory("fencelock-readme-kotlin"),
                testClassPath(),
                "dev.fencelock.readme.ReadmeExampleKt");
        // Standard error is in `out` too: a JVM may warn of JNA's native access.
        assertTrue(out.matches("(?s)(.*\\n)?holding nightly-report with token \\d+\\n.*"), out);
    }

    @Test
    void theJvmReadmeJavaExampleCompilesAndRuns() throws Exception {
        Path readme = Path.of(System.getProperty("user.dir"), "README.md");
        compileAndRun(readme, "Example", "(?s).*holding nightly-report with token \\d+.*");
    }

    @Test
    void theJvmReadmeSemaphoreAndReadWriteLockExampleCompilesAndRuns() throws Exception {
        Path readme = Path.of(System.getProperty("user.dir"), "README.md");
        compileAndRun(
                readme, "Primitives", "(?s).*permit \\d+ of 3\\s+read token \\d+\\s+write token \\d+, mode WRITE.*");
    }

    @Test
    void theJvmReadmeWatchExampleCompilesAndRuns() throws Exception {
        Path readme = Path.of(System.getProperty("user.dir"), "README.md");
        // The example's own process holds the lock, so its pid shows (not this JVM's).
        compileAndRun(readme, "Watch", "(?s).*reports/nightly token \\d+ held by pid \\d+.*");
    }

    @Test
    void theJvmReadmeMultiLockExampleCompilesAndRuns() throws Exception {
        Path readme = Path.of(System.getProperty("user.dir"), "README.md");
        // The names come back in the canonical order, whatever order they were given in.
        compileAndRun(
                readme,
                "Transfer",
                "(?s).*holding \\[account/alice, account/bob\\] with tokens \\{account/alice=\\d+, account/bob=\\d+\\}"
                        + "\\s+alice's part holds token \\d+.*");
    }

    /** Compiles the ```java block of `readme` that declares `exampleClass` and runs it in a JVM of its own. */
    private static void compileAndRun(Path readme, String exampleClass, String expectedOutput) throws Exception {
        String text = Files.readString(readme);
        Matcher block = Pattern.compile("```java\\n([\\s\\S]*?)```").matcher(text);
        String source = null;
        while (source == null && block.find()) {
            if (block.group(1).contains("public class " + exampleClass + " ")) {
                source = block.group(1);
            }
        }
        assertTrue(source != null, readme + " has a ```java example of the class " + exampleClass);
        assertTrue(source.lines().count() <= 20, "the example stays short");
        Matcher className = Pattern.compile("public class (\\w+)").matcher(source);
        assertTrue(className.find(), "the example is a public class");

        Path dir = Files.createTempDirectory("fencelock-readme-java");
        Path file = dir.resolve(className.group(1) + ".java");
        Files.writeString(file, source);
        String classPath = testClassPath();
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        int status = javac.run(null, null, null, "-cp", classPath, "-d", dir.toString(), file.toString());
        assertEquals(0, status, "the example of " + readme + " does not compile");

        String out = run(dir, dir + File.pathSeparator + classPath, className.group(1));
        assertTrue(out.matches(expectedOutput), out);
    }

    /** The class path of these tests: the library, its dependencies and the compiled test sources. */
    private static String testClassPath() {
        return System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
    }

    /**
     * Runs `mainClass` in a JVM of its own, in the folder `dir` (where a relative SQLite URL points; FENCELOCK_URL names a
     * file there too), and returns what it printed once it exited with 0.
     */
    private static String run(Path dir, String classPath, String mainClass) throws Exception {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        ProcessBuilder run = new ProcessBuilder(java, "-cp", classPath, mainClass)
                .directory(dir.toFile())
                .redirectErrorStream(true);
        run.environment().put("FENCELOCK_URL", "sqlite://" + dir.resolve("locks.db"));
        Process process = run.start();
        if (!process.waitFor(120, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            fail(mainClass + " did not finish within 120 s");
        }
        String out = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, process.exitValue(), out);
        return out;
    }
}
