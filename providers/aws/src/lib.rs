//! capstan's AWS provider: [`AwsCloud`] implements [`CloudProvider`] over the AWS SDK.
//!
//! - **Node classes** (`AWSNodeClass`, Karpenter's `EC2NodeClass` under `capstan.dev`) come from
//!   a [`NodeClasses`] source the binary fills from the cluster; their selectors are resolved
//!   against EC2 ([`resolve`]) and cached for a minute.
//!   Aliases resolve through the EKS-optimized AMI parameters in SSM ([`ssm`]).
//! - **Launch** ([`launch`]): a launch template per settings hash (deleted after an hour
//!   unused), the instance profile for a `role` ([`profile`]), then CreateFleet `instant` with
//!   one override per instance type × zone over the 60 cheapest types (minValues respected),
//!   spot with `price-capacity-optimized` when the request allows spot, else on-demand
//!   `lowest-price`; Karpenter's ownership tags; the claim's client token for idempotency.
//!   Per-override capacity errors mark the offering unavailable for three minutes.
//! - **Catalog** ([`catalog`]): DescribeInstanceTypes and offerings, allocatable from
//!   Karpenter's overhead formulas, on-demand prices from the Pricing API ([`pricing`], the
//!   shared catalog's snapshot where it cannot be read), spot prices from
//!   DescribeSpotPriceHistory (refreshed every five minutes).
//! - **Interruptions** ([`interruption`]): EventBridge messages from an SQS queue; a message
//!   is deleted when the controller acknowledges its event; malformed ones are counted and
//!   deleted at once.
//!
//! Throttling and transient failures are retried by the SDK's standard retry strategy
//! (exponential backoff with jitter); what is left is mapped onto [`CloudError`].

pub mod catalog;
pub mod interruption;
pub mod launch;
pub mod pricing;
pub mod profile;
pub mod resolve;
pub mod ssm;

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::Filter;
use capstan_cloud::{
    Clock, CloudError, CloudProvider, Drift, Instance, InstanceState, InterruptionEvent,
    LaunchRequest, OfferingKey, RepairPolicy,
};
use capstan_model::awsnodeclass::{AwsNodeClassSpec, MetadataOptions};
use capstan_model::catalog::{Catalog, CatalogEntry, CatalogFile};
use capstan_model::{InstanceType, NodePool, labels};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Tag naming the node class an instance was launched from (Karpenter's key).
pub const NODECLASS_TAG: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const NODEPOOL_TAG: &str = "karpenter.sh/nodepool";
pub const NODECLAIM_TAG: &str = "karpenter.sh/nodeclaim";
/// Tag on instances: the hash of the node class's static settings they were launched with.
pub const NODECLASS_HASH_TAG: &str = "capstan.dev/nodeclass-hash";
/// Tag on everything capstan makes in EC2 (instances, volumes, launch templates): the cluster.
/// Karpenter's tags say which cluster owns a resource, not which controller made it: a
/// Karpenter in the same cluster tags its own the same way, and capstan must never count them
/// as its own (its garbage collection would terminate them). Instances are capstan's by
/// [`NODECLASS_HASH_TAG`], which every capstan launch has carried (this tag came later);
/// launch templates by this one.
pub const CAPSTAN_CLUSTER_TAG: &str = "capstan.dev/cluster";

/// The hash of the node class fields an instance cannot change after launch (Karpenter's
/// static drift): AMI family, user data, role or profile, block devices, metadata options,
/// tags, public IP, monitoring, kubelet settings. Versioned: `v1-` then FNV-1a of their JSON
/// (selectors drift through what they resolve to, not through this hash).
pub fn nodeclass_hash(spec: &AwsNodeClassSpec) -> String {
    // A BTreeMap: the same bytes whatever order serde_json keeps object keys in.
    let fields: BTreeMap<&str, serde_json::Value> = BTreeMap::from([
        ("amiFamily", serde_json::json!(spec.ami_family)),
        ("userData", serde_json::json!(spec.user_data)),
        ("role", serde_json::json!(spec.role)),
        ("instanceProfile", serde_json::json!(spec.instance_profile)),
        (
            "blockDeviceMappings",
            serde_json::json!(spec.block_device_mappings),
        ),
        ("metadataOptions", serde_json::json!(spec.metadata_options)),
        ("tags", serde_json::json!(spec.tags)),
        (
            "associatePublicIPAddress",
            serde_json::json!(spec.associate_public_ip_address),
        ),
        (
            "detailedMonitoring",
            serde_json::json!(spec.detailed_monitoring),
        ),
        ("kubelet", serde_json::json!(spec.kubelet)),
    ]);
    let fields = serde_json::to_string(&fields).expect("fields serialize");
    format!("v1-{:016x}", launch::fnv1a(fields.as_bytes()))
}
/// How long an offering that failed for capacity is avoided (Karpenter's ICE cache TTL).
pub const UNAVAILABLE_FOR: Duration = Duration::from_secs(180);
const RESOLVE_EVERY: Duration = Duration::from_secs(60);
const TYPES_EVERY: Duration = Duration::from_secs(3600);
const SPOT_PRICES_EVERY: Duration = Duration::from_secs(300);
const ON_DEMAND_PRICES_EVERY: Duration = Duration::from_secs(12 * 3600);
const ON_DEMAND_RETRY: Duration = Duration::from_secs(600);
const PROFILE_EVERY: Duration = Duration::from_secs(3600);
/// A launch template unused this long is deleted.
pub const TEMPLATE_IDLE: Duration = Duration::from_secs(3600);
pub const TEMPLATE_GC_EVERY: Duration = Duration::from_secs(600);

/// What the provider needs besides the SDK configuration.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub cluster_name: String,
    /// For the nodes' user data.
    pub cluster_endpoint: Option<String>,
    pub cluster_ca: Option<String>,
    pub service_cidr: Option<String>,
    /// The SQS queue's name (or URL); `None`: no interruption handling.
    pub interruption_queue: Option<String>,
    /// The cluster's Kubernetes version (`1.34`): the EKS-optimized AMI parameters aliases
    /// are read from. `None`: aliases select by image name.
    pub kubernetes_version: Option<String>,
}

/// The SDK clients the provider calls. One left out turns its part off: no SQS, no
/// interruption queue; no SSM, aliases select by image name; no IAM, a node class's `role`
/// must name an existing instance profile; no Pricing, on-demand prices come from the shared
/// catalog's snapshot.
#[derive(Clone, Debug)]
pub struct Clients {
    pub ec2: aws_sdk_ec2::Client,
    pub sqs: Option<aws_sdk_sqs::Client>,
    pub ssm: Option<aws_sdk_ssm::Client>,
    pub iam: Option<aws_sdk_iam::Client>,
    pub pricing: Option<aws_sdk_pricing::Client>,
}

impl Clients {
    pub fn ec2_only(ec2: aws_sdk_ec2::Client) -> Clients {
        Clients {
            ec2,
            sqs: None,
            ssm: None,
            iam: None,
            pricing: None,
        }
    }
}

/// Where the provider reads node classes from: the binary keeps it filled from the
/// cluster's AWSNodeClass objects (and Karpenter's EC2NodeClass objects, for the what-if).
/// Node classes are `AWSNodeClass` objects or, for a NodePool migrated from Karpenter with
/// only its group changed, `EC2NodeClass` objects under `capstan.dev` (the same schema); a
/// NodePool's `nodeClassRef.kind` says which.
pub trait NodeClasses: Send + Sync {
    fn get(&self, kind: &str, name: &str) -> Option<AwsNodeClassSpec>;
}

/// Node classes held in memory by (kind, name), replaced as a whole.
#[derive(Default)]
pub struct NodeClassMap(RwLock<BTreeMap<(String, String), AwsNodeClassSpec>>);

impl NodeClassMap {
    pub fn set(&self, classes: BTreeMap<(String, String), AwsNodeClassSpec>) {
        *self.0.write().expect("node classes") = classes;
    }

    pub fn insert(&self, kind: &str, name: &str, spec: AwsNodeClassSpec) {
        self.0
            .write()
            .expect("node classes")
            .insert((kind.into(), name.into()), spec);
    }
}

impl NodeClasses for NodeClassMap {
    fn get(&self, kind: &str, name: &str) -> Option<AwsNodeClassSpec> {
        let kind = if kind.is_empty() {
            AWS_NODE_CLASS
        } else {
            kind
        };
        self.0
            .read()
            .expect("node classes")
            .get(&(kind.to_string(), name.to_string()))
            .cloned()
    }
}

pub const AWS_NODE_CLASS: &str = "AWSNodeClass";
pub const EC2_NODE_CLASS: &str = "EC2NodeClass";

/// What went wrong talking to AWS, before it becomes a [`CloudError`].
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AwsError {
    #[error("{operation}: {code}: {message}")]
    Service {
        operation: &'static str,
        code: String,
        message: String,
    },
    #[error("{operation}: {message}")]
    Transport {
        operation: &'static str,
        message: String,
    },
    #[error("node class {field}: {message}")]
    NodeClass { field: String, message: String },
}

impl AwsError {
    pub fn code_is(&self, code: &str) -> bool {
        matches!(self, AwsError::Service { code: c, .. } if c == code)
    }
}

pub(crate) fn sdk_error<E, R>(
    operation: &'static str,
    e: aws_smithy_runtime_api::client::result::SdkError<E, R>,
) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    use aws_smithy_runtime_api::client::result::SdkError;
    match &e {
        SdkError::ServiceError(s) => AwsError::Service {
            operation,
            code: s.err().code().unwrap_or("Unknown").to_string(),
            message: s.err().message().unwrap_or_default().to_string(),
        },
        other => AwsError::Transport {
            operation,
            message: format!(
                "{}",
                aws_smithy_types::error::display::DisplayErrorContext(other)
            ),
        },
    }
}

const THROTTLING: [&str; 4] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "EC2ThrottledException",
];

impl From<AwsError> for CloudError {
    fn from(e: AwsError) -> CloudError {
        match &e {
            AwsError::Service { code, .. } if THROTTLING.contains(&code.as_str()) => {
                CloudError::Throttled {
                    retry_after: Duration::from_secs(5),
                }
            }
            // A new instance profile takes seconds to reach EC2: launch again shortly.
            AwsError::Service { code, message, .. }
                if code == "InvalidParameterValue" && message.contains("iamInstanceProfile") =>
            {
                CloudError::Transient {
                    message: e.to_string(),
                }
            }
            // A template collected meanwhile: the next launch makes it again.
            AwsError::Service { code, .. }
                if code.starts_with("InvalidLaunchTemplateName.NotFound")
                    || code.starts_with("InvalidLaunchTemplateId.NotFound") =>
            {
                CloudError::Transient {
                    message: e.to_string(),
                }
            }
            AwsError::Service { code, .. } if code.starts_with("InvalidInstanceID.NotFound") => {
                CloudError::NotFound {
                    provider_id: e.to_string(),
                }
            }
            AwsError::Service { code, .. }
                if code.starts_with("Invalid")
                    || code == "UnauthorizedOperation"
                    || code == "IdempotentParameterMismatch"
                    || code == "MissingParameter" =>
            {
                CloudError::Invalid {
                    message: e.to_string(),
                }
            }
            AwsError::NodeClass { .. } => CloudError::Invalid {
                message: e.to_string(),
            },
            _ => CloudError::Transient {
                message: e.to_string(),
            },
        }
    }
}

/// The client token of a launch attempt: the claim's, then numbered; at most EC2's 64
/// characters (a long token is shortened to a hash of itself).
pub fn client_token(claim_token: &str, attempt: u32) -> String {
    let t = if attempt == 0 {
        claim_token.to_string()
    } else {
        format!("{claim_token}-{attempt}")
    };
    if t.len() <= 64 {
        t
    } else {
        format!("capstan-{:016x}", launch::fnv1a(t.as_bytes()))
    }
}

/// `aws:///<zone>/<instance-id>`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

pub fn instance_id(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix("aws:///")?
        .rsplit('/')
        .next()
        .filter(|id| id.starts_with("i-"))
}

/// On-demand prices by instance type.
pub type Prices = BTreeMap<String, f64>;

/// Spot prices by (instance type, zone).
pub type SpotPrices = BTreeMap<(String, String), f64>;

/// Types as DescribeInstanceTypes gave them (no offerings), and the zones offering each.
type Described = (
    Arc<Vec<CatalogEntry>>,
    Arc<BTreeMap<String, BTreeSet<String>>>,
);

#[derive(Default)]
struct State {
    unavailable: BTreeMap<OfferingKey, Duration>,
    resolved: BTreeMap<String, (Duration, Arc<resolve::Resolved>)>,
    /// Types as DescribeInstanceTypes gave them (no offerings), and the zones offering each.
    types: Option<(Duration, Described)>,
    spot: Option<(Duration, Arc<SpotPrices>)>,
    /// Instance id → provider id, for interruption messages (which carry no zone).
    known: BTreeMap<String, String>,
    /// Delivered events and the receipt handles of the messages that said them.
    receipts: Vec<(InterruptionEvent, String)>,
    queue_url: Option<String>,
    malformed: u64,
    /// On-demand prices from the Pricing API, when read, and whether that read worked.
    on_demand: Option<(Duration, Arc<Prices>, bool)>,
    /// Instance profiles made sure of: (node class, role) → (when, profile name).
    profiles: BTreeMap<(String, String), (Duration, String)>,
    /// Launch templates by name → when this process last launched with it.
    templates_used: BTreeMap<String, Duration>,
    templates_collected_at: Option<Duration>,
    /// The next launch attempt's number per claim (client token), while its launch has not
    /// succeeded.
    attempts: BTreeMap<String, u32>,
}

/// The AWS provider.
pub struct AwsCloud {
    ec2: aws_sdk_ec2::Client,
    sqs: Option<aws_sdk_sqs::Client>,
    ssm: Option<aws_sdk_ssm::Client>,
    iam: Option<aws_sdk_iam::Client>,
    pricing: Option<aws_sdk_pricing::Client>,
    settings: Settings,
    classes: Arc<dyn NodeClasses>,
    clock: Arc<dyn Clock>,
    /// The shared catalog's on-demand prices: where the Pricing API is not read or lacks a type.
    prices: BTreeMap<String, f64>,
    state: Mutex<State>,
    /// Messages the queue poller received and the controller has not taken yet; `None`
    /// while no poller runs (each pass then receives without waiting).
    polled: Mutex<Option<Arc<Mutex<Vec<Received>>>>>,
    /// Whether this process leads: only the leader receives from the queue (a follower's
    /// receive would hide messages from the leader for their visibility timeout).
    leading: Arc<std::sync::atomic::AtomicBool>,
}

/// A message as SQS delivered it: id, body and receipt handle.
#[derive(Clone, Debug)]
struct Received {
    id: String,
    body: String,
    receipt: String,
}

fn received(out: &aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput) -> Vec<Received> {
    out.messages()
        .iter()
        .filter_map(|m| {
            Some(Received {
                id: m.message_id().unwrap_or_default().to_string(),
                body: m.body().unwrap_or_default().to_string(),
                receipt: m.receipt_handle()?.to_string(),
            })
        })
        .collect()
}

impl AwsCloud {
    /// From the standard AWS configuration (environment, profile, IRSA, Pod Identity;
    /// `AWS_ENDPOINT_URL` for a local endpoint).
    pub async fn from_env(
        settings: Settings,
        classes: Arc<dyn NodeClasses>,
        clock: Arc<dyn Clock>,
    ) -> AwsCloud {
        let conf = aws_config::load_from_env().await;
        let region = conf
            .region()
            .map(|r| r.to_string())
            .unwrap_or_else(|| "us-east-1".into());
        let pricing_conf = aws_sdk_pricing::config::Builder::from(&conf)
            .region(aws_sdk_pricing::config::Region::new(
                pricing::endpoint_region(&region),
            ))
            .build();
        let clients = Clients {
            ec2: aws_sdk_ec2::Client::new(&conf),
            sqs: settings
                .interruption_queue
                .as_ref()
                .map(|_| aws_sdk_sqs::Client::new(&conf)),
            ssm: Some(aws_sdk_ssm::Client::new(&conf)),
            iam: Some(aws_sdk_iam::Client::new(&conf)),
            pricing: Some(aws_sdk_pricing::Client::from_conf(pricing_conf)),
        };
        AwsCloud::with_clients(clients, settings, classes, clock)
    }

    pub fn with_clients(
        clients: Clients,
        settings: Settings,
        classes: Arc<dyn NodeClasses>,
        clock: Arc<dyn Clock>,
    ) -> AwsCloud {
        let prices = serde_json::from_str::<CatalogFile>(capstan_model::catalog::BUILTIN_CATALOG)
            .map(|f| {
                f.instance_types
                    .into_iter()
                    .filter_map(|e| Some((e.name, e.on_demand_price_usd_per_hour?)))
                    .collect()
            })
            .unwrap_or_default();
        AwsCloud {
            ec2: clients.ec2,
            sqs: clients.sqs,
            ssm: clients.ssm,
            iam: clients.iam,
            pricing: clients.pricing,
            settings,
            classes,
            clock,
            prices,
            state: Mutex::new(State::default()),
            polled: Mutex::new(None),
            leading: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        }
    }

    /// Says whether this process leads (the binary calls it after every pass). A process
    /// that stops leading drops the messages it received and has not handed over: they come
    /// back to the queue after their visibility timeout, for the new leader.
    pub fn set_leading(&self, leading: bool) {
        let was = self
            .leading
            .swap(leading, std::sync::atomic::Ordering::SeqCst);
        if was && !leading {
            if let Some(buffer) = self.polled.lock().expect("poller").as_ref() {
                buffer.lock().expect("polled").clear();
            }
        }
    }

    /// Starts long-polling the interruption queue in a task of its own (20 s waits, as
    /// Karpenter does), so a pass never waits on SQS and an idle queue costs three requests a
    /// minute; each pass takes what arrived. It receives only while this process leads
    /// ([`AwsCloud::set_leading`]). Without a queue, nothing starts.
    pub fn spawn_queue_poller(&self) -> Option<tokio::task::JoinHandle<()>> {
        let sqs = self.sqs.clone()?;
        let queue = self.settings.interruption_queue.clone()?;
        let buffer: Arc<Mutex<Vec<Received>>> = Arc::default();
        *self.polled.lock().expect("poller") = Some(buffer.clone());
        let leading = self.leading.clone();
        Some(tokio::spawn(async move {
            let mut url = None;
            loop {
                if !leading.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                let u = match &url {
                    Some(u) => u,
                    None => match queue_url_of(&sqs, &queue).await {
                        Ok(u) => url.insert(u),
                        Err(e) => {
                            tracing::warn!(error = %e, "finding the interruption queue");
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            continue;
                        }
                    },
                };
                match sqs
                    .receive_message()
                    .queue_url(u)
                    .max_number_of_messages(10)
                    .wait_time_seconds(20)
                    .send()
                    .await
                {
                    Ok(out) => buffer.lock().expect("polled").extend(received(&out)),
                    Err(e) => {
                        let e = sdk_error("ReceiveMessage", e);
                        tracing::warn!(error = %e, "receiving interruption messages");
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                }
            }
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("aws provider state")
    }

    /// Malformed interruption messages seen (and deleted).
    pub fn malformed_messages(&self) -> u64 {
        self.lock().malformed
    }

    fn class(
        &self,
        r: Option<&capstan_model::nodepool::NodeClassRef>,
    ) -> Result<(String, AwsNodeClassSpec), CloudError> {
        let r = r.ok_or_else(|| CloudError::Invalid {
            message: "the NodePool has no nodeClassRef to an AWSNodeClass".into(),
        })?;
        let name = r.name.as_str();
        let kind = if r.kind.is_empty() {
            AWS_NODE_CLASS
        } else {
            r.kind.as_str()
        };
        if kind != AWS_NODE_CLASS && kind != EC2_NODE_CLASS {
            return Err(CloudError::Invalid {
                message: format!(
                    "nodeClassRef kind {kind}: the AWS provider serves AWSNodeClass and EC2NodeClass"
                ),
            });
        }
        let spec = self
            .classes
            .get(kind, name)
            .ok_or_else(|| CloudError::Invalid {
                message: format!("{kind} {name} not found"),
            })?;
        spec.validate().map_err(|e| CloudError::Invalid {
            message: format!("AWSNodeClass {name}: {e}"),
        })?;
        Ok((name.to_string(), spec))
    }

    /// Deletes the cluster's launch templates no launch has used for [`TEMPLATE_IDLE`]
    /// (one this process has not launched with counts from its creation), at most every
    /// [`TEMPLATE_GC_EVERY`]. Templates are a cache of launch settings: one deleted while
    /// still wanted is made again by the next launch. Failures are logged and retried next
    /// round.
    pub async fn collect_templates(&self) -> Vec<String> {
        let now = self.clock.now();
        {
            let mut s = self.lock();
            if s.templates_collected_at
                .is_some_and(|at| now.saturating_sub(at) < TEMPLATE_GC_EVERY)
            {
                return vec![];
            }
            s.templates_collected_at = Some(now);
        }
        let listed = match launch::cluster_templates(&self.ec2, &self.settings.cluster_name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "listing launch templates");
                return vec![];
            }
        };
        let mut deleted = Vec::new();
        for (name, created) in listed {
            let last = {
                let s = self.lock();
                s.templates_used
                    .get(&name)
                    .copied()
                    .unwrap_or(Duration::from_secs(created.max(0) as u64))
            };
            if now.saturating_sub(last) < TEMPLATE_IDLE {
                continue;
            }
            match launch::delete_template(&self.ec2, &name).await {
                Ok(()) => {
                    tracing::info!(template = %name, "deleted an idle launch template");
                    self.lock().templates_used.remove(&name);
                    deleted.push(name);
                }
                Err(e) => {
                    tracing::warn!(template = %name, error = %e, "deleting a launch template")
                }
            }
        }
        deleted
    }

    /// The instance profile a node class's instances launch with: `instanceProfile` as given,
    /// or for `role` the node class's own profile holding that role (see [`profile`]), made
    /// sure of at most hourly. Without an IAM client, `role` is taken as a profile's name.
    pub async fn instance_profile(
        &self,
        class_name: &str,
        spec: &AwsNodeClassSpec,
    ) -> Result<Option<String>, CloudError> {
        if let Some(p) = &spec.instance_profile {
            return Ok(Some(p.clone()));
        }
        let Some(role) = &spec.role else {
            return Ok(None);
        };
        let Some(iam) = &self.iam else {
            return Ok(Some(role.clone()));
        };
        let now = self.clock.now();
        let key = (class_name.to_string(), role.clone());
        if let Some((at, name)) = self.lock().profiles.get(&key) {
            if now.saturating_sub(*at) < PROFILE_EVERY {
                return Ok(Some(name.clone()));
            }
        }
        let name = profile::ensure(iam, &self.settings, &self.region(), class_name, role).await?;
        self.lock().profiles.insert(key, (now, name.clone()));
        Ok(Some(name))
    }

    /// The node class's selectors resolved against EC2, at most a minute old (cached by the
    /// selectors themselves, so an edited node class resolves again at once).
    pub async fn resolved(
        &self,
        spec: &AwsNodeClassSpec,
    ) -> Result<Arc<resolve::Resolved>, CloudError> {
        let now = self.clock.now();
        let name = serde_json::to_string(&(
            &spec.subnet_selector_terms,
            &spec.security_group_selector_terms,
            &spec.ami_selector_terms,
        ))
        .expect("selectors serialize");
        if let Some((at, r)) = self.lock().resolved.get(&name) {
            if now.saturating_sub(*at) < RESOLVE_EVERY {
                return Ok(r.clone());
            }
        }
        let ssm = resolve::Ssm {
            client: self.ssm.as_ref(),
            kubernetes_version: self.settings.kubernetes_version.as_deref(),
        };
        let r = Arc::new(resolve::resolve(&self.ec2, ssm, spec).await?);
        self.lock().resolved.insert(name, (now, r.clone()));
        Ok(r)
    }

    /// Keeps on-demand prices fresh in a task of its own ([`AwsCloud::refresh_on_demand_prices`]
    /// checked every minute), so no pass waits on the Pricing API, which can be slow or, from
    /// a private cluster, unreachable. Without a Pricing client, nothing starts.
    pub fn spawn_price_refresher(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        self.pricing.as_ref()?;
        let me = Arc::downgrade(self);
        Some(tokio::spawn(async move {
            while let Some(cloud) = me.upgrade() {
                cloud.refresh_on_demand_prices().await;
                drop(cloud);
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        }))
    }

    /// Reads on-demand prices from the Pricing API when due: every 12 hours, or 10 minutes
    /// after a failed read (the snapshot's prices serve meanwhile).
    pub async fn refresh_on_demand_prices(&self) {
        let Some(client) = &self.pricing else { return };
        let now = self.clock.now();
        if let Some((at, _, ok)) = &self.lock().on_demand {
            let every = if *ok {
                ON_DEMAND_PRICES_EVERY
            } else {
                ON_DEMAND_RETRY
            };
            if now.saturating_sub(*at) < every {
                return;
            }
        }
        let region = self.region();
        let read = pricing::on_demand_prices(client, &region).await;
        let mut s = self.lock();
        match read {
            Ok(p) if !p.is_empty() => {
                tracing::info!(types = p.len(), %region, "on-demand prices from the Pricing API");
                s.on_demand = Some((now, Arc::new(p), true));
                // Entries carry prices: describe them again with the new ones.
                s.types = None;
            }
            Ok(_) => {
                tracing::warn!(%region, "the Pricing API lists no prices: using the catalog snapshot's");
                let old = s.on_demand.take().map(|o| o.1).unwrap_or_default();
                s.on_demand = Some((now, old, false));
            }
            Err(e) => {
                tracing::warn!(error = %e, %region, "reading the Pricing API: using the last prices read, or the catalog snapshot's");
                let old = s.on_demand.take().map(|o| o.1).unwrap_or_default();
                s.on_demand = Some((now, old, false));
            }
        }
    }

    /// An instance type's on-demand price: the Pricing API's, else the snapshot's.
    pub fn on_demand_price(&self, instance_type: &str) -> Option<f64> {
        self.lock()
            .on_demand
            .as_ref()
            .and_then(|(_, p, _)| p.get(instance_type).copied())
            .or_else(|| self.prices.get(instance_type).copied())
    }

    async fn described_types(&self) -> Result<Described, CloudError> {
        let now = self.clock.now();
        if let Some((at, d)) = &self.lock().types {
            if now.saturating_sub(*at) < TYPES_EVERY {
                return Ok(d.clone());
            }
        }
        let mut infos = Vec::new();
        let mut pages = self.ec2.describe_instance_types().into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("DescribeInstanceTypes", e))?;
            infos.extend(page.instance_types().iter().cloned());
        }
        let mut zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut pages = self
            .ec2
            .describe_instance_type_offerings()
            .location_type(aws_sdk_ec2::types::LocationType::AvailabilityZone)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("DescribeInstanceTypeOfferings", e))?;
            for o in page.instance_type_offerings() {
                if let (Some(t), Some(z)) = (o.instance_type(), o.location()) {
                    zones.entry(t.as_str().into()).or_default().insert(z.into());
                }
            }
        }
        let entries: Vec<CatalogEntry> = infos
            .iter()
            .filter_map(|i| {
                let name = i.instance_type()?.as_str();
                catalog::entry(
                    i,
                    self.on_demand_price(name),
                    vec![],
                    &catalog::KubeletOverrides::default(),
                )
            })
            .collect();
        let d: Described = (Arc::new(entries), Arc::new(zones));
        self.lock().types = Some((now, d.clone()));
        Ok(d)
    }

    async fn spot_prices(&self) -> Result<Arc<SpotPrices>, CloudError> {
        let now = self.clock.now();
        if let Some((at, p)) = &self.lock().spot {
            if now.saturating_sub(*at) < SPOT_PRICES_EVERY {
                return Ok(p.clone());
            }
        }
        let mut rows = Vec::new();
        let mut pages = self
            .ec2
            .describe_spot_price_history()
            .product_descriptions("Linux/UNIX")
            .start_time(aws_smithy_types::DateTime::from_secs(now.as_secs() as i64))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("DescribeSpotPriceHistory", e))?;
            for p in page.spot_price_history() {
                let (Some(t), Some(z), Some(price)) =
                    (p.instance_type(), p.availability_zone(), p.spot_price())
                else {
                    continue;
                };
                let Ok(price) = price.parse::<f64>() else {
                    continue;
                };
                let at = p.timestamp().map(|t| t.secs()).unwrap_or(0);
                rows.push((t.as_str().to_string(), z.to_string(), price, at));
            }
        }
        let p = Arc::new(catalog::latest_spot_prices(rows));
        self.lock().spot = Some((now, p.clone()));
        Ok(p)
    }

    /// Instance types for a node class, with its zones' offerings and their availability.
    pub async fn catalog_for(
        &self,
        resolved: &resolve::Resolved,
        kubelet: &catalog::KubeletOverrides,
    ) -> Result<(Vec<CatalogEntry>, Catalog), CloudError> {
        let (entries, zones) = self.described_types().await?;
        let spot = self.spot_prices().await?;
        let subnet_zones = resolved.zones();
        let now = self.clock.now();
        let state = self.lock();
        let mut out = Vec::with_capacity(entries.len());
        for e in entries.iter() {
            let offered: BTreeSet<String> = zones
                .get(&e.name)
                .map(|z| z.intersection(&subnet_zones).cloned().collect())
                .unwrap_or_default();
            if offered.is_empty() {
                continue;
            }
            let mut offerings =
                catalog::offerings(&e.name, &offered, e.on_demand_price_usd_per_hour, &spot);
            for o in &mut offerings {
                let key = OfferingKey {
                    instance_type: e.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                };
                o.available = state
                    .unavailable
                    .get(&key)
                    .is_none_or(|until| *until <= now);
            }
            if offerings.is_empty() {
                continue;
            }
            let mut e = e.clone();
            if *kubelet != catalog::KubeletOverrides::default() {
                let eni = e.eni_max_pods_formula.unwrap_or(110);
                e.max_pods = catalog::max_pods(eni, e.vcpu, kubelet);
                let (c, m) =
                    catalog::allocatable(e.vcpu, e.memory_mib, &e.arch, e.max_pods, kubelet);
                e.karpenter_allocatable_cpu_millicores = Some(c);
                e.karpenter_allocatable_memory_mib = Some(m);
            }
            e.offerings = Some(offerings);
            out.push(e);
        }
        drop(state);
        let file = CatalogFile {
            meta: Some(serde_json::json!({"region": self.region()})),
            zone_ids: resolved.zone_ids(),
            instance_types: out.clone(),
        };
        let catalog = Catalog::from_file(file).map_err(|e| CloudError::Invalid {
            message: format!("the EC2 catalog: {e}"),
        })?;
        Ok((out, catalog))
    }

    /// The region's catalog in the shared file format: every type EC2 describes, offered
    /// on-demand and spot in every zone that offers it, with Karpenter's allocatable, spot
    /// prices from the price history and on-demand prices from the Pricing API (or the catalog
    /// snapshot).
    pub async fn region_catalog(&self) -> Result<CatalogFile, CloudError> {
        self.refresh_on_demand_prices().await;
        let (entries, zones) = self.described_types().await?;
        let spot = self.spot_prices().await?;
        let priced_by_api = self.lock().on_demand.as_ref().is_some_and(|o| o.2);
        let empty = BTreeSet::new();
        let instance_types = entries
            .iter()
            .map(|e| {
                let mut e = e.clone();
                let z = zones.get(&e.name).unwrap_or(&empty);
                e.offerings = Some(catalog::offerings(
                    &e.name,
                    z,
                    e.on_demand_price_usd_per_hour,
                    &spot,
                ));
                e
            })
            .collect();
        Ok(CatalogFile {
            zone_ids: BTreeMap::new(),
            meta: Some(serde_json::json!({
                "region": self.region(),
                "sources": {
                    "specs": "EC2 DescribeInstanceTypes and DescribeInstanceTypeOfferings",
                    "allocatable": "Karpenter's default overhead (kube-reserved, eviction threshold, VM memory overhead 7.5%, ENI-limited pods)",
                    "spot_prices": "EC2 DescribeSpotPriceHistory (Linux/UNIX, newest per type and zone)",
                    "on_demand_prices": if priced_by_api {
                        "the AWS Pricing API (GetProducts: Linux, shared tenancy, no pre-installed software)"
                    } else {
                        "capstan's built-in catalog snapshot (us-east-1): the Pricing API could not be read"
                    }
                }
            })),
            instance_types,
        })
    }

    fn region(&self) -> String {
        self.ec2
            .config()
            .region()
            .map(|r| r.to_string())
            .unwrap_or_else(|| "us-east-1".into())
    }

    fn mark_unavailable(&self, keys: &[OfferingKey]) {
        let until = self.clock.now() + UNAVAILABLE_FOR;
        let mut s = self.lock();
        for k in keys {
            s.unavailable.insert(k.clone(), until);
        }
    }

    fn instance_from(&self, i: &aws_sdk_ec2::types::Instance) -> Option<Instance> {
        let id = i.instance_id()?;
        let zone = i
            .placement()
            .and_then(|p| p.availability_zone())?
            .to_string();
        let tags: BTreeMap<&str, &str> = i
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?, t.value()?)))
            .collect();
        let state = match i.state().and_then(|s| s.name()).map(|n| n.as_str()) {
            Some("pending") => InstanceState::Pending,
            Some("running") => InstanceState::Running,
            Some("shutting-down") | Some("stopping") | Some("stopped") => {
                InstanceState::ShuttingDown
            }
            _ => InstanceState::Terminated,
        };
        let instance_type = i.instance_type().map(|t| t.as_str().to_string())?;
        let spot = i.instance_lifecycle().map(|l| l.as_str()) == Some("spot");
        let capacity_type = if spot { "spot" } else { "on-demand" };
        let pid = provider_id(&zone, id);
        self.lock().known.insert(id.into(), pid.clone());
        Some(Instance {
            provider_id: pid,
            claim_name: tags.get(NODECLAIM_TAG).copied().unwrap_or_default().into(),
            nodepool: tags.get(NODEPOOL_TAG).copied().unwrap_or_default().into(),
            client_token: i.client_token().unwrap_or_default().into(),
            price: self.on_demand_price(&instance_type).unwrap_or(0.0),
            labels: Arc::new(BTreeMap::from([
                (labels::INSTANCE_TYPE.to_string(), instance_type.clone()),
                (labels::ZONE.to_string(), zone.clone()),
                (labels::CAPACITY_TYPE.to_string(), capacity_type.to_string()),
            ])),
            instance_type,
            zone,
            capacity_type: capacity_type.into(),
            state,
            launched_at: i
                .launch_time()
                .map(|t| Duration::from_secs(t.secs().max(0) as u64))
                .unwrap_or_default(),
            ready_at: None,
        })
    }

    async fn queue_url(&self, sqs: &aws_sdk_sqs::Client) -> Result<String, CloudError> {
        if let Some(u) = &self.lock().queue_url {
            return Ok(u.clone());
        }
        let q = self.settings.interruption_queue.clone().unwrap_or_default();
        let url = queue_url_of(sqs, &q).await?;
        self.lock().queue_url = Some(url.clone());
        Ok(url)
    }

    /// A DescribeInstances of capstan's own instances in these states: tagged for the cluster
    /// and carrying [`NODECLASS_HASH_TAG`] (which only capstan sets).
    fn capstan_instances(
        &self,
        states: &[&str],
    ) -> aws_sdk_ec2::operation::describe_instances::builders::DescribeInstancesFluentBuilder {
        self.ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!(
                        "tag:kubernetes.io/cluster/{}",
                        self.settings.cluster_name
                    ))
                    .values("owned")
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("tag-key")
                    .values(NODECLASS_HASH_TAG)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .set_values(Some(states.iter().map(|s| s.to_string()).collect()))
                    .build(),
            )
    }

    /// The live instance tagged for a NodeClaim, if there is one.
    async fn claimed_instance(&self, claim: &str) -> Result<Option<Instance>, CloudError> {
        let out = self
            .capstan_instances(&["pending", "running"])
            .filters(
                Filter::builder()
                    .name(format!("tag:{NODECLAIM_TAG}"))
                    .values(claim)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| sdk_error("DescribeInstances", e))?;
        Ok(out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find_map(|i| self.instance_from(i)))
    }

    async fn provider_id_of(&self, instance_id: &str) -> Option<String> {
        if let Some(p) = self.lock().known.get(instance_id) {
            return Some(p.clone());
        }
        let out = self
            .ec2
            .describe_instances()
            .instance_ids(instance_id)
            .send()
            .await
            .ok()?;
        let i = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .next()?;
        self.instance_from(i).map(|i| i.provider_id)
    }
}

/// A queue's URL from its name (a URL is taken as it is).
async fn queue_url_of(sqs: &aws_sdk_sqs::Client, queue: &str) -> Result<String, CloudError> {
    if queue.starts_with("https://") || queue.starts_with("http://") {
        return Ok(queue.to_string());
    }
    Ok(sqs
        .get_queue_url()
        .queue_name(queue)
        .send()
        .await
        .map_err(|e| sdk_error("GetQueueUrl", e))?
        .queue_url()
        .unwrap_or_default()
        .to_string())
}

/// Deletes one message from the interruption queue; a failure is logged (the message comes
/// back after its visibility timeout) and returned.
async fn delete_message(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    receipt: &str,
) -> Result<(), CloudError> {
    sqs.delete_message()
        .queue_url(url)
        .receipt_handle(receipt)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| {
            let e = sdk_error("DeleteMessage", e);
            tracing::warn!(error = %e, "deleting an interruption message");
            e.into()
        })
}

fn kubelet_overrides(spec: &AwsNodeClassSpec) -> catalog::KubeletOverrides {
    capstan_model::overhead::kubelet_overrides(spec)
}

impl CloudProvider for AwsCloud {
    fn provider_name(&self) -> &'static str {
        "aws"
    }

    async fn create(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        let (class_name, spec) = self.class(request.node_class.as_ref())?;
        let resolved = self.resolved(&spec).await?;
        let (entries, catalog) = self
            .catalog_for(&resolved, &kubelet_overrides(&spec))
            .await?;
        let by_name: BTreeMap<&str, &InstanceType> = catalog
            .instance_types
            .iter()
            .map(|t| (t.name.as_str(), t))
            .collect();
        let reqs = &request.requirements;
        let spot_allowed = reqs.allows(labels::CAPACITY_TYPE, "spot");
        // Offerings in request order, cheapest first within a type.
        let mut candidates: Vec<(bool, launch::Override, String)> = Vec::new();
        for name in &request.instance_types {
            let Some(t) = by_name.get(name.as_str()) else {
                continue;
            };
            let arch = t.labels.get(labels::ARCH).cloned().unwrap_or_default();
            for o in &t.offerings {
                if !o.available || !capstan_model::catalog::offering_allowed(o, reqs) {
                    continue;
                }
                let Some(subnet) = resolved.subnet_in(&o.zone) else {
                    continue;
                };
                candidates.push((
                    o.capacity_type == "spot",
                    launch::Override {
                        template: String::new(),
                        instance_type: t.name.clone(),
                        zone: o.zone.clone(),
                        subnet: subnet.id.clone(),
                        price: o.price,
                    },
                    arch.clone(),
                ));
            }
        }
        // Spot when the request allows it and any spot offering is left, as Karpenter does.
        let spot = spot_allowed && candidates.iter().any(|c| c.0);
        candidates.retain(|c| c.0 == spot);
        if candidates.is_empty() {
            return Err(CloudError::InsufficientCapacity { offerings: vec![] });
        }
        let priced: Vec<(&InstanceType, f64, &str)> = candidates
            .iter()
            .filter_map(|c| {
                Some((
                    *by_name.get(c.1.instance_type.as_str())?,
                    c.1.price,
                    c.1.zone.as_str(),
                ))
            })
            .collect();
        let chosen: BTreeSet<String> = launch::choose_types(&priced, reqs)
            .map_err(|message| CloudError::Invalid {
                message: format!("NodeClaim {}: {message}", request.claim_name),
            })?
            .into_iter()
            .map(String::from)
            .collect();
        drop(priced);
        let mut overrides: Vec<(launch::Override, String)> = candidates
            .into_iter()
            .filter(|c| chosen.contains(&c.1.instance_type))
            .map(|c| (c.1, c.2))
            .collect();
        overrides.sort_by(|a, b| a.0.price.total_cmp(&b.0.price));
        overrides.truncate(launch::MAX_OVERRIDES);
        let profile = self
            .instance_profile(&class_name, &spec)
            .await?
            .unwrap_or_default();
        let mut instance_tags = launch::ownership_tags(
            &self.settings,
            &request.nodepool,
            Some(&request.claim_name),
            &class_name,
            &spec.tags,
        );
        instance_tags.insert(NODECLASS_HASH_TAG.into(), nodeclass_hash(&spec));
        let template_tags = launch::ownership_tags(
            &self.settings,
            &request.nodepool,
            None,
            &class_name,
            &spec.tags,
        );
        let user_data = launch::user_data(&spec, &self.settings, &request.labels, &request.taints)?;
        let mut templates: BTreeMap<String, String> = BTreeMap::new();
        let mut fleet = Vec::with_capacity(overrides.len());
        for (mut o, arch) in overrides {
            let Some(ami) = resolved.ami_for(&arch) else {
                continue;
            };
            let name = match templates.get(&ami.id) {
                Some(n) => n.clone(),
                None => {
                    let t = launch::Template {
                        ami: ami.id.clone(),
                        user_data: user_data.clone(),
                        security_groups: resolved
                            .security_groups
                            .iter()
                            .map(|g| g.id.clone())
                            .collect(),
                        instance_profile: profile.clone(),
                        block_devices: spec.block_device_mappings.clone(),
                        metadata: MetadataOptions::or_defaults(spec.metadata_options.as_ref()),
                        associate_public_ip: spec.associate_public_ip_address,
                        detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
                        tags: template_tags.clone(),
                    };
                    let n = launch::ensure_template(&self.ec2, &self.settings, &t, &template_tags)
                        .await?;
                    templates.insert(ami.id.clone(), n.clone());
                    n
                }
            };
            self.lock()
                .templates_used
                .insert(name.clone(), self.clock.now());
            o.template = name;
            fleet.push(o);
        }
        if fleet.is_empty() {
            return Err(CloudError::Invalid {
                message: format!(
                    "AWSNodeClass {class_name}: no AMI matches the architectures of the instance types asked for"
                ),
            });
        }
        // EC2 tries the overrides itself; where it reports capacity errors and launches
        // nothing, the failed offerings are avoided and the rest tried again (each attempt
        // its own client token, so a retried attempt never launches twice).
        let capacity_type = if spot { "spot" } else { "on-demand" };
        let mut tried: Vec<OfferingKey> = Vec::new();
        let mut launched = None;
        // Attempts number on across calls for one claim: a later call (after capacity errors,
        // with other overrides) never reuses a token. A claim this process launched for before
        // is looked up first, so a launch whose answer was lost is found, not repeated.
        let base = self
            .lock()
            .attempts
            .get(&request.client_token)
            .copied()
            .unwrap_or(0);
        if base > 0 {
            if let Some(i) = self.claimed_instance(&request.claim_name).await? {
                self.lock().attempts.remove(&request.client_token);
                return Ok(i);
            }
        }
        let mut mismatched = None;
        for attempt in base..base + 3 {
            let left: Vec<launch::Override> = fleet
                .iter()
                .filter(|o| {
                    !tried
                        .iter()
                        .any(|k| k.instance_type == o.instance_type && k.zone == o.zone)
                })
                .cloned()
                .collect();
            if left.is_empty() {
                break;
            }
            let token = client_token(&request.client_token, attempt);
            let sent = launch::create_fleet(&self.ec2, &token, spot, &left, &instance_tags).await;
            self.lock()
                .attempts
                .insert(request.client_token.clone(), attempt + 1);
            let result = match sent {
                Ok(r) => r,
                // The token was used before with other overrides (by an earlier process):
                // what that launch made, if anything, is the answer; else the next token.
                Err(e) if e.code_is("IdempotentParameterMismatch") => {
                    if let Some(i) = self.claimed_instance(&request.claim_name).await? {
                        tracing::info!(claim = %request.claim_name, instance = %i.provider_id, "the claim's earlier launch made this instance");
                        self.lock().attempts.remove(&request.client_token);
                        return Ok(i);
                    }
                    tracing::warn!(claim = %request.claim_name, %token, "client token spent on other overrides and nothing launched: trying the next token");
                    mismatched = Some(e);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let failed: Vec<OfferingKey> = result
                .errors
                .iter()
                .filter(|(_, _, code, _)| launch::CAPACITY_ERRORS.contains(&code.as_str()))
                .map(|(t, z, _, _)| OfferingKey {
                    instance_type: t.clone(),
                    zone: z.clone(),
                    capacity_type: capacity_type.into(),
                })
                .collect();
            self.mark_unavailable(&failed);
            if let Some(l) = result.launched {
                launched = Some(l);
                break;
            }
            if let Some((_, _, code, message)) = result
                .errors
                .iter()
                .find(|e| !launch::CAPACITY_ERRORS.contains(&e.2.as_str()))
            {
                return Err(AwsError::Service {
                    operation: "CreateFleet",
                    code: code.clone(),
                    message: message.clone(),
                }
                .into());
            }
            if failed.is_empty() {
                // Nothing launched and nothing said why: every offering counts as tried.
                tried.extend(left.iter().map(|o| OfferingKey {
                    instance_type: o.instance_type.clone(),
                    zone: o.zone.clone(),
                    capacity_type: capacity_type.into(),
                }));
            } else {
                tried.extend(failed);
            }
        }
        if launched.is_some() {
            self.lock().attempts.remove(&request.client_token);
        }
        if let (None, true, Some(e)) = (&launched, tried.is_empty(), mismatched) {
            // Every token was spent elsewhere: the next call starts with new ones.
            return Err(CloudError::Transient {
                message: e.to_string(),
            });
        }
        let Some((id, itype, zone, is_spot)) = launched else {
            // Every offering tried failed for capacity: the caller tries others.
            return Err(CloudError::InsufficientCapacity { offerings: tried });
        };
        let ct = if is_spot { "spot" } else { "on-demand" };
        let price = entries
            .iter()
            .find(|e| e.name == itype)
            .and_then(|e| e.offerings.as_ref())
            .and_then(|os| os.iter().find(|o| o.zone == zone && o.capacity_type == ct))
            .map(|o| o.price_usd_per_hour)
            .unwrap_or(0.0);
        let mut node_labels = by_name
            .get(itype.as_str())
            .map(|t| t.labels.clone())
            .unwrap_or_default();
        node_labels.extend(request.labels.clone());
        node_labels.insert(labels::ZONE.into(), zone.clone());
        node_labels.insert(labels::CAPACITY_TYPE.into(), ct.into());
        node_labels.insert(labels::NODEPOOL.into(), request.nodepool.clone());
        let pid = provider_id(&zone, &id);
        self.lock().known.insert(id.clone(), pid.clone());
        tracing::info!(instance = %id, instance_type = %itype, %zone, capacity_type = ct, claim = %request.claim_name, "launched");
        Ok(Instance {
            provider_id: pid,
            claim_name: request.claim_name.clone(),
            nodepool: request.nodepool.clone(),
            client_token: request.client_token.clone(),
            instance_type: itype,
            zone,
            capacity_type: ct.into(),
            price,
            labels: Arc::new(node_labels),
            state: InstanceState::Pending,
            launched_at: self.clock.now(),
            ready_at: None,
        })
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let id = instance_id(provider_id).ok_or_else(|| CloudError::Invalid {
            message: format!("{provider_id} is not an AWS provider id"),
        })?;
        match self.ec2.terminate_instances().instance_ids(id).send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = sdk_error("TerminateInstances", e);
                if let AwsError::Service { code, .. } = &e {
                    if code.starts_with("InvalidInstanceID.NotFound") {
                        return Ok(());
                    }
                }
                Err(e.into())
            }
        }
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let not_found = || CloudError::NotFound {
            provider_id: provider_id.into(),
        };
        let id = instance_id(provider_id).ok_or_else(not_found)?;
        let out = match self.ec2.describe_instances().instance_ids(id).send().await {
            Ok(o) => o,
            Err(e) => {
                let e = sdk_error("DescribeInstances", e);
                if matches!(&e, AwsError::Service { code, .. } if code.starts_with("InvalidInstanceID.NotFound"))
                {
                    return Err(not_found());
                }
                return Err(e.into());
            }
        };
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find_map(|i| self.instance_from(i))
            .ok_or_else(not_found)
    }

    async fn list(&self) -> Result<Vec<Arc<Instance>>, CloudError> {
        let mut out: Vec<Arc<Instance>> = Vec::new();
        // Pages read while instances change may repeat one: it is listed once.
        let mut seen = HashSet::new();
        let mut pages = self
            // One `tag-key` filter only: moto keeps the last of several with one name.
            .capstan_instances(&["pending", "running", "stopping", "stopped"])
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("DescribeInstances", e))?;
            for r in page.reservations() {
                for i in r.instances() {
                    if let Some(i) = self.instance_from(i) {
                        if seen.insert(i.provider_id.clone()) {
                            out.push(Arc::new(i));
                        }
                    }
                }
            }
        }
        // The controller's garbage collection lists instances periodically: the templates'
        // collection rides along.
        self.collect_templates().await;
        Ok(out)
    }

    async fn instance_types(&self, nodepool: &NodePool) -> Result<Vec<InstanceType>, CloudError> {
        let r = nodepool.spec.template.spec.node_class_ref.as_ref();
        let (_, spec) = self.class(r)?;
        let resolved = self.resolved(&spec).await?;
        let (_, catalog) = self
            .catalog_for(&resolved, &kubelet_overrides(&spec))
            .await?;
        // Only types some resolved AMI can boot.
        let archs: BTreeSet<&str> = resolved
            .amis
            .iter()
            .filter_map(|a| a.arch.as_deref())
            .collect();
        Ok(catalog
            .instance_types
            .into_iter()
            .filter(|t| {
                t.labels
                    .get(labels::ARCH)
                    .is_some_and(|a| archs.contains(a.as_str()))
            })
            .collect())
    }

    async fn is_drifted(&self, instance: &Instance) -> Result<Option<Drift>, CloudError> {
        let Some(id) = instance_id(&instance.provider_id) else {
            return Ok(None);
        };
        let out = self
            .ec2
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .map_err(|e| CloudError::from(sdk_error("DescribeInstances", e)))?;
        let Some(i) = out.reservations().iter().flat_map(|r| r.instances()).next() else {
            return Ok(None);
        };
        let class = i
            .tags()
            .iter()
            .find(|t| t.key() == Some(NODECLASS_TAG))
            .and_then(|t| t.value())
            .map(String::from);
        let Some(class) = class else { return Ok(None) };
        let Some(spec) = self
            .classes
            .get(AWS_NODE_CLASS, &class)
            .or_else(|| self.classes.get(EC2_NODE_CLASS, &class))
        else {
            return Ok(None);
        };
        let launched_with = i
            .tags()
            .iter()
            .find(|t| t.key() == Some(NODECLASS_HASH_TAG))
            .and_then(|t| t.value());
        if let Some(h) = launched_with {
            if h != nodeclass_hash(&spec) {
                return Ok(Some(Drift {
                    reason: "NodeClassDrift: the node class's static settings changed".into(),
                }));
            }
        }
        let resolved = self.resolved(&spec).await?;
        if let Some(ami) = i.image_id() {
            if !resolved.amis.iter().any(|a| a.id == ami) {
                return Ok(Some(Drift {
                    reason: format!("AMIDrift: {ami} is no longer selected"),
                }));
            }
        }
        if let Some(subnet) = i.subnet_id() {
            if !resolved.subnets.iter().any(|s| s.id == subnet)
                && !spec.subnet_selector_terms.is_empty()
            {
                // Any subnet the selectors match counts, not just the per-zone choice.
                let all = resolve::subnets(&self.ec2, &spec).await?;
                if !all.iter().any(|s| s.id == subnet) {
                    return Ok(Some(Drift {
                        reason: format!("SubnetDrift: {subnet} is no longer selected"),
                    }));
                }
            }
        }
        let groups: BTreeSet<&str> = i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id())
            .collect();
        let want: BTreeSet<&str> = resolved
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect();
        if !groups.is_empty() && groups != want {
            return Ok(Some(Drift {
                reason: "SecurityGroupDrift: the selected security groups changed".into(),
            }));
        }
        Ok(None)
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        // Karpenter's AWS policies: a kubelet that stopped reporting, or a node that is not
        // ready, for 30 minutes.
        vec![
            RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: "False".into(),
                toleration: Duration::from_secs(1800),
            },
            RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: "Unknown".into(),
                toleration: Duration::from_secs(1800),
            },
        ]
    }

    async fn interruptions(&self) -> Result<Vec<InterruptionEvent>, CloudError> {
        let Some(sqs) = &self.sqs else {
            return Ok(Vec::new());
        };
        let url = self.queue_url(sqs).await?;
        let poller = self.polled.lock().expect("poller").clone();
        let messages = match poller {
            Some(buffer) => std::mem::take(&mut *buffer.lock().expect("polled")),
            None => received(
                &sqs.receive_message()
                    .queue_url(&url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(0)
                    .send()
                    .await
                    .map_err(|e| sdk_error("ReceiveMessage", e))?,
            ),
        };
        let mut events = Vec::new();
        for m in &messages {
            let receipt = m.receipt.as_str();
            let msg = match interruption::parse(&m.body) {
                Ok(msg) => msg,
                Err(why) => {
                    tracing::warn!(message = %m.id, %why, "malformed interruption message: deleted");
                    self.lock().malformed += 1;
                    let _ = delete_message(sqs, &url, receipt).await;
                    continue;
                }
            };
            let mut here = Vec::new();
            match msg.notice {
                interruption::Notice::SpotInterruption { instance_id } => {
                    if let Some(p) = self.provider_id_of(&instance_id).await {
                        here.push(InterruptionEvent::SpotInterruptionWarning {
                            provider_id: p,
                            at: msg.at,
                            reclaim_at: msg.at + Duration::from_secs(120),
                        });
                    }
                }
                interruption::Notice::Rebalance { instance_id } => {
                    if let Some(p) = self.provider_id_of(&instance_id).await {
                        here.push(InterruptionEvent::RebalanceRecommendation {
                            provider_id: p,
                            at: msg.at,
                        });
                    }
                }
                interruption::Notice::ScheduledChange { instance_ids } => {
                    for id in instance_ids {
                        if let Some(p) = self.provider_id_of(&id).await {
                            here.push(InterruptionEvent::ScheduledMaintenance {
                                provider_id: p,
                                at: msg.at,
                                when: msg.at,
                            });
                        }
                    }
                }
                interruption::Notice::StateChange { instance_id, state } => {
                    if let Some(p) = self.provider_id_of(&instance_id).await {
                        here.push(InterruptionEvent::StateChange {
                            provider_id: p,
                            at: msg.at,
                            state,
                        });
                    }
                }
                interruption::Notice::Ignored => {}
            }
            if here.is_empty() {
                // Nothing capstan acts on (another state, an instance it does not know).
                let _ = delete_message(sqs, &url, receipt).await;
                continue;
            }
            let mut s = self.lock();
            for e in &here {
                s.receipts.push((e.clone(), receipt.to_string()));
            }
            drop(s);
            events.extend(here);
        }
        Ok(events)
    }

    async fn ack_interruptions(&self, events: &[InterruptionEvent]) -> Result<(), CloudError> {
        let Some(sqs) = &self.sqs else { return Ok(()) };
        let receipts: BTreeSet<String> = {
            let mut s = self.lock();
            let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut s.receipts)
                .into_iter()
                .partition(|(e, _)| events.contains(e));
            s.receipts = keep;
            done.into_iter().map(|(_, r)| r).collect()
        };
        if receipts.is_empty() {
            return Ok(());
        }
        let url = self.queue_url(sqs).await?;
        for r in receipts {
            delete_message(sqs, &url, &r).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
