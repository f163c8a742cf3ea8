//! End-to-end tests on a real control plane: etcd, kube-apiserver, kube-scheduler,
//! kube-controller-manager and kwok, built from upstream and started on 127.0.0.1 by
//! `scripts/control-plane.sh up` (`bash .ci/run` does it). The real kube-scheduler binds the
//! pods, the real kube-controller-manager runs ReplicaSets, PDBs and node lifecycle, kwok plays
//! the kubelets, and `capstan controller` runs as a process, as a user runs it.
//!
//! These tests are `#[ignore]`d, so a plain `cargo test` reports them as ignored (skipped),
//! never as passed; `.ci/run` starts the control plane and runs them with `--include-ignored`.
//! They share one cluster, so they run one at a time (a lock) and each starts from a clean
//! cluster.

#[cfg(feature = "aws")]
mod aws;
mod crds;
mod drain;
mod failover;
mod gpu;
mod headroom;
mod nominate;
mod pending;
mod scale;
mod selectors;
mod volumes;
mod whatif;

use serde_json::Value;
use std::io::Write as _;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub const WHY: &str =
    "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it";

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo().join("scripts/control-plane.sh"))
        .args(args)
        .output()
        .expect("scripts/control-plane.sh runs");
    assert!(
        out.status.success(),
        "scripts/control-plane.sh {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The shared cluster, held by one test at a time.
pub struct Cluster {
    pub kubeconfig: String,
    /// What `capstan controller` runs with: a token of the Helm chart's ServiceAccount,
    /// holding exactly the chart's RBAC (`deploy/chart/golden/fake.yaml`).
    pub controller_kubeconfig: String,
    kubectl: String,
    _turn: MutexGuard<'static, ()>,
}

/// A `capstan controller` process; killed when dropped.
pub struct Capstan {
    child: Child,
    pub log: std::path::PathBuf,
    /// Where it serves `/metrics`.
    pub metrics_addr: String,
}

impl Capstan {
    /// SIGKILL: the process dies mid-whatever, as a node failure kills it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and how it exited.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
        self.child.wait().expect("exited")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// One sample of a Prometheus text exposition.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of a Prometheus text exposition (label values without escapes, as capstan's
/// are).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line
            .rsplit_once(' ')
            .expect("a sample line ends in its value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or(f64::NAN),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), Default::default()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels close");
                let mut labels = std::collections::BTreeMap::new();
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("k=\"v\"");
                    labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
                (name.to_string(), labels)
            }
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

impl Capstan {
    /// `GET /metrics`, as text.
    pub fn scrape(&self) -> String {
        use std::io::{Read, Write};
        let mut sock = std::net::TcpStream::connect(&self.metrics_addr).expect("the metrics port");
        write!(
            sock,
            "GET /metrics HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
            self.metrics_addr
        )
        .expect("a request");
        let mut resp = String::new();
        sock.read_to_string(&mut resp).expect("a response");
        let (head, body) = resp.split_once("\r\n\r\n").expect("headers end");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        body.to_string()
    }
}

/// The sum of the samples named `name` whose labels include every `(key, value)` of `with`.
pub fn metric_sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

impl Drop for Capstan {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Cluster {
    /// The cluster, cleaned, with capstan's CRDs applied. Panics (never passes) without one.
    pub fn get() -> Cluster {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let kubeconfig = std::env::var("CAPSTAN_E2E_KUBECONFIG")
            .unwrap_or_else(|_| "/tmp/capstan-cp/kubeconfig".into());
        assert!(
            std::path::Path::new(&kubeconfig).exists(),
            "no control plane at {kubeconfig}: run `scripts/control-plane.sh up` first"
        );
        let bin = std::env::var("CAPSTAN_E2E_BIN").unwrap_or_else(|_| script(&["bin"]));
        let mut c = Cluster {
            kubeconfig: kubeconfig.clone(),
            controller_kubeconfig: kubeconfig,
            kubectl: format!("{bin}/kubectl"),
            _turn: turn,
        };
        c.controller_kubeconfig = c.chart_service_account();
        // The CRDs first: a fresh cluster has none, and the clean-up lists their kinds.
        c.ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &repo().join("crds").display().to_string(),
        ]);
        c.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/nodepools.capstan.dev",
            "crd/nodeclaims.capstan.dev",
            "crd/fakenodeclasses.capstan.dev",
            "crd/fakeinstances.capstan.dev",
        ]);
        c.reset();
        c
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("written");
        }
        child.wait_with_output().expect("kubectl finishes")
    }

    /// kubectl, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args, None);
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    pub fn apply(&self, yaml: &str) {
        let out = self.kubectl(&["apply", "-f", "-"], Some(yaml));
        assert!(
            out.status.success(),
            "kubectl apply: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl get ARGS -o json`.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut a: Vec<&str> = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.ok(&a)).expect("JSON from kubectl")
    }

    pub fn items(&self, args: &[&str]) -> Vec<Value> {
        self.get_json(args)["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Removes everything a test may leave: capstan's objects (finalizers released first),
    /// Nodes, the test namespaces, PersistentVolumes and StorageClasses, the Lease, Karpenter's
    /// NodePools.
    pub fn reset(&self) {
        for kind in ["nodeclaims.capstan.dev", "nodes"] {
            for o in self.items(&[kind]) {
                let name = o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let _ = self.kubectl(
                    &[
                        "patch",
                        kind,
                        &name,
                        "--type",
                        "merge",
                        "-p",
                        r#"{"metadata":{"finalizers":null}}"#,
                    ],
                    None,
                );
            }
        }
        for kind in [
            "nodeclaims.capstan.dev",
            "nodepools.capstan.dev",
            "fakenodeclasses.capstan.dev",
            "fakeinstances.capstan.dev",
            "awsnodeclasses.capstan.dev",
            "ec2nodeclasses.capstan.dev",
            "nodepools.karpenter.sh",
        ] {
            let _ = self.kubectl(&["delete", kind, "--all", "--wait=false"], None);
        }
        let _ = self.kubectl(&["delete", "nodes", "--all", "--wait=false"], None);
        let _ = self.kubectl(&["delete", "pv", "--all", "--wait=false"], None);
        let _ = self.kubectl(
            &["delete", "volumeattachments", "--all", "--wait=false"],
            None,
        );
        let _ = self.kubectl(
            &[
                "delete",
                "storageclass",
                "-l",
                "capstan-e2e=true",
                "--wait=false",
            ],
            None,
        );
        // Headroom placeholders an earlier test's capstan made.
        let _ = self.kubectl(
            &[
                "delete",
                "pods",
                "-n",
                "kube-system",
                "-l",
                "capstan.dev/headroom",
                "--wait=false",
            ],
            None,
        );
        let _ = self.kubectl(
            &[
                "delete",
                "lease",
                "capstan",
                "-n",
                "kube-system",
                "--ignore-not-found",
            ],
            None,
        );
        for ns in self.items(&["namespaces"]) {
            let name = ns["metadata"]["name"].as_str().unwrap_or_default();
            if name.starts_with("e2e-") {
                let _ = self.kubectl(&["delete", "namespace", name, "--wait=false"], None);
            }
        }
        wait_for("a clean cluster", Duration::from_secs(60), || {
            let left = self.items(&["nodes"]).len()
                + self.items(&["nodeclaims.capstan.dev"]).len()
                + self.items(&["fakeinstances.capstan.dev"]).len();
            (left == 0).then_some(())
        });
    }

    /// A fresh namespace for the test's workloads.
    pub fn namespace(&self, name: &str) -> String {
        let ns = format!("e2e-{name}");
        wait_for("the old namespace gone", Duration::from_secs(120), || {
            let out = self.kubectl(&["get", "namespace", &ns], None);
            (!out.status.success()).then_some(())
        });
        self.ok(&["create", "namespace", &ns]);
        wait_for(
            "the namespace's service account",
            Duration::from_secs(30),
            || {
                self.kubectl(&["-n", &ns, "get", "serviceaccount", "default"], None)
                    .status
                    .success()
                    .then_some(())
            },
        );
        ns
    }

    /// Starts `capstan controller` with `RUST_LOG=filter`.
    pub fn capstan_with_log(&self, name: &str, filter: &str) -> Capstan {
        self.spawn_capstan(name, &[], filter)
    }

    /// Starts `capstan controller` as a user would.
    pub fn capstan(&self, name: &str, extra: &[&str]) -> Capstan {
        let filter = std::env::var("CAPSTAN_E2E_LOG").unwrap_or_else(|_| "info".into());
        self.spawn_capstan(name, extra, &filter)
    }

    /// Starts `capstan controller` with extra environment variables.
    pub fn capstan_env(&self, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Capstan {
        let filter = std::env::var("CAPSTAN_E2E_LOG").unwrap_or_else(|_| "info".into());
        self.spawn(name, extra, &filter, env)
    }

    fn spawn_capstan(&self, name: &str, extra: &[&str], filter: &str) -> Capstan {
        self.spawn(name, extra, filter, &[])
    }

    /// Applies the chart's ServiceAccount, ClusterRole, Role and bindings (as the fake values
    /// render them, in kube-system) and writes a kubeconfig holding a token of that account.
    fn chart_service_account(&self) -> String {
        let golden = std::fs::read_to_string(repo().join("deploy/chart/golden/fake.yaml"))
            .expect("the chart's rendering");
        let rbac: Vec<String> = golden
            .split("\n---")
            .filter(|d| {
                d.lines().any(|l| {
                    [
                        "kind: ServiceAccount",
                        "kind: ClusterRole",
                        "kind: ClusterRoleBinding",
                        "kind: Role",
                        "kind: RoleBinding",
                        "kind: PriorityClass",
                    ]
                    .contains(&l)
                })
            })
            .map(|d| format!("---\n{}\n", d.trim_start_matches("---")))
            .collect();
        assert_eq!(
            rbac.len(),
            6,
            "the chart renders 5 RBAC objects and the headroom PriorityClass"
        );
        let out = self.kubectl(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&rbac.concat()),
        );
        assert!(
            out.status.success(),
            "applying the chart's RBAC: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let token = self.ok(&[
            "create",
            "token",
            "capstan",
            "-n",
            "kube-system",
            "--duration=4h",
        ]);
        let view: Value = serde_json::from_str(&self.ok(&[
            "config",
            "view",
            "--raw",
            "--minify",
            "--flatten",
            "-o",
            "json",
        ]))
        .expect("kubeconfig json");
        let cluster = &view["clusters"][0]["cluster"];
        let kc = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {
                "server": cluster["server"],
                "certificate-authority-data": cluster["certificate-authority-data"],
            }}],
            "users": [{"name": "capstan", "user": {"token": token.trim()}}],
            "contexts": [{"name": "capstan", "context": {"cluster": "e2e", "user": "capstan"}}],
            "current-context": "capstan",
        });
        let dir = repo().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).expect("a log dir");
        let path = dir.join("capstan-sa.kubeconfig");
        std::fs::write(&path, kc.to_string()).expect("a kubeconfig");
        path.display().to_string()
    }

    fn spawn(&self, name: &str, extra: &[&str], filter: &str, env: &[(&str, &str)]) -> Capstan {
        let dir = repo().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).expect("a log dir");
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("a log file");
        let health = format!("127.0.0.1:{}", free_port());
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let mut args = vec![
            "controller".to_string(),
            "--kubeconfig".into(),
            self.controller_kubeconfig.clone(),
            "--identity".into(),
            name.into(),
            "--health-addr".into(),
            health,
            "--metrics-addr".into(),
            metrics_addr.clone(),
            "--lease-namespace".into(),
            "kube-system".into(),
            "--kube-api-qps".into(),
            "200".into(),
            "--kube-api-burst".into(),
            "400".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(&args)
            .envs(env.iter().copied())
            .env("RUST_LOG", filter)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("capstan runs");
        Capstan {
            child,
            log,
            metrics_addr,
        }
    }

    /// `capstan ARGS` with this cluster's kubeconfig; its output.
    pub fn capstan_cli(&self, args: &[&str]) -> Output {
        let mut a: Vec<&str> = args.to_vec();
        a.extend_from_slice(&["--kubeconfig", &self.kubeconfig]);
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(&a)
            .output()
            .expect("capstan runs")
    }

    /// The fake node class and a NodePool over a few m7i/c7i types.
    pub fn default_pool(&self, extra_spec: &str) {
        self.pool(
            "m7i.large, m7i.xlarge, m7i.2xlarge, m7i.4xlarge, c7i.large, c7i.xlarge, c7i.2xlarge",
            extra_spec,
        );
    }

    /// The fake node class and a NodePool over `types` (a YAML list's items), on-demand
    /// unless `extra_spec` says otherwise: a NodePool that leaves the capacity type open goes
    /// spot (as in Karpenter v1), whose fake prices drift and are not the catalog's.
    pub fn pool(&self, types: &str, extra_spec: &str) {
        let capacity = if extra_spec.contains("capacity-type") {
            ""
        } else {
            "      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n"
        };
        self.apply(&format!(
            r#"
apiVersion: capstan.dev/v1
kind: FakeNodeClass
metadata: {{name: default}}
spec: {{bootDelay: 2s}}
---
apiVersion: capstan.dev/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {{group: capstan.dev, kind: FakeNodeClass, name: default}}
      requirements:
      - {{key: node.kubernetes.io/instance-type, operator: In, values: [{types}]}}
{capacity}{extra_spec}
"#
        ));
    }

    /// A Deployment of `replicas` pods asking for `cpu` and `memory` each, plus `extra` pod
    /// spec lines (indented for the pod spec).
    pub fn deployment(&self, ns: &str, name: &str, replicas: u32, cpu: &str, extra: &str) {
        self.apply(&format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{{name: c, image: fake, resources: {{requests: {{cpu: {cpu}, memory: 256Mi}}}}}}]
{extra}
"#
        ));
    }

    /// Pods of `app` in `ns` by phase.
    pub fn phases(&self, ns: &str, app: &str) -> Vec<(String, String, String)> {
        self.items(&["pods", "-n", ns, "-l", &format!("app={app}")])
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["status"]["phase"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["spec"]["nodeName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect()
    }

    pub fn running(&self, ns: &str, app: &str) -> usize {
        self.phases(ns, app)
            .iter()
            .filter(|(_, phase, _)| phase == "Running")
            .count()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        self.reset();
    }
}

/// Polls `f` every half second until it gives a value, or fails the test after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {:?} waiting for {what}",
            timeout
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
