//! `pkg/controllers/provisioning/scheduling/topology_test.go`: topology spread, in rounds. A
//! round is one `capstan plan`; its NodeClaims become Ready nodes holding their pods, and the
//! next round plans against them (Karpenter's `ExpectProvisioned` binds the pods it placed).

use super::*;

pub const TOPOLOGY: &str = "pkg/controllers/provisioning/scheduling/topology_test.go";

/// Karpenter's fake cloud provider's instance types when a test sets none.
pub fn default_types() -> Vec<FakeType> {
    let five = default_offerings;
    let mut gpu_a = FakeType::new("gpu-vendor-instance-type", "amd64", 4.0, 4.0);
    gpu_a.extended = Some(("fake.com/vendor-a", 2));
    gpu_a.gpu = true;
    let mut gpu_b = FakeType::new("gpu-vendor-b-instance-type", "amd64", 4.0, 4.0);
    gpu_b.extended = Some(("fake.com/vendor-b", 2));
    gpu_b.gpu = true;
    let mut single = FakeType::new("single-pod-instance-type", "amd64", 4.0, 4.0);
    single.pods = 1;
    vec![
        five(FakeType::new("default-instance-type", "amd64", 4.0, 4.0)),
        five(FakeType::new("small-instance-type", "amd64", 2.0, 2.0)),
        five(gpu_a),
        five(gpu_b),
        five(FakeType::new("arm-instance-type", "arm64", 16.0, 128.0)),
        five(single),
    ]
}

/// `fake.NewInstanceType`'s offerings when a test gives none: spot in zones 1 and 2,
/// on-demand in all three, at the fake price.
pub fn default_offerings(t: FakeType) -> FakeType {
    let p = fake_price(t.cpu, t.mem_gib) + if t.gpu { 1.0 } else { 0.0 };
    t.offering("spot", "test-zone-1", p)
        .offering("spot", "test-zone-2", p)
        .offering("on-demand", "test-zone-1", p)
        .offering("on-demand", "test-zone-2", p)
        .offering("on-demand", "test-zone-3", p)
}

/// `fake.InstanceTypes(n)`: `fake-it-i` with i+1 CPUs, 2(i+1) GiB and 10(i+1) pods.
pub fn fake_instance_types(n: usize) -> Vec<FakeType> {
    (0..n)
        .map(|i| {
            let mut t = FakeType::new(
                &format!("fake-it-{i}"),
                "amd64",
                (i + 1) as f64,
                2.0 * (i + 1) as f64,
            );
            t.pods = 10 * (i as i64 + 1);
            default_offerings(t)
        })
        .collect()
}

/// The suite's BeforeEach NodePool: any capacity type.
fn any_capacity() -> Vec<Value> {
    vec![json!({"key": "karpenter.sh/capacity-type", "operator": "Exists"})]
}

fn zones(z: &[&str]) -> Vec<Value> {
    vec![req("topology.kubernetes.io/zone", "In", z)]
}

/// A NodePool whose template labels the nodes.
fn labelled(name: &str, requirements: Vec<Value>, labels: Value) -> Value {
    let mut p = nodepool(name, requirements);
    p["spec"]["template"]["metadata"] = json!({ "labels": labels });
    p
}

pub fn spread(key: &str, max_skew: i32, selector: bool) -> Value {
    spread_when(key, max_skew, selector, "DoNotSchedule")
}

fn spread_when(key: &str, max_skew: i32, selector: bool, when: &str) -> Value {
    let mut c = json!({"topologyKey": key, "whenUnsatisfiable": when, "maxSkew": max_skew});
    if selector {
        c["labelSelector"] = json!({"matchLabels": {"test": "test"}});
    }
    c
}

/// Pods the cluster holds and the rounds made, and what a round is asked to plan.
pub struct Session {
    dir: PathBuf,
    pub types: Vec<FakeType>,
    pub nodes: Vec<Value>,
    pub bound: Vec<Value>,
    /// Further objects of the cluster (PersistentVolumes, claims).
    pub extra: Vec<Value>,
    /// Further `capstan plan` flags (Karpenter's operator options).
    pub flags: Vec<String>,
    rounds: usize,
    pods: usize,
}

impl Session {
    pub fn new(dir: &Path, types: Vec<FakeType>) -> Session {
        Session {
            dir: dir.to_path_buf(),
            types,
            nodes: Vec::new(),
            bound: Vec::new(),
            extra: Vec::new(),
            flags: Vec::new(),
            rounds: 0,
            pods: 0,
        }
    }

    /// A pending pod: `labels`, `cpu` request, topology spread constraints and node selector.
    pub fn pod(
        &mut self,
        labels: Value,
        cpu: Option<&str>,
        tsc: Vec<Value>,
        selector: Value,
    ) -> Value {
        self.pod_req(labels, cpu, tsc, selector, json!([]))
    }

    /// A pending pod with required node-affinity terms (`NodeRequirements`) as well.
    pub fn pod_req(
        &mut self,
        labels: Value,
        cpu: Option<&str>,
        tsc: Vec<Value>,
        selector: Value,
        reqs: Value,
    ) -> Value {
        self.pods += 1;
        let mut p = pod(&format!("p{}", self.pods), cpu, None, reqs);
        p["metadata"]["labels"] = labels;
        if !tsc.is_empty() {
            p["spec"]["topologySpreadConstraints"] = Value::Array(tsc);
        }
        if selector.as_object().is_some_and(|o| !o.is_empty()) {
            p["spec"]["nodeSelector"] = selector;
        }
        p
    }

    pub fn pods(
        &mut self,
        n: usize,
        labels: Value,
        cpu: Option<&str>,
        tsc: Vec<Value>,
    ) -> Vec<Value> {
        (0..n)
            .map(|_| self.pod(labels.clone(), cpu, tsc.clone(), json!({})))
            .collect()
    }

    /// A node of the cluster that no NodeClaim made (`test.Node`).
    pub fn node(&mut self, name: &str, labels: Value, allocatable: Value) {
        self.nodes.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}]}}));
    }

    /// A pod already bound to a node.
    pub fn bind(&mut self, mut p: Value, node: &str, phase: &str) {
        p["spec"]["nodeName"] = json!(node);
        p["status"] = json!({"phase": phase});
        self.bound.push(p);
    }

    /// One provisioning round: plans the pods, then makes each NodeClaim a node and binds
    /// the pods the plan placed.
    pub fn provision(&mut self, pools: &[Value], pods: Vec<Value>) -> Outcome {
        self.rounds += 1;
        let cluster = (!self.nodes.is_empty() || !self.bound.is_empty() || !self.extra.is_empty())
            .then(|| {
                let items: Vec<Value> = self
                    .nodes
                    .iter()
                    .chain(&self.bound)
                    .chain(&self.extra)
                    .cloned()
                    .collect();
                json!({"apiVersion": "v1", "kind": "List", "items": items})
            });
        let o = run_plan(
            &self.dir.join(format!("round-{}", self.rounds)),
            &self.types,
            pools,
            cluster,
            pods.clone(),
            &self.flags,
        );
        let by_key: BTreeMap<String, Value> = pods
            .into_iter()
            .map(|p| {
                (
                    format!(
                        "{}/{}",
                        p["metadata"]["namespace"].as_str().unwrap(),
                        p["metadata"]["name"].as_str().unwrap()
                    ),
                    p,
                )
            })
            .collect();
        // A pod the plan places that was not pending is one of a deleting node's, planned
        // ahead of its eviction: it stays where it is until evicted, as in Karpenter's tests.
        let bound: std::collections::BTreeSet<String> = self
            .bound
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap(),
                    p["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        let pending = |k: &Value| {
            let k = k.as_str().unwrap();
            assert!(
                by_key.contains_key(k) || bound.contains(k),
                "the plan places {k}, neither pending nor bound"
            );
            by_key.get(k).cloned()
        };
        for e in o.plan["existing"].as_array().into_iter().flatten() {
            let node = e["node"].as_str().unwrap().to_string();
            for p in e["pods"].as_array().unwrap().iter().filter_map(pending) {
                self.bind(p, &node, "Running");
            }
        }
        for (i, c) in o.claims().iter().enumerate() {
            let name = format!("node-{}-{i}", self.rounds);
            let t = &o.types[c["instance_type"].as_str().unwrap()];
            let mut labels = t["labels"].clone();
            for (k, v) in c["labels"].as_object().into_iter().flatten() {
                labels[k] = v.clone();
            }
            for (k, v) in [
                ("topology.kubernetes.io/zone", &c["zone"]),
                ("karpenter.sh/capacity-type", &c["capacity_type"]),
                ("node.kubernetes.io/instance-type", &c["instance_type"]),
                ("karpenter.sh/nodepool", &c["nodepool"]),
                ("kubernetes.io/arch", &t["arch"]),
                ("kubernetes.io/os", &t["os"]),
            ] {
                labels[k] = v.clone();
            }
            labels["kubernetes.io/hostname"] = json!(name);
            let mut allocatable = json!({
                "cpu": format!("{}m", t["karpenter_allocatable_cpu_millicores"]),
                "memory": format!("{}Mi", t["karpenter_allocatable_memory_mib"].as_f64().unwrap() as i64),
                "pods": t["max_pods"].to_string(),
            });
            for (r, n) in t["extended_resources"].as_object().into_iter().flatten() {
                allocatable[r] = json!(n.to_string());
            }
            self.node(&name, labels, allocatable);
            if c["taints"].as_array().is_some_and(|t| !t.is_empty()) {
                self.nodes.last_mut().unwrap()["spec"] = json!({ "taints": c["taints"] });
            }
            for p in c["pods"].as_array().unwrap().iter().filter_map(pending) {
                self.bind(p, &name, "Running");
            }
        }
        o
    }

    /// Removes a bound pod (`ExpectDeleted`).
    pub fn delete(&mut self, name: &str) {
        self.bound.retain(|p| p["metadata"]["name"] != name);
    }

    /// Karpenter's `ExpectSkew`: running pods of namespace `default` the selector matches
    /// (all with none), counted per value of `key` on their nodes, as a sorted list.
    pub fn skew(&self, key: &str, selector: Option<(&str, &str)>) -> Vec<usize> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for p in &self.bound {
            if p["metadata"]["namespace"] != "default" || p["status"]["phase"] != "Running" {
                continue;
            }
            if let Some((k, v)) = selector
                && p["metadata"]["labels"][k] != v
            {
                continue;
            }
            let node = p["spec"]["nodeName"].as_str().unwrap();
            let Some(n) = self.nodes.iter().find(|n| n["metadata"]["name"] == node) else {
                continue;
            };
            let domain = if key == "kubernetes.io/hostname" {
                Some(node.to_string())
            } else {
                n["metadata"]["labels"][key].as_str().map(str::to_string)
            };
            if let Some(d) = domain {
                *counts.entry(d).or_default() += 1;
            }
        }
        let mut v: Vec<usize> = counts.into_values().collect();
        v.sort_unstable();
        v
    }

    /// Where a bound pod runs.
    pub fn node_of(&self, name: &str) -> Option<String> {
        self.bound
            .iter()
            .find(|p| p["metadata"]["name"] == name)
            .and_then(|p| p["spec"]["nodeName"].as_str())
            .map(str::to_string)
    }

    pub fn label_of(&self, node: &str, key: &str) -> Option<String> {
        self.nodes
            .iter()
            .find(|n| n["metadata"]["name"] == node)
            .and_then(|n| n["metadata"]["labels"][key].as_str())
            .map(str::to_string)
    }
}

pub fn expect_skew(
    s: &Session,
    key: &str,
    selector: Option<(&str, &str)>,
    want: &[usize],
) -> Result<(), String> {
    let mut w = want.to_vec();
    w.sort_unstable();
    let got = s.skew(key, selector);
    ensure(
        got == w,
        format!("skew on {key}: {got:?}, Karpenter expects {w:?}"),
    )
}

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";
const CT: &str = "karpenter.sh/capacity-type";
const T: Option<(&str, &str)> = Some(("test", "test"));

fn labels() -> Value {
    json!({"test": "test"})
}

/// Its Karpenter's file has twice under different Contexts carry the Context in brackets.
pub fn cases() -> Vec<Scenario> {
    let f = TOPOLOGY;
    let mut out: Vec<Scenario> = Vec::new();
    let mut add = |it: &'static str, run: fn(&mut Session) -> Result<(), String>| {
        out.push(Scenario {
            file: f,
            it,
            run: Box::new(move |dir: &PathBuf| run(&mut Session::new(dir, default_types()))),
        });
    };
    add("should ignore unknown topology keys", |s| {
        let a = s.pod(labels(), None, vec![spread("unknown", 1, true)], json!({}));
        let b = s.pod(json!({}), None, vec![], json!({}));
        s.provision(&[nodepool("default", any_capacity())], vec![a, b]);
        ensure(
            s.node_of("p1").is_none(),
            "the pod spreading over an unknown key is not scheduled",
        )?;
        ensure(s.node_of("p2").is_some(), "the plain pod is scheduled")
    });
    add(
        "should not spread when a nil label selector is defined",
        |s| {
            let pods = s.pods(2, labels(), None, vec![spread(ZONE, 1, false)]);
            s.provision(&[nodepool("default", any_capacity())], pods);
            expect_skew(s, ZONE, None, &[2])
        },
    );
    add("should balance pods across zones (match labels)", |s| {
        let pods = s.pods(4, labels(), None, vec![spread(ZONE, 1, true)]);
        s.provision(&[nodepool("default", any_capacity())], pods);
        expect_skew(s, ZONE, T, &[1, 1, 2])
    });
    add(
        "should balance pods across zones (match expressions)",
        |s| {
            let mut c = spread(ZONE, 1, false);
            c["labelSelector"] = json!({"matchExpressions": [{"key": "test", "operator": "In", "values": ["test"]}]});
            let pods = s.pods(4, labels(), None, vec![c]);
            s.provision(&[nodepool("default", any_capacity())], pods);
            expect_skew(s, ZONE, T, &[1, 1, 2])
        },
    );
    add("should respect NodePool zonal constraints", |s| {
        let pods = s.pods(4, labels(), None, vec![spread(ZONE, 1, true)]);
        s.provision(
            &[nodepool(
                "default",
                zones(&["test-zone-1", "test-zone-2", "test-zone-3"]),
            )],
            pods,
        );
        expect_skew(s, ZONE, T, &[1, 1, 2])
    });
    add(
        "should respect NodePool zonal constraints (subset) with requirements",
        |s| {
            let pods = s.pods(4, labels(), None, vec![spread(ZONE, 1, true)]);
            s.provision(
                &[nodepool("default", zones(&["test-zone-1", "test-zone-2"]))],
                pods,
            );
            expect_skew(s, ZONE, T, &[2, 2])
        },
    );
    add(
        "should respect NodePool zonal constraints (subset) with labels",
        |s| {
            let pods = s.pods(4, labels(), None, vec![spread(ZONE, 1, true)]);
            s.provision(
                &[labelled(
                    "default",
                    any_capacity(),
                    json!({ZONE: "test-zone-1"}),
                )],
                pods,
            );
            expect_skew(s, ZONE, T, &[4])
        },
    );
    add(
        "should respect NodePool zonal constraints (subset) with requirements and labels",
        |s| {
            let pods = s.pods(4, labels(), None, vec![spread(ZONE, 1, true)]);
            s.provision(
                &[labelled(
                    "default",
                    zones(&["test-zone-1", "test-zone-2"]),
                    json!({ZONE: "test-zone-1"}),
                )],
                pods,
            );
            expect_skew(s, ZONE, T, &[4])
        },
    );
    add(
        "should respect NodePool zonal constraints (subset) with labels across NodePools",
        |s| {
            let pods = s.pods(4, labels(), None, vec![spread(ZONE, 1, true)]);
            s.provision(
                &[
                    labelled(
                        "default",
                        zones(&["test-zone-1", "test-zone-2"]),
                        json!({ZONE: "test-zone-1"}),
                    ),
                    labelled("second", vec![], json!({ZONE: "test-zone-2"})),
                ],
                pods,
            );
            expect_skew(s, ZONE, T, &[2, 2])
        },
    );
    add(
        "should respect NodePool zonal constraints (existing pod)",
        |s| {
            let first = s.pod(labels(), Some("1.1"), vec![], json!({ZONE: "test-zone-3"}));
            s.provision(&[nodepool("default", any_capacity())], vec![first]);
            ensure(s.node_of("p1").is_some(), "the first pod is scheduled")?;
            let pods = s.pods(6, labels(), Some("1.1"), vec![spread(ZONE, 1, true)]);
            s.provision(
                &[nodepool("default", zones(&["test-zone-1", "test-zone-2"]))],
                pods,
            );
            expect_skew(s, ZONE, T, &[1, 2, 2])
        },
    );
    add(
        "should schedule to the non-minimum domain if its all that's available",
        |s| {
            let c = vec![spread(ZONE, 5, true)];
            let p = s.pods(1, labels(), Some("1.1"), c.clone());
            s.provision(&[nodepool("default", zones(&["test-zone-1"]))], p);
            expect_skew(s, ZONE, T, &[1])?;
            let p = s.pods(1, labels(), Some("1.1"), c.clone());
            s.provision(&[nodepool("default", zones(&["test-zone-2"]))], p);
            expect_skew(s, ZONE, T, &[1, 1])?;
            let p = s.pods(10, labels(), Some("1.1"), c);
            s.provision(&[nodepool("default", zones(&["test-zone-3"]))], p);
            expect_skew(s, ZONE, T, &[1, 1, 6])
        },
    );
    add(
        "should only schedule to minimum domains if already violating max skew",
        |s| {
            let c = vec![spread(ZONE, 1, true)];
            let p = s.pods(9, labels(), Some("1.1"), c.clone());
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, ZONE, T, &[3, 3, 3])?;
            for i in 1..=9 {
                let name = format!("p{i}");
                let node = s.node_of(&name).unwrap();
                if s.label_of(&node, ZONE).as_deref() != Some("test-zone-1") {
                    s.delete(&name);
                }
            }
            expect_skew(s, ZONE, T, &[3])?;
            let p = s.pods(3, labels(), Some("1.1"), c);
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, ZONE, T, &[3, 1, 2])
        },
    );
    add(
        "should not violate max-skew when unsat = do not schedule",
        |s| {
            let c = vec![spread(ZONE, 1, true)];
            let p = s.pods(1, labels(), Some("1.1"), c.clone());
            s.provision(&[nodepool("default", zones(&["test-zone-1"]))], p);
            expect_skew(s, ZONE, T, &[1])?;
            let p = s.pods(10, labels(), Some("1.1"), c);
            s.provision(
                &[nodepool("default", zones(&["test-zone-2", "test-zone-3"]))],
                p,
            );
            expect_skew(s, ZONE, T, &[1, 2, 2])
        },
    );
    add(
        "should not violate max-skew when unsat = do not schedule (discover domains)",
        |s| {
            let p = s.pods(1, labels(), Some("1.1"), vec![]);
            s.provision(&[nodepool("default", zones(&["test-zone-1"]))], p);
            let p = s.pods(10, labels(), Some("1.1"), vec![spread(ZONE, 1, true)]);
            s.provision(
                &[nodepool("default", zones(&["test-zone-2", "test-zone-3"]))],
                p,
            );
            expect_skew(s, ZONE, T, &[1, 2, 2])
        },
    );
    add(
        "should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain",
        |s| {
            s.node("first", json!({ZONE: "test-zone-1"}), json!({}));
            s.node("second", json!({ZONE: "test-zone-2"}), json!({}));
            s.node("third", json!({}), json!({}));
            let plain = s.pod(json!({}), None, vec![], json!({}));
            s.bind(plain, "first", "Running"); // ignored, missing labels
            let third = s.pod(labels(), None, vec![], json!({}));
            s.bind(third, "third", "Running"); // ignored, no domain on the node
            let mut other_ns = s.pod(labels(), None, vec![], json!({}));
            other_ns["metadata"]["namespace"] = json!("elsewhere");
            s.bind(other_ns, "first", "Running"); // ignored, another namespace
            let failed = s.pod(labels(), None, vec![], json!({}));
            s.bind(failed, "first", "Failed");
            let succeeded = s.pod(labels(), None, vec![], json!({}));
            s.bind(succeeded, "first", "Succeeded");
            for node in ["first", "first", "second"] {
                let p = s.pod(labels(), None, vec![], json!({}));
                s.bind(p, node, "Running");
            }
            // Pending and terminating pods the cluster holds count for nothing either; capstan's
            // plan takes only what it is asked to plan, so they are left out here.
            let pods = s.pods(2, labels(), None, vec![spread(ZONE, 1, true)]);
            s.provision(&[nodepool("default", any_capacity())], pods);
            expect_skew(s, ZONE, T, &[2, 2, 1])
        },
    );
    add(
        "should match all pods when labelSelector is not specified",
        |s| {
            let p = s.pods(1, json!({}), None, vec![]);
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, ZONE, None, &[1])
        },
    );
    add("should handle interdependent selectors", |s| {
        let p = s.pods(5, json!({}), None, vec![spread(HOST, 1, true)]);
        s.provision(&[nodepool("default", any_capacity())], p);
        let nodes: std::collections::BTreeSet<Option<String>> =
            (1..=5).map(|i| s.node_of(&format!("p{i}"))).collect();
        ensure(
            nodes.len() == 1 && !nodes.contains(&None),
            format!("one node for all five: {nodes:?}"),
        )
    });
    add("should respect minDomains constraints", |s| {
        let mut c = spread(ZONE, 1, true);
        c["minDomains"] = json!(3);
        let p = s.pods(3, labels(), None, vec![c]);
        s.provision(
            &[nodepool("default", zones(&["test-zone-1", "test-zone-2"]))],
            p,
        );
        expect_skew(s, ZONE, T, &[1, 1])
    });
    add(
        "satisfied minDomains constraints (equal) should allow expected pod scheduling",
        |s| {
            let mut c = spread(ZONE, 1, true);
            c["minDomains"] = json!(3);
            let p = s.pods(11, labels(), None, vec![c]);
            s.provision(
                &[nodepool(
                    "default",
                    zones(&["test-zone-1", "test-zone-2", "test-zone-3"]),
                )],
                p,
            );
            expect_skew(s, ZONE, T, &[4, 4, 3])
        },
    );
    add(
        "satisfied minDomains constraints (greater than minimum) should allow expected pod scheduling",
        |s| {
            let mut c = spread(ZONE, 1, true);
            c["minDomains"] = json!(2);
            let p = s.pods(11, labels(), None, vec![c]);
            s.provision(
                &[nodepool(
                    "default",
                    zones(&["test-zone-1", "test-zone-2", "test-zone-3"]),
                )],
                p,
            );
            expect_skew(s, ZONE, T, &[4, 4, 3])
        },
    );
    add("should balance pods across nodes", |s| {
        let p = s.pods(4, labels(), None, vec![spread(HOST, 1, true)]);
        s.provision(&[nodepool("default", any_capacity())], p);
        expect_skew(s, HOST, T, &[1, 1, 1, 1])
    });
    add(
        "should balance pods on the same hostname up to maxskew",
        |s| {
            let p = s.pods(4, labels(), None, vec![spread(HOST, 4, true)]);
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, HOST, T, &[4])
        },
    );
    add(
        "balance multiple deployments with hostname topology spread",
        |s| {
            let mut pods = Vec::new();
            for app in ["app1", "app1", "app2", "app2"] {
                let mut c = spread(HOST, 1, false);
                c["labelSelector"] = json!({"matchLabels": {"app": app}});
                pods.push(s.pod(json!({"app": app}), None, vec![c], json!({})));
            }
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=4).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "all four scheduled",
            )?;
            ensure(
                s.nodes.len() == 2,
                format!("two nodes, got {}", s.nodes.len()),
            )
        },
    );
    add(
        "balance multiple deployments with hostname topology spread & varying arch",
        |s| {
            let mut pods = Vec::new();
            for (app, arch) in [
                ("app1", "amd64"),
                ("app1", "amd64"),
                ("app2", "arm64"),
                ("app2", "arm64"),
            ] {
                let mut c = spread(HOST, 1, false);
                c["labelSelector"] = json!({"matchLabels": {"app": app}});
                let reqs = json!([req("kubernetes.io/arch", "In", &[arch])]);
                pods.push(s.pod_req(json!({"app": app}), None, vec![c], json!({}), reqs));
            }
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=4).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "all four scheduled",
            )?;
            ensure(
                s.nodes.len() == 4,
                format!("four nodes, got {}", s.nodes.len()),
            )
        },
    );
    add("should balance pods across capacity types", |s| {
        let p = s.pods(4, labels(), None, vec![spread(CT, 1, true)]);
        s.provision(&[nodepool("default", any_capacity())], p);
        expect_skew(s, CT, T, &[2, 2])
    });
    add("should respect NodePool capacity type constraints", |s| {
        let p = s.pods(4, labels(), None, vec![spread(CT, 1, true)]);
        s.provision(
            &[nodepool(
                "default",
                vec![req(CT, "In", &["spot", "on-demand"])],
            )],
            p,
        );
        expect_skew(s, CT, T, &[2, 2])
    });
    add(
        "should not violate max-skew when unsat = do not schedule (capacity type)",
        |s| {
            let c = vec![spread(CT, 1, true)];
            let p = s.pods(1, labels(), Some("1.1"), c.clone());
            s.provision(&[nodepool("default", vec![req(CT, "In", &["spot"])])], p);
            expect_skew(s, CT, T, &[1])?;
            let p = s.pods(5, labels(), Some("1.1"), c);
            s.provision(
                &[nodepool("default", vec![req(CT, "In", &["on-demand"])])],
                p,
            );
            expect_skew(s, CT, T, &[1, 2])
        },
    );
    add(
        "should violate max-skew when unsat = schedule anyway (capacity type)",
        |s| {
            let c = vec![spread_when(CT, 1, true, "ScheduleAnyway")];
            let p = s.pods(1, labels(), Some("1.1"), c.clone());
            s.provision(&[nodepool("default", vec![req(CT, "In", &["spot"])])], p);
            expect_skew(s, CT, T, &[1])?;
            let p = s.pods(5, labels(), Some("1.1"), c);
            s.provision(
                &[nodepool("default", vec![req(CT, "In", &["on-demand"])])],
                p,
            );
            expect_skew(s, CT, T, &[1, 5])
        },
    );
    add(
        "should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain [CapacityType]",
        |s| {
            s.node("first", json!({CT: "spot"}), json!({}));
            s.node("second", json!({CT: "on-demand"}), json!({}));
            s.node("third", json!({}), json!({}));
            let plain = s.pod(json!({}), None, vec![], json!({}));
            s.bind(plain, "first", "Running");
            let third = s.pod(labels(), None, vec![], json!({}));
            s.bind(third, "third", "Running");
            let mut other_ns = s.pod(labels(), None, vec![], json!({}));
            other_ns["metadata"]["namespace"] = json!("elsewhere");
            s.bind(other_ns, "first", "Running");
            let failed = s.pod(labels(), None, vec![], json!({}));
            s.bind(failed, "first", "Failed");
            let succeeded = s.pod(labels(), None, vec![], json!({}));
            s.bind(succeeded, "first", "Succeeded");
            for node in ["first", "first", "second"] {
                let p = s.pod(labels(), None, vec![], json!({}));
                s.bind(p, node, "Running");
            }
            let pods = s.pods(2, labels(), None, vec![spread(CT, 1, true)]);
            s.provision(&[nodepool("default", any_capacity())], pods);
            expect_skew(s, CT, T, &[2, 3])
        },
    );
    add(
        "should match all pods when labelSelector is not specified [CapacityType]",
        |s| {
            let p = s.pods(1, json!({}), None, vec![]);
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, CT, None, &[1])
        },
    );
    add(
        "should handle interdependent selectors [CapacityType]",
        |s| {
            let p = s.pods(5, json!({}), None, vec![spread(HOST, 1, true)]);
            s.provision(&[nodepool("default", any_capacity())], p);
            let nodes: std::collections::BTreeSet<Option<String>> =
                (1..=5).map(|i| s.node_of(&format!("p{i}"))).collect();
            ensure(
                nodes.len() == 1 && !nodes.contains(&None),
                format!("one node for all five: {nodes:?}"),
            )
        },
    );
    add(
        "should balance pods across capacity-types (node required affinity constrained)",
        |s| {
            let first = s.pod_req(
                labels(),
                None,
                vec![],
                json!({}),
                json!([
                    req(ZONE, "In", &["test-zone-1"]),
                    req(CT, "In", &["on-demand"])
                ]),
            );
            s.provision(&[nodepool("default", any_capacity())], vec![first]);
            ensure(s.node_of("p1").is_some(), "the on-demand pod is scheduled")?;
            let pods: Vec<Value> = (0..5)
                .map(|_| {
                    s.pod_req(
                        labels(),
                        None,
                        vec![spread(CT, 1, true)],
                        json!({}),
                        json!([req(ZONE, "In", &["test-zone-2"]), req(CT, "In", &["spot"])]),
                    )
                })
                .collect();
            s.provision(&[nodepool("default", any_capacity())], pods);
            expect_skew(s, CT, T, &[1, 5])
        },
    );
    add(
        "should balance pods across capacity-types (no constraints)",
        |s| {
            let first = s.pod_req(
                labels(),
                None,
                vec![],
                json!({"node.kubernetes.io/instance-type": "single-pod-instance-type"}),
                json!([req(CT, "In", &["on-demand"])]),
            );
            s.provision(&[nodepool("default", any_capacity())], vec![first]);
            ensure(s.node_of("p1").is_some(), "the on-demand pod is scheduled")?;
            let p = s.pods(5, labels(), Some("2"), vec![spread(CT, 1, true)]);
            s.provision(&[nodepool("default", vec![req(CT, "In", &["spot"])])], p);
            expect_skew(s, CT, T, &[1, 2])
        },
    );
    add("should balance pods across arch (no constraints)", |s| {
        let first = s.pod_req(
            labels(),
            None,
            vec![],
            json!({"node.kubernetes.io/instance-type": "single-pod-instance-type"}),
            json!([req("kubernetes.io/arch", "In", &["amd64"])]),
        );
        s.provision(&[nodepool("default", any_capacity())], vec![first]);
        ensure(s.node_of("p1").is_some(), "the amd64 pod is scheduled")?;
        let p = s.pods(
            5,
            labels(),
            Some("2"),
            vec![spread("kubernetes.io/arch", 1, true)],
        );
        s.provision(
            &[nodepool(
                "default",
                vec![req("kubernetes.io/arch", "In", &["arm64"])],
            )],
            p,
        );
        expect_skew(s, "kubernetes.io/arch", T, &[1, 2])
    });
    add(
        "should spread pods while respecting both constraints (hostname and zonal)",
        |s| {
            let c = vec![spread(ZONE, 1, true), spread(HOST, 3, true)];
            for (n, want) in [
                (2, vec![1, 1]),
                (3, vec![2, 2, 1]),
                (5, vec![4, 3, 3]),
                (11, vec![7, 7, 7]),
            ] {
                let p = s.pods(n, labels(), None, c.clone());
                s.provision(&[nodepool("default", any_capacity())], p);
                expect_skew(s, ZONE, T, &want)?;
                ensure(
                    s.skew(HOST, T).iter().all(|&k| k <= 3),
                    format!("at most 3 a node: {:?}", s.skew(HOST, T)),
                )?;
            }
            Ok(())
        },
    );
    add("should balance pods across NodePool requirements", |s| {
        let key = "capacity.spread.4-1";
        let spot = nodepool(
            "spot",
            vec![
                req(CT, "In", &["spot"]),
                req(key, "In", &["2", "3", "4", "5"]),
            ],
        );
        let od = nodepool(
            "on-demand",
            vec![req(CT, "In", &["on-demand"]), req(key, "In", &["1"])],
        );
        let p = s.pods(20, labels(), None, vec![spread(key, 1, true)]);
        s.provision(&[spot, od], p);
        ensure(
            (1..=20).all(|i| s.node_of(&format!("p{i}")).is_some()),
            "all twenty scheduled",
        )?;
        expect_skew(s, key, T, &[4, 4, 4, 4, 4])?;
        expect_skew(s, CT, T, &[4, 16])
    });
    add(
        "should spread pods while respecting both constraints",
        |s| {
            let c = vec![
                spread(ZONE, 1, true),
                spread_when(HOST, 1, true, "ScheduleAnyway"),
            ];
            let mut b = nodepool("b", zones(&["test-zone-3"]));
            b["spec"]["limits"] = json!({"cpu": "0"});
            let p = s.pods(10, labels(), None, c);
            s.provision(
                &[
                    nodepool("default", zones(&["test-zone-1", "test-zone-2"])),
                    b,
                ],
                p,
            );
            expect_skew(s, ZONE, T, &[1, 1])?;
            expect_skew(s, HOST, T, &[1, 1])
        },
    );
    add(
        "should spread pods while respecting both constraints [capacity type and hostname]",
        |s| {
            let c = vec![spread(CT, 1, true), spread(HOST, 3, true)];
            for (n, want) in [
                (2, vec![1, 1]),
                (3, vec![3, 2]),
                (5, vec![5, 5]),
                (11, vec![11, 10]),
            ] {
                let p = s.pods(n, labels(), None, c.clone());
                s.provision(&[nodepool("default", any_capacity())], p);
                expect_skew(s, CT, T, &want)?;
                ensure(
                    s.skew(HOST, T).iter().all(|&k| k <= 3),
                    format!("at most 3 a node: {:?}", s.skew(HOST, T)),
                )?;
            }
            Ok(())
        },
    );
    add(
        "should spread pods while respecting both constraints [zonal and capacity type]",
        |s| {
            let c = vec![spread(CT, 1, true), spread(ZONE, 1, true)];
            for (n, ct_max, zone_max) in [(2, 1, 1), (3, 3, 2), (3, 5, 4), (11, 11, 7)] {
                let p = s.pods(n, labels(), None, c.clone());
                s.provision(&[nodepool("default", any_capacity())], p);
                let (a, b) = (s.skew(CT, T), s.skew(ZONE, T));
                ensure(
                    a.iter().all(|&k| k <= ct_max),
                    format!("capacity types: {a:?}, none above {ct_max}"),
                )?;
                ensure(
                    b.iter().all(|&k| k <= zone_max),
                    format!("zones: {b:?}, none above {zone_max}"),
                )?;
            }
            Ok(())
        },
    );
    add("should spread pods while respecting all constraints", |s| {
        s.types = assorted();
        let c = vec![
            spread(CT, 1, true),
            spread(ZONE, 2, true),
            spread(HOST, 3, true),
        ];
        for n in 1..15 {
            let first = s.pods + 1;
            let p = s.pods(n, labels(), None, c.clone());
            s.provision(&[nodepool("default", any_capacity())], p);
            for (key, max) in [(CT, 1), (ZONE, 2), (HOST, 3)] {
                let k = s.skew(key, T);
                let spread = k.iter().max().unwrap_or(&0) - k.iter().min().unwrap_or(&0);
                ensure(
                    spread <= max,
                    format!("round {n}: skew on {key} {k:?} above {max}"),
                )?;
            }
            ensure(
                (first..=s.pods).all(|i| s.node_of(&format!("p{i}")).is_some()),
                format!("round {n}: every pod scheduled"),
            )?;
        }
        Ok(())
    });
    add("should limit spread options by nodeSelector", |s| {
        let c = vec![spread(ZONE, 1, true)];
        let mut p: Vec<Value> = (0..5)
            .map(|_| s.pod(labels(), None, c.clone(), json!({ZONE: "test-zone-1"})))
            .collect();
        p.extend((0..10).map(|_| s.pod(labels(), None, c.clone(), json!({ZONE: "test-zone-2"}))));
        s.provision(&[nodepool("default", any_capacity())], p);
        expect_skew(s, ZONE, T, &[5, 10])
    });
    add("should limit spread options by node requirements", |s| {
        let c = vec![spread(ZONE, 1, true)];
        let p: Vec<Value> = (0..10)
            .map(|_| {
                s.pod_req(
                    labels(),
                    None,
                    c.clone(),
                    json!({}),
                    json!([req(ZONE, "In", &["test-zone-1", "test-zone-2"])]),
                )
            })
            .collect();
        s.provision(&[nodepool("default", any_capacity())], p);
        expect_skew(s, ZONE, T, &[5, 5])
    });
    add(
        "should limit spread options by required node affinity",
        |s| {
            let c = vec![spread(ZONE, 1, true)];
            let p: Vec<Value> = (0..6)
                .map(|_| {
                    s.pod_req(
                        labels(),
                        None,
                        c.clone(),
                        json!({}),
                        json!([req(ZONE, "In", &["test-zone-1", "test-zone-2"])]),
                    )
                })
                .collect();
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, ZONE, T, &[3, 3])?;
            let all = zones(&["test-zone-1", "test-zone-2", "test-zone-3"]);
            let p = s.pod_req(
                labels(),
                None,
                c.clone(),
                json!({}),
                json!([req(ZONE, "In", &["test-zone-2", "test-zone-3"])]),
            );
            s.provision(&[nodepool("default", all.clone())], vec![p]);
            expect_skew(s, ZONE, T, &[3, 3, 1])?;
            let p = s.pods(5, labels(), None, c);
            s.provision(&[nodepool("default", all)], p);
            expect_skew(s, ZONE, T, &[4, 4, 4])
        },
    );
    add(
        "should not limit spread options by preferred node affinity",
        |s| {
            let c = vec![spread(ZONE, 1, true)];
            let p: Vec<Value> = (0..6)
            .map(|_| {
                let mut p = s.pod(labels(), None, c.clone(), json!({}));
                p["spec"]["affinity"] = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [req(ZONE, "In", &["test-zone-1", "test-zone-2"])]}}]}});
                p
            })
            .collect();
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, ZONE, T, &[2, 2, 2])
        },
    );
    add(
        "should limit spread options by nodeSelector [capacity type]",
        |s| {
            let c = vec![spread_when(CT, 1, true, "ScheduleAnyway")];
            let mut p: Vec<Value> = (0..5)
                .map(|_| s.pod(labels(), None, c.clone(), json!({CT: "spot"})))
                .collect();
            p.extend((0..5).map(|_| s.pod(labels(), None, c.clone(), json!({CT: "on-demand"}))));
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, CT, T, &[5, 5])
        },
    );
    add(
        "should limit spread options by node affinity (capacity type)",
        |s| {
            let c = vec![spread(CT, 1, true)];
            let p: Vec<Value> = (0..3)
                .map(|_| {
                    s.pod_req(
                        labels(),
                        None,
                        c.clone(),
                        json!({}),
                        json!([req(CT, "In", &["spot"])]),
                    )
                })
                .collect();
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, CT, T, &[3])?;
            let p = s.pod_req(
                labels(),
                None,
                c.clone(),
                json!({}),
                json!([req(CT, "In", &["on-demand", "spot"])]),
            );
            s.provision(&[nodepool("default", any_capacity())], vec![p]);
            expect_skew(s, CT, T, &[3, 1])?;
            let p = s.pods(5, labels(), None, c);
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, CT, T, &[5, 4])
        },
    );
    add(
        "should schedule a pod with empty pod affinity and anti-affinity",
        |s| {
            let mut p = s.pod(json!({}), None, vec![], json!({}));
            p["spec"]["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}});
            s.provision(&[nodepool("default", any_capacity())], vec![p]);
            ensure(s.node_of("p1").is_some(), "scheduled")
        },
    );
    add("should respect pod affinity (hostname)", |s| {
        let mut pods = s.pods(10, labels(), None, vec![spread(HOST, 1, true)]);
        pods.push(s.pod(s2(), None, vec![], json!({})));
        let mut b = s.pod(json!({}), None, vec![], json!({}));
        with_term(&mut b, AFF, true, s2(), HOST);
        pods.push(b);
        s.provision(&[nodepool("default", any_capacity())], pods);
        same_node(s, "p11", "p12", true)
    });
    add("should respect pod affinity (arch)", |s| {
        let mut tsc = spread(HOST, 1, false);
        tsc["labelSelector"] = json!({"matchLabels": s2()});
        let a = s.pod(
            s2(),
            Some("2"),
            vec![tsc.clone()],
            json!({"kubernetes.io/arch": "arm64"}),
        );
        let mut b = s.pod(s2(), Some("1"), vec![tsc], json!({}));
        with_term(&mut b, AFF, true, s2(), "kubernetes.io/arch");
        s.provision(&[nodepool("default", any_capacity())], vec![a, b]);
        let (n1, n2) = (
            s.node_of("p1").ok_or("p1 scheduled")?,
            s.node_of("p2").ok_or("p2 scheduled")?,
        );
        ensure(
            s.label_of(&n1, "kubernetes.io/arch") == s.label_of(&n2, "kubernetes.io/arch"),
            "the same arch",
        )?;
        ensure(n1 != n2, "not the same node")
    });
    add("should respect self pod affinity (hostname)", |s| {
        let p = self_affine(s, 3, HOST, json!({}), json!([]));
        s.provision(&[nodepool("default", any_capacity())], p);
        nodes_of(s, 1..=3, 1)
    });
    add(
        "should respect self pod affinity for first empty topology domain only (hostname)",
        |s| {
            let p = self_affine(s, 10, HOST, json!({}), json!([]));
            s.provision(&[nodepool("default", any_capacity())], p);
            let placed: Vec<String> = (1..=10)
                .filter_map(|i| s.node_of(&format!("p{i}")))
                .collect();
            let nodes: std::collections::BTreeSet<&String> = placed.iter().collect();
            ensure(
                placed.len() == 5 && nodes.len() == 1,
                format!("five pods on one node: {placed:?}"),
            )?;
            let p = self_affine(s, 10, HOST, json!({}), json!([]));
            s.provision(&[nodepool("default", any_capacity())], p);
            ensure(
                (11..=20).all(|i| s.node_of(&format!("p{i}")).is_none()),
                "the second batch waits",
            )
        },
    );
    add(
        "should respect self pod affinity for first empty topology domain only (hostname/constrained zones)",
        |s| {
            let p = self_affine(s, 1, HOST, json!({ZONE: "test-zone-1"}), json!([]));
            s.provision(&[nodepool("default", any_capacity())], p);
            let p = self_affine(
                s,
                10,
                HOST,
                json!({}),
                json!([req(ZONE, "In", &["test-zone-2", "test-zone-3"])]),
            );
            s.provision(&[nodepool("default", any_capacity())], p);
            ensure(
                (2..=11).all(|i| s.node_of(&format!("p{i}")).is_none()),
                "none of the ten schedules",
            )
        },
    );
    add("should respect self pod affinity (zone)", |s| {
        let p = self_affine(s, 3, ZONE, json!({}), json!([]));
        s.provision(&[nodepool("default", any_capacity())], p);
        nodes_of(s, 1..=3, 1)
    });
    add(
        "should respect self pod affinity (zone w/ constraint)",
        |s| {
            let p = self_affine(
                s,
                3,
                ZONE,
                json!({}),
                json!([req(ZONE, "In", &["test-zone-3"])]),
            );
            s.provision(&[nodepool("default", any_capacity())], p);
            nodes_of(s, 1..=3, 1)?;
            let n = s.node_of("p1").unwrap();
            ensure(
                s.label_of(&n, ZONE).as_deref() == Some("test-zone-3"),
                "in test-zone-3",
            )
        },
    );
    add(
        "should allow two nodes to be created when two pods with matching affinities have incompatible selectors",
        |s| {
            let s1 = json!({"security": "s1"});
            let mut pods = Vec::new();
            for z in ["test-zone-2", "test-zone-3"] {
                let mut p = s.pod_req(
                    s1.clone(),
                    None,
                    vec![],
                    json!({}),
                    json!([req(ZONE, "In", &[z])]),
                );
                with_term(&mut p, AFF, true, s1.clone(), ZONE);
                pods.push(p);
            }
            s.provision(&[nodepool("default", any_capacity())], pods);
            let (n1, n2) = (
                s.node_of("p1").ok_or("p1 scheduled")?,
                s.node_of("p2").ok_or("p2 scheduled")?,
            );
            ensure(
                s.label_of(&n1, ZONE).as_deref() == Some("test-zone-2"),
                "p1 in test-zone-2",
            )?;
            ensure(
                s.label_of(&n2, ZONE).as_deref() == Some("test-zone-3"),
                "p2 in test-zone-3",
            )?;
            ensure(n1 != n2, "two nodes")
        },
    );
    add("should allow violation of preferred pod affinity", |s| {
        let mut pods = s.pods(10, labels(), None, vec![spread(HOST, 1, true)]);
        let mut p = s.pod(json!({}), None, vec![], json!({}));
        with_term(&mut p, AFF, false, s2(), HOST);
        pods.push(p);
        s.provision(&[nodepool("default", any_capacity())], pods);
        ensure(
            s.node_of("p11").is_some(),
            "the preferring pod is scheduled",
        )
    });
    add(
        "should allow violation of preferred pod anti-affinity",
        |s| {
            let mut pods = s.pods(3, labels(), None, vec![spread(ZONE, 1, true)]);
            for _ in 0..10 {
                let mut p = s.pod(json!({}), None, vec![], json!({}));
                with_term(&mut p, ANTI, false, labels(), ZONE);
                pods.push(p);
            }
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (4..=13).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "every anti-preferring pod is scheduled",
            )
        },
    );
    add(
        "should separate nodes using simple pod anti-affinity on hostname",
        |s| {
            for round in 0..10 {
                let a = s.pod(s2(), None, vec![], json!({}));
                let mut b = s.pod(json!({}), None, vec![], json!({}));
                with_term(&mut b, ANTI, true, s2(), HOST);
                s.provision(&[nodepool("default", any_capacity())], vec![b, a]);
                let (i, j) = (2 * round + 1, 2 * round + 2);
                same_node(s, &format!("p{i}"), &format!("p{j}"), false)?;
            }
            Ok(())
        },
    );
    add("should not violate pod anti-affinity on zone", |s| {
        let mut pods: Vec<Value> = ["test-zone-1", "test-zone-2", "test-zone-3"]
            .iter()
            .map(|z| s.pod(s2(), Some("2"), vec![], json!({ZONE: z})))
            .collect();
        let mut a = s.pod(json!({}), None, vec![], json!({}));
        with_term(&mut a, ANTI, true, s2(), ZONE);
        pods.push(a);
        s.provision(&[nodepool("default", any_capacity())], pods);
        ensure(
            (1..=3).all(|i| s.node_of(&format!("p{i}")).is_some()),
            "the zone pods are scheduled",
        )?;
        ensure(s.node_of("p4").is_none(), "the anti-affine pod is not")
    });
    add(
        "should not violate pod anti-affinity on zone (other schedules first)",
        |s| {
            let p = s.pod(s2(), Some("2"), vec![], json!({}));
            let mut a = s.pod(json!({}), None, vec![], json!({}));
            with_term(&mut a, ANTI, true, s2(), ZONE);
            s.provision(&[nodepool("default", any_capacity())], vec![p, a]);
            ensure(s.node_of("p1").is_some(), "the first pod is scheduled")?;
            ensure(s.node_of("p2").is_none(), "the anti-affine pod is not")
        },
    );
    add("should not violate pod anti-affinity (arch)", |s| {
        let mut tsc = spread(HOST, 1, false);
        tsc["labelSelector"] = json!({"matchLabels": s2()});
        let a = s.pod(
            s2(),
            Some("2"),
            vec![tsc.clone()],
            json!({"kubernetes.io/arch": "arm64"}),
        );
        let mut b = s.pod(s2(), Some("1"), vec![tsc], json!({}));
        with_term(&mut b, ANTI, true, s2(), "kubernetes.io/arch");
        s.provision(&[nodepool("default", any_capacity())], vec![a, b]);
        let (n1, n2) = (
            s.node_of("p1").ok_or("p1 scheduled")?,
            s.node_of("p2").ok_or("p2 scheduled")?,
        );
        ensure(
            s.label_of(&n1, "kubernetes.io/arch") != s.label_of(&n2, "kubernetes.io/arch"),
            "different arch",
        )
    });
    add(
        "should violate preferred pod anti-affinity on zone (inverse)",
        |s| {
            let pods = zone_pods_with_anti(s, false);
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=4).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "all four scheduled",
            )
        },
    );
    add(
        "should not violate pod anti-affinity on zone (inverse)",
        |s| {
            let pods = zone_pods_with_anti(s, true);
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=3).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "the zone pods are scheduled",
            )?;
            ensure(s.node_of("p4").is_none(), "the pod they repel is not")
        },
    );
    add(
        "should not violate pod anti-affinity on zone (Schrödinger)",
        |s| {
            let mut a = s.pod(json!({}), Some("2"), vec![], json!({}));
            with_term(&mut a, ANTI, true, s2(), ZONE);
            let b = s.pod(s2(), None, vec![], json!({}));
            s.provision(&[nodepool("default", any_capacity())], vec![a, b.clone()]);
            ensure(
                s.node_of("p1").is_some(),
                "the anti-affine pod is scheduled",
            )?;
            ensure(
                s.node_of("p2").is_none(),
                "the other waits while the first one's zone is open",
            )?;
            s.provision(&[nodepool("default", any_capacity())], vec![b]);
            let (n1, n2) = (
                s.node_of("p1").unwrap(),
                s.node_of("p2").ok_or("p2 scheduled next round")?,
            );
            ensure(
                s.label_of(&n1, ZONE) != s.label_of(&n2, ZONE),
                "in another zone",
            )
        },
    );
    add(
        "should not violate pod anti-affinity on zone (inverse w/existing nodes)",
        |s| {
            let mut pods = zone_pods_with_anti(s, true);
            let last = pods.pop().unwrap();
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=3).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "the zone pods are scheduled",
            )?;
            s.provision(&[nodepool("default", any_capacity())], vec![last]);
            ensure(s.node_of("p4").is_none(), "the pod they repel is not")
        },
    );
    add(
        "should violate preferred pod anti-affinity on zone (inverse w/existing nodes)",
        |s| {
            let mut pods = zone_pods_with_anti(s, false);
            let last = pods.pop().unwrap();
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=3).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "the zone pods are scheduled",
            )?;
            s.provision(&[nodepool("default", any_capacity())], vec![last]);
            ensure(
                s.node_of("p4").is_some(),
                "the pod they only prefer to avoid is scheduled",
            )
        },
    );
    add(
        "should allow violation of a pod affinity preference with a conflicting required constraint",
        |s| {
            let target = s.pod(s2(), None, vec![], json!({}));
            let mut pods: Vec<Value> = (0..3)
                .map(|_| {
                    let mut p = s.pod(labels(), None, vec![spread(HOST, 1, true)], json!({}));
                    with_term(&mut p, AFF, false, s2(), HOST);
                    p
                })
                .collect();
            pods.push(target);
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=4).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "all four scheduled",
            )?;
            expect_skew(s, HOST, T, &[1, 1, 1])
        },
    );
    add(
        "should support pod anti-affinity with a zone topology",
        |s| {
            for want in [vec![1], vec![1, 1], vec![1, 1, 1], vec![1, 1, 1]] {
                let pods: Vec<Value> = (0..3)
                    .map(|_| {
                        let mut p = s.pod(s2(), None, vec![], json!({}));
                        with_term(&mut p, ANTI, true, s2(), ZONE);
                        p
                    })
                    .collect();
                s.provision(&[nodepool("default", any_capacity())], pods);
                expect_skew(s, ZONE, None, &want)?;
            }
            Ok(())
        },
    );
    add(
        "should not schedule pods with affinity to a non-existent pod",
        |s| {
            let pods: Vec<Value> = (0..10)
                .map(|_| {
                    let mut p = s.pod(json!({}), None, vec![], json!({}));
                    with_term(&mut p, AFF, true, s2(), ZONE);
                    p
                })
                .collect();
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=10).all(|i| s.node_of(&format!("p{i}")).is_none()),
                "none scheduled",
            )
        },
    );
    add(
        "should support pod affinity with zone topology (unconstrained target)",
        |s| {
            let mut pods: Vec<Value> = (0..10)
                .map(|_| {
                    let mut p = s.pod(json!({}), None, vec![], json!({}));
                    with_term(&mut p, AFF, true, s2(), ZONE);
                    p
                })
                .collect();
            pods.push(s.pod(s2(), None, vec![], json!({})));
            let waiting = pods[..10].to_vec();
            s.provision(&[nodepool("default", any_capacity())], pods);
            ensure(
                (1..=10).all(|i| s.node_of(&format!("p{i}")).is_none()),
                "the ten wait while the target's zone is open",
            )?;
            expect_skew(s, ZONE, None, &[1])?;
            s.provision(&[nodepool("default", any_capacity())], waiting);
            ensure(
                (1..=10).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "then they follow it",
            )?;
            expect_skew(s, ZONE, None, &[11])
        },
    );
    add(
        "should support pod affinity with zone topology (constrained target)",
        |s| {
            let mut pods: Vec<Value> = (0..10)
                .map(|_| {
                    let mut p = s.pod(json!({}), None, vec![], json!({}));
                    with_term(&mut p, AFF, true, s2(), ZONE);
                    p
                })
                .collect();
            pods.push(s.pod_req(
                s2(),
                None,
                vec![],
                json!({}),
                json!([req(ZONE, "In", &["test-zone-1"])]),
            ));
            s.provision(&[nodepool("default", any_capacity())], pods);
            expect_skew(s, ZONE, None, &[11])
        },
    );
    add("should handle multiple dependent affinities", |s| {
        let l = |t: &str| json!({"type": t, "spread": "spread"});
        for round in 0..50 {
            let mut db = s.pod(l("db"), None, vec![], json!({}));
            db["metadata"]["name"] = json!(format!("db-{round}"));
            let mut chain = vec![db];
            for (me, to) in [("web", "db"), ("cache", "web"), ("ui", "cache")] {
                let mut p = s.pod(l(me), None, vec![], json!({}));
                p["metadata"]["name"] = json!(format!("{me}-{round}"));
                with_term(&mut p, AFF, true, l(to), HOST);
                chain.push(p);
            }
            // Each round on an empty cluster, as Karpenter's loop cleans up between rounds.
            s.nodes.clear();
            s.bound.clear();
            s.provision(&[nodepool("default", any_capacity())], chain);
            for t in ["db", "web", "cache", "ui"] {
                ensure(
                    s.node_of(&format!("{t}-{round}")).is_some(),
                    format!("round {round}: {t} scheduled"),
                )?;
            }
        }
        Ok(())
    });
    add(
        "should fail to schedule pods with unsatisfiable dependencies",
        |s| {
            let mut p = s.pod(
                json!({"type": "db", "spread": "spread"}),
                None,
                vec![],
                json!({}),
            );
            with_term(
                &mut p,
                AFF,
                true,
                json!({"type": "web", "spread": "spread"}),
                HOST,
            );
            s.provision(&[nodepool("default", any_capacity())], vec![p]);
            ensure(s.node_of("p1").is_none(), "not scheduled")
        },
    );
    add(
        "should filter pod affinity topologies by namespace, no matching pods",
        |s| namespaced_affinity(s, "other-ns-no-match", json!({}), false),
    );
    add(
        "should filter pod affinity topologies by namespace, matching pods namespace list",
        |s| {
            namespaced_affinity(
                s,
                "other-ns-list",
                json!({"namespaces": ["other-ns-list"]}),
                true,
            )
        },
    );
    add(
        "should filter pod affinity topologies by namespace, empty namespace selector",
        |s| {
            namespaced_affinity(
                s,
                "empty-ns-selector",
                json!({"namespaceSelector": {}}),
                true,
            )
        },
    );
    add("should support matchLabelKeys", |s| {
        let mut c = spread(HOST, 1, true);
        c["matchLabelKeys"] = json!(["test-label"]);
        let mut p = s.pods(
            2,
            json!({"test": "test", "test-label": "value-a"}),
            None,
            vec![c.clone()],
        );
        p.extend(s.pods(
            2,
            json!({"test": "test", "test-label": "value-b"}),
            None,
            vec![c],
        ));
        s.provision(&[nodepool("default", any_capacity())], p);
        expect_skew(s, HOST, T, &[2, 2])
    });
    add(
        "should ignore unknown labels specified in matchLabelKeys",
        |s| {
            let mut c = spread(HOST, 1, true);
            c["matchLabelKeys"] = json!(["test-label"]);
            let p = s.pods(4, labels(), None, vec![c]);
            s.provision(&[nodepool("default", any_capacity())], p);
            expect_skew(s, HOST, T, &[1, 1, 1, 1])
        },
    );
    add(
        "should balance pods across a label (NodeTaintsPolicy=ignore)",
        |s| tainted_domains(s, "Ignore", &[1]),
    );
    add(
        "should balance pods across a label (NodeTaintsPolicy=honor)",
        |s| tainted_domains(s, "Honor", &[5]),
    );
    add(
        "should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=ignore)",
        |s| tainted_pool_domain(s, "Ignore", &[1]),
    );
    add(
        "should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=honor)",
        |s| tainted_pool_domain(s, "Honor", &[2]),
    );
    add(
        "should balance pods across a label when mutually exclusive NodePools (by taints) share domains (NodeTaintsPolicy=honor)",
        |s| {
            let mut c = spread("fake-label", 1, true);
            c["nodeTaintsPolicy"] = json!("Honor");
            let mut pools = Vec::new();
            let mut pods = Vec::new();
            for (i, domains) in [["foo", "bar"], ["foo", "baz"]].iter().enumerate() {
                let mut p = nodepool(
                    &format!("pool-{i}"),
                    vec![
                        json!({"key": CT, "operator": "Exists"}),
                        req("fake-label", "In", domains),
                    ],
                );
                p["spec"]["template"]["spec"]["taints"] = json!([{"key": "taint-key", "value": format!("nodepool-{i}"), "effect": "NoSchedule"}]);
                pools.push(p);
                for _ in 0..(i + 1) * 2 {
                    let mut pod = s.pod(labels(), None, vec![c.clone()], json!({}));
                    pod["spec"]["tolerations"] = json!([{"key": "taint-key", "value": format!("nodepool-{i}"), "effect": "NoSchedule"}]);
                    pods.push(pod);
                }
            }
            s.provision(&pools, pods);
            expect_skew(s, "fake-label", T, &[3, 2, 1])
        },
    );
    add(
        "should balance pods across a label (NodeAffinityPolicy=ignore)",
        |s| mismatched_domains(s, "Ignore", &[1]),
    );
    add(
        "should balance pods across a label (NodeAffinityPolicy=honor)",
        |s| mismatched_domains(s, "Honor", &[5]),
    );
    add("should taint nodes with NodePool taints [Taints]", |s| {
        let mut pool = nodepool("default", any_capacity());
        pool["spec"]["template"]["spec"]["taints"] =
            json!([{"key": "test", "value": "bar", "effect": "NoSchedule"}]);
        let mut p = s.pod(json!({}), None, vec![], json!({}));
        p["spec"]["tolerations"] = json!([{"effect": "NoSchedule", "operator": "Exists"}]);
        let o = s.provision(&[pool], vec![p]);
        ensure(s.node_of("p1").is_some(), "scheduled")?;
        let taints = &o.claims()[0]["taints"];
        ensure(
            taints.as_array().is_some_and(|t| {
                t.contains(&json!({"key": "test", "value": "bar", "effect": "NoSchedule"}))
            }),
            format!("the node carries the NodePool's taint: {taints}"),
        )
    });
    add(
        "should schedule pods that tolerate NodePool constraints [Taints]",
        |s| {
            let mut pool = nodepool("default", any_capacity());
            pool["spec"]["template"]["spec"]["taints"] =
                json!([{"key": "test-key", "value": "test-value", "effect": "NoSchedule"}]);
            let tolerations = [
                json!([{"key": "test-key", "operator": "Exists", "effect": "NoSchedule"}]),
                json!([{"key": "test-key", "value": "test-value", "operator": "Equal", "effect": "NoSchedule"}]),
            ];
            let pods: Vec<Value> = tolerations
                .iter()
                .map(|t| {
                    let mut p = s.pod(json!({}), None, vec![], json!({}));
                    p["spec"]["tolerations"] = t.clone();
                    p
                })
                .collect();
            s.provision(std::slice::from_ref(&pool), pods);
            ensure(
                s.node_of("p1").is_some() && s.node_of("p2").is_some(),
                "both tolerating pods scheduled",
            )?;
            let others = [
                json!(null),
                json!([{"key": "invalid", "operator": "Exists"}]),
                json!([{"key": "test-key", "operator": "Equal", "effect": "NoSchedule"}]),
            ];
            let pods: Vec<Value> = others
                .iter()
                .map(|t| {
                    let mut p = s.pod(json!({}), None, vec![], json!({}));
                    if !t.is_null() {
                        p["spec"]["tolerations"] = t.clone();
                    }
                    p
                })
                .collect();
            s.provision(&[pool], pods);
            ensure(
                (3..=5).all(|i| s.node_of(&format!("p{i}")).is_none()),
                "the others are not",
            )
        },
    );
    add(
        "should provision nodes with taints and schedule pods if the taint is only a startup taint [Taints]",
        |s| {
            let mut pool = nodepool("default", any_capacity());
            pool["spec"]["template"]["spec"]["startupTaints"] = json!([{"key": "ignore-me", "value": "nothing-to-see-here", "effect": "NoSchedule"}]);
            let p = s.pod(json!({}), None, vec![], json!({}));
            s.provision(&[pool], vec![p]);
            ensure(s.node_of("p1").is_some(), "scheduled")
        },
    );
    add("should not generate taints for OpExists [Taints]", |s| {
        let mut p = s.pod(json!({}), None, vec![], json!({}));
        p["spec"]["tolerations"] =
            json!([{"key": "test-key", "operator": "Exists", "effect": "NoExecute"}]);
        // Karpenter's node has one taint, its own unregistered taint; capstan adds that at
        // launch too, so the claim's own taints must be none.
        let o = s.provision(&[nodepool("default", any_capacity())], vec![p]);
        ensure(s.node_of("p1").is_some(), "scheduled")?;
        let taints = &o.claims()[0]["taints"];
        ensure(
            taints.as_array().is_some_and(Vec::is_empty),
            format!("no taint from a toleration: {taints}"),
        )
    });
    add(
        "should schedule pod with PVC and TSC minDomains=3 when pods are spread across 3 zones",
        |s| {
            let app = json!({"app": "test"});
            let mut c = spread(ZONE, 1, false);
            c["labelSelector"] = json!({"matchLabels": {"app": "test"}});
            c["minDomains"] = json!(3);
            let pool = nodepool("default", vec![req(CT, "In", &["on-demand"])]);
            let p = s.pods(3, app.clone(), None, vec![c.clone()]);
            s.provision(std::slice::from_ref(&pool), p);
            ensure(
                (1..=3).all(|i| s.node_of(&format!("p{i}")).is_some()),
                "the first three scheduled",
            )?;
            expect_skew(s, ZONE, Some(("app", "test")), &[1, 1, 1])?;
            s.extra.push(json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "test-pv"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "claimRef": {"namespace": "default", "name": "test-pvc"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [req(ZONE, "In", &["test-zone-1"])]}]}}},
            "status": {"phase": "Bound"}}));
            s.extra.push(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "test-pvc", "namespace": "default",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"volumeName": "test-pv", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"}}));
            let mut p = s.pod(app, None, vec![c], json!({}));
            p["spec"]["volumes"] =
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": "test-pvc"}}]);
            s.provision(&[pool], vec![p]);
            let n = s
                .node_of("p4")
                .ok_or("the pod with the volume is scheduled")?;
            ensure(
                s.label_of(&n, ZONE).as_deref() == Some("test-zone-1"),
                "in the volume's zone",
            )?;
            expect_skew(s, ZONE, Some(("app", "test")), &[1, 1, 2])
        },
    );
    out
}

const AFF: &str = "podAffinity";
const ANTI: &str = "podAntiAffinity";

fn s2() -> Value {
    json!({"security": "s2"})
}

/// Adds a pod (anti-)affinity term: `kind` is `podAffinity` or `podAntiAffinity`; a
/// preference has weight 50.
fn with_term(p: &mut Value, kind: &str, required: bool, selector: Value, key: &str) {
    let term = json!({"labelSelector": {"matchLabels": selector}, "topologyKey": key});
    let (field, entry) = if required {
        ("requiredDuringSchedulingIgnoredDuringExecution", term)
    } else {
        (
            "preferredDuringSchedulingIgnoredDuringExecution",
            json!({"weight": 50, "podAffinityTerm": term}),
        )
    };
    let list = &mut p["spec"]["affinity"][kind][field];
    if list.is_null() {
        *list = json!([]);
    }
    list.as_array_mut().unwrap().push(entry);
}

/// `n` pods labelled `security: s2` with required affinity to each other over `key`.
fn self_affine(s: &mut Session, n: usize, key: &str, selector: Value, reqs: Value) -> Vec<Value> {
    (0..n)
        .map(|_| {
            let mut p = s.pod_req(s2(), None, vec![], selector.clone(), reqs.clone());
            with_term(&mut p, AFF, true, s2(), key);
            p
        })
        .collect()
}

/// Three pods of 2 CPU, one pinned to each zone, with (`required`) or preferring zonal
/// anti-affinity to `security: s2`, then one pod so labelled.
fn zone_pods_with_anti(s: &mut Session, required: bool) -> Vec<Value> {
    let mut pods: Vec<Value> = ["test-zone-1", "test-zone-2", "test-zone-3"]
        .iter()
        .map(|z| {
            let mut p = s.pod(json!({}), Some("2"), vec![], json!({ZONE: z}));
            with_term(&mut p, ANTI, required, s2(), ZONE);
            p
        })
        .collect();
    pods.push(s.pod(s2(), None, vec![], json!({})));
    pods
}

fn same_node(s: &Session, a: &str, b: &str, same: bool) -> Result<(), String> {
    let (n1, n2) = (
        s.node_of(a).ok_or(format!("{a} scheduled"))?,
        s.node_of(b).ok_or(format!("{b} scheduled"))?,
    );
    ensure((n1 == n2) == same, format!("{a} on {n1}, {b} on {n2}"))
}

/// The pods numbered `range` are all scheduled, on `n` nodes.
fn nodes_of(s: &Session, range: std::ops::RangeInclusive<usize>, n: usize) -> Result<(), String> {
    let mut nodes = std::collections::BTreeSet::new();
    for i in range {
        nodes.insert(
            s.node_of(&format!("p{i}"))
                .ok_or(format!("p{i} scheduled"))?,
        );
    }
    ensure(nodes.len() == n, format!("{n} nodes, got {nodes:?}"))
}

/// Ten pods spread one a node, a `security: s2` pod in namespace `ns`, and a pod with
/// hostname affinity to it whose term also says `extra` (namespaces, namespaceSelector):
/// whether that one lands with the target.
fn namespaced_affinity(
    s: &mut Session,
    ns: &str,
    extra: Value,
    together: bool,
) -> Result<(), String> {
    let mut pods = s.pods(10, labels(), None, vec![spread(HOST, 1, true)]);
    let mut target = s.pod(s2(), None, vec![], json!({}));
    target["metadata"]["namespace"] = json!(ns);
    pods.push(target);
    let mut p = s.pod(json!({}), None, vec![], json!({}));
    let mut term = json!({"labelSelector": {"matchLabels": s2()}, "topologyKey": HOST});
    for (k, v) in extra.as_object().unwrap() {
        term[k] = v.clone();
    }
    p["spec"]["affinity"] =
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}});
    pods.push(p);
    s.provision(&[nodepool("default", any_capacity())], pods);
    ensure(s.node_of("p11").is_some(), "the target is scheduled")?;
    if together {
        same_node(s, "p11", "p12", true)
    } else {
        ensure(
            s.node_of("p12").is_none(),
            "the pod with affinity is not scheduled",
        )
    }
}

/// Two tainted 100m nodes in `fake-label` domains foo and bar, a NodePool labelling baz, and
/// five 1-CPU pods spreading over the label with `nodeTaintsPolicy`.
fn tainted_domains(s: &mut Session, policy: &str, want: &[usize]) -> Result<(), String> {
    for (n, v) in [("node1", "foo"), ("node2", "bar")] {
        s.node(n, json!({"fake-label": v}), json!({"cpu": "100m"}));
        s.nodes.last_mut().unwrap()["spec"] = json!({"taints": [{"key": "taintname", "value": "taintvalue", "effect": "NoSchedule"}]});
    }
    let mut c = spread("fake-label", 1, true);
    c["nodeTaintsPolicy"] = json!(policy);
    let p = s.pods(5, labels(), Some("1"), vec![c]);
    s.provision(
        &[labelled(
            "default",
            any_capacity(),
            json!({"fake-label": "baz"}),
        )],
        p,
    );
    expect_skew(s, "fake-label", T, want)
}

/// A NodePool of `fake-label` foo and a tainted one of bar, and two pods spreading over the
/// label with `nodeTaintsPolicy` that do not tolerate the taint.
fn tainted_pool_domain(s: &mut Session, policy: &str, want: &[usize]) -> Result<(), String> {
    let mut plain = any_capacity();
    plain.push(req("fake-label", "In", &["foo"]));
    let mut tainted = nodepool(
        "tainted",
        vec![
            json!({"key": CT, "operator": "Exists"}),
            req("fake-label", "In", &["bar"]),
        ],
    );
    tainted["spec"]["template"]["spec"]["taints"] =
        json!([{"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}]);
    let mut c = spread("fake-label", 1, true);
    c["nodeTaintsPolicy"] = json!(policy);
    let p = s.pods(2, labels(), None, vec![c]);
    s.provision(&[nodepool("default", plain), tainted], p);
    expect_skew(s, "fake-label", T, want)
}

/// Two 100m nodes in `fake-label` domains foo and bar whose `selector` label the pods do not
/// select, a NodePool labelling baz and `selector: value`, and five 1-CPU pods selecting
/// `selector: value` and spreading over the label with `nodeAffinityPolicy`.
fn mismatched_domains(s: &mut Session, policy: &str, want: &[usize]) -> Result<(), String> {
    for (n, v) in [("node1", "foo"), ("node2", "bar")] {
        s.node(
            n,
            json!({"fake-label": v, "selector": "mismatch"}),
            json!({"cpu": "100m"}),
        );
    }
    let mut c = spread("fake-label", 1, true);
    c["nodeAffinityPolicy"] = json!(policy);
    let p: Vec<Value> = (0..5)
        .map(|_| {
            s.pod(
                labels(),
                Some("1"),
                vec![c.clone()],
                json!({"selector": "value"}),
            )
        })
        .collect();
    s.provision(
        &[labelled(
            "default",
            any_capacity(),
            json!({"fake-label": "baz", "selector": "value"}),
        )],
        p,
    );
    expect_skew(s, "fake-label", T, want)
}

/// Its of the file not transcribed yet or that need what capstan's plan cannot be told, with
/// the reason.
pub const NOT_RUN: &[(&str, &str)] = &[
    (
        "DefaultConstraints: 12 Its",
        "capstan has no cluster-level default spread constraints (Karpenter reads \
         kube-scheduler's PodTopologySpread defaultConstraints from --scheduler-config): not \
         implemented, so not counted as passing",
    ),
    (
        "should not spread an invalid label selector",
        "Karpenter skips it on Kubernetes 1.24 and later (the API server refuses the selector)",
    ),
];

use std::path::Path;

/// capstan's side of two listed differences: a pod with zonal anti-affinity to a pod whose
/// claim's zone is still open is placed in the same plan, in another zone — both orders.
#[test]
fn capstan_places_both_sides_of_a_zonal_anti_affinity_in_one_round() {
    for anti_first in [true, false] {
        let dir = std::env::temp_dir().join(format!(
            "capstan-karpenter-anti-{anti_first}-{}",
            std::process::id()
        ));
        let mut s = Session::new(&dir, default_types());
        let plain = s.pod(s2(), Some("2"), vec![], json!({}));
        let mut anti = s.pod(json!({}), None, vec![], json!({}));
        with_term(&mut anti, ANTI, true, s2(), ZONE);
        let pods = if anti_first {
            vec![anti, plain]
        } else {
            vec![plain, anti]
        };
        s.provision(&[nodepool("default", any_capacity())], pods);
        let (n1, n2) = (
            s.node_of("p1").expect("p1 placed"),
            s.node_of("p2").expect("p2 placed"),
        );
        assert_ne!(
            s.label_of(&n1, ZONE),
            s.label_of(&n2, ZONE),
            "different zones"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    let dir = std::env::temp_dir().join(format!("capstan-karpenter-aff-{}", std::process::id()));
    // Three pods anti-affine to each other by zone: one per zone, in one pass.
    let mut s = Session::new(&dir.join("anti"), default_types());
    let pods: Vec<Value> = (0..3)
        .map(|_| {
            let mut p = s.pod(s2(), None, vec![], json!({}));
            with_term(&mut p, ANTI, true, s2(), ZONE);
            p
        })
        .collect();
    s.provision(&[nodepool("default", any_capacity())], pods);
    assert_eq!(s.skew(ZONE, None), [1, 1, 1]);
    // Ten pods with zonal affinity to a pod of open zone: all in its zone, in one pass.
    let mut s = Session::new(&dir.join("aff"), default_types());
    let mut pods: Vec<Value> = (0..10)
        .map(|_| {
            let mut p = s.pod(json!({}), None, vec![], json!({}));
            with_term(&mut p, AFF, true, s2(), ZONE);
            p
        })
        .collect();
    pods.push(s.pod(s2(), None, vec![], json!({})));
    s.provision(&[nodepool("default", any_capacity())], pods);
    assert_eq!(s.skew(ZONE, None), [11]);
    let _ = std::fs::remove_dir_all(&dir);
}
