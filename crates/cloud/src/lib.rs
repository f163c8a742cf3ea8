//! The boundary between capstan and a cloud: the [`CloudProvider`] trait, the errors a caller
//! can act on, interruption events, and the [`Clock`] providers read time from.
//!
//! The trait is generic, not object-safe: its methods return `impl Future + Send`, so callers
//! (the controller loops) are generic over the provider and pay no boxing per call. capstan
//! knows its providers at compile time (fake, AWS); the binary picks one at start-up.

use capstan_model::{InstanceType, NodePool, Requirements, Taint};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What to launch: derived from a NodeClaim. The same `client_token` always means the same
/// launch: a provider returns the instance it already made for it, never a second one.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRequest {
    pub claim_name: String,
    pub nodepool: String,
    /// Idempotency key, derived from the NodeClaim (name and uid).
    pub client_token: String,
    /// Instance types to choose from, in order of preference (cheapest first).
    pub instance_types: Vec<String>,
    /// Narrowed requirements: zones and capacity types allowed, among others.
    pub requirements: Requirements,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// The NodePool's node class (`nodeClassRef`): the provider's launch settings.
    pub node_class: Option<capstan_model::nodepool::NodeClassRef>,
    /// The planner put the claim on a warm instance (`CloudProvider::warm`): start a stopped
    /// one if one is ready. False: boot one.
    pub warm_start: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
}

/// A machine the cloud runs for capstan.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub provider_id: String,
    pub claim_name: String,
    pub nodepool: String,
    pub client_token: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour at launch.
    pub price: f64,
    /// The labels the node will carry (instance type, zone, capacity type, NodePool labels);
    /// shared, as listing instances is frequent and they never change.
    pub labels: std::sync::Arc<BTreeMap<String, String>>,
    pub state: InstanceState,
    /// Clock time of the launch.
    pub launched_at: Duration,
    /// Clock time the node registers with the cluster; `None` if it never will (a fault).
    pub ready_at: Option<Duration>,
}

/// One (instance type, zone, capacity type) offering.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfferingKey {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

impl std::fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.instance_type, self.zone, self.capacity_type
        )
    }
}

fn join(offerings: &[OfferingKey]) -> String {
    offerings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Errors a caller can act on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CloudError {
    /// No capacity in any of these offerings; try others, and remember these for a while.
    #[error("insufficient capacity in {}", join(.offerings))]
    InsufficientCapacity { offerings: Vec<OfferingKey> },
    /// Too many calls; retry after the given time.
    #[error("throttled; retry after {retry_after:?}")]
    Throttled { retry_after: Duration },
    #[error("instance {provider_id} not found")]
    NotFound { provider_id: String },
    /// The request can never succeed as it is.
    #[error("invalid request: {message}")]
    Invalid { message: String },
    /// A passing failure; retry with backoff.
    #[error("transient failure: {message}")]
    Transient { message: String },
}

impl CloudError {
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CloudError::Throttled { .. }
                | CloudError::Transient { .. }
                | CloudError::InsufficientCapacity { .. }
        )
    }
}

/// Something the cloud tells capstan about an instance.
#[derive(Clone, Debug, PartialEq)]
pub enum InterruptionEvent {
    /// Spot capacity is being reclaimed at `reclaim_at` (two minutes after the warning).
    SpotInterruptionWarning {
        provider_id: String,
        at: Duration,
        reclaim_at: Duration,
    },
    /// The instance is at elevated risk of interruption.
    RebalanceRecommendation { provider_id: String, at: Duration },
    /// The cloud will retire or reboot the instance at `when`.
    ScheduledMaintenance {
        provider_id: String,
        at: Duration,
        when: Duration,
    },
    /// The instance changed state outside capstan's doing (stopping, stopped, terminated).
    StateChange {
        provider_id: String,
        at: Duration,
        state: InstanceState,
    },
}

impl InterruptionEvent {
    pub fn provider_id(&self) -> &str {
        match self {
            InterruptionEvent::SpotInterruptionWarning { provider_id, .. }
            | InterruptionEvent::RebalanceRecommendation { provider_id, .. }
            | InterruptionEvent::ScheduledMaintenance { provider_id, .. }
            | InterruptionEvent::StateChange { provider_id, .. } => provider_id,
        }
    }

    /// When the cloud emitted the event.
    pub fn at(&self) -> Duration {
        match self {
            InterruptionEvent::SpotInterruptionWarning { at, .. }
            | InterruptionEvent::RebalanceRecommendation { at, .. }
            | InterruptionEvent::ScheduledMaintenance { at, .. }
            | InterruptionEvent::StateChange { at, .. } => *at,
        }
    }
}

/// Why an instance no longer matches what its NodePool asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drift {
    pub reason: String,
}

/// A node condition that means the node is broken, and how long to tolerate it before
/// replacing the node (Karpenter's RepairPolicy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition_type: String,
    pub condition_status: String,
    pub toleration: Duration,
}

/// A cloud capstan can launch machines in.
pub trait CloudProvider: Send + Sync {
    /// The provider's name, as metrics label it (`aws`, `fake`).
    fn provider_name(&self) -> &'static str {
        "cloud"
    }
    /// Launches one instance for the request, or returns the one already launched for its
    /// client token.
    fn create(
        &self,
        request: &LaunchRequest,
    ) -> impl Future<Output = Result<Instance, CloudError>> + Send;
    /// Terminates an instance. Terminating a terminated instance succeeds.
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>> + Send;
    fn get(&self, provider_id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send;
    /// Every live instance capstan owns (for garbage collection of leaks), each once. Shared:
    /// a provider may hand out the records it keeps without copying them.
    fn list(&self) -> impl Future<Output = Result<Vec<Arc<Instance>>, CloudError>> + Send;
    /// The instance types a NodePool may launch, with offerings and their current availability.
    fn instance_types(
        &self,
        nodepool: &NodePool,
    ) -> impl Future<Output = Result<Vec<InstanceType>, CloudError>> + Send;
    /// Whether the instance drifted from what the provider would launch for it now.
    fn is_drifted(
        &self,
        instance: &Instance,
    ) -> impl Future<Output = Result<Option<Drift>, CloudError>> + Send;
    /// [`CloudProvider::is_drifted`] of each instance, in order: garbage collection asks it
    /// of every instance it owns, and a provider may answer them together.
    fn drift_of(
        &self,
        instances: &[&Instance],
    ) -> impl Future<Output = Vec<Result<Option<Drift>, CloudError>>> + Send {
        async move {
            let mut out = Vec::with_capacity(instances.len());
            for i in instances {
                out.push(self.is_drifted(i).await);
            }
            out
        }
    }
    /// Stopped, pre-initialised instances ready to start in seconds (warm pools), by
    /// offering: a launch whose allowed offerings include one starts it instead of booting a
    /// machine. Most clouds keep none.
    fn warm(&self) -> impl Future<Output = Result<Vec<capstan_model::Warm>, CloudError>> + Send {
        async { Ok(Vec::new()) }
    }
    /// Node conditions that mean the node should be replaced.
    fn repair_policies(&self) -> Vec<RepairPolicy>;
    /// Interruption events not yet acknowledged, oldest first. As with an SQS queue, a
    /// delivered event becomes invisible for a while and is delivered again unless
    /// [`CloudProvider::ack_interruptions`] acknowledges it, so a controller that crashes or
    /// loses its lease while handling one loses nothing.
    fn interruptions(
        &self,
    ) -> impl Future<Output = Result<Vec<InterruptionEvent>, CloudError>> + Send;
    /// Acknowledges handled events: they are not delivered again.
    fn ack_interruptions(
        &self,
        events: &[InterruptionEvent],
    ) -> impl Future<Output = Result<(), CloudError>> + Send;
}

/// The wall clock, as unix time: what capstan reads on a real cluster (where the controller's
/// clock zero is the unix epoch).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// A source of time. Providers and the controller read time only through this, so the
/// simulator can run everything on virtual time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Time since the clock's epoch.
    fn now(&self) -> Duration;
}

/// A clock tests set by hand. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    pub fn advance(&self, by: Duration) {
        self.nanos.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }

    pub fn set(&self, to: Duration) {
        self.nanos.store(to.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

/// Tokio's clock: real time in production, virtual time under a paused runtime
/// (`tokio::time::pause`), which is how the simulator runs.
#[derive(Clone, Debug)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn new() -> TokioClock {
        TokioClock {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let c = ManualClock::new();
        let d = c.clone();
        c.advance(Duration::from_secs(5));
        assert_eq!(d.now(), Duration::from_secs(5));
        d.set(Duration::from_secs(1));
        assert_eq!(c.now(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_virtual_time() {
        let c = TokioClock::new();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(c.now(), Duration::from_secs(3600));
    }

    #[test]
    fn insufficient_capacity_names_the_offerings() {
        let e = CloudError::InsufficientCapacity {
            offerings: vec![OfferingKey {
                instance_type: "m7i.large".into(),
                zone: "us-east-1a".into(),
                capacity_type: "spot".into(),
            }],
        };
        assert_eq!(
            e.to_string(),
            "insufficient capacity in m7i.large/us-east-1a/spot"
        );
        assert!(e.is_retryable());
    }
}

/// Adapts a [`Clock`] to governor's, so rate limits run on virtual time in the simulator.
#[derive(Clone, Debug)]
pub struct GovernorClock(pub Arc<dyn Clock>);

impl governor::clock::Clock for GovernorClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        self.0.now()
    }
}

/// A direct (unkeyed) governor rate limiter on a [`Clock`].
pub type RateLimiter = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    GovernorClock,
    governor::middleware::NoOpMiddleware<Duration>,
>;
