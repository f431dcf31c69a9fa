//! `fencelock run --permits N`, `--shared` and `--exclusive`, and `status` of a semaphore and a
//! read-write lock: real processes of the built command on SQLite, and on Redis when the
//! environment gives its URL (`tests/servers.sh env`).

use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const LONG: Duration = Duration::from_secs(30);

/// CMD: logs its start with every token variable it sees, holds until the file $GO exists, then
/// logs its end. One `echo >>` is one O_APPEND write, so lines of concurrent CMDs never mix.
const HOLD_UNTIL_GO: &str = r#"seen="$$ permit=${FENCELOCK_PERMIT_TOKEN:--} read=${FENCELOCK_READ_TOKEN:--} token=${FENCELOCK_TOKEN:--} name=$FENCELOCK_NAME"
echo "start $seen" >> "$LOG"
while [ ! -e "$GO" ]; do sleep 0.02; done
echo "end $seen" >> "$LOG""#;

/// One line of the log.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    start: bool,
    pid: i32,
    permit: Option<u64>,
    read: Option<u64>,
    token: Option<u64>,
}

impl Event {
    fn parse(line: &str) -> Event {
        let words: Vec<&str> = line.split_whitespace().collect();
        let value = |key: &str| -> Option<u64> {
            let text = words
                .iter()
                .find_map(|w| w.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key} in {line:?}"));
            (text != "-").then(|| text.parse().unwrap())
        };
        Event {
            start: words[0] == "start",
            pid: words[1].parse().unwrap(),
            permit: value("permit="),
            read: value("read="),
            token: value("token="),
        }
    }
}

/// One backend, one lock name per test, and the CMDs holding it.
struct Stage {
    sandbox: Sandbox,
    url: String,
    backend: String,
    log: PathBuf,
    go: PathBuf,
}

impl Stage {
    fn new(backend: &str, url: Option<String>) -> Stage {
        let sandbox = Sandbox::new();
        let url = url.unwrap_or_else(|| sandbox.url());
        Stage {
            log: sandbox.path("log"),
            go: sandbox.path("go"),
            url,
            backend: backend.to_string(),
            sandbox,
        }
    }

    /// A lock name of its own: a server outlives the sandbox and serves other tests.
    fn name(&self, base: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("cli-{base}-{}-{nanos}", std::process::id())
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = self.sandbox.command();
        command
            .env("FENCELOCK_URL", &self.url)
            .env("LOG", &self.log)
            .env("GO", &self.go)
            // An outer fencelock's tokens, which CMD must not see as this lock's.
            .env("FENCELOCK_TOKEN", "999999")
            .env("FENCELOCK_READ_TOKEN", "999999")
            .env("FENCELOCK_PERMIT_TOKEN", "999999")
            .args(args);
        command
    }

    /// `fencelock run ARGS -- sh -c HOLD_UNTIL_GO`, in the background.
    fn hold(&self, args: &[&str]) -> Child {
        self.command(&[&["run"], args, &["--", "sh", "-c", HOLD_UNTIL_GO]].concat())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn status(&self, name: &str) -> String {
        let out = self.run(&["status", name]);
        assert_eq!(code(&out), 0, "{}: {}", self.backend, stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `status NAME` until its output contains `text`.
    fn status_until(&self, name: &str, text: &str) -> String {
        let started = Instant::now();
        loop {
            let status = self.status(name);
            if status.contains(text) {
                return status;
            }
            assert!(
                started.elapsed() < LONG,
                "{}: status never said {text:?}: {status}",
                self.backend
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn events(&self) -> Vec<Event> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(Event::parse)
            .collect()
    }

    /// Polls the log until `count` CMDs have started.
    fn wait_for_starts(&self, count: usize) -> Vec<Event> {
        let started = Instant::now();
        loop {
            let events = self.events();
            if events.iter().filter(|e| e.start).count() >= count {
                return events;
            }
            assert!(
                started.elapsed() < LONG,
                "{}: only {events:?} after {LONG:?}",
                self.backend
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets every CMD end.
    fn go(&self) {
        std::fs::write(&self.go, "").unwrap();
    }

    fn expect_success(&self, holders: &mut [Child]) {
        for holder in holders {
            let status = wait_child(holder, LONG);
            let mut err = String::new();
            std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert_eq!(status.code(), Some(0), "{}: {err}", self.backend);
        }
    }
}

/// SQLite always; Redis when the environment names it (CI names every server).
fn stages() -> Vec<Stage> {
    let mut stages = vec![Stage::new("sqlite", None)];
    match std::env::var("FENCELOCK_TEST_REDIS_URL") {
        Ok(url) => stages.push(Stage::new("redis", Some(url))),
        Err(_) => assert!(
            std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() != Ok("1"),
            "FENCELOCK_TEST_REDIS_URL is not set"
        ),
    }
    stages
}

/// The most CMDs that ran at once, replaying the log.
fn most_at_once(events: &[Event]) -> usize {
    let (mut running, mut most) = (0usize, 0usize);
    for event in events {
        if event.start {
            running += 1;
            most = most.max(running);
        } else {
            running -= 1;
        }
    }
    most
}

#[test]
fn permits_2_runs_at_most_two_cmds_at_once_each_with_its_own_permit_token() {
    for stage in stages() {
        let pool = stage.name("pool");
        let backend = &stage.backend;
        let mut holders: Vec<Child> = (0..3)
            .map(|i| stage.hold(&["--permits", "2", "--holder", &format!("job {i}"), &pool]))
            .collect();
        let events = stage.wait_for_starts(2);
        // Both permits are held: a try fails whoever asks, and the third CMD has not started.
        let tried = stage.run(&["run", "--permits", "2", "--wait", "0", &pool, "--", "true"]);
        assert_eq!(code(&tried), 124, "{backend}: {}", stderr(&tried));
        assert_eq!(events.iter().filter(|e| e.start).count(), 2, "{backend}");

        let status = stage.status_until(&pool, "waiting:");
        assert!(
            status.contains("semaphore, 2 permits"),
            "{backend}: {status}"
        );
        assert!(
            status.contains("held by 2 of 2 permits"),
            "{backend}: {status}"
        );
        for event in &events {
            let token = event.permit.expect("a permit token");
            assert!(
                status.lines().any(|l| l.contains("permit")
                    && l.contains(&format!("token {token}"))
                    && l.contains("job ")
                    && l.contains("left")),
                "{backend}: permit {token} is not listed: {status}"
            );
        }

        stage.go();
        stage.expect_success(&mut holders);
        let events = stage.events();
        assert_eq!(events.len(), 6, "{backend}: {events:?}");
        assert!(most_at_once(&events) <= 2, "{backend}: {events:?}");
        let mut tokens: Vec<u64> = events
            .iter()
            .filter(|e| e.start)
            .map(|e| e.permit.expect("FENCELOCK_PERMIT_TOKEN"))
            .collect();
        // The third was granted after a release, so after both others were minted (the first
        // two start in either order: they were granted at about the same time).
        assert!(
            tokens[2] > tokens[0] && tokens[2] > tokens[1],
            "{backend}: {tokens:?}"
        );
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), 3, "{backend}: permit tokens repeat");
        for event in &events {
            assert_eq!(
                (event.read, event.token),
                (None, None),
                "{backend}: a permit holder got another token variable: {event:?}"
            );
        }
        let status = stage.status(&pool);
        assert!(status.contains("free"), "{backend}: {status}");
    }
}

#[test]
fn shared_holders_run_together_and_exclusive_runs_alone_after_them() {
    for stage in stages() {
        let catalog = stage.name("catalog");
        let backend = &stage.backend;
        let mut holders = vec![
            stage.hold(&["--shared", &catalog]),
            stage.hold(&["--shared", &catalog]),
        ];
        // Both started, and neither ends before $GO: they hold the lock at once.
        let readers = stage.wait_for_starts(2);
        let tried = stage.run(&["run", "--exclusive", "--wait", "0", &catalog, "--", "true"]);
        assert_eq!(code(&tried), 124, "{backend}: {}", stderr(&tried));
        let status = stage.status(&catalog);
        assert!(status.contains("read-write lock"), "{backend}: {status}");
        assert!(status.contains("held by 2 readers"), "{backend}: {status}");
        assert_eq!(
            status
                .lines()
                .filter(|l| l.trim().starts_with("read "))
                .count(),
            2,
            "{backend}: {status}"
        );

        holders.push(stage.hold(&["--exclusive", &catalog]));
        stage.status_until(&catalog, "waiting:");
        // A writer waits: a new reader queues behind it.
        let tried = stage.run(&["run", "--shared", "--wait", "0", &catalog, "--", "true"]);
        assert_eq!(code(&tried), 124, "{backend}: {}", stderr(&tried));

        stage.go();
        stage.expect_success(&mut holders);
        let events = stage.events();
        assert_eq!(events.len(), 6, "{backend}: {events:?}");
        let writer_start = events
            .iter()
            .position(|e| e.start && e.token.is_some())
            .expect("the writer ran");
        let reader_ends = events
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.start && e.read.is_some())
            .map(|(at, _)| at);
        for end in reader_ends {
            assert!(end < writer_start, "{backend}: overlap: {events:?}");
        }
        let writer = &events[writer_start];
        assert_eq!((writer.read, writer.permit), (None, None), "{backend}");
        for reader in &readers {
            let read = reader.read.expect("FENCELOCK_READ_TOKEN");
            assert_eq!((reader.token, reader.permit), (None, None), "{backend}");
            assert!(writer.token.unwrap() > read, "{backend}: {events:?}");
        }
    }
}

#[test]
fn one_name_is_one_kind_and_every_holder_of_a_semaphore_uses_the_same_permits() {
    let stage = Stage::new("sqlite", None);
    let mut holders = vec![stage.hold(&["--permits", "2", "pool"])];
    stage.wait_for_starts(1);
    let refusals: [(&[&str], &[&str]); 3] = [
        (&[], &["semaphore", "mutex"]),
        (&["--shared"], &["semaphore", "read-write lock"]),
        (&["--permits", "3"], &["2 permits", "not 3"]),
    ];
    for (flags, words) in refusals {
        let args = [&["run", "--wait", "0"], flags, &["pool", "--", "true"]].concat();
        let out = stage.run(&args);
        let err = stderr(&out);
        assert_eq!(code(&out), 125, "{args:?}: {err}");
        assert!(err.contains("INVALID_ARGUMENT"), "{args:?}: {err}");
        for word in words {
            assert!(err.contains(word), "{args:?}: {err} should name {word:?}");
        }
    }

    // The other way round: a held mutex is not the write lock of the same name.
    holders.push(stage.hold(&["job"]));
    stage.wait_for_starts(2);
    let out = stage.run(&["run", "--exclusive", "--wait", "0", "job", "--", "true"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("mutex") && stderr(&out).contains("read-write lock"),
        "{}",
        stderr(&out)
    );
    let status = stage.status("job");
    assert!(
        status.contains("token:") && !status.contains("kind:"),
        "a mutex's status stays as it was: {status}"
    );
    stage.go();
    stage.expect_success(&mut holders);
}

#[test]
fn a_forced_release_stops_cmd_with_the_lost_code_in_every_mode() {
    let stage = Stage::new("sqlite", None);
    for (at, flags) in [&["--permits", "2"][..], &["--shared"], &["--exclusive"]]
        .into_iter()
        .enumerate()
    {
        let name = format!("lost-{at}");
        let mut holder = stage.hold(&[flags, &["--ttl", "3s", &name][..]].concat());
        let cmd = stage.wait_for_starts(at + 1)[at].pid;
        let forced = stage.run(&["release", "--force", &name]);
        assert_eq!(code(&forced), 0, "{flags:?}: {}", stderr(&forced));
        let status = wait_child(&mut holder, LONG);
        assert_eq!(status.code(), Some(122), "{flags:?}");
        assert!(
            wait_until_gone(cmd, Duration::from_secs(10)),
            "{flags:?}: CMD outlived the lease"
        );
    }
}

#[test]
fn the_three_flags_exclude_each_other_and_permits_are_checked() {
    let sandbox = Sandbox::new();
    let cases: [(&[&str], &str); 7] = [
        (&["--permits", "0"], "1 to 10000"),
        (&["--permits", "10001"], "1 to 10000"),
        (&["--permits", "-1"], "1 to 10000"),
        (&["--permits", "many"], "1 to 10000"),
        (&["--shared", "--exclusive"], "cannot be used with"),
        (&["--permits", "2", "--shared"], "cannot be used with"),
        (&["--exclusive", "--permits", "2"], "cannot be used with"),
    ];
    for (flags, words) in cases {
        let args = [&["run"], flags, &["job", "--", "true"]].concat();
        let out = sandbox.run(&args);
        assert_eq!(code(&out), 125, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(words), "{args:?}: {}", stderr(&out));
    }
    let out = sandbox.run(&["run", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for words in [
        "--permits",
        "--shared",
        "--exclusive",
        "Plain `run NAME` takes the mutex NAME",
        "FENCELOCK_PERMIT_TOKEN",
        "FENCELOCK_READ_TOKEN",
        "not the same lock",
    ] {
        assert!(help.contains(words), "--help should say {words:?}: {help}");
    }
}
