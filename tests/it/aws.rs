//! The AWS provider on the wire: every EC2 and SQS call it makes, against moto on 127.0.0.1
//! (`scripts/moto.sh up`; `bash .ci/run` starts it). `#[ignore]`d like the control-plane
//! tests, so a plain `cargo test` reports them as skipped, never as passed.
//!
//! moto takes CreateFleet's first override and never runs out of capacity: fleet errors,
//! throttling and idempotency are tested with aws-smithy-mocks in `providers/aws`.

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use capstan_aws::{AwsCloud, Clients, NodeClassMap, Settings};
use capstan_cloud::{CloudProvider, InstanceState, InterruptionEvent, LaunchRequest, SystemClock};
use capstan_model::awsnodeclass::AwsNodeClassSpec;
use capstan_model::nodepool::NodeClassRef;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WHY: &str = "needs moto (scripts/moto.sh up); bash .ci/run starts it";
/// One test at a time uses moto (each resets it).
pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

pub fn endpoint() -> String {
    std::env::var("CAPSTAN_MOTO_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5055".into())
}

pub async fn sdk() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint())
        // moto routes unsigned requests elsewhere: sign with dummy credentials.
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "testing", "testing", None, None, "static",
        ))
        .load()
        .await
}

/// Wipes moto's state; panics (never passes) without moto.
pub fn reset() {
    let out = std::process::Command::new("curl")
        .args([
            "-fsS",
            "-X",
            "POST",
            &format!("{}/moto-api/reset", endpoint()),
        ])
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "no moto at {}: run `scripts/moto.sh up` first ({})",
        endpoint(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn discovery(resource: ResourceType) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .tags(
            Tag::builder()
                .key("karpenter.sh/discovery")
                .value("demo")
                .build(),
        )
        .build()
}

/// A VPC with tagged subnets in us-east-1a and us-east-1b and a tagged security group; an
/// x86_64 image moto serves. Returns the node class selecting them.
pub async fn region(ec2: &aws_sdk_ec2::Client) -> AwsNodeClassSpec {
    // The node role a node class names (its instance profile is capstan's to make).
    let conf = sdk().await;
    aws_sdk_iam::Client::new(&conf)
        .create_role()
        .role_name("KarpenterNodeRole-demo")
        .assume_role_policy_document(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
        )
        .send()
        .await
        .unwrap();
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .unwrap()
        .vpc()
        .and_then(|v| v.vpc_id())
        .unwrap()
        .to_string();
    for (zone, cidr) in [("us-east-1a", "10.0.1.0/24"), ("us-east-1b", "10.0.2.0/24")] {
        ec2.create_subnet()
            .vpc_id(&vpc)
            .cidr_block(cidr)
            .availability_zone(zone)
            .tag_specifications(discovery(ResourceType::Subnet))
            .send()
            .await
            .unwrap();
    }
    // An untagged subnet the selector must not pick.
    ec2.create_subnet()
        .vpc_id(&vpc)
        .cidr_block("10.0.3.0/24")
        .availability_zone("us-east-1c")
        .send()
        .await
        .unwrap();
    ec2.create_security_group()
        .group_name("nodes")
        .description("capstan nodes")
        .vpc_id(&vpc)
        .tag_specifications(discovery(ResourceType::SecurityGroup))
        .send()
        .await
        .unwrap();
    let images = ec2
        .describe_images()
        .owners("amazon")
        .filters(
            Filter::builder()
                .name("architecture")
                .values("x86_64")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let ami = images
        .images()
        .iter()
        .filter_map(|i| i.image_id())
        .next()
        .expect("moto serves Amazon images")
        .to_string();
    serde_json::from_value(serde_json::json!({
        "amiFamily": "AL2023",
        "role": "KarpenterNodeRole-demo",
        "amiSelectorTerms": [{"id": ami}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "tags": {"team": "platform"},
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "40Gi", "volumeType": "gp3", "encrypted": true}}]
    }))
    .unwrap()
}

/// Every client the provider calls, against moto (which serves no Pricing API: prices fall
/// back to the snapshot's).
pub fn clients(conf: &aws_config::SdkConfig, sqs: Option<aws_sdk_sqs::Client>) -> Clients {
    Clients {
        ec2: aws_sdk_ec2::Client::new(conf),
        sqs,
        ssm: Some(aws_sdk_ssm::Client::new(conf)),
        iam: Some(aws_sdk_iam::Client::new(conf)),
        pricing: None,
    }
}

fn request(claim: &str) -> LaunchRequest {
    LaunchRequest {
        claim_name: claim.into(),
        nodepool: "default".into(),
        client_token: format!("{claim}-uid"),
        instance_types: vec!["m5.large".into(), "m5.xlarge".into()],
        requirements: Default::default(),
        labels: BTreeMap::from([("team".to_string(), "platform".to_string())]),
        taints: vec![],
        node_class: Some(NodeClassRef {
            group: "capstan.dev".into(),
            kind: "AWSNodeClass".into(),
            name: "demo".into(),
        }),
        warm_start: false,
    }
}

fn nodepool() -> capstan_model::NodePool {
    let obj: capstan_model::nodepool::NodePoolObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "AWSNodeClass", "name": "demo"},
            "requirements": []}}}
    }))
    .unwrap();
    capstan_model::NodePool::compile_fail_closed(&obj).unwrap()
}

fn tags_of(i: &aws_sdk_ec2::types::Instance) -> BTreeMap<String, String> {
    i.tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect()
}

#[test]
#[ignore = "needs moto (scripts/moto.sh up); bash .ci/run starts it"]
fn the_aws_provider_launches_lists_and_terminates_through_ec2_with_karpenters_tags() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    runtime().block_on(launch_list_terminate());
}

async fn launch_list_terminate() {
    reset();
    let conf = sdk().await;
    let ec2 = aws_sdk_ec2::Client::new(&conf);
    let spec = region(&ec2).await;
    let classes = Arc::new(NodeClassMap::default());
    classes.insert("AWSNodeClass", "demo", spec.clone());
    let cloud = AwsCloud::with_clients(
        clients(&conf, None),
        Settings {
            cluster_name: "demo".into(),
            cluster_endpoint: Some("https://demo.eks.example".into()),
            ..Default::default()
        },
        classes.clone(),
        Arc::new(SystemClock),
    );

    // The catalog: EC2's types, offered in the two selected zones only, with Karpenter's
    // allocatable.
    let types = cloud.instance_types(&nodepool()).await.expect(WHY);
    let large = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large");
    let zones: std::collections::BTreeSet<&str> =
        large.offerings.iter().map(|o| o.zone.as_str()).collect();
    assert_eq!(zones, ["us-east-1a", "us-east-1b"].into());
    assert_eq!(large.allocatable.cpu, 1930);
    assert_eq!(large.capacity.pods, 29);

    let first = cloud
        .create(&request("default-aaaaa"))
        .await
        .expect("a launch");
    assert!(
        first.provider_id.starts_with("aws:///us-east-1"),
        "{}",
        first.provider_id
    );
    assert_eq!(
        first.instance_type, "m5.large",
        "moto takes the first override"
    );
    let id = capstan_aws::instance_id(&first.provider_id)
        .unwrap()
        .to_string();
    let described = ec2
        .describe_instances()
        .instance_ids(&id)
        .send()
        .await
        .unwrap();
    let inst = described.reservations()[0].instances()[0].clone();
    let tags = tags_of(&inst);
    for (k, v) in [
        ("kubernetes.io/cluster/demo", "owned"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/nodeclaim", "default-aaaaa"),
        ("karpenter.k8s.aws/ec2nodeclass", "demo"),
        ("eks:eks-cluster-name", "demo"),
        ("capstan.dev/cluster", "demo"),
        ("team", "platform"),
    ] {
        assert_eq!(tags.get(k).map(String::as_str), Some(v), "{k} on {tags:?}");
    }
    let subnet = inst.subnet_id().unwrap_or_default().to_string();
    let subnets = ec2
        .describe_subnets()
        .subnet_ids(&subnet)
        .send()
        .await
        .unwrap();
    assert_ne!(
        subnets.subnets()[0].availability_zone(),
        Some("us-east-1c"),
        "an untagged subnet is never used"
    );

    // One launch template for equal settings, tagged for the cluster, reused.
    let second = cloud
        .create(&request("default-bbbbb"))
        .await
        .expect("a launch");
    assert_ne!(second.provider_id, first.provider_id);
    let templates = ec2.describe_launch_templates().send().await.unwrap();
    let names: Vec<&str> = templates
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("capstan/demo/"), "{names:?}");
    let lt_tags: BTreeMap<String, String> = templates.launch_templates()[0]
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect();
    assert_eq!(
        lt_tags
            .get("kubernetes.io/cluster/demo")
            .map(String::as_str),
        Some("owned")
    );
    let version = ec2
        .describe_launch_template_versions()
        .launch_template_name(names[0])
        .send()
        .await
        .unwrap();
    let data = version.launch_template_versions()[0]
        .launch_template_data()
        .unwrap()
        .clone();
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.http_put_response_hop_limit()),
        Some(2)
    );
    // The node class names a role: its instance profile is capstan's, holding that role.
    let profile = data
        .iam_instance_profile()
        .and_then(|p| p.name())
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        profile,
        capstan_aws::profile::profile_name("demo", "us-east-1", "demo")
    );
    let iam = aws_sdk_iam::Client::new(&conf);
    let got = iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .unwrap();
    let roles: Vec<&str> = got
        .instance_profile()
        .unwrap()
        .roles()
        .iter()
        .map(|r| r.role_name())
        .collect();
    assert_eq!(roles, ["KarpenterNodeRole-demo"]);
    let user_data = data.user_data().unwrap_or_default();
    use base64::Engine as _;
    let user_data = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(user_data)
            .unwrap(),
    )
    .unwrap();
    assert!(user_data.contains("kind: NodeConfig"), "{user_data}");
    assert!(
        user_data.contains("karpenter.sh/unregistered:NoExecute"),
        "{user_data}"
    );
    assert!(user_data.contains("team=platform"), "{user_data}");

    let listed = cloud.list().await.unwrap();
    let mut ids: Vec<&str> = listed.iter().map(|i| i.provider_id.as_str()).collect();
    ids.sort();
    let mut want = vec![first.provider_id.as_str(), second.provider_id.as_str()];
    want.sort();
    assert_eq!(ids, want);
    let got = cloud.get(&first.provider_id).await.unwrap();
    assert_eq!(got.claim_name, "default-aaaaa");
    assert!(matches!(
        got.state,
        InstanceState::Pending | InstanceState::Running
    ));
    // The template names the selected security group (moto itself puts fleet instances in
    // the default group, so security-group drift cannot be checked here).
    let groups = ec2
        .describe_security_groups()
        .filters(
            Filter::builder()
                .name("tag:karpenter.sh/discovery")
                .values("demo")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let want: Vec<String> = groups
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id().map(String::from))
        .collect();
    assert_eq!(data.security_group_ids(), want.as_slice());
    // AMI drift: the node class now selects another image.
    let other = ec2
        .describe_images()
        .owners("amazon")
        .filters(
            Filter::builder()
                .name("architecture")
                .values("x86_64")
                .build(),
        )
        .send()
        .await
        .unwrap()
        .images()
        .iter()
        .filter_map(|i| i.image_id())
        .find(|id| Some(*id) != inst.image_id())
        .unwrap()
        .to_string();
    let mut moved = spec.clone();
    moved.ami_selector_terms[0].id = Some(other);
    classes.insert("AWSNodeClass", "demo", moved);
    let drift = cloud.is_drifted(&got).await.unwrap().expect("AMI drift");
    assert!(drift.reason.starts_with("AMIDrift"), "{drift:?}");
    // Static drift: the user data changed (the instance carries the hash it launched with).
    let mut edited = spec.clone();
    edited.user_data = Some("#!/bin/bash\necho changed".into());
    classes.insert("AWSNodeClass", "demo", edited);
    let drift = cloud
        .is_drifted(&got)
        .await
        .unwrap()
        .expect("node class drift");
    assert!(drift.reason.starts_with("NodeClassDrift"), "{drift:?}");
    classes.insert("AWSNodeClass", "demo", spec.clone());

    cloud.delete(&first.provider_id).await.unwrap();
    cloud
        .delete(&first.provider_id)
        .await
        .expect("terminating twice is fine");
    let listed = cloud.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].provider_id, second.provider_id);
    let gone = cloud.get(&first.provider_id).await.unwrap();
    assert!(matches!(
        gone.state,
        InstanceState::ShuttingDown | InstanceState::Terminated
    ));
}

#[test]
#[ignore = "needs moto (scripts/moto.sh up); bash .ci/run starts it"]
fn interruption_messages_in_sqs_become_events_and_are_deleted_once_handled() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    runtime().block_on(interruptions());
}

async fn interruptions() {
    reset();
    let conf = sdk().await;
    let ec2 = aws_sdk_ec2::Client::new(&conf);
    let sqs = aws_sdk_sqs::Client::new(&conf);
    let spec = region(&ec2).await;
    let url = sqs
        .create_queue()
        .queue_name("capstan-demo")
        .send()
        .await
        .expect(WHY)
        .queue_url()
        .unwrap()
        .to_string();
    let classes = Arc::new(NodeClassMap::default());
    classes.insert("AWSNodeClass", "demo", spec);
    let cloud = AwsCloud::with_clients(
        clients(&conf, Some(sqs.clone())),
        Settings {
            cluster_name: "demo".into(),
            interruption_queue: Some("capstan-demo".into()),
            ..Default::default()
        },
        classes,
        Arc::new(SystemClock),
    );
    let inst = cloud.create(&request("default-ccccc")).await.unwrap();
    let id = capstan_aws::instance_id(&inst.provider_id)
        .unwrap()
        .to_string();
    let spot = serde_json::json!({
        "version": "0", "id": "1", "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "account": "123456789012", "time": "2026-12-01T16:00:00Z",
        "region": "us-east-1", "resources": [], "detail": {"instance-id": id, "instance-action": "terminate"}
    });
    for body in [spot.to_string(), "{not an event".to_string()] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let mut events = Vec::new();
    for _ in 0..5 {
        events.extend(cloud.interruptions().await.unwrap());
        if !events.is_empty() && cloud.malformed_messages() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        cloud.malformed_messages(),
        1,
        "the malformed message is counted"
    );
    assert_eq!(events.len(), 1, "{events:?}");
    match &events[0] {
        InterruptionEvent::SpotInterruptionWarning {
            provider_id,
            at,
            reclaim_at,
        } => {
            assert_eq!(provider_id, &inst.provider_id);
            assert_eq!(*reclaim_at - *at, Duration::from_secs(120));
        }
        other => panic!("{other:?}"),
    }
    cloud.ack_interruptions(&events).await.unwrap();
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let count = |k: aws_sdk_sqs::types::QueueAttributeName| {
        attrs
            .attributes()
            .and_then(|a| a.get(&k))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    };
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            + count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        0,
        "both messages are deleted: the handled one on ack, the malformed one at once"
    );

    // With the poller long-polling in its own task, a message sent while it waits is taken by
    // the next pass.
    let poller = cloud.spawn_queue_poller().expect("a queue is configured");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rebalance = serde_json::json!({
        "version": "0", "id": "2", "detail-type": "EC2 Instance Rebalance Recommendation",
        "source": "aws.ec2", "account": "123456789012", "time": "2026-12-01T16:01:00Z",
        "region": "us-east-1", "resources": [], "detail": {"instance-id": id}
    });
    sqs.send_message()
        .queue_url(&url)
        .message_body(rebalance.to_string())
        .send()
        .await
        .unwrap();
    let mut events = Vec::new();
    for _ in 0..100 {
        events.extend(cloud.interruptions().await.unwrap());
        if !events.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    poller.abort();
    assert!(
        matches!(&events[..], [InterruptionEvent::RebalanceRecommendation { provider_id, .. }] if provider_id == &inst.provider_id),
        "{events:?}"
    );
    cloud.ack_interruptions(&events).await.unwrap();
}

#[test]
#[ignore = "needs moto (scripts/moto.sh up); bash .ci/run starts it"]
fn capstan_catalog_from_aws_writes_the_regions_types_in_the_shared_format() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    reset();
    let dir = std::env::temp_dir().join(format!("capstan-catalog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("catalog.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["catalog", "--from-aws", "--out", path.to_str().unwrap()])
        .env("AWS_ENDPOINT_URL", endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("capstan runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let file: capstan_model::catalog::CatalogFile = serde_json::from_str(&text).unwrap();
    assert!(
        file.instance_types.len() > 1000,
        "{}",
        file.instance_types.len()
    );
    let catalog = capstan_model::Catalog::from_file(file).expect("a loadable catalog");
    assert_eq!(catalog.region, "us-east-1");
    let large = catalog.get("m5.large").expect("m5.large");
    assert_eq!((large.allocatable.cpu, large.capacity.pods), (1930, 29));
    assert!(
        large
            .offerings
            .iter()
            .any(|o| o.zone == "us-east-1a" && o.capacity_type == "spot"),
        "{:?}",
        large.offerings
    );
    assert!(
        large
            .offerings
            .iter()
            .any(|o| o.capacity_type == "on-demand" && o.price == 0.096)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
#[ignore = "needs moto (scripts/moto.sh up); bash .ci/run starts it"]
fn launch_templates_no_launch_has_used_for_an_hour_are_deleted_and_made_again_when_wanted() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    runtime().block_on(template_collection());
}

async fn template_names(ec2: &aws_sdk_ec2::Client) -> Vec<String> {
    let mut names: Vec<String> = ec2
        .describe_launch_templates()
        .send()
        .await
        .unwrap()
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(String::from))
        .filter(|n| n.starts_with("capstan/"))
        .collect();
    names.sort();
    names
}

/// What a Karpenter running in the same cluster makes: a launch template and an instance,
/// tagged for the cluster and a NodePool as Karpenter tags them (a migration runs both).
async fn karpenters_own(ec2: &aws_sdk_ec2::Client) -> String {
    let karpenter_tags = |resource: ResourceType| {
        TagSpecification::builder()
            .resource_type(resource)
            .tags(
                Tag::builder()
                    .key("kubernetes.io/cluster/demo")
                    .value("owned")
                    .build(),
            )
            .tags(
                Tag::builder()
                    .key("karpenter.sh/nodepool")
                    .value("default")
                    .build(),
            )
            .tags(
                Tag::builder()
                    .key("karpenter.sh/nodeclaim")
                    .value("default-kkkkk")
                    .build(),
            )
            .build()
    };
    ec2.create_launch_template()
        .launch_template_name("karpenter.k8s.aws/12345")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
                .build(),
        )
        .tag_specifications(karpenter_tags(ResourceType::LaunchTemplate))
        .send()
        .await
        .expect(WHY);
    let image = ec2
        .describe_images()
        .owners("amazon")
        .send()
        .await
        .expect(WHY)
        .images()[0]
        .image_id()
        .unwrap()
        .to_string();
    ec2.run_instances()
        .image_id(image)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .tag_specifications(karpenter_tags(ResourceType::Instance))
        .send()
        .await
        .expect(WHY)
        .instances()[0]
        .instance_id()
        .unwrap()
        .to_string()
}

async fn template_collection() {
    use capstan_cloud::Clock as _;
    reset();
    let conf = sdk().await;
    let ec2 = aws_sdk_ec2::Client::new(&conf);
    let spec = region(&ec2).await;
    let mut other = spec.clone();
    other.tags.insert("team".into(), "data".into());
    let classes = Arc::new(NodeClassMap::default());
    classes.insert("AWSNodeClass", "demo", spec);
    classes.insert("AWSNodeClass", "other", other);
    // The provider's clock, from now (templates' creation times are EC2's).
    let clock = Arc::new(capstan_cloud::ManualClock::new());
    clock.set(SystemClock.now());
    let cloud = AwsCloud::with_clients(
        clients(&conf, None),
        Settings {
            cluster_name: "demo".into(),
            ..Default::default()
        },
        classes,
        clock.clone(),
    );
    let karpenters_instance = karpenters_own(&ec2).await;
    let mut for_other = request("other-aaaaa");
    for_other.node_class.as_mut().unwrap().name = "other".into();
    cloud.create(&request("default-aaaaa")).await.expect(WHY);
    cloud.create(&for_other).await.expect(WHY);
    let both = template_names(&ec2).await;
    assert_eq!(both.len(), 2, "{both:?}");

    // 30 minutes on, `demo` launches again; 40 more, `other` has been idle 70 minutes.
    clock.advance(Duration::from_secs(30 * 60));
    cloud.create(&request("default-bbbbb")).await.expect(WHY);
    clock.advance(Duration::from_secs(40 * 60));
    cloud.list().await.expect(WHY);
    let left = template_names(&ec2).await;
    assert_eq!(left.len(), 1, "{left:?}");
    let described = ec2
        .describe_launch_templates()
        .launch_template_names(&left[0])
        .send()
        .await
        .unwrap();
    let tags: BTreeMap<String, String> = described.launch_templates()[0]
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect();
    assert_eq!(
        tags.get("karpenter.k8s.aws/ec2nodeclass")
            .map(String::as_str),
        Some("demo"),
        "the template still in use is kept"
    );

    // An hour later nothing is in use; the next launch makes its template again.
    clock.advance(Duration::from_secs(61 * 60));
    cloud.list().await.expect(WHY);
    assert!(template_names(&ec2).await.is_empty());
    cloud.create(&request("default-ccccc")).await.expect(WHY);
    assert_eq!(template_names(&ec2).await, left);

    // What Karpenter made is never capstan's: its template is kept, its instance not listed
    // (so capstan's garbage collection never terminates it).
    let all = ec2.describe_launch_templates().send().await.unwrap();
    assert!(
        all.launch_templates()
            .iter()
            .any(|t| t.launch_template_name() == Some("karpenter.k8s.aws/12345")),
        "Karpenter's template is kept"
    );
    let listed = cloud.list().await.expect(WHY);
    assert!(
        listed
            .iter()
            .all(|i| capstan_aws::instance_id(&i.provider_id) != Some(karpenters_instance.as_str())),
        "Karpenter's instance is not capstan's: {listed:?}"
    );
    assert!(!listed.is_empty(), "capstan's own are listed");
}
