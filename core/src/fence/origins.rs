//! The origins a fence has seen: which stored data the tokens it accepted were minted from, so
//! that two servers answering behind one address are noticed (docs/design.md §3.7).
//!
//! A Redis lock's tokens carry an origin mark, written with the lock's counter and kept as long
//! as it ([`crate::backend::Attempt`]). The mark changes when the server lost the lock's data
//! (a restart without persistence): the time floor then keeps the new tokens above every
//! earlier one. It also differs between two servers reached under one spelling (`localhost` on
//! two hosts), whose tokens interleave. The fence tells the two apart by the order: a new
//! origin whose first token is above the fence's highest is a successor, and the one it
//! replaced is retired at that token; a token of a retired origin below that point is from
//! before (a holder that slept through the restart), refused only if stale. Anything else, a
//! new origin below the highest or a retired one at or above its retirement, is a warning.
//! The warning never changes what the fence accepts: that is the token order alone.
//!
//! Stored as text, `CURRENT [RETIRED@TOKEN ...]`: origins in 16 hex digits, tokens in decimal,
//! the last [`RETIRED_KEPT`] retirements, newest first. The Redis fence's script keeps the same
//! record by the same rule (`fence::redis::mutex_scripts::FENCED_SET`).

/// How many replaced origins a fence remembers: a holder that slept through more restarts
/// than this (of the lock's server, without persistence) gets a warning with its refusal.
pub(crate) const RETIRED_KEPT: usize = 4;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Origins {
    current: Option<u64>,
    /// (origin, the first token of its successor), newest first.
    retired: Vec<(u64, u64)>,
}

/// What a fence does about a token's origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Judgement {
    /// The record to store if the token is accepted (`None`: unchanged).
    pub record: Option<String>,
    /// Why the lock's tokens look like they come from two places, if they do.
    pub warning: Option<String>,
}

impl Origins {
    /// Reads a stored record; an unreadable one counts as empty (it is advisory).
    pub(crate) fn parse(text: Option<&str>) -> Origins {
        let mut words = text.unwrap_or("").split_ascii_whitespace();
        let current = words.next().and_then(|w| u64::from_str_radix(w, 16).ok());
        let retired = words
            .filter_map(|w| {
                let (origin, at) = w.split_once('@')?;
                Some((u64::from_str_radix(origin, 16).ok()?, at.parse().ok()?))
            })
            .take(RETIRED_KEPT)
            .collect();
        Origins { current, retired }
    }

    pub(crate) fn format(&self) -> String {
        let mut text = self.current.map(hex).unwrap_or_default();
        for (origin, at) in &self.retired {
            text.push_str(&format!(" {}@{at}", hex(*origin)));
        }
        text
    }

    /// Judges a token of `origin` against this record and the fence's `highest` token.
    pub(crate) fn judge(&self, origin: Option<u64>, token: u64, highest: Option<u64>) -> Judgement {
        let unchanged = Judgement {
            record: None,
            warning: None,
        };
        let Some(origin) = origin else {
            return unchanged;
        };
        let Some(current) = self.current else {
            return Judgement {
                record: Some(hex(origin)),
                warning: None,
            };
        };
        if origin == current {
            return unchanged;
        }
        if let Some((_, retired_at)) = self.retired.iter().find(|(o, _)| *o == origin) {
            let warning = (token >= *retired_at).then(|| {
                format!(
                    "token {token} comes from stored data ({}) that the lock's tokens left at token \
                     {retired_at} for other data ({}): two servers answer behind one address",
                    hex(origin),
                    hex(current)
                )
            });
            return Judgement {
                record: None,
                warning,
            };
        }
        if highest.is_none_or(|h| token > h) {
            let mut retired = vec![(current, token)];
            retired.extend(self.retired.iter().copied().take(RETIRED_KEPT - 1));
            let next = Origins {
                current: Some(origin),
                retired,
            };
            return Judgement {
                record: Some(next.format()),
                warning: None,
            };
        }
        Judgement {
            record: None,
            warning: Some(format!(
                "token {token} comes from other stored data ({}) than the fence's highest token {} \
                 ({}) and is not above it: two servers answer behind one address, or the lock's \
                 server lost its data and its clock went back",
                hex(origin),
                highest.unwrap_or(0),
                hex(current)
            )),
        }
    }
}

fn hex(origin: u64) -> String {
    format!("{origin:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 0xa;
    const B: u64 = 0xb;
    const C: u64 = 0xc;

    fn record(current: u64, retired: &[(u64, u64)]) -> Origins {
        Origins {
            current: Some(current),
            retired: retired.to_vec(),
        }
    }

    #[test]
    fn the_first_origin_is_recorded_and_tokens_without_one_change_nothing() {
        let empty = Origins::default();
        assert_eq!(
            empty.judge(Some(A), 5, None).record.as_deref(),
            Some("000000000000000a")
        );
        let judged = record(A, &[]).judge(None, 1, Some(9));
        assert_eq!((judged.record, judged.warning), (None, None));
    }

    #[test]
    fn a_successor_above_the_highest_retires_the_current_origin() {
        let judged = record(A, &[]).judge(Some(B), 10, Some(9));
        assert_eq!(judged.warning, None);
        let next = Origins::parse(judged.record.as_deref());
        assert_eq!(next, record(B, &[(A, 10)]));
        assert_eq!(Origins::parse(Some(&next.format())), next);
        // A holder from before the restart: refused as stale by the token order, no warning.
        assert_eq!(next.judge(Some(A), 8, Some(10)).warning, None);
    }

    #[test]
    fn tokens_that_interleave_from_two_origins_warn() {
        // A new origin below the highest.
        assert!(record(A, &[]).judge(Some(B), 8, Some(9)).warning.is_some());
        assert!(record(A, &[]).judge(Some(B), 9, Some(9)).warning.is_some());
        // A retired origin minting at or after its successor's first token.
        let judged = record(B, &[(A, 10)]).judge(Some(A), 12, Some(11));
        assert!(judged.warning.is_some());
        assert_eq!(judged.record, None, "a warning never moves the record");
    }

    #[test]
    fn only_the_last_retirements_are_kept() {
        let mut origins = record(A, &[]);
        let mut token = 1;
        for next in [B, C, 0xd, 0xe, 0xf] {
            token += 10;
            origins = Origins::parse(
                origins
                    .judge(Some(next), token, Some(token - 1))
                    .record
                    .as_deref(),
            );
        }
        assert_eq!(origins.current, Some(0xf));
        assert_eq!(origins.retired.len(), RETIRED_KEPT);
        assert!(origins.retired.iter().all(|(o, _)| *o != A));
    }

    #[test]
    fn unreadable_records_count_as_empty() {
        assert_eq!(Origins::parse(Some("zz q@r")), Origins::default());
        assert_eq!(Origins::parse(None), Origins::default());
    }
}
