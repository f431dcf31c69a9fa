//! Reading locks without holding them: inspect asks every master and reports what a majority
//! shows (a mutex's holder, or a read-write lock's leases and waiters); list scans every
//! master and inspects each name found.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;

use super::fanout::{error_summary, fan_out, fatal_error};
use super::{RedlockBackend, SLACK, ok_count};
use crate::backend::redis::inspect::{lease_owners, lock_info};
use crate::backend::redis::keys::{
    keys, name_of_lock_key, name_of_shared_key, scan_pattern, shared_scan_pattern,
};
use crate::backend::redis::semaphore_rwlock_scripts::INSPECT_ANY;
use crate::backend::{LeaseInfo, LockInfo, MAX_WAITERS_SHOWN, Waiter};
use crate::error::{Error, Result};
use crate::mode::LockKind;
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
        let seen = self.answered_by_a_majority(&answers, name)?;
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
            return self.inspect_shared(name, counter).await;
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

    /// A name no mutex holds, read as a read-write lock: each master's [`INSPECT_ANY`], a
    /// lease shown when its owner is on a majority of them (with the token most of its
    /// entries carry, which phase 2 wrote, and the shortest time left), a waiter when it is
    /// registered on a majority. `counter`: the mutex inspection's, for a name not in use.
    async fn inspect_shared(&self, name: &LockName, counter: Option<u64>) -> Result<LockInfo> {
        let k = keys(&self.settings.prefix, name);
        let keys = [
            &k.shared, &k.leases, &k.waiters, &k.writers, &k.lock, &k.fence,
        ];
        let keys = keys.map(String::as_str);
        let args = [MAX_WAITERS_SHOWN.to_string()];
        let timeout = self.settings.instance_timeout;
        let requests = self
            .instances
            .iter()
            .map(|i| {
                let (keys, args) = (&keys, &args);
                async move {
                    let reply = i.run(timeout, &INSPECT_ANY, keys, args, "inspect").await?;
                    let Value::Array(reply) = reply else {
                        return Err(Error::internal(format!(
                            "unexpected reply to the inspect script: {reply:?}"
                        )));
                    };
                    Ok((lock_info(name, &reply)?, lease_owners(&reply)))
                }
            })
            .collect();
        let answers = self.ask_every_master(requests).await;
        let seen = self.answered_by_a_majority(&answers, name)?;
        let counter = seen
            .iter()
            .filter_map(|(info, _)| info.token)
            .chain(counter)
            .max();
        let mut info = LockInfo::free(name, counter);
        // Each owner's entries, one per master that shows it.
        let mut by_owner: BTreeMap<&str, Vec<&LeaseInfo>> = BTreeMap::new();
        for (shown, owners) in &seen {
            for (lease, owner) in shown.leases.iter().zip(owners) {
                if let Some(owner) = owner {
                    by_owner.entry(owner).or_default().push(lease);
                }
            }
        }
        for entries in by_owner.values().filter(|e| e.len() >= self.quorum) {
            let votes = |t: Option<u64>| entries.iter().filter(|e| e.token == t).count();
            let Some(top) = entries.iter().max_by_key(|e| (votes(e.token), e.token)) else {
                continue;
            };
            info.leases.push(LeaseInfo {
                time_left: entries.iter().filter_map(|e| e.time_left).min(),
                ..(*top).clone()
            });
        }
        let mut registered: BTreeMap<&str, Vec<&Waiter>> = BTreeMap::new();
        for (shown, _) in &seen {
            for waiter in &shown.waiters {
                registered.entry(&waiter.node).or_default().push(waiter);
            }
        }
        info.waiters = registered
            .into_values()
            .filter(|w| w.len() >= self.quorum)
            .map(|w| w[0].clone())
            .collect();
        if let Some((shown, _)) = seen.iter().find(|(shown, _)| !shown.leases.is_empty()) {
            info.kind = shown.kind;
            info.permits = shown.permits;
        } else if let Some((shown, _)) =
            seen.iter().find(|(shown, _)| shown.kind != LockKind::Mutex)
        {
            info.kind = shown.kind;
        }
        info.held = !info.leases.is_empty();
        Ok(info)
    }

    /// The answers of an inspection, once a majority of masters gave one: else its most telling
    /// error, or UNAVAILABLE.
    fn answered_by_a_majority<'a, T>(
        &self,
        answers: &'a [Option<Result<T>>],
        name: &LockName,
    ) -> Result<Vec<&'a T>> {
        if let Some(e) = fatal_error(answers) {
            return Err(e);
        }
        let seen: Vec<&T> = answers.iter().flatten().flatten().collect();
        if seen.len() < self.quorum {
            return Err(Error::unavailable(format!(
                "no quorum to inspect lock {:?}: {} of {} redlock masters answered: {}",
                name.as_str(),
                seen.len(),
                self.instances.len(),
                error_summary(answers, &self.labels)
            )));
        }
        Ok(seen)
    }

    /// The names whose keys a majority of masters scanned (each master's keys, in union: a
    /// holder's keys may sit on different majorities), each then inspected with the majority
    /// rule of [`Self::inspect_lock`], so only locks a majority agrees are held are listed.
    pub(super) async fn list_locks(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.ensure_open()?;
        let key_prefix = &self.settings.prefix;
        let patterns = [
            scan_pattern(key_prefix, prefix),
            shared_scan_pattern(key_prefix, prefix),
        ];
        let timeout = self.settings.instance_timeout.max(Duration::from_secs(2));
        let requests = self
            .instances
            .iter()
            .map(|i| {
                let patterns = &patterns;
                async move {
                    let mut found = i.scan(timeout, &patterns[0], limit).await?;
                    found.extend(i.scan(timeout, &patterns[1], limit).await?);
                    Ok(found)
                }
            })
            .collect();
        let answers = fan_out(requests, timeout + SLACK, &self.labels).await;
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
            .filter_map(|key| {
                name_of_lock_key(key_prefix, &key).or_else(|| name_of_shared_key(key_prefix, &key))
            })
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
