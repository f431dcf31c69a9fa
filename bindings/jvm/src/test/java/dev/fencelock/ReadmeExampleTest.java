package dev.fencelock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
 * The Java examples of the repository's README and of bindings/jvm/README.md, compiled as written against this library and
 * run in a JVM of its own, as a user would.
 */
class ReadmeExampleTest {
    @Test
    void theReadmeJavaExampleCompilesAndRuns() throws Exception {
        Path readme =
                Path.of(System.getProperty("user.dir"), "..", "..", "README.md").normalize();
        compileAndRun(readme, "Example", "(?s).*holding nightly-report with token \\d+.*");
    }

    @Test
    void theReadmeSemaphoreAndReadWriteLockExampleCompilesAndRuns() throws Exception {
        Path readme =
                Path.of(System.getProperty("user.dir"), "..", "..", "README.md").normalize();
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
        String classPath = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        int status = javac.run(null, null, null, "-cp", classPath, "-d", dir.toString(), file.toString());
        assertEquals(0, status, "the example of " + readme + " does not compile");

        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        ProcessBuilder run = new ProcessBuilder(java, "-cp", dir + File.pathSeparator + classPath, className.group(1))
                .redirectErrorStream(true);
        run.environment().put("FENCELOCK_URL", "sqlite://" + dir.resolve("locks.db"));
        Process process = run.start();
        assertTrue(process.waitFor(120, TimeUnit.SECONDS), "the example did not finish");
        String out = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, process.exitValue(), out);
        assertTrue(out.matches(expectedOutput), out);
    }
}
