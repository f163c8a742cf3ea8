//! Leader election on a coordination.k8s.io Lease, as client-go's leader elector does it.
//!
//! - A follower takes the lease over once it has seen the same lease record (resourceVersion)
//!   for longer than the lease's duration, measured on its own clock from when it first saw
//!   that record — never from the holder's renewTime, so clock skew cannot make two leaders.
//! - The leader renews every pass; it writes only while its last successful renewal is within
//!   the renew deadline (shorter than the lease duration), and steps down past it.
//! - Every lease write carries the resourceVersion it read: two processes racing for the
//!   lease cannot both win.
//!
//! [`next_lease`] is the pure decision; [`Election`] holds what it needs between passes.

use crate::Action;
use crate::api::{ApiError, ClusterApi, Lease, Write, Written};
use crate::context::Ctx;
use capstan_cloud::CloudProvider;

/// What a process does with the lease this pass.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseStep {
    /// No lease exists: create it, held by this process.
    Create(Lease),
    /// This process holds it: renew it.
    Renew { lease: Lease, rv: String },
    /// It expired (or was released): take it over, one transition later.
    TakeOver { lease: Lease, rv: String },
    /// Another process holds it and it has not expired: follow.
    Follow,
}

/// What a process remembers of the lease record it last saw: its resourceVersion and when (on
/// its own clock) it first saw it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    pub rv: String,
    pub since: f64,
}

/// The lease step for process `me` at clock `now`, given the lease as read (`None` when there
/// is none), the term this process believes it holds, and what it observed before.
pub fn next_lease(
    me: &str,
    now: f64,
    read: Option<(&str, &Lease)>,
    held: Option<u64>,
    observed: Option<&Observed>,
    duration: f64,
) -> LeaseStep {
    let fresh = |transitions: u64| Lease {
        holder: me.to_string(),
        renewed_at: now,
        acquired_at: now,
        duration_seconds: duration,
        transitions,
    };
    let Some((rv, l)) = read else {
        return LeaseStep::Create(fresh(1));
    };
    if l.holder == me && held == Some(l.transitions) {
        return LeaseStep::Renew {
            lease: Lease {
                renewed_at: now,
                ..l.clone()
            },
            rv: rv.to_string(),
        };
    }
    // Seen unchanged for longer than its duration (since this process first saw it).
    let unchanged_since = match observed {
        Some(o) if o.rv == rv => o.since,
        _ => now,
    };
    let expired = now - unchanged_since > l.duration_seconds;
    // A released lease, or one held by an earlier run of this identity, is free at once.
    if l.holder.is_empty() || l.holder == me || expired {
        return LeaseStep::TakeOver {
            lease: fresh(l.transitions + 1),
            rv: rv.to_string(),
        };
    }
    LeaseStep::Follow
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Election {
    observed: Option<Observed>,
    /// The lease's resourceVersion after this process's last write to it.
    lease_rv: Option<String>,
    /// Set when this process has just taken the lease: the controller relists and forgets
    /// everything volatile before acting.
    pub fresh_term: bool,
    /// Whether the last lease read reached the API server.
    pub connected: bool,
    /// Clock seconds of the last lease read.
    polled_at: f64,
}

impl Election {
    /// Acquires or renews the lease; whether this process leads for this pass.
    pub async fn reconcile<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
    ) -> bool {
        if !cx.config.leader_elect {
            self.connected = true;
            cx.s.lead.renewed_at = now;
            if cx.s.lead.term.is_none() {
                cx.s.lead.term = Some(1);
                self.fresh_term = true;
                cx.record(now, Action::Elected { term: 1 });
            }
            return true;
        }
        // Between renewals a leader acts on the renewal it has (its deadline still applies).
        if cx.leading() && now - cx.s.lead.renewed_at < cx.config.renew_interval {
            return true;
        }
        if !cx.leading() && now - self.polled_at < cx.config.renew_interval {
            return false;
        }
        self.polled_at = now;
        let read = match cx.api.get_lease().await {
            Ok(l) => {
                self.connected = true;
                l
            }
            Err(e) => {
                self.connected = false;
                tracing::warn!(error = %e, "reading the lease failed");
                // Without a renewal the renew deadline runs out and writes stop by themselves.
                return cx.leading();
            }
        };
        if let Some((rv, _)) = &read {
            if self.observed.as_ref().is_none_or(|o| o.rv != *rv) {
                self.observed = Some(Observed {
                    rv: rv.clone(),
                    since: now,
                });
            }
        }
        let step = next_lease(
            &cx.config.identity,
            now,
            read.as_ref().map(|(rv, l)| (rv.as_str(), l)),
            cx.s.lead.term,
            self.observed.as_ref(),
            cx.config.lease_duration,
        );
        let (write, term) = match step {
            LeaseStep::Follow => {
                cx.depose(now, "lease held by another".into());
                return false;
            }
            LeaseStep::Create(lease) => {
                let t = lease.transitions;
                (Write::CreateLease(lease), t)
            }
            LeaseStep::Renew { lease, rv } | LeaseStep::TakeOver { lease, rv } => {
                let t = lease.transitions;
                (Write::UpdateLease { lease, rv }, t)
            }
        };
        match cx.write(write).await {
            Ok(Written::Lease(rv)) => {
                self.observed = Some(Observed {
                    rv: rv.clone(),
                    since: now,
                });
                self.lease_rv = Some(rv);
                cx.s.lead.renewed_at = now;
                if cx.s.lead.term != Some(term) {
                    cx.s.lead.term = Some(term);
                    self.fresh_term = true;
                    tracing::info!(identity = %cx.config.identity, term, "elected");
                    cx.record(now, Action::Elected { term });
                }
                true
            }
            Ok(_) => true,
            Err(e) => {
                // Lost a race for the lease (409), or the server is away: a leader keeps
                // leading until its renew deadline, then stops writing by itself.
                tracing::debug!(error = %e, "lease update lost");
                if matches!(e, ApiError::Conflict { .. }) {
                    cx.depose(now, e.to_string());
                    return false;
                }
                cx.leading()
            }
        }
    }

    /// Gives the lease up (holder cleared) if this process holds it.
    pub async fn release<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
    ) {
        let Some(term) = cx.s.lead.term else {
            return;
        };
        if !cx.config.leader_elect {
            return;
        }
        let Ok(Some((rv, l))) = cx.api.get_lease().await else {
            return;
        };
        if l.holder != cx.config.identity || l.transitions != term {
            return;
        }
        let lease = Lease {
            holder: String::new(),
            renewed_at: now,
            ..l
        };
        match cx.write(Write::UpdateLease { lease, rv }).await {
            Ok(_) => tracing::info!(identity = %cx.config.identity, term, "lease released"),
            Err(e) => tracing::warn!(error = %e, "releasing the lease failed"),
        }
        cx.depose(now, "released the lease".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, transitions: u64) -> Lease {
        Lease {
            holder: holder.into(),
            renewed_at: 0.0,
            acquired_at: 0.0,
            duration_seconds: 15.0,
            transitions,
        }
    }

    fn seen(rv: &str, since: f64) -> Observed {
        Observed {
            rv: rv.into(),
            since,
        }
    }

    #[test]
    fn the_lease_step_follows_client_go() {
        let other = lease("b", 4);
        let mine = lease("a", 4);
        let released = lease("", 4);
        // (case, read, held term, observed, now, expected step kind, expected transitions)
        type Case<'a> = (
            &'a str,
            Option<(&'a str, &'a Lease)>,
            Option<u64>,
            Option<Observed>,
            f64,
            &'a str,
            u64,
        );
        let cases: [Case<'_>; 8] = [
            ("no lease: create it", None, None, None, 100.0, "create", 1),
            (
                "held by me: renew",
                Some(("7", &mine)),
                Some(4),
                None,
                100.0,
                "renew",
                4,
            ),
            (
                "held by another, just seen: follow",
                Some(("7", &other)),
                None,
                None,
                100.0,
                "follow",
                0,
            ),
            (
                "held by another, unchanged 15 s: follow",
                Some(("7", &other)),
                None,
                Some(seen("7", 85.0)),
                100.0,
                "follow",
                0,
            ),
            (
                "held by another, unchanged 16 s: take over",
                Some(("7", &other)),
                None,
                Some(seen("7", 84.0)),
                100.0,
                "take",
                5,
            ),
            (
                "renewed meanwhile: follow",
                Some(("8", &other)),
                None,
                Some(seen("7", 0.0)),
                100.0,
                "follow",
                0,
            ),
            (
                "released: take over at once",
                Some(("7", &released)),
                None,
                None,
                100.0,
                "take",
                5,
            ),
            (
                "an earlier run of me: take over",
                Some(("7", &mine)),
                None,
                None,
                100.0,
                "take",
                5,
            ),
        ];
        for (case, read, held, observed, now, kind, transitions) in cases {
            let got = next_lease("a", now, read, held, observed.as_ref(), 15.0);
            let (k, t) = match &got {
                LeaseStep::Create(l) => ("create", l.transitions),
                LeaseStep::Renew { lease, .. } => ("renew", lease.transitions),
                LeaseStep::TakeOver { lease, .. } => ("take", lease.transitions),
                LeaseStep::Follow => ("follow", 0),
            };
            assert_eq!((k, t), (kind, transitions), "{case}: {got:?}");
            if let LeaseStep::Renew { lease, .. } | LeaseStep::TakeOver { lease, .. } = &got {
                assert_eq!(lease.holder, "a", "{case}");
                assert_eq!(lease.renewed_at, now, "{case}");
            }
        }
    }

    #[test]
    fn the_holders_renew_time_does_not_decide_expiry() {
        // The holder's clock is an hour behind: its renewTime looks ancient, but the record
        // changed just now, so it is not expired.
        let mut skewed = lease("b", 2);
        skewed.renewed_at = -3600.0;
        let step = next_lease(
            "a",
            100.0,
            Some(("9", &skewed)),
            None,
            Some(&seen("8", 0.0)),
            15.0,
        );
        assert_eq!(step, LeaseStep::Follow);
    }
}
