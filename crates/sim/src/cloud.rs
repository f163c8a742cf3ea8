//! The fake cloud as capstan sees it in the simulator, with the simulator's API faults
//! (throttling) in front.

use capstan_cloud::{
    Clock, CloudError, CloudProvider, Drift, Instance, InterruptionEvent, LaunchRequest,
    RepairPolicy,
};
use capstan_fake_cloud::FakeCloud;
use capstan_model::{InstanceType, NodePool};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Clone)]
pub struct SimCloud {
    pub inner: FakeCloud,
    clock: Arc<dyn Clock>,
    throttled_until: Arc<AtomicU64>,
}

impl SimCloud {
    pub fn new(inner: FakeCloud, clock: Arc<dyn Clock>) -> SimCloud {
        SimCloud {
            inner,
            clock,
            throttled_until: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Mutating calls are throttled until clock second `until`.
    pub fn throttle_until(&self, until: u64) {
        self.throttled_until.store(until, Ordering::SeqCst);
    }

    fn throttled(&self) -> Option<CloudError> {
        let until = self.throttled_until.load(Ordering::SeqCst);
        let now = self.clock.now().as_secs();
        (now < until).then(|| CloudError::Throttled {
            retry_after: Duration::from_secs(until - now),
        })
    }
}

impl CloudProvider for SimCloud {
    fn provider_name(&self) -> &'static str {
        "fake"
    }

    async fn create(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        if let Some(e) = self.throttled() {
            return Err(e);
        }
        self.inner.create(request).await
    }
    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        if let Some(e) = self.throttled() {
            return Err(e);
        }
        self.inner.delete(provider_id).await
    }
    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.inner.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<Arc<Instance>>, CloudError> {
        self.inner.list().await
    }
    async fn instance_types(&self, nodepool: &NodePool) -> Result<Vec<InstanceType>, CloudError> {
        self.inner.instance_types(nodepool).await
    }
    async fn is_drifted(&self, instance: &Instance) -> Result<Option<Drift>, CloudError> {
        self.inner.is_drifted(instance).await
    }
    async fn drift_of(&self, instances: &[&Instance]) -> Vec<Result<Option<Drift>, CloudError>> {
        self.inner.drift_of(instances).await
    }
    async fn warm(&self) -> Result<Vec<capstan_model::Warm>, CloudError> {
        self.inner.warm().await
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.inner.repair_policies()
    }
    async fn interruptions(&self) -> Result<Vec<InterruptionEvent>, CloudError> {
        self.inner.interruptions().await
    }
    async fn ack_interruptions(&self, events: &[InterruptionEvent]) -> Result<(), CloudError> {
        self.inner.ack_interruptions(events).await
    }
}
