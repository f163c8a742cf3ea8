//! Why a node goes, and how many may go at once: the disruption reasons every crate shares,
//! and NodePool disruption budgets compiled once into typed values.

use crate::error::FieldError;
use crate::nodepool::Budget as BudgetSpec;
use crate::pdb::IntOrPercent;
use crate::time::{Cron, parse_duration};

/// Why capstan removes a node. One enum for the engine's methods, the cloud's events and the
/// controller's own reasons; its spelling (`as_str`) is Karpenter's where Karpenter has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// No pods but DaemonSet pods (voluntary; budgets apply).
    Empty,
    /// Its pods fit elsewhere more cheaply (voluntary; budgets apply).
    Underutilized,
    /// It no longer matches its NodePool or NodeClass (voluntary; budgets apply).
    Drifted,
    /// Older than the NodePool's `expireAfter` (forceful).
    Expired,
    /// The cloud reclaims the spot instance (two-minute notice).
    SpotInterruption,
    /// The cloud retires the instance at a scheduled time.
    ScheduledMaintenance,
    /// The cloud recommends leaving the spot pool (best effort).
    RebalanceRecommendation,
    /// The instance is stopping or gone.
    InstanceTerminated,
    /// The Node object was deleted (`kubectl delete node`).
    NodeDeleted,
    /// The NodeClaim was deleted by someone other than capstan (`kubectl delete nodeclaim`).
    ClaimDeleted,
    /// The instance never registered a node in time.
    NotRegistered,
    /// A replacement launched for a disruption that was abandoned.
    DisruptionAborted,
    /// No offering of the claim can ever launch.
    LaunchFailed,
    /// A static NodePool's replicas were lowered.
    ScaledDown,
}

impl Reason {
    pub const ALL: [Reason; 14] = [
        Reason::Empty,
        Reason::Underutilized,
        Reason::Drifted,
        Reason::Expired,
        Reason::SpotInterruption,
        Reason::ScheduledMaintenance,
        Reason::RebalanceRecommendation,
        Reason::InstanceTerminated,
        Reason::NodeDeleted,
        Reason::ClaimDeleted,
        Reason::NotRegistered,
        Reason::DisruptionAborted,
        Reason::LaunchFailed,
        Reason::ScaledDown,
    ];

    /// The name NodePool budgets, Events and conditions use.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Underutilized => "Underutilized",
            Reason::Drifted => "Drifted",
            Reason::Expired => "Expired",
            Reason::SpotInterruption => "SpotInterruption",
            Reason::ScheduledMaintenance => "ScheduledMaintenance",
            Reason::RebalanceRecommendation => "RebalanceRecommendation",
            Reason::InstanceTerminated => "InstanceTerminated",
            Reason::NodeDeleted => "NodeDeleted",
            Reason::ClaimDeleted => "ClaimDeleted",
            Reason::NotRegistered => "NotRegistered",
            Reason::DisruptionAborted => "DisruptionAborted",
            Reason::LaunchFailed => "LaunchFailed",
            Reason::ScaledDown => "ScaledDown",
        }
    }

    /// The lower-case form `capstan consolidate` prints (`empty`, `underutilized`, …).
    pub fn cli_name(self) -> String {
        self.as_str().to_ascii_lowercase()
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Reasons a NodePool budget may name (Karpenter's: Empty, Drifted, Underutilized).
    pub fn budgeted(self) -> bool {
        matches!(
            self,
            Reason::Empty | Reason::Drifted | Reason::Underutilized
        )
    }

    /// Whether deleting a claim for this reason is a disruption, as Karpenter counts them
    /// (its methods and the cloud's interruptions; not a person deleting the node or claim,
    /// nor a launch or registration that failed).
    pub fn disruption(self) -> bool {
        matches!(
            self,
            Reason::Empty
                | Reason::Underutilized
                | Reason::Drifted
                | Reason::Expired
                | Reason::SpotInterruption
                | Reason::ScheduledMaintenance
                | Reason::RebalanceRecommendation
                | Reason::InstanceTerminated
        )
    }

    /// Whether the cloud takes the instance whatever capstan decides.
    pub fn involuntary(self) -> bool {
        matches!(
            self,
            Reason::SpotInterruption | Reason::ScheduledMaintenance | Reason::InstanceTerminated
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A budget's active window: from each time `cron` fires, for `duration_seconds`.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub cron: Cron,
    pub duration_seconds: u64,
}

/// One compiled NodePool disruption budget.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub nodes: IntOrPercent,
    /// `None`: always active.
    pub window: Option<Window>,
    /// `None`: every budgeted reason.
    pub reasons: Option<Vec<Reason>>,
}

/// A NodePool's budgets. A pool whose budgets do not compile still provisions, but allows no
/// disruption (fail closed) and says why.
#[derive(Clone, Debug, PartialEq)]
pub enum Budgets {
    Valid(Vec<Budget>),
    Invalid(FieldError),
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets::Valid(vec![Budget::default_budget()])
    }
}

impl Budget {
    /// Karpenter's default when a NodePool names none: `nodes: 10%`.
    pub fn default_budget() -> Budget {
        Budget {
            nodes: IntOrPercent::Percent(10),
            window: None,
            reasons: None,
        }
    }

    /// Compiles one budget; `field` is its path (`spec.disruption.budgets[0]`).
    pub fn compile(b: &BudgetSpec, field: &str) -> Result<Budget, FieldError> {
        let nodes = match b.nodes.strip_suffix('%') {
            Some(p) => match p.parse::<u32>() {
                Ok(v) if v <= 100 => IntOrPercent::Percent(v as i64),
                _ => {
                    return Err(FieldError::new(
                        format!("{field}.nodes"),
                        format!(
                            "expected a count or a percentage up to 100%, got {:?}",
                            b.nodes
                        ),
                    ));
                }
            },
            None => match b.nodes.parse::<u32>() {
                Ok(v) => IntOrPercent::Int(v as i64),
                Err(_) => {
                    return Err(FieldError::new(
                        format!("{field}.nodes"),
                        format!("expected a count or a percentage, got {:?}", b.nodes),
                    ));
                }
            },
        };
        let window = match (&b.schedule, &b.duration) {
            (None, None) => None,
            (Some(schedule), Some(duration)) => {
                let cron = Cron::parse(schedule).map_err(|e| {
                    FieldError::new(
                        format!("{field}.schedule"),
                        format!("invalid cron schedule {schedule:?}: {e}"),
                    )
                })?;
                let duration_seconds = match parse_duration(duration) {
                    Ok(Some(d)) => d,
                    Ok(None) => {
                        return Err(FieldError::new(
                            format!("{field}.duration"),
                            "a budget window cannot last Never",
                        ));
                    }
                    Err(e) => return Err(FieldError::new(format!("{field}.duration"), e)),
                };
                Some(Window {
                    cron,
                    duration_seconds,
                })
            }
            _ => {
                return Err(FieldError::new(
                    field,
                    "schedule and duration must be set together",
                ));
            }
        };
        let reasons = match &b.reasons {
            None => None,
            Some(rs) => Some(
                rs.iter()
                    .enumerate()
                    .map(|(j, r)| {
                        Reason::parse(r).filter(|r| r.budgeted()).ok_or_else(|| {
                            FieldError::new(
                                format!("{field}.reasons[{j}]"),
                                format!("expected Empty, Drifted or Underutilized, got {r:?}"),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        Ok(Budget {
            nodes,
            window,
            reasons,
        })
    }

    /// Whether this budget applies to `reason` at unix time `now`.
    pub fn applies(&self, reason: Reason, now: f64) -> bool {
        if let Some(rs) = &self.reasons {
            if !rs.contains(&reason) {
                return false;
            }
        }
        match &self.window {
            None => true,
            Some(w) => w.cron.active(now, w.duration_seconds as f64),
        }
    }
}

impl Budgets {
    /// Compiles a NodePool's budgets (`None`: Karpenter's default, 10%).
    pub fn compile(specs: Option<&[BudgetSpec]>) -> Budgets {
        let Some(specs) = specs else {
            return Budgets::default();
        };
        let mut out = Vec::with_capacity(specs.len());
        for (i, b) in specs.iter().enumerate() {
            match Budget::compile(b, &format!("spec.disruption.budgets[{i}]")) {
                Ok(b) => out.push(b),
                Err(e) => return Budgets::Invalid(e),
            }
        }
        Budgets::Valid(out)
    }

    /// How many nodes of a pool of `total_nodes` may be disrupted for `reason` at unix time
    /// `now`, before subtracting those already disrupting. Invalid budgets allow none.
    pub fn allows(&self, reason: Reason, total_nodes: i64, now: f64) -> i64 {
        match self {
            Budgets::Invalid(_) => 0,
            Budgets::Valid(bs) => bs
                .iter()
                .filter(|b| b.applies(reason, now))
                .map(|b| b.nodes.scaled(total_nodes))
                .min()
                .unwrap_or(i64::MAX),
        }
    }

    pub fn error(&self) -> Option<&FieldError> {
        match self {
            Budgets::Invalid(e) => Some(e),
            Budgets::Valid(_) => None,
        }
    }

    pub fn valid(&self) -> &[Budget] {
        match self {
            Budgets::Valid(b) => b,
            Budgets::Invalid(_) => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_rfc3339;

    fn spec(nodes: &str, schedule: Option<&str>, duration: Option<&str>) -> BudgetSpec {
        BudgetSpec {
            nodes: nodes.into(),
            schedule: schedule.map(str::to_string),
            duration: duration.map(str::to_string),
            reasons: None,
        }
    }

    #[test]
    fn every_reason_round_trips_through_its_name() {
        for r in Reason::ALL {
            assert_eq!(Reason::parse(r.as_str()), Some(r));
        }
        assert_eq!(Reason::parse("spot"), None);
    }

    #[test]
    fn budgets_compile_or_name_the_field_that_is_wrong() {
        // (budget, the field the error names, or None when it compiles)
        let cases = [
            (spec("10%", None, None), None),
            (spec("3", Some("0 9 * * mon-fri"), Some("8h")), None),
            (
                spec("ten", None, None),
                Some("spec.disruption.budgets[0].nodes"),
            ),
            (
                spec("101%", None, None),
                Some("spec.disruption.budgets[0].nodes"),
            ),
            (
                spec("0", Some("0 9 * * funday"), Some("8h")),
                Some("spec.disruption.budgets[0].schedule"),
            ),
            (
                spec("0", Some("0 9 * * *"), Some("8 hours")),
                Some("spec.disruption.budgets[0].duration"),
            ),
            (
                spec("0", Some("0 9 * * *"), None),
                Some("spec.disruption.budgets[0]"),
            ),
        ];
        for (b, want) in cases {
            let got = Budgets::compile(Some(std::slice::from_ref(&b)));
            assert_eq!(got.error().map(|e| e.field.as_str()), want, "{b:?}");
        }
    }

    #[test]
    fn invalid_budgets_allow_no_disruption() {
        let b = Budgets::compile(Some(&[spec("5", Some("not a cron"), Some("1h"))]));
        assert!(b.error().is_some());
        for r in [Reason::Empty, Reason::Drifted, Reason::Underutilized] {
            assert_eq!(b.allows(r, 100, 0.0), 0);
        }
    }

    #[test]
    fn the_tightest_active_budget_for_the_reason_wins() {
        let mut weekday = spec("0", Some("0 9 * * mon-fri"), Some("8h"));
        weekday.reasons = Some(vec!["Underutilized".into()]);
        let b = Budgets::compile(Some(&[spec("20%", None, None), weekday]));
        let monday_10 = parse_rfc3339("2026-11-30T10:00:00Z").unwrap();
        let monday_20 = parse_rfc3339("2026-11-30T20:00:00Z").unwrap();
        assert_eq!(b.allows(Reason::Underutilized, 10, monday_10), 0);
        assert_eq!(b.allows(Reason::Empty, 10, monday_10), 2);
        assert_eq!(b.allows(Reason::Underutilized, 10, monday_20), 2);
        assert_eq!(
            b.allows(Reason::Underutilized, 11, monday_20),
            3,
            "rounded up"
        );
    }
}
