//! `capstan`: a Karpenter-style node provisioner. See `capstan --help`.

use anyhow::{Context, Result};
use capstan_cli::input::{self, InputError};
use capstan_cli::table::fixed;
use capstan_cli::{bench, table};
use capstan_fake_cloud::{FakeCloud, FakeCloudConfig};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::process::ExitCode;

// Reading tens of thousands of pods and packing them allocates in many small pieces; mimalloc
// reads a 20,000-pod set in 0.8 s where glibc's allocator takes 1.4 s.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// For the commands that run to completion (`simulate`, `bench`): mimalloc keeps the memory
/// they free for reuse instead of handing it back to the OS a second later, its default. A
/// simulation frees and allocates the same large buffers every pass; handed back, each comes
/// back as freshly faulted, zeroed pages. The 10,000-node day (`xlarge.yaml`) ran in 134.9 s
/// against 153.8 s with the default, side by side, at 1.9 against 1.8 GiB peak RSS. The
/// controller, which runs for months, keeps the default.
fn keep_freed_memory() {
    // mimalloc's `mi_option_set` and its `mi_option_purge_delay` (15 in the v3 sources
    // libmimalloc-sys builds; -1: never purge). Linked from libmimalloc-sys's static library.
    #[allow(unsafe_code)]
    // SAFETY: the signature is mimalloc's own (`void mi_option_set(mi_option_t, long)`, an enum
    // passed as int). It is called once, from `main`, before any other thread starts (the
    // function is not thread-safe), and changes only when freed memory is returned to the OS.
    unsafe extern "C" {
        safe fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
    mi_option_set(MI_OPTION_PURGE_DELAY, -1);
}

#[derive(Parser)]
#[command(name = "capstan", version, about = "Karpenter-style Kubernetes node provisioner", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulates a cluster — traffic, HPA, scheduler, capstan's controller, the fake cloud —
    /// deterministically, and writes summary.json and report.html.
    Simulate {
        /// Scenario YAML (default: the built-in day-long scenario).
        #[arg(long)]
        scenario: Option<String>,
        /// The seed (the first seed with --seeds).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where summary.json and report.html go.
        #[arg(long, default_value = "capstan-report")]
        out: String,
        /// Run this many seeds (seed, seed+1, …) and check the invariants after each; no report.
        #[arg(long)]
        seeds: Option<u64>,
        /// Inject random faults drawn from each seed.
        #[arg(long)]
        faults: bool,
        /// With --seeds: run only shard INDEX of COUNT (`3/10`; an Indexed Job passes
        /// `$(JOB_COMPLETION_INDEX)/COUNT`); `capstan campaign merge` joins the shards' JSON.
        #[arg(long, requires = "seeds", value_parser = capstan_cli::simulate_cmd::parse_shard)]
        shard: Option<(u64, u64)>,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Campaigns run as shards (`simulate --seeds N --shard I/K`, e.g. as an Indexed Job).
    Campaign {
        #[command(subcommand)]
        which: CampaignCommand,
    },
    /// Plans new capacity for pending pods: which machines to buy, at what price.
    Plan {
        /// Pending pods (PodList / List / multi-document YAML); `-` for standard input.
        #[arg(long, required_unless_present = "kubeconfig")]
        pods: Option<String>,
        /// Read the live cluster instead (pending pods, nodes, NodePools of capstan.dev/v1 and
        /// karpenter.sh/v1, NodeClaims, PDBs, DaemonSets); nothing is written.
        #[arg(long)]
        kubeconfig: Option<String>,
        /// Instance-type catalog (the shared catalog format; default: the built-in one).
        #[arg(long)]
        catalog: Option<String>,
        /// NodePool manifests (capstan.dev/v1 or karpenter.sh/v1); repeatable.
        #[arg(long = "nodepool")]
        nodepools: Vec<String>,
        /// A cluster snapshot (`kubectl get nodes,pods -A -o json`): existing nodes take pods first.
        #[arg(long)]
        cluster: Option<String>,
        #[arg(long, default_value = "default")]
        strategy: String,
        /// Seconds the `optimal` strategy may take.
        #[arg(long = "time-limit", default_value_t = 10.0)]
        time_limit: f64,
        /// Most of the plan's spot vCPU one pool (type × zone) may hold.
        #[arg(long = "spot-max-pool-share", default_value_t = 0.25)]
        spot_max_pool_share: f64,
        /// Spot prices (`aws ec2 describe-spot-price-history --output json`); default:
        /// estimates from the fake cloud's price model.
        #[arg(long = "spot-prices")]
        spot_prices: Option<String>,
        /// Karpenter's preference policy: Respect honours pods' preferred affinity and
        /// ScheduleAnyway spread where it can; Ignore plans without them.
        #[arg(long = "preference-policy", value_enum, default_value_t = PreferencePolicy::Respect)]
        preference_policy: PreferencePolicy,
        /// Karpenter's minValues policy: Strict leaves a pod pending when a NodePool's
        /// `minValues` cannot be met; BestEffort lowers them to what the types offer and marks
        /// the NodeClaim `karpenter.sh/nodeclaim-min-values-relaxed: "true"`.
        #[arg(long = "min-values-policy", value_enum, default_value_t = MinValuesPolicy::Strict)]
        min_values_policy: MinValuesPolicy,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// What the disruption engine would do now to a cluster snapshot.
    Consolidate {
        /// A cluster snapshot (`kubectl get nodes,pods,daemonsets,pdb -A -o json`).
        #[arg(long, required_unless_present = "kubeconfig")]
        cluster: Option<String>,
        /// Read the live cluster instead; nothing is written.
        #[arg(long)]
        kubeconfig: Option<String>,
        /// Instance-type catalog (default: the built-in one).
        #[arg(long)]
        catalog: Option<String>,
        #[arg(long = "nodepool")]
        nodepools: Vec<String>,
        /// PodDisruptionBudgets, if not in the snapshot; repeatable.
        #[arg(long = "pdbs")]
        pdbs: Vec<String>,
        /// The time to evaluate at (RFC 3339); default: now.
        #[arg(long)]
        now: Option<String>,
        /// Apply each round's commands and evaluate again until nothing changes.
        #[arg(long = "until-stable")]
        until_stable: bool,
        /// Spot prices (`aws ec2 describe-spot-price-history --output json`); default:
        /// estimates from the fake cloud's price model.
        #[arg(long = "spot-prices")]
        spot_prices: Option<String>,
        /// Karpenter's feature gates as the controller takes them (`SpotToSpotConsolidation`,
        /// off by default as in Karpenter).
        #[arg(long = "feature-gates", default_value = "", value_parser = capstan_cli::cluster_cmd::FeatureGates::parse)]
        feature_gates: capstan_cli::cluster_cmd::FeatureGates,
        /// Karpenter's preference policy, as the controller takes it: Ignore places the
        /// candidates' pods without their preferred affinities and ScheduleAnyway spreads.
        #[arg(long = "preference-policy", value_enum, default_value_t = PreferencePolicy::Respect)]
        preference_policy: PreferencePolicy,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Runs capstan on a cluster: watches pods, nodes and NodePools, launches and removes
    /// machines through the provider.
    Controller {
        /// Kubeconfig file (default: `KUBECONFIG`, `~/.kube/config`, then in-cluster).
        #[arg(long)]
        kubeconfig: Option<String>,
        /// The cloud: `fake` (kwok-managed Nodes) or `aws` (EC2; the standard AWS SDK
        /// configuration: `AWS_REGION`, the credentials chain, IRSA, `AWS_ENDPOINT_URL`).
        #[arg(long, default_value = "fake")]
        provider: String,
        /// `--provider aws`: the EKS cluster's name (required).
        #[arg(long = "cluster-name")]
        cluster_name: Option<String>,
        /// `--provider aws`: the cluster's API endpoint, for the nodes' user data.
        #[arg(long = "cluster-endpoint")]
        cluster_endpoint: Option<String>,
        /// `--provider aws`: the SQS queue of interruption events (none: no interruption
        /// handling).
        #[arg(long = "interruption-queue")]
        interruption_queue: Option<String>,
        /// Elect a leader through a Lease (`false`: this is the only replica).
        #[arg(long = "leader-elect", default_value_t = true, action = clap::ArgAction::Set)]
        leader_elect: bool,
        /// Namespace of the Lease (default: `POD_NAMESPACE`, else kube-system).
        #[arg(long = "lease-namespace")]
        lease_namespace: Option<String>,
        #[arg(long = "lease-name", default_value = "capstan")]
        lease_name: String,
        /// This process in the Lease (default: hostname and pid).
        #[arg(long)]
        identity: Option<String>,
        /// Where `/healthz` and `/readyz` are served.
        #[arg(long = "health-addr", default_value = "127.0.0.1:8081")]
        health_addr: String,
        /// Where `/metrics` is served.
        #[arg(long = "metrics-addr", default_value = "127.0.0.1:8080")]
        metrics_addr: String,
        /// Client-side rate limit to the API server: requests per second, and burst.
        #[arg(long = "kube-api-qps", default_value_t = 50)]
        kube_api_qps: u32,
        #[arg(long = "kube-api-burst", default_value_t = 100)]
        kube_api_burst: u32,
        /// Provision for the unschedulable pods of these schedulers (`spec.schedulerName`);
        /// repeatable.
        #[arg(long = "scheduler-name", default_value = "default-scheduler")]
        scheduler_names: Vec<String>,
        /// Pods below this priority are expendable: they never cause a launch and run only
        /// where there is room (Cluster Autoscaler's --expendable-pods-priority-cutoff).
        #[arg(long = "expendable-pods-priority-cutoff", default_value_t = -10, allow_hyphen_values = true)]
        expendable_priority_cutoff: i32,
        /// Karpenter's preference policy: Respect honours pods' preferred affinity and
        /// ScheduleAnyway spread where it can; Ignore plans without them.
        #[arg(long = "preference-policy", value_enum, default_value_t = PreferencePolicy::Respect)]
        preference_policy: PreferencePolicy,
        /// Karpenter's minValues policy: Strict leaves a pod pending when a NodePool's
        /// `minValues` cannot be met; BestEffort lowers them to what the types offer and marks
        /// the NodeClaim `karpenter.sh/nodeclaim-min-values-relaxed: "true"`.
        #[arg(long = "min-values-policy", value_enum, default_value_t = MinValuesPolicy::Strict)]
        min_values_policy: MinValuesPolicy,
        /// A batch of pending pods is planned once no new one came for this long (a Go
        /// duration; Karpenter's BATCH_IDLE_DURATION)…
        #[arg(long = "batch-idle-duration", default_value = "1s", value_parser = go_duration)]
        batch_idle: f64,
        /// …or once it is this old (Karpenter's BATCH_MAX_DURATION).
        #[arg(long = "batch-max-duration", default_value = "10s", value_parser = go_duration)]
        batch_max: f64,
        /// Karpenter's feature gates, as its FEATURE_GATES: `SpotToSpotConsolidation=true`.
        /// Karpenter's other gates are accepted off (capstan does not implement them).
        #[arg(long = "feature-gates", default_value = "", value_parser = capstan_cli::cluster_cmd::FeatureGates::parse)]
        feature_gates: capstan_cli::cluster_cmd::FeatureGates,
    },
    /// Writes an instance-type catalog in the shared format (`--from-aws`: from EC2 in
    /// `AWS_REGION`, with the standard AWS SDK configuration).
    Catalog {
        #[arg(long = "from-aws", required = true)]
        from_aws: bool,
        /// Where to write it (default: stdout).
        #[arg(long)]
        out: Option<String>,
    },
    /// Prints every CRD capstan serves (multi-document YAML), or writes one file each to DIR.
    Crds {
        #[arg(long)]
        out: Option<String>,
    },
    /// Benchmarks (run with --release).
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// The HorizontalPodAutoscaler.
    Hpa {
        #[command(subcommand)]
        which: HpaCommand,
    },
    /// The fake cloud.
    Cloud {
        #[command(subcommand)]
        which: CloudCommand,
    },
}

#[derive(Subcommand)]
enum CampaignCommand {
    /// Merges shard reports (`simulate --seeds … --shard I/K --output json`) into the report
    /// one unsharded run gives; exits 1 when a seed broke an invariant, 2 when the shards do
    /// not cover one run of seeds exactly once.
    Merge {
        /// The shards' JSON reports.
        #[arg(required = true)]
        files: Vec<String>,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

#[derive(Subcommand)]
enum HpaCommand {
    /// One HPA reconcile tick (or a list of ticks), upstream semantics.
    Decide {
        /// The tick(s), JSON or YAML; `-` for standard input.
        file: String,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

#[derive(Subcommand)]
enum CloudCommand {
    /// Validates a fake-cloud configuration (YAML or JSON) and prints what it resolves to.
    Check {
        /// The fake-cloud configuration block; `-` for standard input.
        #[arg(long)]
        config: String,
        /// Catalog file (default: the built-in AWS us-east-1 catalog).
        #[arg(long)]
        catalog: Option<String>,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Karpenter's scheduling benchmark: N mixed pods against M synthetic instance types.
    Scheduling {
        /// Pending pods per row; repeat for several rows.
        #[arg(long = "pods", default_values_t = vec![1usize, 100, 1000, 5000, 20000])]
        pods: Vec<usize>,
        /// Synthetic instance types (type i has i+1 vCPU).
        #[arg(long = "instance-types", default_value_t = 400)]
        instance_types: usize,
        /// Seed for the pods' requests.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Solves per row at most (the median is reported; rows stop repeating after ~2 s).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// One simulation run, timed: wall seconds, simulated seconds per wall second, peak memory.
    Simulate {
        /// Scenario YAML (default: the built-in day; crates/sim/scenarios/large.yaml is the
        /// 1,000-node day).
        #[arg(long)]
        scenario: Option<String>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// The scale curve: the 1,000-node day (`large.yaml`) scaled to each node count, each run
    /// in a process of its own (so each peak RSS is its own): wall, simulated seconds per wall
    /// second, peak nodes, pods and memory, and the slowest controller step that planned and
    /// that evaluated disruption.
    Scale {
        /// Node counts; repeat for several rows (the scenario is `large.yaml` times N/1000).
        #[arg(long = "nodes", default_values_t = vec![1000usize, 2000, 5000, 10000])]
        nodes: Vec<usize>,
        /// Simulate only this much of each day (`2h`); default: the whole day.
        #[arg(long)]
        duration: Option<String>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the scenario for this node count instead of running anything
        /// (`--print-scenario 10000` is `crates/sim/scenarios/xlarge.yaml`).
        #[arg(long = "print-scenario")]
        print_scenario: Option<usize>,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// One controller pass on a synthetic cluster (N nodes, ~P pods each): the plan for a batch
    /// of pending pods (a snapshot of the cluster, then the solve) and one full disruption
    /// evaluation, each timed (median of the runs).
    Pass {
        #[arg(long, default_value_t = 10000)]
        nodes: usize,
        /// At most this many pods per node (33: about 30.7 on average, 306,762 at 10,000 nodes).
        #[arg(long = "pods-per-node", default_value_t = 33)]
        pods_per_node: usize,
        /// Pending pods in the batch (the scheduling benchmark's five groups).
        #[arg(long, default_value_t = 1000)]
        pending: usize,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// One full disruption evaluation of a synthetic cluster (N nodes, ~P pods each).
    Disruption {
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
        #[arg(long = "pods-per-node", default_value_t = 30)]
        pods_per_node: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Each packing strategy on each recorded pod set in DIR, against the lower bound.
    Packing {
        #[arg(long)]
        sets: String,
        /// Catalog (default: the built-in AWS us-east-1 catalog).
        #[arg(long)]
        catalog: Option<String>,
        /// Strategies to run; repeatable (default: all three).
        #[arg(long = "strategy")]
        strategies: Vec<String>,
        /// Spot prices (`aws ec2 describe-spot-price-history --output json`); default:
        /// estimates from the fake cloud's price model.
        #[arg(long = "spot-prices")]
        spot_prices: Option<String>,
        #[arg(long = "time-limit", default_value_t = 10.0)]
        time_limit: f64,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Json,
}

fn crds(out: Option<&str>) -> Result<()> {
    match out {
        None => emit(&capstan_kube::crds::yaml()),
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| dir.to_string())?;
            for c in capstan_kube::crds::definitions() {
                let path = format!("{dir}/{}", capstan_kube::crds::file_name(&c));
                std::fs::write(&path, capstan_kube::crds::to_yaml(&c))
                    .with_context(|| path.clone())?;
                eprintln!("wrote {path}");
            }
            Ok(())
        }
    }
}

fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn bench_scheduling(
    pods: &[usize],
    instance_types: usize,
    seed: u64,
    runs: usize,
    output: Output,
) -> Result<()> {
    let mut rows = Vec::new();
    for &n in pods {
        let row = bench::run_scheduling(n, instance_types, seed, runs);
        tracing::info!(
            pods = row.pods,
            seconds = row.seconds,
            nodes = row.nodes,
            runs = row.runs,
            "solved"
        );
        rows.push(row);
    }
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&rows)?)),
        Output::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.pods.to_string(),
                        r.instance_types.to_string(),
                        fixed(r.seconds, 4),
                        format!("{:.0}", r.pods_per_second),
                        r.nodes.to_string(),
                        r.unschedulable.to_string(),
                    ]
                })
                .collect();
            emit(&table::render(
                &[
                    "PODS",
                    "INSTANCE TYPES",
                    "SECONDS",
                    "PODS/S",
                    "NODES",
                    "UNSCHEDULABLE",
                ],
                &cells,
            ))
        }
    }
}

fn cloud_check(config: &str, catalog: Option<&str>, output: Output) -> Result<()> {
    let text = input::read(config)?;
    let cfg = FakeCloudConfig::from_yaml(config, &text).map_err(|e| InputError(e.to_string()))?;
    let catalog = input::catalog(catalog)?;
    cfg.validate_offered(&catalog)
        .map_err(|(field, message)| InputError(format!("{config}: {field}: {message}")))?;
    let types = catalog
        .instance_types
        .iter()
        .filter(|t| !t.offerings.is_empty())
        .count();
    let cloud = FakeCloud::new(
        cfg.clone(),
        catalog,
        std::sync::Arc::new(capstan_cloud::ManualClock::new()),
    );
    let capacity_types = if cfg.spot.enabled { 2 } else { 1 };
    let summary = serde_json::json!({
        "seed": cfg.seed,
        "zones": cloud.zones(),
        "instance_types": types,
        "pools": types * cloud.zones().len() * capacity_types,
        "capacity_per_pool": cfg.capacity.per_pool,
        "capacity_overrides": cfg.capacity.pools.len(),
        "spot": cfg.spot.enabled,
        "spot_price_fraction": [cfg.spot.min_price_fraction, cfg.spot.max_price_fraction],
        "api_rate_per_second": cfg.api.rate_per_second,
        "api_burst": cfg.api.burst,
        "boot_seconds": [cfg.boot.min_seconds, cfg.boot.max_seconds],
        "launch_failure_rate": cfg.faults.launch_failure_rate,
        "never_ready_rate": cfg.faults.never_ready_rate,
        "interruptions": cfg.interruptions.enabled,
        "interruption_rate_multiplier": cfg.interruptions.rate_multiplier,
        "warm_pool_instances": cfg.warm_pool.pools.iter().map(|p| p.size as u64).sum::<u64>(),
        "warm_start_seconds": [cfg.warm_pool.start.min_seconds, cfg.warm_pool.start.max_seconds],
    });
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&summary)?)),
        Output::Table => {
            let rows: Vec<Vec<String>> = summary
                .as_object()
                .expect("object")
                .iter()
                .map(|(k, v)| vec![k.clone(), v.to_string()])
                .collect();
            emit(&table::render(&["SETTING", "VALUE"], &rows))
        }
    }
}

fn hpa_decide(file: &str, output: Output) -> Result<()> {
    let text = input::read(file)?;
    let (ticks, is_list) = capstan_cli::hpa_cmd::read_ticks(file, &text)?;
    let decisions: Vec<_> = ticks.iter().map(capstan_hpa::decide).collect();
    match output {
        Output::Json => {
            let values: Vec<_> = decisions
                .iter()
                .map(capstan_cli::hpa_cmd::decision_json)
                .collect();
            let v = if is_list {
                serde_json::Value::Array(values)
            } else {
                values.into_iter().next().unwrap_or_default()
            };
            emit(&format!("{}\n", serde_json::to_string_pretty(&v)?))
        }
        Output::Table => {
            let mut out = String::new();
            for (i, d) in decisions.iter().enumerate() {
                if is_list {
                    out.push_str(&format!("tick {i}\n"));
                }
                out.push_str(&format!(
                    "desired replicas: {} (rescale: {})\n",
                    d.desired_replicas, d.rescale
                ));
                let metrics: Vec<Vec<String>> = d
                    .metrics
                    .iter()
                    .map(|m| {
                        vec![
                            m.type_.clone(),
                            m.name.clone(),
                            m.replicas
                                .map(|r| r.to_string())
                                .unwrap_or_else(|| "-".into()),
                            m.utilization
                                .map(|u| format!("{u}%"))
                                .unwrap_or_else(|| "-".into()),
                            m.raw_value.clone().unwrap_or_else(|| "-".into()),
                            m.error.clone().unwrap_or_default(),
                        ]
                    })
                    .collect();
                if !metrics.is_empty() {
                    out.push_str(&table::render(
                        &["TYPE", "NAME", "REPLICAS", "UTILIZATION", "VALUE", "ERROR"],
                        &metrics,
                    ));
                }
                let conds: Vec<Vec<String>> = d
                    .conditions
                    .iter()
                    .map(|c| {
                        vec![
                            c.type_.clone(),
                            c.status.clone(),
                            c.reason.clone(),
                            c.message.clone(),
                        ]
                    })
                    .collect();
                out.push_str(&table::render(
                    &["CONDITION", "STATUS", "REASON", "MESSAGE"],
                    &conds,
                ));
            }
            emit(&out)
        }
    }
}

fn check_time_limit(t: f64) -> Result<()> {
    if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
        return Err(InputError(format!(
            "--time-limit: must be between 0 and 86400 seconds, got {t}"
        ))
        .into());
    }
    Ok(())
}

fn strategy(s: &str) -> Result<capstan_pack::Strategy> {
    capstan_pack::Strategy::parse(s).ok_or_else(|| {
        InputError(format!(
            "--strategy: unknown strategy {s:?} (expected default, karpenter-ffd or optimal)"
        ))
        .into()
    })
}

#[allow(clippy::too_many_arguments)]
/// Karpenter's `--min-values-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum MinValuesPolicy {
    #[value(name = "Strict")]
    Strict,
    #[value(name = "BestEffort")]
    BestEffort,
}

/// Karpenter's `--preference-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PreferencePolicy {
    #[value(name = "Respect")]
    Respect,
    #[value(name = "Ignore")]
    Ignore,
}

#[allow(clippy::too_many_arguments)] // one per `capstan plan` flag
fn plan(
    pods: Option<&str>,
    kubeconfig: Option<&str>,
    catalog: Option<&str>,
    nodepools: &[String],
    cluster: Option<&str>,
    strategy_name: &str,
    time_limit: f64,
    spot_share: f64,
    spot_prices: Option<&str>,
    preference_policy: PreferencePolicy,
    min_values_policy: MinValuesPolicy,
    output: Output,
) -> Result<()> {
    use capstan_cli::plan_cmd;
    let strategy = strategy(strategy_name)?;
    check_time_limit(time_limit)?;
    if !(0.0..=1.0).contains(&spot_share) || spot_share == 0.0 {
        return Err(InputError(format!(
            "--spot-max-pool-share: must be in (0, 1], got {spot_share}"
        ))
        .into());
    }
    let mut catalog = input::catalog(catalog)?;
    let spot = capstan_cli::spot::add(&mut catalog, spot_prices)?;
    let p = match (kubeconfig, pods) {
        (Some(kc), _) => {
            let live = capstan_cli::cluster_cmd::read_live(kc)?;
            let pools = if nodepools.is_empty() {
                live_pools(&live)?
            } else {
                plan_cmd::read_nodepools(nodepools)?
            };
            capstan_cli::cluster_cmd::plan_input(&live, pools, catalog)
        }
        (None, pods) => {
            let (mut pending, mut volumes) = plan_cmd::read_pods_and_volumes(pods.unwrap_or("-"))?;
            let nodepools = plan_cmd::read_nodepools(nodepools)?;
            let snapshot = match cluster {
                Some(c) => {
                    let (snap, more, v) = plan_cmd::read_cluster(c, &catalog)?;
                    pending.extend(more);
                    volumes.extend(v);
                    snap
                }
                None => Default::default(),
            };
            plan_cmd::PlanInput {
                pending: plan_cmd::with_volumes(pending, &volumes),
                snapshot,
                nodepools,
                catalog,
            }
        }
    };
    let mut p = p;
    if preference_policy == PreferencePolicy::Ignore {
        p.pending = p
            .pending
            .iter()
            .map(|pod| std::sync::Arc::new(pod.without_preferences()))
            .collect();
    }
    let options = capstan_pack::PackOptions {
        strategy,
        time_limit_seconds: time_limit,
        spot_max_pool_share: spot_share,
        relax_min_values: min_values_policy == MinValuesPolicy::BestEffort,
    };
    spot.report(&p.nodepools);
    let (r, ms) = plan_cmd::run(&p, &options)?;
    let v = plan_cmd::plan_json(&p, &r, ms);
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&v)?)),
        Output::Table => {
            let rows: Vec<Vec<String>> = v["nodeclaims"]
                .as_array()
                .expect("array")
                .iter()
                .map(|c| {
                    vec![
                        c["name"].as_str().unwrap_or("").to_string(),
                        c["instance_type"].as_str().unwrap_or("").to_string(),
                        c["capacity_type"].as_str().unwrap_or("").to_string(),
                        c["zone"].as_str().unwrap_or("").to_string(),
                        fixed(c["price_usd_per_hour"].as_f64().unwrap_or(0.0), 4),
                        c["pods"]
                            .as_array()
                            .map(|a| a.len())
                            .unwrap_or(0)
                            .to_string(),
                    ]
                })
                .collect();
            let mut out = table::render(
                &[
                    "NODECLAIM",
                    "INSTANCE TYPE",
                    "CAPACITY",
                    "ZONE",
                    "$/HOUR",
                    "PODS",
                ],
                &rows,
            );
            for b in v["existing"].as_array().expect("array") {
                out.push_str(&format!(
                    "existing {}: {} pods\n",
                    b["node"].as_str().unwrap_or(""),
                    b["pods"].as_array().map(|a| a.len()).unwrap_or(0)
                ));
            }
            for u in v["unschedulable"].as_array().expect("array") {
                out.push_str(&format!(
                    "unschedulable {}: {}\n",
                    u["pod"].as_str().unwrap_or(""),
                    u["reason"].as_str().unwrap_or("")
                ));
            }
            out.push_str(&format!(
                "total {} $/hour, lower bound {} $/hour ({} strategy, {:.1} ms)\n",
                fixed(r.total_price, 4),
                fixed(r.lower_bound, 4),
                r.strategy.name(),
                ms
            ));
            emit(&out)
        }
    }
}

fn bench_packing(
    sets: &str,
    catalog: Option<&str>,
    strategies: &[String],
    time_limit: f64,
    spot_prices: Option<&str>,
    output: Output,
) -> Result<()> {
    let strategies: Vec<capstan_pack::Strategy> = if strategies.is_empty() {
        vec![
            capstan_pack::Strategy::KarpenterFfd,
            capstan_pack::Strategy::Default,
            capstan_pack::Strategy::Optimal,
        ]
    } else {
        strategies
            .iter()
            .map(|s| strategy(s))
            .collect::<Result<_>>()?
    };
    let mut catalog = input::catalog(catalog)?;
    // The recorded sets plan on the built-in pool (on-demand): spot prices matter only to a
    // catalog or pool that offers spot, so no note is printed.
    let _ = capstan_cli::spot::add(&mut catalog, spot_prices)?;
    let rows = capstan_cli::plan_cmd::bench_packing(sets, catalog, &strategies, time_limit)?;
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&rows)?)),
        Output::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.set.clone(),
                        r.strategy.clone(),
                        r.pods.to_string(),
                        r.shapes.to_string(),
                        r.nodes.to_string(),
                        fixed(r.price_usd_per_hour, 4),
                        fixed(r.lower_bound_usd_per_hour, 4),
                        fixed(r.ratio_to_bound, 4),
                        fixed(r.gap, 4),
                        format!("{:.1}", r.solve_ms),
                        format!("{:.0}", r.peak_rss_mib),
                    ]
                })
                .collect();
            emit(&table::render(
                &[
                    "SET", "STRATEGY", "PODS", "SHAPES", "NODES", "$/HOUR", "BOUND", "RATIO",
                    "GAP", "MS", "PEAK MIB",
                ],
                &cells,
            ))
        }
    }
}

fn bench_simulate(scenario: Option<&str>, seed: u64, output: Output) -> Result<()> {
    use capstan_cli::simulate_cmd as sc;
    let compiled = sc::load(scenario)?;
    let o = sc::run_one(&compiled, seed, false, &mut |_| {});
    let s = &o.summary;
    let row = serde_json::json!({
        "scenario": s.scenario,
        "seed": s.seed,
        "simulated_seconds": s.simulated_seconds,
        "wall_seconds": s.wall_seconds,
        "simulated_per_wall_second": (s.simulated_seconds / s.wall_seconds.max(1e-9)).round(),
        "peak_nodes": s.peak_nodes,
        "peak_pods": s.peak_pods,
        "peak_rss_mib": sc::peak_rss_mib(),
        "controller_steps": o.passes.steps,
        "controller_seconds": (o.passes.seconds * 1000.0).round() / 1000.0,
        "slowest_plan": o.passes.slowest_plan,
        "slowest_evaluation": o.passes.slowest_evaluation,
    });
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&row)?)),
        Output::Table => {
            let rows: Vec<Vec<String>> = row
                .as_object()
                .expect("object")
                .iter()
                .map(|(k, v)| vec![k.clone(), v.to_string()])
                .collect();
            emit(&table::render(&["FIELD", "VALUE"], &rows))
        }
    }
}

fn bench_pass(
    nodes: usize,
    pods_per_node: usize,
    pending: usize,
    runs: usize,
    seed: u64,
    output: Output,
) -> Result<()> {
    if nodes == 0 || pods_per_node == 0 || pending == 0 || runs == 0 {
        return Err(InputError(
            "--nodes, --pods-per-node, --pending and --runs must be positive".into(),
        )
        .into());
    }
    let row = bench::run_pass(nodes, pods_per_node, pending, seed, runs);
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&row)?)),
        Output::Table => emit(&pass_table(&[row])),
    }
}

fn pass_table(rows: &[bench::PassRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.nodes.to_string(),
                r.pods.to_string(),
                r.pending.to_string(),
                fixed(r.plan_seconds, 4),
                fixed(r.evaluation_seconds, 4),
                fixed(r.seconds, 4),
                format!("{}/{}/{}", r.on_existing, r.on_new, r.unschedulable),
                r.new_claims.to_string(),
                r.commands.to_string(),
            ]
        })
        .collect();
    table::render(
        &[
            "NODES",
            "PODS",
            "PENDING",
            "PLAN S",
            "EVALUATION S",
            "PASS S",
            "EXISTING/NEW/NOWHERE",
            "CLAIMS",
            "COMMANDS",
        ],
        &cells,
    )
}

/// `large.yaml` scaled to `nodes` nodes (named for them), optionally cut to `duration`.
fn scaled_scenario(nodes: usize, duration: Option<&str>) -> Result<String> {
    use capstan_sim::scenario;
    if nodes == 0 {
        return Err(InputError("--nodes must be positive".into()).into());
    }
    let name = match nodes {
        10_000 => "xlarge-10000-nodes".to_string(),
        n => format!("large-{n}-nodes"),
    };
    let mut text = scenario::scaled(scenario::LARGE, nodes as f64 / 1000.0, &name)
        .map_err(|e| anyhow::anyhow!("scaling large.yaml: {e}"))?;
    if let Some(d) = duration {
        let secs = scenario::seconds(d).map_err(|e| InputError(format!("--duration: {e}")))?;
        if secs <= 0.0 {
            return Err(InputError(format!("--duration: {d:?} must be positive")).into());
        }
        let mut doc: serde_yaml::Value = serde_yaml::from_str(&text)?;
        doc["duration"] = serde_yaml::Value::String(d.to_string());
        text = serde_yaml::to_string(&doc)?;
    }
    if nodes == 10_000 && duration.is_none() {
        text = format!(
            "# The 1,000-node day ten times larger: 10,000+ nodes and 300,000+ pods at peak. Written by\n\
             # `capstan bench scale --print-scenario 10000` (large.yaml scaled by 10); a test keeps\n\
             # the two in step. `capstan bench scale` runs it for the scale curve.\n{text}"
        );
    }
    Ok(text)
}

/// Runs `capstan bench simulate` on each size's scenario in a child process.
fn bench_scale(nodes: &[usize], duration: Option<&str>, seed: u64, output: Output) -> Result<()> {
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("capstan-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let run = |n: usize| -> Result<serde_json::Value> {
        let path = dir.join(format!("scale-{n}.yaml"));
        std::fs::write(&path, scaled_scenario(n, duration)?)?;
        eprintln!("simulating {n} nodes…");
        let out = std::process::Command::new(&exe)
            .args(["bench", "simulate", "--output", "json", "--seed"])
            .arg(seed.to_string())
            .arg("--scenario")
            .arg(&path)
            .stderr(std::process::Stdio::inherit())
            .output()?;
        if !out.status.success() {
            anyhow::bail!("the {n}-node run failed ({})", out.status);
        }
        let mut row: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        row["nodes"] = n.into();
        eprintln!("timing one controller pass at {n} nodes…");
        row["pass"] = serde_json::to_value(bench::run_pass(n, 33, 1000, seed, 3))?;
        Ok(row)
    };
    let rows: Result<Vec<serde_json::Value>> = nodes.iter().map(|&n| run(n)).collect();
    std::fs::remove_dir_all(&dir).ok();
    let mut rows = rows?;
    let first_wall = rows
        .first()
        .and_then(|r| r["wall_seconds"].as_f64())
        .unwrap_or(0.0);
    for r in &mut rows {
        let wall = r["wall_seconds"].as_f64().unwrap_or(0.0);
        r["wall_vs_first"] = (((wall / first_wall.max(1e-9)) * 100.0).round() / 100.0).into();
    }
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&rows)?)),
        Output::Table => {
            let pass = |p: &serde_json::Value| match p.as_object() {
                Some(_) => format!(
                    "{:.3} s ({} at {} nodes/{} pods)",
                    p["seconds"].as_f64().unwrap_or(0.0),
                    p["work"],
                    p["nodes"],
                    p["pods"]
                ),
                None => "-".into(),
            };
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r["nodes"].to_string(),
                        r["peak_nodes"].to_string(),
                        r["peak_pods"].to_string(),
                        fixed(r["wall_seconds"].as_f64().unwrap_or(0.0), 1),
                        format!("{}×", r["wall_vs_first"]),
                        r["simulated_per_wall_second"].to_string(),
                        r["peak_rss_mib"].to_string(),
                        fixed(r["controller_seconds"].as_f64().unwrap_or(0.0), 1),
                        pass(&r["slowest_plan"]),
                        pass(&r["slowest_evaluation"]),
                        format!(
                            "{} + {} s ({} pods)",
                            fixed(r["pass"]["plan_seconds"].as_f64().unwrap_or(0.0), 3),
                            fixed(r["pass"]["evaluation_seconds"].as_f64().unwrap_or(0.0), 3),
                            r["pass"]["pods"]
                        ),
                    ]
                })
                .collect();
            emit(&table::render(
                &[
                    "NODES",
                    "PEAK NODES",
                    "PEAK PODS",
                    "WALL S",
                    "VS FIRST",
                    "SIM S/WALL S",
                    "PEAK MIB",
                    "CONTROLLER S",
                    "SLOWEST PLAN (PODS)",
                    "SLOWEST EVALUATION (NODES)",
                    "PASS: 1,000 PENDING + EVALUATION",
                ],
                &cells,
            ))
        }
    }
}

fn simulate(
    scenario: Option<&str>,
    seed: u64,
    out: &str,
    seeds: Option<u64>,
    faults: bool,
    shard: Option<(u64, u64)>,
    output: Output,
) -> Result<()> {
    use capstan_cli::simulate_cmd as sc;
    use indicatif::{ProgressBar, ProgressStyle};
    let compiled = sc::load(scenario)?;
    let hidden = output == Output::Json;
    if let Some(n) = seeds {
        let (seed, n) = match shard {
            Some((i, k)) => sc::shard_range(seed, n, i, k),
            None => (seed, n),
        };
        let bar = if hidden {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(n)
        };
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} seeds, {elapsed} elapsed")
                .expect("template"),
        );
        bar.set_message(format!("simulating {}", compiled.scenario.name));
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let mut r = sc::run_seeds(&compiled, scenario, seed, n, faults, workers, &|| {
            bar.inc(1)
        });
        r.shard = shard.map(|(i, k)| format!("{i}/{k}"));
        bar.finish_and_clear();
        return seeds_report(&r, output);
    }
    let total = compiled.duration as u64;
    let bar = if hidden {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} simulated s, {elapsed} elapsed")
            .expect("template"),
    );
    bar.set_message(format!(
        "simulating {} (seed {seed})",
        compiled.scenario.name
    ));
    let o = sc::run_one(&compiled, seed, faults, &mut |t| bar.set_position(t as u64));
    bar.finish_and_clear();
    let dir = std::path::Path::new(out);
    sc::write(dir, &o).map_err(|e| anyhow::anyhow!("writing {}: {e}", dir.display()))?;
    let s = &o.summary;
    match output {
        Output::Json => emit(&sc::summary_json(s))?,
        Output::Table => {
            let v = serde_json::to_value(s)?;
            let rows: Vec<Vec<String>> = v
                .as_object()
                .expect("object")
                .iter()
                .filter(|(k, _)| k.as_str() != "faults_injected")
                .map(|(k, v)| vec![k.clone(), v.to_string()])
                .collect();
            let mut text = table::render(&["FIELD", "VALUE"], &rows);
            text.push_str(&format!(
                "wrote {} and {}\n",
                dir.join("summary.json").display(),
                dir.join("report.html").display()
            ));
            emit(&text)?;
        }
    }
    let failures = s.failures();
    if !failures.is_empty() {
        anyhow::bail!(
            "invariants broken: {}; replay: capstan simulate --seed {seed}{}",
            failures.join("; "),
            if faults { " --faults" } else { "" }
        );
    }
    Ok(())
}

/// A positive Go duration (`1s`, `500ms`, `1m30s`) as seconds.
fn go_duration(s: &str) -> std::result::Result<f64, String> {
    match capstan_model::time::parse_duration(s)? {
        Some(secs) if secs > 0 => Ok(secs as f64),
        Some(_) => Err(format!("{s:?}: must be positive")),
        None => Err(format!("{s:?}: must be a duration, not Never")),
    }
}

#[allow(clippy::too_many_arguments)]
/// The live cluster's NodePools, or why there are none to plan with.
fn live_pools(live: &capstan_kube::whatif::Live) -> Result<Vec<capstan_model::NodePool>> {
    if live.nodepools.is_empty() {
        return Err(InputError(
            "the cluster has no NodePool (capstan.dev/v1 or karpenter.sh/v1): pass --nodepool"
                .into(),
        )
        .into());
    }
    Ok(live.nodepools.clone())
}

#[allow(clippy::too_many_arguments)]
fn consolidate(
    cluster: Option<&str>,
    kubeconfig: Option<&str>,
    catalog: Option<&str>,
    nodepools: &[String],
    pdbs: &[String],
    now: Option<&str>,
    until_stable: bool,
    spot_prices: Option<&str>,
    gates: capstan_cli::cluster_cmd::FeatureGates,
    ignore_preferences: bool,
    output: Output,
) -> Result<()> {
    use capstan_cli::consolidate_cmd as cc;
    let now = cc::now(now)?;
    let mut catalog = input::catalog(catalog)?;
    let spot = capstan_cli::spot::add(&mut catalog, spot_prices)?;
    let (pools, mut state, catalog) = match kubeconfig {
        Some(kc) => {
            let live = capstan_cli::cluster_cmd::read_live(kc)?;
            let pools = if nodepools.is_empty() {
                live_pools(&live)?
            } else {
                capstan_cli::plan_cmd::read_nodepools(nodepools)?
            };
            // Replacements are priced and sized as each pool's node class sees the types.
            let (catalog, warnings) =
                capstan_cli::cluster_cmd::pool_catalog(&live, &pools, catalog);
            for w in &warnings {
                tracing::warn!("{w}");
            }
            let state = capstan_cli::cluster_cmd::consolidate_input(&live, &catalog);
            (pools, state, catalog)
        }
        None => {
            let state = cc::read(cluster.unwrap_or("-"), pdbs, &catalog)?;
            (
                capstan_cli::plan_cmd::read_nodepools(nodepools)?,
                state,
                catalog,
            )
        }
    };
    spot.report(&pools);
    let mut rounds = Vec::new();
    let mut evaluations = Vec::new();
    for round in 0..50 {
        let e = cc::evaluate_now(
            &state,
            &pools,
            &catalog,
            now,
            gates.spot_to_spot_consolidation,
            ignore_preferences,
        );
        rounds.push(cc::evaluation_json(&e, &catalog));
        let done = e.commands.is_empty() || !until_stable;
        if !done {
            cc::apply(&mut state, &e, &catalog, round, now);
        }
        evaluations.push(e);
        if done {
            break;
        }
    }
    let v = if until_stable {
        serde_json::json!({"rounds": rounds})
    } else {
        rounds.remove(0)
    };
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&v)?)),
        Output::Table => {
            let mut out = String::new();
            for (r, e) in evaluations.iter().enumerate() {
                if until_stable {
                    out.push_str(&format!("round {r}\n"));
                }
                let rows: Vec<Vec<String>> = e
                    .commands
                    .iter()
                    .map(|c| {
                        vec![
                            c.reason.cli_name(),
                            c.candidates.join(","),
                            c.replacements
                                .iter()
                                .map(|x| {
                                    format!(
                                        "{}/{}/{}",
                                        catalog.instance_types[x.instance_type].name,
                                        x.capacity_type,
                                        x.zone
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join(","),
                            c.moves.len().to_string(),
                            fixed(c.savings, 4),
                        ]
                    })
                    .collect();
                out.push_str(&table::render(
                    &["REASON", "CANDIDATES", "REPLACEMENTS", "MOVES", "SAVES $/H"],
                    &rows,
                ));
                for b in &e.blocked {
                    out.push_str(&format!("blocked {}: {}\n", b.node, b.reason));
                }
                out.push_str(&format!(
                    "{} $/hour → {} $/hour\n",
                    fixed(e.before, 4),
                    fixed(e.after, 4)
                ));
            }
            emit(&out)
        }
    }
}

#[cfg(feature = "aws")]
fn catalog_from_aws(out: Option<&str>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let file = rt.block_on(async {
        let cloud = capstan_aws::AwsCloud::from_env(
            capstan_aws::Settings::default(),
            std::sync::Arc::new(capstan_aws::NodeClassMap::default()),
            std::sync::Arc::new(capstan_cloud::SystemClock),
        )
        .await;
        cloud.region_catalog().await
    })?;
    let text = serde_json::to_string_pretty(&file)?;
    match out {
        Some(path) => {
            std::fs::write(path, text + "\n").with_context(|| format!("writing {path}"))?;
            eprintln!("wrote {path}: {} instance types", file.instance_types.len());
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{text}")?;
        }
    }
    Ok(())
}

#[cfg(not(feature = "aws"))]
fn catalog_from_aws(_out: Option<&str>) -> anyhow::Result<()> {
    anyhow::bail!("--from-aws: this build has no AWS provider (the `aws` feature)")
}

/// Prints a many-seed report; an error when a seed broke an invariant.
fn seeds_report(r: &capstan_cli::simulate_cmd::SeedsReport, output: Output) -> Result<()> {
    let faults = r.faults;
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&r)?))?,
        Output::Table => {
            let mut text = format!(
                "{} seeds of {} ({}): {} passed, {} failed in {:.1} s\n",
                r.seeds,
                r.scenario,
                if faults { "random faults" } else { "no faults" },
                r.passed,
                r.failed.len(),
                r.wall_seconds
            );
            text.push_str(&format!(
                "totals: pods lost {}, leaked instances {}, double launches {}, budget violations {}, PDB violations {}, stuck pods {}, spot interruptions {}, controller restarts {}, writes refused by preconditions {}, writes from deposed leaders {}\n",
                r.pods_lost,
                r.leaked_instances,
                r.double_launches,
                r.budget_violations,
                r.pdb_violations,
                r.pods_stuck,
                r.spot_interruptions,
                r.controller_restarts,
                r.writes_refused_by_preconditions,
                r.writes_from_deposed_leaders
            ));
            for f in &r.failed {
                text.push_str(&format!(
                    "seed {} failed: {}\n  replay: {}\n",
                    f.seed,
                    f.failures.join("; "),
                    f.replay
                ));
            }
            emit(&text)?;
        }
    }
    if !r.failed.is_empty() {
        anyhow::bail!("{} of {} seeds broke an invariant", r.failed.len(), r.seeds);
    }
    Ok(())
}

/// `capstan campaign merge`: the shards' reports as one.
fn campaign_merge(files: &[String], output: Output) -> Result<()> {
    use capstan_cli::simulate_cmd as sc;
    let mut shards = Vec::with_capacity(files.len());
    for f in files {
        let text = input::read(f)?;
        // The file as a whole, else its last line that is a report (a pod's log can hold
        // lines before it).
        let r: sc::SeedsReport = serde_json::from_str(&text)
            .or_else(|e| {
                text.lines()
                    .rev()
                    .find_map(|l| serde_json::from_str(l.trim()).ok())
                    .ok_or(e)
            })
            .map_err(|e| {
                InputError(format!(
                    "{f}: not a shard report (simulate --seeds … --shard I/K --output json): {e}"
                ))
            })?;
        shards.push((f.clone(), r));
    }
    let merged = sc::merge(&shards).map_err(|e| InputError(e.to_string()))?;
    seeds_report(&merged, output)
}

fn main() -> ExitCode {
    // kube's TLS (ring) and the AWS SDK's (aws-lc-rs) are both linked: say which one rustls
    // uses for the process, or the first TLS connection panics.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Simulate { .. } | Command::Bench { .. }
    ) {
        keep_freed_memory();
    }
    // In a simulation the controllers' warnings are about faults the simulator injects on
    // purpose; the summary counts them. `RUST_LOG` shows them.
    let default = match cli.command {
        Command::Simulate { .. } | Command::Bench { .. } => "warn,capstan_controller=error",
        Command::Controller { .. } => "info",
        _ => "warn",
    };
    // An empty RUST_LOG means "not set".
    let filter = || match std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        Some(v) => tracing_subscriber::EnvFilter::try_new(v).unwrap_or_else(|_| default.into()),
        None => default.into(),
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr);
    if matches!(cli.command, Command::Controller { .. }) {
        // The controller logs JSON lines, one field per structured field.
        logs.json().init();
    } else {
        logs.init();
    }
    let result = match cli.command {
        Command::Simulate {
            scenario,
            seed,
            out,
            seeds,
            faults,
            shard,
            output,
        } => simulate(
            scenario.as_deref(),
            seed,
            &out,
            seeds,
            faults,
            shard,
            output,
        ),
        Command::Campaign {
            which: CampaignCommand::Merge { files, output },
        } => campaign_merge(&files, output),
        Command::Plan {
            pods,
            kubeconfig,
            catalog,
            nodepools,
            cluster,
            strategy,
            time_limit,
            spot_max_pool_share,
            spot_prices,
            preference_policy,
            min_values_policy,
            output,
        } => plan(
            pods.as_deref(),
            kubeconfig.as_deref(),
            catalog.as_deref(),
            &nodepools,
            cluster.as_deref(),
            &strategy,
            time_limit,
            spot_max_pool_share,
            spot_prices.as_deref(),
            preference_policy,
            min_values_policy,
            output,
        ),
        Command::Consolidate {
            cluster,
            kubeconfig,
            catalog,
            nodepools,
            pdbs,
            now,
            until_stable,
            spot_prices,
            feature_gates,
            preference_policy,
            output,
        } => consolidate(
            cluster.as_deref(),
            kubeconfig.as_deref(),
            catalog.as_deref(),
            &nodepools,
            &pdbs,
            now.as_deref(),
            until_stable,
            spot_prices.as_deref(),
            feature_gates,
            preference_policy == PreferencePolicy::Ignore,
            output,
        ),
        Command::Bench { which } => match which {
            BenchCommand::Scheduling {
                pods,
                instance_types,
                seed,
                runs,
                output,
            } => bench_scheduling(&pods, instance_types, seed, runs, output),
            BenchCommand::Simulate {
                scenario,
                seed,
                output,
            } => bench_simulate(scenario.as_deref(), seed, output),
            BenchCommand::Scale {
                nodes,
                duration,
                seed,
                print_scenario,
                output,
            } => match print_scenario {
                Some(n) => scaled_scenario(n, duration.as_deref()).and_then(|t| emit(&t)),
                None => bench_scale(&nodes, duration.as_deref(), seed, output),
            },
            BenchCommand::Pass {
                nodes,
                pods_per_node,
                pending,
                runs,
                seed,
                output,
            } => bench_pass(nodes, pods_per_node, pending, runs, seed, output),
            BenchCommand::Disruption {
                nodes,
                pods_per_node,
                seed,
                output,
            } => {
                let row = bench::run_disruption(nodes, pods_per_node, seed);
                match output {
                    Output::Json => emit(&format!(
                        "{}\n",
                        serde_json::to_string_pretty(&row).unwrap_or_default()
                    )),
                    Output::Table => emit(&table::render(
                        &[
                            "NODES",
                            "PODS",
                            "SECONDS",
                            "COMMANDS",
                            "BLOCKED",
                            "SAVES $/H",
                        ],
                        &[vec![
                            row.nodes.to_string(),
                            row.pods.to_string(),
                            fixed(row.seconds, 4),
                            row.commands.to_string(),
                            row.blocked.to_string(),
                            fixed(row.savings_usd_per_hour, 4),
                        ]],
                    )),
                }
            }
            BenchCommand::Packing {
                sets,
                catalog,
                strategies,
                time_limit,
                spot_prices,
                output,
            } => bench_packing(
                &sets,
                catalog.as_deref(),
                &strategies,
                time_limit,
                spot_prices.as_deref(),
                output,
            ),
        },
        Command::Hpa {
            which: HpaCommand::Decide { file, output },
        } => hpa_decide(&file, output),
        Command::Controller {
            kubeconfig,
            provider,
            leader_elect,
            lease_namespace,
            lease_name,
            identity,
            health_addr,
            metrics_addr,
            kube_api_qps,
            kube_api_burst,
            scheduler_names,
            expendable_priority_cutoff,
            preference_policy,
            min_values_policy,
            cluster_name,
            cluster_endpoint,
            interruption_queue,
            batch_idle,
            batch_max,
            feature_gates,
        } => capstan_cli::cluster_cmd::controller(capstan_cli::cluster_cmd::ControllerArgs {
            kubeconfig,
            provider,
            leader_elect,
            lease_namespace,
            lease_name,
            identity,
            health_addr,
            metrics_addr,
            kube_api_qps,
            kube_api_burst,
            scheduler_names,
            expendable_priority_cutoff,
            ignore_preferences: preference_policy == PreferencePolicy::Ignore,
            relax_min_values: min_values_policy == MinValuesPolicy::BestEffort,
            cluster_name,
            cluster_endpoint,
            interruption_queue,
            batch_idle,
            batch_max,
            feature_gates,
        }),
        Command::Crds { out } => crds(out.as_deref()),
        Command::Catalog { from_aws: _, out } => catalog_from_aws(out.as_deref()),
        Command::Cloud {
            which:
                CloudCommand::Check {
                    config,
                    catalog,
                    output,
                },
        } => cloud_check(&config, catalog.as_deref(), output),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            if e.downcast_ref::<InputError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
