//! `capstan controller` (the production entry point), `capstan crds`, and the read-only
//! what-if on a live cluster (`plan --kubeconfig`, `consolidate --kubeconfig`).

use anyhow::{Context, bail};
use capstan_cloud::{Clock, SystemClock};
use capstan_controller::{Config, Controller};
use capstan_fake_cloud::{FakeCloud, FakeCloudConfig};
use capstan_kube::fake::{ClusterFakeCloud, FakeNodes};
use capstan_kube::{KubeApi, Settings, Throttle};
use capstan_model::Catalog;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How often the loops run on a cluster.
const PASS: Duration = Duration::from_millis(200);

/// `capstan controller`'s flags.
#[derive(Clone, Debug)]
pub struct ControllerArgs {
    pub kubeconfig: Option<String>,
    pub provider: String,
    pub leader_elect: bool,
    pub lease_namespace: Option<String>,
    pub lease_name: String,
    pub identity: Option<String>,
    pub health_addr: String,
    pub metrics_addr: String,
    pub kube_api_qps: u32,
    pub kube_api_burst: u32,
    pub scheduler_names: Vec<String>,
    pub expendable_priority_cutoff: i32,
    /// `--preference-policy Ignore`.
    pub ignore_preferences: bool,
    /// Karpenter's MinValuesPolicy BestEffort.
    pub relax_min_values: bool,
    /// `--provider aws`: the EKS cluster's name (tags, user data), its endpoint, and the SQS
    /// interruption queue (none: no interruption handling).
    pub cluster_name: Option<String>,
    pub cluster_endpoint: Option<String>,
    pub interruption_queue: Option<String>,
    /// Provisioning batches: idle and maximum duration, seconds.
    pub batch_idle: f64,
    pub batch_max: f64,
    pub feature_gates: FeatureGates,
}

/// Karpenter's feature gates (`--feature-gates`, Karpenter's `FEATURE_GATES`), as far as
/// capstan has them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    pub spot_to_spot_consolidation: bool,
    /// Karpenter's `StaticCapacity`: NodePools with `replicas` keep that many nodes.
    pub static_capacity: bool,
}

/// Karpenter's gates capstan does not implement: accepted when off, refused when on (a gate a
/// user turns on must not be silently ignored).
const UNIMPLEMENTED_GATES: [&str; 3] = ["NodeRepair", "ReservedCapacity", "NodeOverlay"];

impl FeatureGates {
    /// `Name=true,Name=false`, as Kubernetes components take `--feature-gates`.
    pub fn parse(s: &str) -> Result<FeatureGates, String> {
        let mut gates = FeatureGates::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected Name=true or Name=false"))?;
            let on = match value.trim() {
                "true" => true,
                "false" => false,
                v => return Err(format!("{name}={v}: expected true or false")),
            };
            match name.trim() {
                "SpotToSpotConsolidation" => gates.spot_to_spot_consolidation = on,
                "StaticCapacity" => gates.static_capacity = on,
                n if UNIMPLEMENTED_GATES.contains(&n) => {
                    if on {
                        return Err(format!(
                            "{n}=true: capstan does not implement Karpenter's {n}; leave it false"
                        ));
                    }
                }
                n => {
                    return Err(format!(
                        "{n}: no such feature gate (capstan has SpotToSpotConsolidation and StaticCapacity; {} only off)",
                        UNIMPLEMENTED_GATES.join(", ")
                    ));
                }
            }
        }
        Ok(gates)
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "capstan".into())
}

/// What the health endpoints report.
#[derive(Default)]
struct Health {
    /// Unix seconds of the last completed pass.
    last_pass: AtomicU64,
    /// The API has answered at least once.
    ready: AtomicBool,
}

/// Answers HTTP/1.1 GETs on `addr`: `respond` maps a path to (status line, content type,
/// body); `flag` names the address's flag in errors. A request's head is read up to 16 KiB
/// within 10 s (a scrape with a bearer token fits); at most 64 connections are served at once;
/// a failed accept (out of file descriptors, say) is logged and the server goes on.
async fn serve(
    addr: String,
    flag: &'static str,
    respond: impl Fn(&str) -> (&'static str, &'static str, String) + Send + Sync + 'static,
) -> anyhow::Result<()> {
    const HEAD_MAX: usize = 16 * 1024;
    const TIMEOUT: Duration = Duration::from_secs(10);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("{flag} {addr}"))?;
    tracing::info!(%addr, flag, "serving");
    let respond = Arc::new(respond);
    let slots = Arc::new(tokio::sync::Semaphore::new(64));
    loop {
        let (mut sock, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%addr, error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Too many at once: refuse this one rather than queue without bound.
            drop(sock);
            continue;
        };
        let respond = respond.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut head = Vec::with_capacity(1024);
            let read = tokio::time::timeout(TIMEOUT, async {
                let mut buf = [0u8; 4096];
                loop {
                    let n = sock.read(&mut buf).await?;
                    if n == 0 {
                        return Ok::<bool, std::io::Error>(false);
                    }
                    head.extend_from_slice(&buf[..n]);
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        return Ok(true);
                    }
                    if head.len() > HEAD_MAX {
                        return Ok(false);
                    }
                }
            })
            .await;
            let (code, content_type, body) = match read {
                Ok(Ok(true)) => {
                    let req = String::from_utf8_lossy(&head);
                    let path = req.split_whitespace().nth(1).unwrap_or("/");
                    let path = path.split('?').next().unwrap_or(path);
                    respond(path)
                }
                Ok(Ok(false)) if head.len() > HEAD_MAX => (
                    "431 Request Header Fields Too Large",
                    "text/plain",
                    "request head over 16 KiB".to_string(),
                ),
                _ => return,
            };
            let resp = format!(
                "HTTP/1.1 {code}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = tokio::time::timeout(TIMEOUT, async {
                sock.write_all(resp.as_bytes()).await?;
                sock.write_all(body.as_bytes()).await?;
                sock.shutdown().await
            })
            .await;
        });
    }
}

/// `/healthz` (a pass completed within the last 30 s) and `/readyz` (the API answered).
fn health_response(health: &Health, path: &str) -> (&'static str, &'static str, String) {
    let now = SystemClock.now().as_secs();
    let (code, body) = match path {
        "/healthz" => {
            let last = health.last_pass.load(Ordering::SeqCst);
            if last == 0 || now.saturating_sub(last) < 30 {
                ("200 OK", "ok")
            } else {
                ("503 Service Unavailable", "the control loop is stuck")
            }
        }
        "/readyz" => {
            if health.ready.load(Ordering::SeqCst) {
                ("200 OK", "ok")
            } else {
                (
                    "503 Service Unavailable",
                    "not connected to the API server yet",
                )
            }
        }
        _ => ("404 Not Found", "not found"),
    };
    (code, "text/plain", body.to_string())
}

/// `/metrics`: the Prometheus text format (version 0.0.4).
fn metrics_response(
    metrics: &capstan_controller::Metrics,
    path: &str,
) -> (&'static str, &'static str, String) {
    match path {
        "/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        _ => ("404 Not Found", "text/plain", "not found".into()),
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

pub fn controller(args: ControllerArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(run_controller(args))
}

async fn run_controller(args: ControllerArgs) -> anyhow::Result<()> {
    let client = capstan_kube::connect(args.kubeconfig.as_deref()).await?;
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let lease_namespace = args
        .lease_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "kube-system".into());
    let settings = Settings {
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
        lease_namespace: lease_namespace.clone(),
        lease_name: args.lease_name.clone(),
        identity: identity.clone(),
    };
    let throttle = Throttle::new(args.kube_api_qps, args.kube_api_burst);
    let api = Arc::new(KubeApi::new(client.clone(), settings));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let config = Config {
        identity: identity.clone(),
        epoch_unix: 0.0,
        leader_elect: args.leader_elect,
        // client-go's retry period: the lease is read and renewed every 2 s, while the loops
        // run every PASS (they read only the watch buffers between changes).
        renew_interval: 2.0,
        scheduler_names: args.scheduler_names.clone(),
        expendable_priority_cutoff: args.expendable_priority_cutoff,
        ignore_preferences: args.ignore_preferences,
        relax_min_values: args.relax_min_values,
        batch_idle: args.batch_idle,
        batch_max: args.batch_max,
        metrics_state_interval: 1.0,
        lease_name: args.lease_name.clone(),
        // Placeholders live beside the Lease, in capstan's namespace (the chart's Role).
        headroom_namespace: lease_namespace,
        spot_to_spot_consolidation: args.feature_gates.spot_to_spot_consolidation,
        static_capacity: args.feature_gates.static_capacity,
        ..Default::default()
    };
    match args.provider.as_str() {
        "fake" => {
            let catalog = Catalog::builtin();
            let fake = FakeCloud::new(FakeCloudConfig::default(), catalog.clone(), clock.clone());
            let cloud = Arc::new(ClusterFakeCloud::new(
                client.clone(),
                throttle.clone(),
                fake,
                clock.clone(),
            ));
            let nodes = FakeNodes::new(client, throttle, catalog.instance_types, clock.clone());
            let controller = Controller::new(api, cloud, clock, config);
            drive(controller, &args, Some(nodes), |_| {}).await
        }
        #[cfg(feature = "aws")]
        "aws" => {
            let cluster_name = args
                .cluster_name
                .clone()
                .context("--provider aws needs --cluster-name")?;
            let classes = Arc::new(capstan_aws::NodeClassMap::default());
            // Aliases read the EKS-optimized AMI parameters of the cluster's version.
            let kubernetes_version = match client.apiserver_version().await {
                Ok(v) => Some(format!("{}.{}", v.major, v.minor.trim_end_matches('+'))),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the API server's version: AMI aliases select by image name");
                    None
                }
            };
            let settings = capstan_aws::Settings {
                cluster_name,
                cluster_endpoint: args.cluster_endpoint.clone(),
                interruption_queue: args.interruption_queue.clone(),
                kubernetes_version,
                ..Default::default()
            };
            let cloud = Arc::new(
                capstan_aws::AwsCloud::from_env(settings, classes.clone(), clock.clone()).await,
            );
            cloud.spawn_queue_poller();
            cloud.spawn_price_refresher();
            tokio::spawn(refresh_node_classes(
                client.clone(),
                classes,
                cloud.clone(),
                config.identity.clone(),
            ));
            let leading = cloud.clone();
            let controller = Controller::new(api, cloud, clock, config);
            drive(controller, &args, None, move |l| leading.set_leading(l)).await
        }
        other => bail!(
            "--provider {other}: this build serves --provider fake{}",
            if cfg!(feature = "aws") {
                " and --provider aws"
            } else {
                ""
            }
        ),
    }
}

/// Keeps the AWS provider's node classes in step with the cluster's AWSNodeClass and
/// EC2NodeClass objects (every 10 s), and writes each one's status: what its selectors
/// resolve to and `Ready`. One whose spec does not load, or whose selectors match nothing,
/// gets `Ready=False` with the reason and nothing launches for it (fail closed).
#[cfg(feature = "aws")]
async fn refresh_node_classes(
    client: kube::Client,
    classes: Arc<capstan_aws::NodeClassMap>,
    cloud: Arc<capstan_aws::AwsCloud>,
    identity: String,
) {
    use capstan_model::awsnodeclass::AwsNodeClassStatus;
    use capstan_model::nodepool::Condition;
    let mut written: std::collections::BTreeMap<String, AwsNodeClassStatus> = Default::default();
    loop {
        match capstan_kube::nodeclasses::aws_node_classes(&client).await {
            Ok(listed) => {
                let mut good = std::collections::BTreeMap::new();
                for (kind, (name, spec), uid) in listed {
                    let key = format!("{kind}/{name}");
                    let (mut status, ready, reason, message) = match spec {
                        Err(e) => (AwsNodeClassStatus::default(), false, "InvalidSpec", e),
                        Ok(s) => {
                            let ignored = s.unsupported_fields();
                            let note = if ignored.is_empty() {
                                String::new()
                            } else {
                                format!("kept but not acted on: {}", ignored.join(", "))
                            };
                            match (
                                cloud.resolved(&s).await,
                                cloud.instance_profile(&name, &s).await,
                            ) {
                                (Ok(r), Ok(profile)) => {
                                    good.insert((kind.to_string(), name.clone()), s.clone());
                                    let status = AwsNodeClassStatus {
                                        subnets: r.subnets.clone(),
                                        security_groups: r.security_groups.clone(),
                                        amis: r.amis.clone(),
                                        instance_profile: profile,
                                        conditions: vec![],
                                    };
                                    (status, true, "Ready", note)
                                }
                                (Err(e), _) => (
                                    AwsNodeClassStatus::default(),
                                    false,
                                    "ResolutionFailed",
                                    e.to_string(),
                                ),
                                (Ok(_), Err(e)) => (
                                    AwsNodeClassStatus::default(),
                                    false,
                                    "InstanceProfileFailed",
                                    e.to_string(),
                                ),
                            }
                        }
                    };
                    let previous = written.get(&key);
                    let cond_status = if ready { "True" } else { "False" };
                    let same = previous
                        .and_then(|p| p.conditions.first())
                        .is_some_and(|c| {
                            c.status == cond_status && c.reason == reason && c.message == message
                        });
                    let since = previous
                        .and_then(|p| p.conditions.first())
                        .filter(|c| c.status == cond_status)
                        .map(|c| c.last_transition_time.clone())
                        .unwrap_or_else(|| {
                            capstan_model::time::format_rfc3339(SystemClock.now().as_secs_f64())
                        });
                    status.conditions = vec![Condition {
                        type_: "Ready".into(),
                        status: cond_status.into(),
                        reason: reason.into(),
                        message: message.clone(),
                        last_transition_time: since,
                    }];
                    if same && previous == Some(&status) {
                        continue;
                    }
                    if !ready && !same {
                        tracing::warn!(nodeclass = %key, %reason, %message, "node class not ready: nothing launches for it");
                        if let Err(e) = capstan_kube::nodeclasses::warn(
                            &client, kind, &name, &uid, reason, &message, &identity,
                        )
                        .await
                        {
                            tracing::warn!(nodeclass = %key, error = %e, "publishing an Event");
                        }
                    }
                    match capstan_kube::nodeclasses::set_status(&client, kind, &name, &status).await
                    {
                        Ok(()) => {
                            written.insert(key, status);
                        }
                        Err(e) => {
                            tracing::warn!(nodeclass = %key, error = %e, "writing node class status")
                        }
                    }
                }
                classes.set(good);
            }
            Err(e) => tracing::warn!(error = %e, "listing AWSNodeClasses"),
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// Runs the passes until SIGTERM: every PASS, one controller step, and (for the fake cloud)
/// its kubelets.
async fn drive<C: capstan_cloud::CloudProvider>(
    mut controller: Controller<KubeApi, C>,
    args: &ControllerArgs,
    nodes: Option<FakeNodes>,
    // After each pass, whether this process leads (the AWS provider polls its queue only then).
    leading: impl Fn(bool),
) -> anyhow::Result<()> {
    let identity = controller.config().identity.clone();
    let health = Arc::new(Health::default());
    let h = health.clone();
    let serving = tokio::spawn(serve(args.health_addr.clone(), "--health-addr", move |p| {
        health_response(&h, p)
    }));
    let metrics = controller.metrics().clone();
    let serving_metrics = tokio::spawn(serve(
        args.metrics_addr.clone(),
        "--metrics-addr",
        move |p| metrics_response(&metrics, p),
    ));
    tracing::info!(%identity, provider = %args.provider, leader_elect = args.leader_elect,
        spot_to_spot_consolidation = args.feature_gates.spot_to_spot_consolidation,
        static_capacity = args.feature_gates.static_capacity,
        "capstan controller starting");
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut kubelets_at = 0.0;
    loop {
        // A pass is never cut short: the write in flight finishes before shutdown.
        controller.step().await;
        leading(controller.is_leader());
        let now = SystemClock.now().as_secs_f64();
        if let Some(nodes) = &nodes {
            if controller.is_leader() && now - kubelets_at >= 0.5 {
                kubelets_at = now;
                if let Err(e) = nodes.reconcile().await {
                    tracing::warn!(error = %e, "fake nodes");
                }
            }
        }
        health.ready.store(controller.connected(), Ordering::SeqCst);
        health
            .last_pass
            .store(SystemClock.now().as_secs(), Ordering::SeqCst);
        if serving.is_finished() {
            bail!(
                "the health endpoints stopped (is --health-addr {} free?)",
                args.health_addr
            );
        }
        if serving_metrics.is_finished() {
            bail!(
                "the metrics endpoint stopped (is --metrics-addr {} free?)",
                args.metrics_addr
            );
        }
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(PASS) => {}
        }
    }
    tracing::info!(%identity, "shutting down: releasing the lease");
    controller.release().await;
    Ok(())
}

/// Reads the live cluster for a what-if (list requests only).
pub fn read_live(kubeconfig: &str) -> anyhow::Result<capstan_kube::whatif::Live> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let client = capstan_kube::connect(Some(kubeconfig)).await?;
        let live = capstan_kube::whatif::read(client)
            .await
            .map_err(|e| anyhow::anyhow!("reading the cluster: {e}"))?;
        for w in &live.warnings {
            tracing::warn!("{w}");
        }
        Ok(live)
    })
}

/// The catalog as each NodePool's node class sees it: a node class (Karpenter's
/// `karpenter.k8s.aws/v1` EC2NodeClass, or capstan's) changes its pools' types by its
/// kubelet settings (pods, allocatable) and the zones of the subnets its status lists. Pools
/// that see a type differently get a variant each (`merge_pool_types`). A pool whose AWS node
/// class is missing or does not load plans with the catalog as it is, and says so.
pub fn pool_catalog(
    live: &capstan_kube::whatif::Live,
    nodepools: &[capstan_model::NodePool],
    mut catalog: Catalog,
) -> (Catalog, Vec<String>) {
    use capstan_model::overhead::{kubelet_overrides, with_kubelet};
    let mut warnings = Vec::new();
    let mut per_pool = Vec::with_capacity(nodepools.len());
    for pool in nodepools {
        let types = match pool.spec.template.spec.node_class_ref.as_ref() {
            Some(r) if matches!(r.kind.as_str(), "EC2NodeClass" | "AWSNodeClass") => {
                let seen = live.node_classes.iter().find(|c| {
                    c.kind == r.kind
                        && c.name == r.name
                        && (r.group.is_empty() || c.group == r.group)
                });
                match seen.map(|c| (c, &c.spec)) {
                    Some((c, Ok(spec))) => {
                        let k = kubelet_overrides(spec);
                        catalog
                            .instance_types
                            .iter()
                            .map(|t| {
                                let mut t = with_kubelet(t, &k);
                                if !c.zones.is_empty() {
                                    t.offerings.retain(|o| c.zones.contains(&o.zone));
                                }
                                t
                            })
                            .filter(|t| !t.offerings.is_empty())
                            .collect()
                    }
                    Some((c, Err(e))) => {
                        warnings.push(format!(
                            "nodepool {}: {} {}: {e}: planned with the catalog as it is",
                            pool.name, c.kind, c.name
                        ));
                        catalog.instance_types.clone()
                    }
                    None => {
                        warnings.push(format!(
                            "nodepool {}: nodeClassRef {}/{} {} not found: planned with the catalog as it is",
                            pool.name, r.group, r.kind, r.name
                        ));
                        catalog.instance_types.clone()
                    }
                }
            }
            _ => catalog.instance_types.clone(),
        };
        per_pool.push((pool.name.clone(), types));
    }
    catalog.instance_types = capstan_model::catalog::merge_pool_types(per_pool);
    (catalog, warnings)
}

/// What a plan reads, from the live cluster: its pending pods, its nodes with their bound pods
/// and DaemonSets, and the NodeClaims still launching (as in-flight capacity).
pub fn plan_input(
    live: &capstan_kube::whatif::Live,
    nodepools: Vec<capstan_model::NodePool>,
    catalog: Catalog,
) -> crate::plan_cmd::PlanInput {
    let (catalog, warnings) = pool_catalog(live, &nodepools, catalog);
    for w in &warnings {
        tracing::warn!("{w}");
    }
    use capstan_sched::{InFlight, Snapshot};
    let mut snapshot = Snapshot {
        nodes: live
            .nodes
            .iter()
            .cloned()
            .map(std::sync::Arc::new)
            .collect(),
        daemonsets: live.daemonsets.clone(),
        ..Default::default()
    };
    // A node whose NodeClaim is being deleted is going too (Karpenter's MarkedForDeletion).
    for n in &mut snapshot.nodes {
        if live
            .claims
            .iter()
            .any(|c| c.deleting() && c.status.node_name.as_deref() == Some(n.name.as_str()))
        {
            std::sync::Arc::make_mut(n).deleting = true;
        }
    }
    let deleting: std::collections::BTreeSet<&str> = snapshot
        .nodes
        .iter()
        .filter(|n| n.deleting)
        .map(|n| n.name.as_str())
        .collect();
    let now = crate::consolidate_cmd::now(None).unwrap_or_default();
    let mut pending = Vec::new();
    for p in &live.pods {
        // What the controller would provision for: pods kube-scheduler gave up on.
        if p.is_provisionable(&[capstan_model::pod::DEFAULT_SCHEDULER.to_string()]) {
            match &p.volume_error {
                // As the controller: no node for a pod whose claims cannot bind yet.
                Some(e) => tracing::warn!("pod {}: no node planned: {e}", p.key()),
                None => pending.push(Arc::new(p.clone())),
            }
        } else if p.node_name.is_some() && p.is_active() {
            // As the controller: a deleting node's pods that need room elsewhere are planned
            // ahead of their eviction.
            let on_deleting = p.node_name.as_deref().is_some_and(|n| deleting.contains(n));
            if on_deleting && capstan_model::pdb::moves_ahead_of_drain(p, &live.pdbs, now) {
                pending.push(Arc::new(p.off_its_node()));
            } else {
                snapshot.pods.push(Arc::new(p.clone()));
            }
        }
    }
    for c in &live.claims {
        if let Some(slot) = InFlight::of_claim(c, &catalog.instance_types) {
            snapshot.inflight.push(slot);
        }
    }
    crate::plan_cmd::PlanInput {
        pending,
        snapshot,
        nodepools,
        catalog,
    }
}

/// What `consolidate` reads, from the live cluster.
pub fn consolidate_input(
    live: &capstan_kube::whatif::Live,
    catalog: &Catalog,
) -> crate::consolidate_cmd::Cluster {
    crate::consolidate_cmd::Cluster {
        nodes: live
            .nodes
            .iter()
            .map(|n| capstan_disrupt::NodeInfo::from_node(n.clone(), &catalog.instance_types))
            .collect(),
        pods: live
            .pods
            .iter()
            .filter(|p| p.node_name.is_some() && p.is_active())
            .map(|p| Arc::new(p.clone()))
            .collect(),
        pdbs: live.pdbs.clone(),
        daemonsets: live.daemonsets.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_what_if_plans_a_deleting_nodes_pods_ahead_of_their_eviction() {
        use capstan_model::{Node, NodeClaim, Pod, pod::PodPhase};
        let node = |name: &str, deleting: bool| Node {
            name: name.into(),
            deleting,
            ..Default::default()
        };
        let pod = |name: &str, on: &str| Pod {
            namespace: "default".into(),
            name: name.into(),
            node_name: Some(on.into()),
            phase: PodPhase::Running,
            ..Default::default()
        };
        let mut going = NodeClaim {
            name: "c".into(),
            deleted_at: Some(1.0),
            ..Default::default()
        };
        going.status.node_name = Some("b".into());
        let live = capstan_kube::whatif::Live {
            nodes: vec![node("a", true), node("b", false), node("c", false)],
            pods: vec![pod("on-a", "a"), pod("on-b", "b"), pod("on-c", "c")],
            claims: vec![going],
            ..Default::default()
        };
        let p = plan_input(&live, Vec::new(), Catalog::default());
        let pending: Vec<String> = p.pending.iter().map(|p| p.key()).collect();
        assert_eq!(pending, ["default/on-a", "default/on-b"]);
        assert!(p.pending.iter().all(|p| p.node_name.is_none()));
        let bound: Vec<String> = p.snapshot.pods.iter().map(|p| p.key()).collect();
        assert_eq!(bound, ["default/on-c"]);
        assert!(p.snapshot.nodes.iter().filter(|n| n.deleting).count() == 2);
    }

    #[test]
    fn feature_gates_parse_as_kubernetes_components_take_them() {
        let on = FeatureGates {
            spot_to_spot_consolidation: true,
            ..Default::default()
        };
        let both = FeatureGates {
            spot_to_spot_consolidation: true,
            static_capacity: true,
        };
        // (flag, result)
        let cases: [(&str, Result<FeatureGates, &str>); 8] = [
            ("", Ok(FeatureGates::default())),
            ("SpotToSpotConsolidation=true", Ok(on)),
            (
                "SpotToSpotConsolidation=true, NodeRepair=false,ReservedCapacity=false",
                Ok(on),
            ),
            ("SpotToSpotConsolidation=false", Ok(FeatureGates::default())),
            ("SpotToSpotConsolidation=true,StaticCapacity=true", Ok(both)),
            (
                "NodeRepair=true",
                Err("capstan does not implement Karpenter's NodeRepair"),
            ),
            ("Spot=true", Err("Spot: no such feature gate")),
            ("SpotToSpotConsolidation=yes", Err("expected true or false")),
        ];
        for (flag, want) in cases {
            match (FeatureGates::parse(flag), want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{flag}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{flag}: {e}"),
                (got, w) => panic!("{flag}: {got:?}, expected {w:?}"),
            }
        }
    }
}
