//! `capstan controller --provider aws` on the real control plane against moto: instances
//! launched in moto become Nodes through a test registrar (no kubelet exists here: it registers
//! a Node as a kubelet does — only the kubelet's labels, `aws:///<zone>/<id>`, the unregistered
//! taint — and kwok keeps it Ready), pods bind to them, a spot interruption message in SQS drains
//! the node and terminates the instance before its deadline, and an empty node's instance is
//! terminated.

use super::{Cluster, wait_for};
use crate::aws::{ONE_AT_A_TIME, endpoint, region, reset, runtime, sdk};
use capstan_model::Catalog;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// moto's running or pending instances tagged for cluster `demo`: (id, type, zone, state).
fn instances(
    rt: &tokio::runtime::Runtime,
    ec2: &aws_sdk_ec2::Client,
) -> Vec<(String, String, String, String)> {
    rt.block_on(async {
        let out = ec2
            .describe_instances()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("tag:kubernetes.io/cluster/demo")
                    .values("owned")
                    .build(),
            )
            .send()
            .await
            .unwrap();
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .map(|i| {
                (
                    i.instance_id().unwrap_or_default().to_string(),
                    i.instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    i.placement()
                        .and_then(|p| p.availability_zone())
                        .unwrap_or_default()
                        .to_string(),
                    i.state()
                        .and_then(|s| s.name())
                        .map(|n| n.as_str().to_string())
                        .unwrap_or_default(),
                )
            })
            .collect()
    })
}

/// The kubelets: a Node for every running instance that has none, as a kubelet registers it.
fn register(
    c: &Cluster,
    rt: &tokio::runtime::Runtime,
    ec2: &aws_sdk_ec2::Client,
    catalog: &Catalog,
) {
    let nodes: BTreeSet<String> = c
        .items(&["nodes"])
        .iter()
        .filter_map(|n| n["spec"]["providerID"].as_str().map(String::from))
        .collect();
    for (id, itype, zone, state) in instances(rt, ec2) {
        let pid = format!("aws:///{zone}/{id}");
        if state != "running" || nodes.contains(&pid) {
            continue;
        }
        let t = catalog.get(&itype).expect("a catalog type");
        let name = format!("ip-{}.ec2.internal", id.trim_start_matches("i-"));
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": itype,
                    "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "us-east-1"}},
            "spec": {"providerID": pid,
                "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
            "status": {
                "capacity": {"cpu": format!("{}m", t.capacity.cpu), "memory": t.capacity.memory.to_string(), "pods": t.capacity.pods.to_string()},
                "allocatable": {"cpu": format!("{}m", t.allocatable.cpu), "memory": t.allocatable.memory.to_string(), "pods": t.allocatable.pods.to_string()},
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.34.4",
                    "kubeProxyVersion": "", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                    "machineID": "", "osImage": "", "systemUUID": ""}}
        });
        let _ = c.kubectl(&["create", "-f", "-"], Some(&node.to_string()));
    }
}

fn state_of(rt: &tokio::runtime::Runtime, ec2: &aws_sdk_ec2::Client, id: &str) -> String {
    instances(rt, ec2)
        .into_iter()
        .find(|i| i.0 == id)
        .map(|i| i.3)
        .unwrap_or_default()
}

#[test]
#[ignore = "needs the local control plane and moto (scripts/control-plane.sh up, scripts/moto.sh up); bash .ci/run runs it"]
fn capstan_on_aws_launches_through_moto_drains_an_interrupted_node_before_its_deadline_and_removes_an_empty_one()
 {
    let _moto = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let c = Cluster::get();
    reset();
    let rt = runtime();
    let (ec2, sqs, spec) = rt.block_on(async {
        let conf = sdk().await;
        let ec2 = aws_sdk_ec2::Client::new(&conf);
        let sqs = aws_sdk_sqs::Client::new(&conf);
        let spec = region(&ec2).await;
        sqs.create_queue()
            .queue_name("capstan-demo")
            .send()
            .await
            .unwrap();
        (ec2, sqs, spec)
    });
    let url = rt.block_on(async {
        sqs.get_queue_url()
            .queue_name("capstan-demo")
            .send()
            .await
            .unwrap()
            .queue_url()
            .unwrap()
            .to_string()
    });
    let class = json!({"apiVersion": "capstan.dev/v1", "kind": "AWSNodeClass",
        "metadata": {"name": "demo"}, "spec": spec});
    c.apply(&class.to_string());
    // moto puts fleet instances in the default security group whatever the template says, so
    // every node would look drifted: this pool's budget allows no drift.
    c.apply(
        r#"
apiVersion: capstan.dev/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: capstan.dev, kind: AWSNodeClass, name: demo}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
  disruption:
    consolidateAfter: 0s
    budgets: [{nodes: "0", reasons: [Drifted]}, {nodes: "100%"}]
"#,
    );
    let ns = c.namespace("aws");
    let endpoint = endpoint();
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let capstan = c.capstan_env(
        "capstan-aws",
        &[
            "--provider",
            "aws",
            "--cluster-name",
            "demo",
            "--interruption-queue",
            "capstan-demo",
        ],
        &env,
    );
    let catalog = Catalog::builtin();
    c.deployment(&ns, "web", 2, "500m", "");
    wait_for(
        "2 pods running on a node launched in moto",
        Duration::from_secs(120),
        || {
            register(&c, &rt, &ec2, &catalog);
            (c.running(&ns, "web") == 2).then_some(())
        },
    );
    let first: Vec<_> = instances(&rt, &ec2)
        .into_iter()
        .filter(|i| i.3 == "running")
        .collect();
    assert_eq!(first.len(), 1, "two 500m pods fit one m5.large: {first:?}");
    let (id, _, zone, _) = first[0].clone();
    let node: Value = c
        .items(&["nodes"])
        .into_iter()
        .find(|n| n["spec"]["providerID"] == format!("aws:///{zone}/{id}"))
        .expect("the registered node");
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["karpenter.sh/nodepool"], "default", "{labels}");
    assert!(
        node["spec"]["taints"]
            .as_array()
            .is_none_or(|t| t.iter().all(|t| t["key"] != "karpenter.sh/unregistered")),
        "{node}"
    );

    // The node class's status: what its selectors resolved to, and Ready; one whose
    // selectors match nothing is not Ready and says why.
    let mut nothing = class.clone();
    nothing["metadata"]["name"] = json!("nothing");
    nothing["spec"]["subnetSelectorTerms"] =
        json!([{"tags": {"karpenter.sh/discovery": "nobody"}}]);
    c.apply(&nothing.to_string());
    let ready = |name: &str| {
        let o = c.get_json(&["awsnodeclass", name]);
        let cond = o["status"]["conditions"][0].clone();
        (cond["type"] == "Ready").then(|| {
            (
                cond["status"].as_str().unwrap_or_default().to_string(),
                cond["reason"].clone(),
                o["status"].clone(),
            )
        })
    };
    let (status, _, demo) = wait_for("demo's status", Duration::from_secs(30), || ready("demo"));
    assert_eq!(status, "True", "{demo}");
    assert_eq!(demo["subnets"].as_array().map(Vec::len), Some(2), "{demo}");
    assert_eq!(
        demo["securityGroups"].as_array().map(Vec::len),
        Some(1),
        "{demo}"
    );
    let (status, reason, _) = wait_for("nothing's status", Duration::from_secs(30), || {
        ready("nothing")
    });
    assert_eq!(
        (status.as_str(), reason),
        ("False", json!("ResolutionFailed"))
    );
    // … and a Warning Event on it says the same.
    let event = wait_for("an Event on nothing", Duration::from_secs(30), || {
        c.items(&["events.events.k8s.io", "-n", "default"])
            .into_iter()
            .find(|e| {
                e["regarding"]["kind"] == "AWSNodeClass" && e["regarding"]["name"] == "nothing"
            })
    });
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["reason"], "ResolutionFailed", "{event}");
    assert!(
        event["note"]
            .as_str()
            .unwrap_or_default()
            .contains("subnetSelectorTerms"),
        "{event}"
    );
    // A node class with a role: its status names the instance profile capstan made.
    assert_eq!(
        demo["instanceProfile"],
        json!(capstan_aws::profile::profile_name(
            "demo",
            "us-east-1",
            "demo"
        )),
        "{demo}"
    );

    // A spot interruption warning: the node is drained and the instance gone within 120 s.
    let sent = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let at = rfc3339(sent);
    let message = json!({
        "version": "0", "id": "e2e", "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "account": "123456789012", "time": at, "region": "us-east-1",
        "resources": [], "detail": {"instance-id": id, "instance-action": "terminate"}});
    rt.block_on(async {
        sqs.send_message()
            .queue_url(&url)
            .message_body(message.to_string())
            .send()
            .await
            .unwrap();
    });
    wait_for(
        "the interrupted instance terminated",
        Duration::from_secs(120),
        || {
            register(&c, &rt, &ec2, &catalog);
            (state_of(&rt, &ec2, &id) == "terminated").then_some(())
        },
    );
    let took = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - sent;
    assert!(
        took < 120,
        "terminated {took} s after the warning, past its deadline"
    );
    wait_for(
        "the pods running again on a replacement",
        Duration::from_secs(120),
        || {
            register(&c, &rt, &ec2, &catalog);
            (c.running(&ns, "web") == 2).then_some(())
        },
    );
    assert!(
        !c.items(&["nodes"])
            .iter()
            .any(|n| n["spec"]["providerID"] == format!("aws:///{zone}/{id}")),
        "the interrupted node is gone"
    );

    // Empty: the replacement's instance is terminated.
    c.ok(&["delete", "deployment", "web", "-n", &ns]);
    wait_for("no instance left running", Duration::from_secs(120), || {
        register(&c, &rt, &ec2, &catalog);
        instances(&rt, &ec2)
            .iter()
            .all(|i| i.3 != "running" && i.3 != "pending")
            .then_some(())
    });
    drop(capstan);
}

/// RFC 3339 for unix seconds, as EventBridge writes `time`.
fn rfc3339(secs: u64) -> String {
    aws_sdk_sqs::primitives::DateTime::from_secs(secs as i64)
        .fmt(aws_sdk_sqs::primitives::DateTimeFormat::DateTime)
        .expect("a time")
}
