//! Named scenarios for the controller: the real loops on the in-memory API and the fake cloud,
//! with a kubelet that registers booted instances and a `kubectl` that writes as a person
//! would. Each test is one situation, so a bug gets its own test rather than a seed number.

use crate::api::{ClusterEvent, EventType, Kind, Object, Write, Written};
use crate::memory::{ApiClient, InMemoryApi};
use crate::{Action, ClusterApi, Config, Controller};
use capstan_cloud::{Clock, InstanceState, ManualClock};
use capstan_fake_cloud::{FakeCloud, FakeCloudConfig, testkit};
use capstan_model::claim::TERMINATION_FINALIZER;
use capstan_model::disruption::Reason;
use capstan_model::labels::UNREGISTERED_TAINT;
use capstan_model::nodepool::NodePoolObject;
use capstan_model::pod::PodPhase;
use capstan_model::taints::Effect;
use capstan_model::{Node, NodeClaim, NodePool, Pod, Taint};
use std::sync::Arc;
use std::time::Duration;

type Ctl = Controller<ApiClient, FakeCloud>;

/// A cluster with one NodePool, two capstan processes (`a`, `b`) and a kubelet.
struct World {
    clock: ManualClock,
    api: InMemoryApi,
    cloud: FakeCloud,
    kubectl: ApiClient,
    a: Ctl,
    b: Ctl,
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

impl World {
    fn new(pool: NodePool) -> World {
        World::with(pool, |_| {}, |_| {})
    }

    /// A world whose fake cloud `cloud` configures further.
    fn with_cloud(pool: NodePool, cloud: impl FnOnce(&mut FakeCloudConfig)) -> World {
        World::with(pool, cloud, |_| {})
    }

    /// A world whose fake cloud `cloud` and controllers' configuration `controller` configure
    /// further.
    fn with(
        pool: NodePool,
        cloud: impl FnOnce(&mut FakeCloudConfig),
        controller: impl Fn(&mut Config),
    ) -> World {
        let clock = ManualClock::new();
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let mut config = FakeCloudConfig::default();
        config.boot.min_seconds = 5.0;
        config.boot.max_seconds = 5.0;
        cloud(&mut config);
        let cloud = FakeCloud::new(config, testkit::small_catalog(), shared.clone());
        let api = InMemoryApi::new(shared.clone());
        api.put(Object::NodePool(Arc::new(pool)));
        let mk = |id: &str| {
            Controller::new(
                Arc::new(api.client(id)),
                Arc::new(cloud.clone()),
                shared.clone(),
                {
                    let mut c = Config {
                        identity: id.into(),
                        batch_idle: 0.0,
                        validation_delay: 0.0,
                        ..Default::default()
                    };
                    controller(&mut c);
                    c
                },
            )
        };
        World {
            a: mk("a"),
            b: mk("b"),
            kubectl: api.client("kubectl"),
            clock,
            api,
            cloud,
        }
    }

    /// One second passes: booted instances register their node (NotReady → Ready at once),
    /// bar those the fake cloud made never to become ready (their kubelet never joins).
    fn tick(&mut self) {
        self.clock.advance(Duration::from_secs(1));
        for tr in self.cloud.take_transitions() {
            if tr.state != InstanceState::Running {
                continue;
            }
            let Some(inst) = self.cloud.peek(&tr.provider_id) else {
                continue;
            };
            if inst.ready_at.is_none() {
                continue;
            }
            let t = testkit::small_catalog()
                .instance_types
                .into_iter()
                .find(|t| t.name == inst.instance_type)
                .expect("a catalog type");
            let name = format!("node-{}", inst.provider_id.trim_start_matches("fake://"));
            let mut n =
                Node::for_instance_type(&t, &name, &inst.zone, &inst.capacity_type, &inst.nodepool);
            n.provider_id = Some(inst.provider_id.clone());
            n.taints.push(Taint {
                key: UNREGISTERED_TAINT.into(),
                value: String::new(),
                effect: Effect::NoExecute,
            });
            self.api.put(Object::Node(Arc::new(n)));
        }
    }

    /// `secs` seconds in which only `a` runs.
    async fn run_a(&mut self, secs: u32) {
        for _ in 0..secs {
            self.tick();
            self.a.step().await;
        }
    }

    fn pending(&self, name: &str) {
        self.pending_cpu(name, 500);
    }

    fn pending_cpu(&self, name: &str, cpu: i64) {
        let mut p = Pod {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            // kube-scheduler found no node for it.
            unschedulable: true,
            ..Default::default()
        };
        p.requests.cpu = cpu;
        p.requests.memory = 1 << 30;
        p.requests.pods = 1;
        self.api.put(Object::Pod(Arc::new(p)));
    }

    /// kube-scheduler: binds a pod to a node.
    fn bind(&self, pod: &str, node: &str) {
        let p = self.api.pod(&format!("default/{pod}")).expect("the pod");
        let mut p = Pod::clone(&p);
        p.node_name = Some(node.into());
        p.phase = PodPhase::Running;
        p.unschedulable = false;
        self.api.put(Object::Pod(Arc::new(p)));
    }

    fn claims(&self) -> Vec<Arc<NodeClaim>> {
        self.api
            .all(Kind::NodeClaim)
            .into_iter()
            .filter_map(|o| match o {
                Object::NodeClaim(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    fn nodes(&self) -> Vec<Arc<Node>> {
        self.api
            .all(Kind::Node)
            .into_iter()
            .filter_map(|o| match o {
                Object::Node(n) => Some(n),
                _ => None,
            })
            .collect()
    }

    fn live_instances(&self) -> usize {
        self.cloud.live_instances(|i| i.count())
    }
}

fn pool(json: serde_json::Value) -> NodePool {
    let mut o = serde_json::json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]}]}}}
    });
    if let Some(d) = json.get("disruption") {
        o["spec"]["disruption"] = d.clone();
    }
    let obj: NodePoolObject = serde_json::from_value(o).unwrap();
    NodePool::compile_fail_closed(&obj).unwrap()
}

/// A static NodePool of `replicas` m7i.large nodes that would be consolidated at once were
/// it not static.
fn static_pool(replicas: u32) -> NodePool {
    let o = serde_json::json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "fixed"},
        "spec": {"replicas": replicas,
                 "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "0s"},
                 "template": {"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]}]}}}
    });
    let obj: NodePoolObject = serde_json::from_value(o).unwrap();
    NodePool::compile_fail_closed(&obj).unwrap()
}

fn actions(c: &mut Ctl) -> Vec<Action> {
    c.take_records().into_iter().map(|r| r.action).collect()
}

#[test]
fn a_pending_pod_gets_a_claim_that_launches_registers_and_initializes() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        w.pending("web-1");
        w.run_a(12).await;
        let claims = w.claims();
        assert_eq!(claims.len(), 1);
        let c = &claims[0];
        assert!(c.status.initialized(), "{:?}", c.status);
        assert!(c.finalizers.iter().any(|f| f == TERMINATION_FINALIZER));
        let node = &w.nodes()[0];
        assert!(node.finalizers.iter().any(|f| f == TERMINATION_FINALIZER));
        assert!(!node.taints.iter().any(|t| t.key == UNREGISTERED_TAINT));
        assert_eq!(c.status.node_name.as_deref(), Some(node.name.as_str()));
        let kinds: Vec<&str> = actions(&mut w.a)
            .iter()
            .map(|a| match a {
                Action::Elected { .. } => "elected",
                Action::Provisioned { .. } => "provisioned",
                Action::Launched { .. } => "launched",
                Action::Registered { .. } => "registered",
                Action::Initialized { .. } => "initialized",
                _ => "other",
            })
            .filter(|k| *k != "other" && *k != "provisioned")
            .collect();
        assert_eq!(kinds, ["elected", "launched", "registered", "initialized"]);
        // Said as Events on the claim and its node, and counted as Karpenter counts them.
        let events = w.api.events();
        let said = |reason: &str, kind: Kind, name: &str| {
            events
                .iter()
                .filter(|(_, e)| e.reason == reason && e.regarding == (kind, name.to_string()))
                .count()
        };
        assert_eq!(said("Launched", Kind::NodeClaim, &c.name), 1, "{events:?}");
        assert_eq!(
            said("Registered", Kind::NodeClaim, &c.name),
            1,
            "{events:?}"
        );
        assert_eq!(said("Registered", Kind::Node, &node.name), 1, "{events:?}");
        let text = w.a.metrics().render();
        for line in [
            "karpenter_nodeclaims_created_total{nodepool=\"default\",reason=\"provisioned\"} 1",
            "karpenter_nodes_created_total{nodepool=\"default\"} 1",
            "karpenter_cluster_state_synced 1",
            "leader_election_master_status{name=\"capstan\"} 1",
            "karpenter_scheduler_unschedulable_pods_count{controller=\"provisioner\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        // The follower says it does not lead.
        w.b.step().await;
        assert!(
            w.b.metrics()
                .render()
                .contains("leader_election_master_status{name=\"capstan\"} 0")
        );
    });
}

#[test]
fn a_registering_node_is_nominated_for_the_pods_planned_on_it_and_nominations_that_do_not_bind_are_cleared()
 {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        w.pending("web-1");
        w.pending("web-2");
        let nominated = |w: &World, pod: &str| {
            w.api
                .pod(&format!("default/{pod}"))
                .and_then(|p| p.nominated_node.clone())
        };
        // Until the claim registers, nobody is nominated; as it does, both pods are, to
        // its node, before the unregistered taint comes off.
        let mut registered = None;
        for _ in 0..30 {
            w.run_a(1).await;
            let c = w.claims();
            assert_eq!(c.len(), 1, "both pods fit one claim");
            if let Some(node) = c[0].status.node_name.clone() {
                registered = Some((node, w.clock.now().as_secs_f64()));
                break;
            }
            assert_eq!(nominated(&w, "web-1"), None);
        }
        let (node, at) = registered.expect("the claim registers");
        assert_eq!(nominated(&w, "web-1").as_deref(), Some(node.as_str()));
        assert_eq!(nominated(&w, "web-2").as_deref(), Some(node.as_str()));
        // kube-scheduler binds one; the other stays pending (a pod of higher priority took
        // its room, say). Its nomination stays for the grace after the node initializes,
        // then capstan clears it and the pod is the provisioner's again.
        w.bind("web-1", &node);
        w.run_a(10).await;
        assert_eq!(nominated(&w, "web-2").as_deref(), Some(node.as_str()));
        w.run_a(crate::registration::NOMINATION_GRACE as u32).await;
        assert!(w.clock.now().as_secs_f64() - at > crate::registration::NOMINATION_GRACE);
        assert_eq!(nominated(&w, "web-2"), None);
        assert_eq!(
            w.api.pod("default/web-1").and_then(|p| p.node_name.clone()),
            Some(node)
        );
    });
}

#[test]
fn a_claim_whose_instance_is_terminated_behind_its_back_starts_its_deletion_at_the_next_collection()
{
    block(async {
        use capstan_cloud::CloudProvider;
        let mut w = World::new(pool(serde_json::json!({})));
        w.pending("web-1");
        w.run_a(12).await;
        let name = w.claims()[0].name.clone();
        let pid = w.claims()[0].status.provider_id.clone().expect("launched");
        // Collections that find every launched claim's instance leave the claims alone.
        w.run_a(65).await;
        assert!(w.claims().iter().all(|c| !c.deleting()), "{:?}", w.claims());
        w.cloud.delete(&pid).await.expect("terminated");
        w.run_a(crate::Config::default().gc_interval as u32 + 1)
            .await;
        let claim = w.claims().into_iter().find(|c| c.name == name);
        assert!(
            claim.as_ref().is_none_or(
                |c| c.deleting() && c.deletion_reason == Some(Reason::InstanceTerminated)
            ),
            "{claim:?}"
        );
        assert!(
            actions(&mut w.a)
                .iter()
                .all(|a| !matches!(a, Action::GarbageCollected { .. })),
            "its instance was not leaked"
        );
    });
}

#[test]
fn a_node_a_do_not_disrupt_pod_keeps_gets_one_disruption_blocked_event_naming_the_pod() {
    block(async {
        let mut w = World::new(pool(
            serde_json::json!({"disruption": {"consolidateAfter": "0s"}}),
        ));
        w.pending("web-1");
        w.run_a(12).await;
        let node = w.nodes()[0].name.clone();
        let claim = w.claims()[0].name.clone();
        let mut p = Pod::clone(&w.api.pod("default/web-1").expect("the pod"));
        p.node_name = Some(node.clone());
        p.phase = PodPhase::Running;
        p.unschedulable = false;
        // As converted from the API (Karpenter's spelling becomes capstan's).
        p.annotations
            .insert(capstan_model::labels::DO_NOT_DISRUPT.into(), "true".into());
        w.api.put(Object::Pod(Arc::new(p)));
        w.run_a(120).await;
        assert_eq!(w.nodes().len(), 1, "the node stays");
        let events = w.api.events();
        for (kind, name) in [(Kind::Node, &node), (Kind::NodeClaim, &claim)] {
            let blocked: Vec<&ClusterEvent> = events
                .iter()
                .map(|(_, e)| e)
                .filter(|e| e.reason == "DisruptionBlocked" && e.regarding == (kind, name.clone()))
                .collect();
            assert_eq!(blocked.len(), 1, "said once on the {kind:?}: {events:?}");
            assert_eq!(blocked[0].type_, EventType::Normal);
            assert!(
                blocked[0]
                    .note
                    .contains("pod default/web-1 has do-not-disrupt"),
                "{:?}",
                blocked[0]
            );
        }
        let text = w.a.metrics().render();
        assert!(
            text.contains(
                "karpenter_voluntary_disruption_eligible_nodes{reason=\"underutilized\"} 0"
            ),
            "a blocked node is not eligible: {text}"
        );
    });
}

#[test]
fn a_leader_frozen_past_its_renew_deadline_sends_one_write_and_then_none() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        // Three pods that each need a node of their own: three claims to launch.
        for i in 0..3 {
            w.pending_cpu(&format!("web-{i}"), 1500);
        }
        w.run_a(1).await;
        assert!(w.a.is_leader());
        assert_eq!(w.claims().len(), 3);
        let before = w.a.write_stats().clone();
        // Frozen for 11 s: past the 10 s renew deadline, before the 15 s lease runs out.
        for _ in 0..11 {
            w.tick();
        }
        w.a.step_after_freeze().await;
        let after = w.a.write_stats().clone();
        assert!(
            after.withheld > before.withheld,
            "it stops writing: {after:?}"
        );
        assert!(
            w.live_instances() <= 1,
            "one launch got through before the check: {}",
            w.live_instances()
        );
        assert!(!w.a.is_leader());
    });
}

#[test]
fn a_static_nodepool_keeps_its_replicas_empty_or_not_and_scales_down_when_they_are_lowered() {
    block(async {
        let mut w = World::with(static_pool(2), |_| {}, |c| c.static_capacity = true);
        w.run_a(40).await;
        let claims = w.claims();
        assert_eq!(claims.len(), 2, "two nodes with no pod asking");
        assert!(claims.iter().all(|c| c.status.initialized()));
        assert_eq!(w.nodes().len(), 2);
        // Empty, consolidateAfter 0s, WhenEmpty: a dynamic pool would remove them by now.
        w.run_a(60).await;
        assert_eq!(w.claims().len(), 2, "static nodes are not consolidated");
        // A pod kube-scheduler cannot place gets no node from a static pool.
        w.pending_cpu("big", 64_000);
        w.run_a(20).await;
        assert_eq!(w.claims().len(), 2);
        // One replica fewer: one claim goes, the instance with it.
        w.api
            .put(crate::api::Object::NodePool(Arc::new(static_pool(1))));
        w.run_a(30).await;
        let live: Vec<_> = w.claims().into_iter().filter(|c| !c.deleting()).collect();
        assert_eq!(live.len(), 1);
        assert_eq!(w.live_instances(), 1);
        let scaled = actions(&mut w.a).into_iter().any(|a| {
            matches!(
                a,
                Action::Terminated {
                    reason: Reason::ScaledDown,
                    ..
                }
            )
        });
        assert!(scaled, "the deletion says why");
    });
}

#[test]
fn a_static_nodepool_without_the_static_capacity_gate_launches_nothing_and_says_why() {
    block(async {
        let mut w = World::new(static_pool(2));
        w.pending("web-1");
        w.run_a(20).await;
        assert!(w.claims().is_empty());
        let said: Vec<_> = w
            .api
            .events()
            .into_iter()
            .filter(|(_, e)| e.reason == "StaticCapacityDisabled")
            .collect();
        assert_eq!(said.len(), 1, "said once: {said:?}");
        assert!(said[0].1.note.contains("StaticCapacity=true"));
    });
}

#[test]
fn pods_below_the_expendable_priority_cutoff_never_cause_a_launch_and_are_told_why() {
    // (priority, cutoff, launches)
    let cases = [
        (-11, None, false),
        (-10, None, true),
        (0, None, true),
        (-100, Some(-1000), true),
        (5, Some(10), false),
    ];
    for (priority, cutoff, launches) in cases {
        block(async {
            let mut w = World::with(
                pool(serde_json::json!({})),
                |_| {},
                |c| {
                    if let Some(cut) = cutoff {
                        c.expendable_priority_cutoff = cut;
                    }
                },
            );
            let mut p = Pod {
                namespace: "default".into(),
                name: "filler".into(),
                uid: "uid-filler".into(),
                unschedulable: true,
                priority,
                ..Default::default()
            };
            p.requests.cpu = 500;
            p.requests.pods = 1;
            w.api.put(Object::Pod(Arc::new(p)));
            w.run_a(20).await;
            assert_eq!(
                !w.claims().is_empty(),
                launches,
                "priority {priority}, cutoff {cutoff:?}"
            );
            let told = w
                .api
                .events()
                .into_iter()
                .filter(|(_, e)| {
                    e.reason == "Expendable"
                        && e.regarding == (Kind::Pod, "default/filler".to_string())
                })
                .count();
            assert_eq!(told, usize::from(!launches), "told once, when expendable");
        });
    }
}

#[test]
fn a_balanced_nodepool_provisions_and_says_once_that_it_consolidates_only_empty_nodes() {
    block(async {
        let o = serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"disruption": {"consolidationPolicy": "Balanced"},
                     "template": {"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]}]}}}
        });
        let obj: NodePoolObject = serde_json::from_value(o).unwrap();
        let mut w = World::new(NodePool::compile_fail_closed(&obj).unwrap());
        w.pending("web-1");
        w.run_a(12).await;
        assert_eq!(w.claims().len(), 1, "the pool provisions");
        let notes: Vec<String> = w
            .api
            .events()
            .into_iter()
            .filter(|(_, e)| {
                e.reason == "NotSupported"
                    && e.type_ == EventType::Warning
                    && e.regarding == (Kind::NodePool, "default".to_string())
            })
            .map(|(_, e)| e.note)
            .collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("Balanced") && notes[0].contains("WhenEmpty"));
    });
}

#[test]
fn a_claim_whose_launch_has_not_succeeded_in_five_minutes_is_deleted_and_its_pod_planned_again() {
    block(async {
        let mut w = World::with_cloud(one_zone_on_demand(&["m7i.large", "m7i.xlarge"]), |c| {
            c.faults.launch_failure_rate = 1.0;
        });
        w.pending("web-1");
        w.run_a(5).await;
        let first = w.claims();
        assert_eq!(first.len(), 1);
        w.run_a(290).await;
        assert_eq!(
            w.claims()[0].name,
            first[0].name,
            "retried, not abandoned, within 5 minutes"
        );
        w.run_a(20).await;
        let abandoned = actions(&mut w.a).into_iter().any(|a| {
            matches!(&a, Action::LaunchAbandoned { claim, error }
                if *claim == first[0].name && error.contains("not launched within 300"))
        });
        assert!(abandoned, "the first claim is given up after 300 s");
        let claims = w.claims();
        assert!(
            claims.iter().all(|c| c.name != first[0].name),
            "the first claim is gone: {:?}",
            claims.iter().map(|c| &c.name).collect::<Vec<_>>()
        );
        assert_eq!(claims.len(), 1, "a new claim for the pod");
        assert_eq!(first[0].instance_types, ["m7i.large", "m7i.xlarge"]);
        assert_eq!(
            claims[0].instance_types,
            ["m7i.xlarge"],
            "the offering the first claim went for is cached unavailable"
        );
        assert_eq!(w.live_instances(), 0);
    });
}

/// A NodePool of these types, on-demand in us-east-1a only: one offering per type.
fn one_zone_on_demand(types: &[&str]) -> NodePool {
    let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}
    }))
    .unwrap();
    NodePool::compile_fail_closed(&obj).unwrap()
}

#[test]
fn an_instance_that_never_registers_is_replaced_on_another_offering() {
    block(async {
        let mut w = World::with_cloud(one_zone_on_demand(&["m7i.large", "m7i.xlarge"]), |c| {
            c.faults.never_ready_rate = 1.0;
        });
        w.pending("web-1");
        w.run_a(10).await;
        let first = w.claims();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].status.instance_type.as_deref(), Some("m7i.large"));
        w.run_a(880).await;
        assert_eq!(
            w.claims()[0].name,
            first[0].name,
            "not replaced within 15 minutes"
        );
        w.run_a(40).await;
        let acts = actions(&mut w.a);
        assert!(
            acts.iter()
                .any(|a| matches!(a, Action::NotRegistered { claim } if *claim == first[0].name)),
            "the claim is given up after 15 minutes"
        );
        let launched: Vec<&String> = acts
            .iter()
            .filter_map(|a| match a {
                Action::Launched { instance_type, .. } => Some(instance_type),
                _ => None,
            })
            .collect();
        assert_eq!(
            launched.last().map(|s| s.as_str()),
            Some("m7i.xlarge"),
            "the replacement avoids the offering that never joined: {launched:?}"
        );
    });
}

#[test]
fn a_frozen_leaders_stale_write_is_refused_by_its_precondition_and_launches_nothing_twice() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        w.run_a(1).await;
        w.pending("web-1");
        // a creates the claim, then freezes before launching it.
        w.tick();
        w.a.step().await;
        let claims = w.claims();
        assert_eq!(claims.len(), 1);
        assert!(claims[0].status.provider_id.is_none() || w.live_instances() == 1);
        // b takes over once the lease has not changed for its duration, and launches.
        for _ in 0..20 {
            w.tick();
            w.b.step().await;
        }
        assert!(w.b.is_leader());
        let launched = w.claims()[0].status.provider_id.clone();
        assert!(launched.is_some());
        let before = w.api.stats().conflicts;
        // a resumes believing it leads, with the claim as it last saw it.
        w.a.step_after_freeze().await;
        w.a.step().await;
        assert!(!w.a.is_leader());
        assert_eq!(w.live_instances(), 1, "one claim, one instance");
        assert_eq!(w.claims()[0].status.provider_id, launched);
        let stats = w.api.stats();
        assert_eq!(stats.conflicts, before + 1, "{stats:?}");
        assert_eq!(
            stats.non_holder_writes, 1,
            "the one stale write reached the server"
        );
        assert_eq!(w.a.write_stats().conflicts, 1);
        let lease = w.api.lease().unwrap();
        assert_eq!(lease.holder, "b");
    });
}

#[test]
fn kubectl_delete_node_drains_through_the_finalizer_before_the_instance_goes() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        w.pending("web-1");
        w.run_a(12).await;
        let node = w.nodes()[0].name.clone();
        w.bind("web-1", &node);
        w.run_a(1).await;
        // kubectl delete node: the finalizer holds it.
        let meta = w.api.meta(Kind::Node, &node).unwrap();
        let held = w
            .kubectl
            .write(Write::Delete {
                kind: Kind::Node,
                key: node.clone(),
                uid: meta.uid,
                rv: String::new(),
            })
            .await
            .unwrap();
        assert!(
            matches!(held, Written::Object(..)),
            "held by capstan's finalizer"
        );
        // Its pod is planned ahead of its eviction: a node is launched for it (a ReplicaSet's
        // pod comes back and needs the room). The pod is evicted while the instance still
        // runs; then the instance, the node and the claim go.
        let old = w.claims()[0].name.clone();
        for _ in 0..5 {
            w.run_a(1).await;
            if w.api.pod("default/web-1").is_none() {
                break;
            }
        }
        assert!(w.api.pod("default/web-1").is_none(), "evicted");
        assert_eq!(w.live_instances(), 2, "drained before the instance goes");
        assert!(
            w.claims().iter().any(|c| c.name != old),
            "a node launched for its pod ahead of the drain"
        );
        w.run_a(2).await;
        assert_eq!(w.live_instances(), 1);
        assert!(w.nodes().iter().all(|n| n.name != node));
        assert!(w.claims().iter().all(|c| c.name != old));
        let terminated: Vec<Reason> = actions(&mut w.a)
            .into_iter()
            .filter_map(|a| match a {
                Action::Terminated { reason, .. } => Some(reason),
                _ => None,
            })
            .collect();
        assert_eq!(terminated, [Reason::NodeDeleted]);
    });
}

#[test]
fn a_deleted_nodes_pod_that_its_budget_never_lets_go_gets_no_node_ahead_of_its_drain() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        w.pending("web-1");
        w.run_a(12).await;
        let node = w.nodes()[0].name.clone();
        w.bind("web-1", &node);
        let mut p = Pod::clone(&w.api.pod("default/web-1").unwrap());
        p.labels.insert("app".into(), "web".into());
        w.api.put(Object::Pod(Arc::new(p)));
        w.api.put(Object::Pdb(Arc::new(capstan_model::pdb::Pdb {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(capstan_model::selector::LabelSelector::from_match_labels(
                &[("app".to_string(), "web".to_string())]
                    .into_iter()
                    .collect(),
            )),
            min_available: None,
            max_unavailable: Some(capstan_model::pdb::IntOrPercent::Int(0)),
            always_allow_unhealthy: false,
        })));
        w.run_a(1).await;
        let meta = w.api.meta(Kind::Node, &node).unwrap();
        w.kubectl
            .write(Write::Delete {
                kind: Kind::Node,
                key: node.clone(),
                uid: meta.uid,
                rv: String::new(),
            })
            .await
            .unwrap();
        w.run_a(15).await;
        assert!(w.api.pod("default/web-1").is_some(), "its budget holds it");
        assert_eq!(
            w.claims().len(),
            1,
            "no node launched for a pod that cannot go"
        );
    });
}

#[test]
fn a_do_not_disrupt_pod_is_not_evicted_by_a_drain_but_deleted_its_grace_period_before_the_nodes_runs_out()
 {
    block(async {
        let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"terminationGracePeriod": "120s", "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]}]}}}
        }))
        .unwrap();
        let mut w = World::new(NodePool::compile_fail_closed(&obj).unwrap());
        w.pending("web-1");
        w.run_a(12).await;
        let node = w.nodes()[0].name.clone();
        w.bind("web-1", &node);
        let mut p = Pod::clone(&w.api.pod("default/web-1").unwrap());
        p.annotations
            .insert(capstan_model::labels::DO_NOT_DISRUPT.into(), "true".into());
        p.termination_grace_seconds = Some(30);
        w.api.put(Object::Pod(Arc::new(p)));
        w.run_a(1).await;
        let meta = w.api.meta(Kind::Node, &node).unwrap();
        w.kubectl
            .write(Write::Delete {
                kind: Kind::Node,
                key: node.clone(),
                uid: meta.uid,
                rv: String::new(),
            })
            .await
            .unwrap();
        // 120 s of grace, 30 s of them the pod's own: it stays until 90 s have passed.
        w.run_a(85).await;
        assert!(w.api.pod("default/web-1").is_some(), "not evicted");
        assert_eq!(w.live_instances(), 1);
        w.run_a(10).await;
        assert!(
            w.api.pod("default/web-1").is_none_or(|p| p.deleting),
            "deleted with its grace period still ahead"
        );
        w.run_a(40).await;
        assert_eq!(w.live_instances(), 0, "gone once the grace period ran out");
    });
}

#[test]
fn the_instance_waits_for_its_volumes_to_detach_after_the_pods_are_gone() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        w.pending("web-1");
        w.run_a(12).await;
        let node = w.nodes()[0].name.clone();
        w.bind("web-1", &node);
        let attachment = capstan_model::volume::Attachment {
            name: "csi-123".into(),
            node: node.clone(),
            volume: Some("pv-1".into()),
        };
        w.api.put(Object::VolumeAttachment(Arc::new(attachment)));
        w.run_a(1).await;
        let meta = w.api.meta(Kind::Node, &node).unwrap();
        w.kubectl
            .write(Write::Delete {
                kind: Kind::Node,
                key: node.clone(),
                uid: meta.uid,
                rv: String::new(),
            })
            .await
            .unwrap();
        let old = w.claims()[0].name.clone();
        w.run_a(20).await;
        assert!(w.api.pod("default/web-1").is_none(), "drained");
        // Its own, and the one launched for its pod ahead of the drain.
        assert_eq!(w.live_instances(), 2, "its volume is still attached");
        // The CSI driver detaches it: the instance goes.
        w.api.remove(Kind::VolumeAttachment, "csi-123");
        w.run_a(3).await;
        assert_eq!(w.live_instances(), 1);
        assert!(w.claims().iter().all(|c| c.name != old));
    });
}

#[test]
fn kubectl_delete_nodeclaim_terminates_its_node_and_instance() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        w.pending("web-1");
        w.run_a(12).await;
        let node = w.nodes()[0].name.clone();
        w.bind("web-1", &node);
        w.run_a(1).await;
        let c = w.claims()[0].clone();
        let meta = w.api.meta(Kind::NodeClaim, &c.name).unwrap();
        w.kubectl
            .write(Write::Delete {
                kind: Kind::NodeClaim,
                key: c.name.clone(),
                uid: meta.uid,
                rv: meta.resource_version,
            })
            .await
            .unwrap();
        w.run_a(3).await;
        assert!(w.api.pod("default/web-1").is_none(), "drained");
        // What is left is the node launched for its pod ahead of the drain.
        assert!(w.claims().iter().all(|x| x.name != c.name));
        assert_eq!(w.live_instances(), 1);
        let reasons: Vec<Reason> = actions(&mut w.a)
            .into_iter()
            .filter_map(|a| match a {
                Action::Terminated { reason, .. } => Some(reason),
                _ => None,
            })
            .collect();
        assert_eq!(reasons, [Reason::ClaimDeleted]);
    });
}

#[test]
fn a_nodepool_whose_budgets_do_not_compile_disrupts_nothing_and_says_why() {
    block(async {
        let budgets = serde_json::json!({"disruption": {"consolidateAfter": "0s", "budgets": [
            {"nodes": "100%", "schedule": "0 9 * * funday", "duration": "8h"}]}});
        let mut w = World::new(pool(budgets));
        w.pending("web-1");
        w.run_a(12).await;
        // The pod finishes: the node is empty, and would be deleted with valid budgets.
        w.api.remove(Kind::Pod, "default/web-1");
        w.run_a(120).await;
        let acts = actions(&mut w.a);
        assert!(
            !acts.iter().any(|a| matches!(a, Action::Disrupting { .. })),
            "{acts:?}"
        );
        assert_eq!(w.nodes().len(), 1);
        let events = w.api.events();
        assert!(
            events
                .iter()
                .any(|(_, e)| e.reason == "InvalidDisruptionBudgets"
                    && e.note.contains("spec.disruption.budgets[0].schedule")),
            "{events:?}"
        );
        assert_eq!(
            events
                .iter()
                .filter(|(_, e)| e.reason == "InvalidDisruptionBudgets")
                .count(),
            1,
            "said once"
        );
    });
}

#[test]
fn with_valid_budgets_the_same_empty_node_is_removed() {
    block(async {
        let mut w = World::new(pool(
            serde_json::json!({"disruption": {"consolidateAfter": "0s"}}),
        ));
        w.pending("web-1");
        w.run_a(12).await;
        w.api.remove(Kind::Pod, "default/web-1");
        w.run_a(120).await;
        assert!(w.nodes().is_empty());
        assert_eq!(w.live_instances(), 0);
    });
}

#[test]
fn a_stray_disrupted_taint_left_by_a_deposed_leader_is_removed() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({})));
        w.pending("web-1");
        w.run_a(12).await;
        let node = w.nodes()[0].clone();
        w.bind("web-1", &node.name);
        let meta = w.api.meta(Kind::Node, &node.name).unwrap();
        w.kubectl
            .write(Write::Taint {
                node: node.name.clone(),
                rv: meta.resource_version,
                current: node.taints.clone(),
                change: crate::api::TaintChange::Add(Taint {
                    key: capstan_model::labels::DISRUPTED_TAINT.into(),
                    value: String::new(),
                    effect: Effect::NoSchedule,
                }),
            })
            .await
            .unwrap();
        w.run_a(11).await;
        let n = &w.nodes()[0];
        assert!(!n.has_disrupted_taint(), "{:?}", n.taints);
    });
}

#[test]
fn a_spot_interruption_marks_its_offering_unavailable_so_the_replacement_goes_elsewhere() {
    block(async {
        let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}
        }))
        .unwrap();
        let mut w = World::new(NodePool::compile_fail_closed(&obj).unwrap());
        w.pending("web-1");
        w.run_a(12).await;
        let first = w.claims()[0].clone();
        assert!(first.status.initialized(), "{:?}", first.status);
        assert_eq!(first.status.capacity_type.as_deref(), Some("spot"));
        let node = first.status.node_name.clone().expect("registered");
        w.bind("web-1", &node);
        let pid = first.status.provider_id.clone().expect("launched");
        w.cloud.interrupt(&pid).unwrap();
        actions(&mut w.a);
        w.run_a(20).await;
        let launches: Vec<(String, String)> = actions(&mut w.a)
            .into_iter()
            .filter_map(|a| match a {
                Action::Launched {
                    instance_type,
                    zone,
                    ..
                } => Some((instance_type, zone)),
                _ => None,
            })
            .collect();
        assert_eq!(launches.len(), 1, "one replacement: {launches:?}");
        assert_eq!(launches[0].0, "m7i.large");
        assert_ne!(
            Some(&launches[0].1),
            first.status.zone.as_ref(),
            "the interrupted pool is avoided for three minutes"
        );
    });
}

#[test]
fn a_leader_resuming_from_a_freeze_starts_no_disruption_its_budget_no_longer_allows() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({"disruption": {
            "consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}})));
        // Two pods that each need a node of their own.
        w.pending_cpu("web-1", 1500);
        w.pending_cpu("web-2", 1500);
        w.run_a(12).await;
        let nodes = w.nodes();
        assert_eq!(nodes.len(), 2);
        w.bind("web-1", &nodes[0].name);
        w.bind("web-2", &nodes[1].name);
        w.run_a(12).await;
        // web-1 finishes: its node is empty, and `a` proposes removing it.
        w.api.remove(Kind::Pod, "default/web-1");
        for _ in 0..300 {
            if w.a.disruption.proposed().is_some() {
                break;
            }
            w.run_a(1).await;
        }
        let proposed = w.a.disruption.proposed().cloned().expect("a proposal");
        assert_eq!(proposed.candidates, [nodes[0].name.clone()]);
        // `a` freezes; meanwhile the other node goes NotReady, which uses up the budget.
        let now = w.nodes().into_iter().find(|n| n.name == nodes[1].name);
        let mut other = Node::clone(&now.expect("the other node"));
        other.ready = false;
        w.api.put(Object::Node(Arc::new(other)));
        for _ in 0..11 {
            w.tick();
        }
        // `a` resumes with its cache as it was: the proposal still holds there.
        w.a.step_after_freeze().await;
        let tainted: Vec<String> = w
            .nodes()
            .iter()
            .filter(|n| n.has_disrupted_taint())
            .map(|n| n.name.clone())
            .collect();
        assert!(tainted.is_empty(), "past the budget of 1: {tainted:?}");
        assert!(
            !actions(&mut w.a)
                .iter()
                .any(|a| matches!(a, Action::Disrupting { .. }))
        );
    });
}

#[test]
fn a_cordon_by_a_person_does_not_use_up_the_disruption_budget() {
    block(async {
        let mut w = World::new(pool(serde_json::json!({"disruption": {
            "consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}})));
        w.pending_cpu("web-1", 1500);
        w.pending_cpu("web-2", 1500);
        w.run_a(12).await;
        let nodes = w.nodes();
        assert_eq!(nodes.len(), 2);
        w.bind("web-1", &nodes[0].name);
        w.bind("web-2", &nodes[1].name);
        w.run_a(12).await;
        // Someone cordons the second node (`kubectl cordon`); the first empties.
        let mut other = Node::clone(&w.nodes()[1]);
        other.unschedulable = true;
        w.api.put(Object::Node(Arc::new(other)));
        w.api.remove(Kind::Pod, "default/web-1");
        let mut tainted = Vec::new();
        for _ in 0..300 {
            w.run_a(1).await;
            tainted = w
                .nodes()
                .iter()
                .filter(|n| n.has_disrupted_taint())
                .map(|n| n.name.clone())
                .collect();
            if !tainted.is_empty() {
                break;
            }
        }
        // As in Karpenter, the cordoned node is not "disrupting": the budget of 1 is free.
        assert_eq!(tainted, [nodes[0].name.clone()]);
    });
}

/// The fake cloud answering as EC2's CreateFleet does: one call is one capacity type, and spot
/// is out. A request that allows spot gets InsufficientCapacity naming every spot offering it
/// tried; after that the provider (as the AWS provider's own cache does) sends on-demand.
#[derive(Clone)]
struct SpotOut {
    inner: FakeCloud,
    spot_reported: Arc<std::sync::atomic::AtomicBool>,
}

impl capstan_cloud::CloudProvider for SpotOut {
    async fn create(
        &self,
        request: &capstan_cloud::LaunchRequest,
    ) -> Result<capstan_cloud::Instance, capstan_cloud::CloudError> {
        use capstan_model::labels;
        use std::sync::atomic::Ordering;
        if !request.requirements.allows(labels::CAPACITY_TYPE, "spot") {
            return self.inner.create(request).await;
        }
        if !self.spot_reported.swap(true, Ordering::SeqCst) {
            let offerings = request
                .instance_types
                .iter()
                .flat_map(|t| {
                    self.inner
                        .zones()
                        .iter()
                        .map(|z| capstan_cloud::OfferingKey {
                            instance_type: t.clone(),
                            zone: z.clone(),
                            capacity_type: "spot".into(),
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            return Err(capstan_cloud::CloudError::InsufficientCapacity { offerings });
        }
        let mut on_demand = request.clone();
        on_demand
            .requirements
            .add(capstan_model::Requirement::in_values(
                labels::CAPACITY_TYPE,
                ["on-demand"],
            ));
        self.inner.create(&on_demand).await
    }
    async fn delete(&self, provider_id: &str) -> Result<(), capstan_cloud::CloudError> {
        self.inner.delete(provider_id).await
    }
    async fn get(
        &self,
        provider_id: &str,
    ) -> Result<capstan_cloud::Instance, capstan_cloud::CloudError> {
        self.inner.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<Arc<capstan_cloud::Instance>>, capstan_cloud::CloudError> {
        self.inner.list().await
    }
    async fn instance_types(
        &self,
        nodepool: &NodePool,
    ) -> Result<Vec<capstan_model::InstanceType>, capstan_cloud::CloudError> {
        self.inner.instance_types(nodepool).await
    }
    async fn is_drifted(
        &self,
        instance: &capstan_cloud::Instance,
    ) -> Result<Option<capstan_cloud::Drift>, capstan_cloud::CloudError> {
        self.inner.is_drifted(instance).await
    }
    fn repair_policies(&self) -> Vec<capstan_cloud::RepairPolicy> {
        self.inner.repair_policies()
    }
    async fn interruptions(
        &self,
    ) -> Result<Vec<capstan_cloud::InterruptionEvent>, capstan_cloud::CloudError> {
        self.inner.interruptions().await
    }
    async fn ack_interruptions(
        &self,
        events: &[capstan_cloud::InterruptionEvent],
    ) -> Result<(), capstan_cloud::CloudError> {
        self.inner.ack_interruptions(events).await
    }
}

#[test]
fn spot_out_of_capacity_falls_back_to_on_demand_in_the_same_pass() {
    block(async {
        let clock = ManualClock::new();
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let inner = FakeCloud::new(
            FakeCloudConfig::default(),
            testkit::small_catalog(),
            shared.clone(),
        );
        let cloud = SpotOut {
            inner,
            spot_reported: Default::default(),
        };
        let api = InMemoryApi::new(shared.clone());
        // A Karpenter v1 pool that leaves the capacity type open: spot first, on-demand after.
        api.put(Object::NodePool(Arc::new(pool(serde_json::json!({})))));
        let mut a = Controller::new(
            Arc::new(api.client("a")),
            Arc::new(cloud.clone()),
            shared.clone(),
            Config {
                identity: "a".into(),
                batch_idle: 0.0,
                validation_delay: 0.0,
                ..Default::default()
            },
        );
        let mut p = Pod {
            namespace: "default".into(),
            name: "web-1".into(),
            uid: "uid-web-1".into(),
            unschedulable: true,
            ..Default::default()
        };
        p.requests.cpu = 500;
        p.requests.memory = 1 << 30;
        p.requests.pods = 1;
        api.put(Object::Pod(Arc::new(p)));
        let mut records = Vec::new();
        for _ in 0..10 {
            clock.advance(Duration::from_secs(1));
            a.step().await;
            records.extend(a.take_records());
        }
        let failed: Vec<f64> = records
            .iter()
            .filter(|r| matches!(r.action, Action::LaunchFailed { .. }))
            .map(|r| r.at)
            .collect();
        let launched: Vec<(f64, String)> = records
            .iter()
            .filter_map(|r| match &r.action {
                Action::Launched { capacity_type, .. } => Some((r.at, capacity_type.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(failed.len(), 1, "one capacity error: {records:?}");
        assert_eq!(launched.len(), 1, "{records:?}");
        assert_eq!(launched[0].1, "on-demand");
        assert_eq!(
            launched[0].0, failed[0],
            "the on-demand launch follows the spot error in the same pass"
        );
        assert_eq!(cloud.inner.live_instances(|i| i.count()), 1);
    });
}

#[test]
fn a_registered_node_not_yet_initialized_takes_a_new_pending_pod_instead_of_a_new_node() {
    block(async {
        // The node keeps its startup taint (no agent removes it): registered, never
        // initialized. Karpenter schedules onto such a node as it will be, without its
        // startup and ephemeral taints.
        let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "startupTaints": [{"key": "example.com/agent-not-ready", "effect": "NoSchedule"}]}}}
        }))
        .unwrap();
        let mut w = World::new(NodePool::compile_fail_closed(&obj).unwrap());
        w.pending("web-1");
        w.run_a(12).await;
        let claims = w.claims();
        assert_eq!(claims.len(), 1);
        assert!(
            claims[0].status.registered() && !claims[0].status.initialized(),
            "{:?}",
            claims[0].status
        );
        let node = &w.nodes()[0];
        assert!(
            node.taints
                .iter()
                .any(|t| t.key == "example.com/agent-not-ready"),
            "{:?}",
            node.taints
        );
        w.pending("web-2");
        w.run_a(20).await;
        assert_eq!(
            w.claims().len(),
            1,
            "web-2 (500m) waits for the m7i.large coming up: {:?}",
            w.claims().iter().map(|c| &c.name).collect::<Vec<_>>()
        );
    });
}

/// The default NodePool (m7i.large) with `capstan.dev/headroom: annotation`.
fn headroom_pool(annotation: &str) -> NodePool {
    let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool",
        "metadata": {"name": "default", "annotations": {"capstan.dev/headroom": annotation}},
        "spec": {"template": {"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]}]}}}
    }))
    .unwrap();
    NodePool::compile_fail_closed(&obj).unwrap()
}

#[test]
fn a_nodepools_headroom_is_kept_as_placeholder_pods_made_again_when_preempted() {
    block(async {
        let mut w = World::new(headroom_pool("count=2,cpu=500m,memory=1Gi"));
        w.run_a(3).await;
        let key = |i: u32| format!("kube-system/capstan-headroom-default-{i}");
        for i in 0..2 {
            let p = w.api.pod(&key(i)).expect("a placeholder");
            assert_eq!(p.priority, capstan_model::headroom::PRIORITY);
            assert_eq!(p.requests.cpu, 500);
        }
        assert!(w.api.pod(&key(2)).is_none());
        // kube-scheduler finds no node for them: capstan launches one, as for any pod.
        for i in 0..2 {
            let mut p = Pod::clone(&w.api.pod(&key(i)).unwrap());
            p.unschedulable = true;
            w.api.put(Object::Pod(Arc::new(p)));
        }
        w.run_a(3).await;
        // They spread over the pool's zones: an m7i.large in each of two.
        let claims = w.claims();
        let zones: std::collections::BTreeSet<String> = claims
            .iter()
            .filter_map(|c| {
                c.requirements
                    .single_values()
                    .remove(capstan_model::labels::ZONE)
            })
            .collect();
        assert_eq!((claims.len(), zones.len()), (2, 2), "{zones:?}");
        // A real pod preempts one: it is made again.
        w.api.remove(Kind::Pod, &key(1));
        w.run_a(1).await;
        assert!(w.api.pod(&key(1)).is_some(), "made again");
        // Less headroom asked for: the extra placeholder goes.
        w.api.put(Object::NodePool(Arc::new(headroom_pool(
            "count=1,cpu=500m,memory=1Gi",
        ))));
        w.run_a(2).await;
        assert!(w.api.pod(&key(0)).is_some());
        assert!(w.api.pod(&key(1)).is_none(), "deleted");
    });
}

#[test]
fn placeholders_of_an_earlier_shape_are_replaced_by_ones_of_the_shape_asked_for_now() {
    block(async {
        let mut w = World::new(headroom_pool("count=2,cpu=500m,memory=1Gi"));
        w.run_a(3).await;
        let key = |i: u32| format!("kube-system/capstan-headroom-default-{i}");
        // One was made by an older capstan, without the spread.
        let first = w.api.meta(Kind::Pod, &key(0)).unwrap().uid;
        let mut old = Pod::clone(&w.api.pod(&key(0)).unwrap());
        old.spread.clear();
        w.api.put(Object::Pod(Arc::new(old)));
        w.run_a(3).await;
        assert_eq!(w.api.pod(&key(0)).unwrap().spread.len(), 1);
        assert_ne!(
            w.api.meta(Kind::Pod, &key(0)).unwrap().uid,
            first,
            "made again"
        );
        // Bigger placeholders asked for: both are made again at the new size.
        w.api.put(Object::NodePool(Arc::new(headroom_pool(
            "count=2,cpu=1,memory=1Gi",
        ))));
        w.run_a(3).await;
        for i in 0..2 {
            let p = w.api.pod(&key(i)).expect("a placeholder");
            assert_eq!((p.requests.cpu, p.requests.memory), (1000, 1 << 30));
        }
        // What admission adds (default tolerations) is no reason to make one again.
        let uid = w.api.meta(Kind::Pod, &key(1)).unwrap().uid;
        let mut p = Pod::clone(&w.api.pod(&key(1)).unwrap());
        p.tolerations
            .push(capstan_model::taints::Toleration::exists(
                "node.kubernetes.io/not-ready",
                Some(capstan_model::taints::Effect::NoExecute),
            ));
        w.api.put(Object::Pod(Arc::new(p)));
        w.run_a(3).await;
        assert_eq!(w.api.meta(Kind::Pod, &key(1)).unwrap().uid, uid, "kept");
    });
}

#[test]
fn a_headroom_annotation_that_does_not_parse_keeps_none_and_is_said_on_the_nodepool() {
    block(async {
        let mut w = World::new(headroom_pool("count=two,cpu=1"));
        w.run_a(3).await;
        assert!(!w.api.all(Kind::Pod).iter().any(
            |o| matches!(o, Object::Pod(p) if p.labels.contains_key(capstan_model::headroom::LABEL))
        ));
        let events = w.api.events();
        assert!(
            events
                .iter()
                .any(|(_, e)| e.regarding == (Kind::NodePool, "default".into())
                    && e.note.contains("capstan.dev/headroom")
                    && e.note.contains("count=two")),
            "{events:?}"
        );
    });
}
