//! Reading locks without holding them: inspect asks every master and reports what a majority
//! shows; list scans every master and inspects each name found.

use std::time::Duration;

use super::fanout::{error_summary, fan_out, fatal_error};
use super::{RedlockBackend, SLACK, ok_count};
use crate::backend::LockInfo;
use crate::backend::redis::keys::{keys, name_of_lock_key, scan_pattern};
use crate::error::{Error, Result};
use crate::name::LockName;

impl RedlockBackend {
    /// Asks every master. `held` when one owner's key is on a majority, or when keys exist
    /// and no majority says the lock is free (a master being down may hide the holder's
    /// majority). `token` is that holder's (the one most of its keys carry: phase 2 wrote T),
    /// or else the largest counter seen; `time_left` the shortest among the holder's keys.
    pub(super) async fn inspect_lock(&self, name: &LockName) -> Result<LockInfo> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let requests = self
            .instances
            .iter()
            .map(|i| i.inspect(self.settings.instance_timeout, [&k.lock, &k.fence]))
            .collect();
        let answers = self.ask_every_master(requests).await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        let seen: Vec<_> = answers.iter().flatten().flatten().collect();
        if seen.len() < self.quorum {
            return Err(Error::unavailable(format!(
                "no quorum to inspect lock {:?}: {} of {} redlock masters answered: {}",
                name.as_str(),
                seen.len(),
                self.instances.len(),
                error_summary(&answers, &self.labels)
            )));
        }
        let free = seen.iter().filter(|s| s.pttl.is_none()).count();
        // The owner with the most keys.
        let mut best: Option<(&str, usize)> = None;
        for s in &seen {
            if let Some(owner) = s.owner.as_deref() {
                let count = seen
                    .iter()
                    .filter(|o| o.owner.as_deref() == Some(owner))
                    .count();
                if best.is_none_or(|(_, c)| count > c) {
                    best = Some((owner, count));
                }
            }
        }
        let held =
            best.is_some_and(|(_, c)| c >= self.quorum) || (best.is_some() && free < self.quorum);
        let counter = seen.iter().filter_map(|s| s.counter.or(s.token)).max();
        if !held {
            return Ok(LockInfo::free(name, counter));
        }
        let owner = best.map(|(o, _)| o);
        let keys_of: Vec<_> = seen
            .iter()
            .filter(|s| s.owner.as_deref() == owner)
            .collect();
        // Phase 2 wrote T on a majority; a master that granted late still shows its own
        // phase-1 token. The token most of the holder's keys carry is T (ties: the larger).
        let votes = |t: Option<u64>| keys_of.iter().filter(|s| s.token == t).count();
        let top = keys_of.iter().max_by_key(|s| (votes(s.token), s.token));
        Ok(LockInfo {
            name: name.to_string(),
            held: true,
            token: top.and_then(|s| s.token),
            holder: top.and_then(|s| s.holder.clone()),
            time_left: keys_of
                .iter()
                .filter_map(|s| s.pttl)
                .filter(|p| *p >= 0)
                .min()
                .map(|p| Duration::from_millis(p as u64)),
            waiters: Vec::new(),
            kind: crate::mode::LockKind::Mutex,
            permits: None,
            leases: Vec::new(),
        })
    }

    /// The names whose keys a majority of masters scanned (each master's keys, in union: a
    /// holder's keys may sit on different majorities), each then inspected with the majority
    /// rule of [`Self::inspect_lock`], so only locks a majority agrees are held are listed.
    pub(super) async fn list_locks(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.ensure_open()?;
        let pattern = scan_pattern(&self.settings.prefix, prefix);
        let timeout = self.settings.instance_timeout.max(Duration::from_secs(2));
        let requests = self
            .instances
            .iter()
            .map(|i| i.scan(timeout, &pattern, limit))
            .collect();
        let answers = fan_out(requests, timeout + SLACK, &self.labels, |_| false).await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        let answered = ok_count(&answers, |_, _| true);
        if answered < self.quorum {
            return Err(Error::unavailable(format!(
                "no quorum to list locks: {answered} of {} redlock masters answered: {}",
                self.instances.len(),
                error_summary(&answers, &self.labels)
            )));
        }
        let mut names: Vec<LockName> = answers
            .into_iter()
            .flatten()
            .flatten()
            .flatten()
            .filter_map(|key| name_of_lock_key(&self.settings.prefix, &key))
            .collect();
        names.sort();
        names.dedup();
        let mut locks = Vec::new();
        for name in names.into_iter().take(limit) {
            let info = self.inspect_lock(&name).await?;
            if info.held {
                locks.push(info);
            }
        }
        Ok(locks)
    }
}
