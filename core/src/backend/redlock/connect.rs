//! Connecting to the masters: each one is checked and probed (`run_id`, uptime, clock) and asked
//! for the stored `max_ttl`, which is written where it is missing; a majority must answer, and
//! a master listed twice is refused.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use super::fanout::{error_summary, fan_out, fatal_error};
use super::health::duplicates;
use super::instance::Instance;
use super::settings::RedlockSettings;
use super::{RedlockBackend, SLACK, ok_count};
use crate::backend::redis::connect::RedisSettings;
use crate::backend::redis::ms;
use crate::error::{Error, Result};
use crate::options::LockerOptions;
use crate::url::LockerUrl;

fn sorted(labels: &[String]) -> Vec<String> {
    let mut labels = labels.to_vec();
    labels.sort();
    labels
}

impl RedlockBackend {
    pub(crate) async fn connect(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let settings = RedlockSettings::from_url(url)?;
        let connect_timeout = (options.operation_timeout / 2).min(Duration::from_secs(5));
        let instances = url
            .hosts
            .iter()
            .map(|host| Instance::new(url, host, connect_timeout))
            .collect::<Result<Vec<_>>>()?;
        let labels: Vec<String> = instances.iter().map(|i| i.label.clone()).collect();
        let quorum = RedlockSettings::quorum(instances.len());
        let redis_settings = RedisSettings {
            prefix: settings.prefix.clone(),
            replica_ack: false,
            allow_eviction: settings.allow_eviction,
            strict_checks: settings.strict_checks,
            max_skew: settings.max_skew,
        };
        let key = settings.max_ttl_key();
        let wanted = ms(settings.max_ttl);
        let answers = fan_out(
            instances
                .iter()
                .map(|i| i.prepare(&redis_settings, &key))
                .collect(),
            connect_timeout + SLACK,
            &labels,
        )
        .await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        let reached = ok_count(&answers, |_, _| true);
        if reached < quorum {
            return Err(Error::unavailable(format!(
                "no quorum: {reached} of {} redlock masters answered at connect (need {quorum}): {}",
                instances.len(),
                error_summary(&answers, &labels)
            )));
        }
        // The largest value any master stores; the URL's only for a new deployment (the first
        // client's wins). Masters that answered without one get it now: the deployment's
        // value, not this URL's, for a master that restarted and lost it.
        let found = answers
            .iter()
            .flatten()
            .flatten()
            .filter_map(|(stored, _)| *stored)
            .max();
        let missing: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| matches!(a, Some(Ok((None, _)))))
            .map(|(i, _)| i)
            .collect();
        let stored_now = fan_out(
            missing
                .iter()
                .map(|&i| instances[i].store_max_ttl(&key, found.unwrap_or(wanted)))
                .collect(),
            connect_timeout + SLACK,
            &missing
                .iter()
                .map(|&i| labels[i].clone())
                .collect::<Vec<_>>(),
        )
        .await;
        if let Some(e) = fatal_error(&stored_now) {
            return Err(e);
        }
        let stored = found
            .into_iter()
            .chain(stored_now.iter().flatten().flatten().copied())
            .max()
            .unwrap_or(wanted);
        let max_ttl = Duration::from_millis(stored);
        if url.query.contains_key("max_ttl") && stored != wanted {
            flog!(
                warn,
                "redlock max_ttl={:?} from the URL is ignored: the masters store {max_ttl:?} ({key}), \
                 which every client uses",
                settings.max_ttl
            );
        }
        let backend = RedlockBackend {
            // The masters as a set: the order they are listed in is not part of the identity.
            deployment_id: format!("redlock:{}/{}", sorted(&labels).join(","), settings.prefix),
            listed_id: format!("redlock:{}/{}", labels.join(","), settings.prefix),
            instances,
            labels,
            settings,
            max_ttl_ms: AtomicU64::new(stored),
            quorum,
            closed: AtomicBool::new(false),
        };
        let probes: Vec<_> = answers
            .into_iter()
            .map(|a| a.and_then(|a| a.ok()).map(|(_, probe)| probe))
            .collect();
        let run_ids: Vec<Option<&str>> = probes
            .iter()
            .map(|p| p.as_ref().and_then(|p| p.run_id.as_deref()))
            .collect();
        if let Some((i, Some(first))) = duplicates(&run_ids)
            .into_iter()
            .enumerate()
            .find(|(_, d)| d.is_some())
        {
            return Err(Error::invalid(format!(
                "redlock masters {} and {} are the same server (one run_id): list each master \
                 once, or its vote would count twice",
                backend.labels[first], backend.labels[i]
            )));
        }
        backend.judge(&probes);
        Ok(backend)
    }
}
