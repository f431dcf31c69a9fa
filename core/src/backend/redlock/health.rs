//! Which masters may vote: a master that restarted recently abstains, and a master whose
//! clock is too far from the others' is left out of quorums (docs/design.md §3.3, changes 3 and 4).
//!
//! Both are decided from `INFO server`, which is pipelined in front of every phase-1 acquire
//! (and sent at connect): its `uptime_in_seconds` and `server_time_usec` describe the master at
//! the moment it granted, so a restart between two acquires is never missed and costs no extra
//! round trip.

use std::time::Duration;

/// What one `INFO server` said about a master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `uptime_in_seconds`: Redis subtracts two wall-clock readings it truncated to whole
    /// seconds each (its start, and now), so the true uptime may be up to a second *less*.
    pub uptime: Duration,
    /// The master's clock minus this client's, in microseconds (estimated at the midpoint of
    /// the round trip).
    pub offset_us: i64,
    /// The round trip it was read in, in microseconds.
    pub rtt_us: i64,
    /// `run_id`: the server process's random id, the same under every name it is reached by.
    pub run_id: Option<String>,
}

/// Reads `uptime_in_seconds` and `server_time_usec` out of an `INFO server` reply.
/// `sent_us` and `received_us`: this client's wall clock when the request went out and when
/// the reply came back.
pub fn parse_info(text: &str, sent_us: i64, received_us: i64) -> Option<Probe> {
    let local_mid_us = (sent_us + received_us) / 2;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    let uptime = field("uptime_in_seconds")?;
    let server_us = field("server_time_usec")?;
    let run_id = text
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    Some(Probe {
        uptime: Duration::from_secs(uptime.max(0) as u64),
        offset_us: server_us - local_mid_us,
        rtt_us: (received_us - sent_us).max(0),
        run_id,
    })
}

/// How long a restarted master abstains: every lease it may have granted before the restart
/// has expired (`max_ttl`), and its clock has passed every token it may have handed out (a
/// token is at most the fastest master's clock, which may lead this one by up to twice the skew
/// around the true time).
pub fn abstain_bound(max_ttl: Duration, max_skew: Duration) -> Duration {
    max_ttl + max_skew * 2
}

/// Whether a master that reports this uptime must not vote: until its true uptime, which may
/// be up to a second below the reported one ([`Probe::uptime`]), has passed the bound.
pub fn abstains(uptime: Duration, max_ttl: Duration, max_skew: Duration) -> bool {
    uptime < abstain_bound(max_ttl, max_skew) + UPTIME_OVERSTATEMENT
}

/// Why a master abstains, for the log: the uptime it reported, and the uptime it must report
/// before it votes again, both in the whole seconds Redis reports.
pub fn abstain_reason(uptime: Duration, max_ttl: Duration, max_skew: Duration) -> String {
    let must_pass = abstain_bound(max_ttl, max_skew) + UPTIME_OVERSTATEMENT;
    let votes_from = must_pass.as_secs() + u64::from(must_pass.subsec_nanos() > 0);
    format!(
        "reports an uptime of {}s: it abstains until it reports {votes_from}s (max_ttl \
         {max_ttl:?} + 2 x max_skew {max_skew:?}, + 1s because Redis rounds the uptime down to \
         whole seconds)",
        uptime.as_secs()
    )
}

/// For each master, the earlier master that answered with the same `run_id` (one server listed
/// twice, under two names): its vote must not count twice.
pub fn duplicates(run_ids: &[Option<&str>]) -> Vec<Option<usize>> {
    run_ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let id = (*id)?;
            run_ids[..i].iter().position(|other| *other == Some(id))
        })
        .collect()
}

/// How long a master that reports this uptime still abstains, at most.
pub fn abstention_left(uptime: Duration, max_ttl: Duration, max_skew: Duration) -> Duration {
    (abstain_bound(max_ttl, max_skew) + UPTIME_OVERSTATEMENT).saturating_sub(uptime)
}

/// How much `uptime_in_seconds` can exceed the true uptime: started at 52.9 s and read at
/// 56.0 s of the wall clock, Redis reports 56 - 52 = 4 s for 3.1 s.
const UPTIME_OVERSTATEMENT: Duration = Duration::from_secs(1);

/// Given each master's clock offset (`None` where unknown), says which are beyond `max_skew`
/// from the median of the known ones. With fewer than two known offsets nobody is excluded.
pub fn skewed(offsets: &[Option<i64>], max_skew: Duration) -> Vec<bool> {
    let mut known: Vec<i64> = offsets.iter().flatten().copied().collect();
    if known.len() < 2 {
        return vec![false; offsets.len()];
    }
    known.sort_unstable();
    // The lower median: with an even count it is one of the two middle values, so a pair
    // of masters that disagree by more than the skew excludes one, not both.
    let median = known[(known.len() - 1) / 2];
    let limit = i64::try_from(max_skew.as_micros()).unwrap_or(i64::MAX);
    offsets
        .iter()
        .map(|o| o.is_some_and(|o| (o - median).abs() > limit))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole seconds a message names after `prefix` ("4s" → 4).
    fn seconds_after(message: &str, prefix: &str) -> u64 {
        let rest = &message[message
            .find(prefix)
            .unwrap_or_else(|| panic!("{prefix:?} in {message:?}"))
            + prefix.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        assert!(
            rest[digits.len()..].starts_with('s'),
            "whole seconds after {prefix:?} in {message:?}"
        );
        digits.parse().unwrap()
    }

    #[test]
    fn an_abstaining_master_is_told_an_uptime_above_the_one_it_reported() {
        // Seen with max_ttl=2s&max_skew=10ms: "is up for 3s only: it abstains until 2.02s".
        for (max_ttl, skew) in [(2_000, 10), (30_000, 500), (1_500, 0), (3_000, 1_000)] {
            let (max_ttl, skew) = (Duration::from_millis(max_ttl), Duration::from_millis(skew));
            for reported in 0..40 {
                let uptime = Duration::from_secs(reported);
                if !abstains(uptime, max_ttl, skew) {
                    continue;
                }
                let message = abstain_reason(uptime, max_ttl, skew);
                assert_eq!(
                    seconds_after(&message, "reports an uptime of "),
                    reported,
                    "{message}"
                );
                let votes_from = seconds_after(&message, "abstains until it reports ");
                assert!(votes_from > reported, "{message}");
                assert!(
                    !abstains(Duration::from_secs(votes_from), max_ttl, skew),
                    "{message}"
                );
                assert!(
                    abstains(Duration::from_secs(votes_from - 1), max_ttl, skew),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn info_parses() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:4a1c\r\nserver_time_usec:1000500\r\nuptime_in_seconds:12\r\n";
        assert_eq!(
            parse_info(info, 999_900, 1_000_100),
            Some(Probe {
                uptime: Duration::from_secs(12),
                offset_us: 500,
                rtt_us: 200,
                run_id: Some("4a1c".to_string()),
            })
        );
        assert_eq!(parse_info("redis_version:7\r\n", 0, 0), None);
    }

    #[test]
    fn a_server_listed_twice_is_a_duplicate_of_its_first_listing() {
        let ids = [Some("a"), Some("b"), None, Some("a"), Some("b"), Some("a")];
        assert_eq!(
            duplicates(&ids),
            vec![None, None, None, Some(0), Some(1), Some(0)]
        );
    }

    #[test]
    fn a_restarted_master_abstains_for_max_ttl_plus_twice_the_skew() {
        let (ttl, skew) = (Duration::from_secs(2), Duration::from_millis(500));
        // The bound is 3 s; a reported uptime may be a second more than the true one.
        assert!(abstains(Duration::from_secs(3), ttl, skew));
        assert!(!abstains(Duration::from_secs(4), ttl, skew));
        assert_eq!(
            abstain_bound(Duration::from_secs(60), skew),
            Duration::from_secs(61)
        );
    }

    #[test]
    fn skew_is_measured_against_the_median() {
        let ms = |n: i64| Some(n * 1000);
        let skew = Duration::from_millis(500);
        assert_eq!(
            skewed(&[ms(0), ms(10), ms(-20), ms(900), None], skew),
            vec![false, false, false, true, false]
        );
        assert_eq!(skewed(&[ms(0), ms(2000)], skew), vec![false, true]);
        assert_eq!(
            skewed(&[ms(5000), None, None], skew),
            vec![false, false, false]
        );
    }
}
