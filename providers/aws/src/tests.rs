//! The provider against aws-smithy-mocks: what moto cannot produce (fleet capacity errors,
//! throttling with retries, error codes), with the EC2 answers a small region gives.

use super::*;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::operation::create_launch_template::CreateLaunchTemplateOutput;
use aws_sdk_ec2::operation::describe_images::DescribeImagesOutput;
use aws_sdk_ec2::operation::describe_instance_type_offerings::DescribeInstanceTypeOfferingsOutput;
use aws_sdk_ec2::operation::describe_instance_types::DescribeInstanceTypesOutput;
use aws_sdk_ec2::operation::describe_instances::DescribeInstancesOutput;
use aws_sdk_ec2::operation::describe_launch_templates::DescribeLaunchTemplatesOutput;
use aws_sdk_ec2::operation::describe_security_groups::DescribeSecurityGroupsOutput;
use aws_sdk_ec2::operation::describe_spot_price_history::DescribeSpotPriceHistoryOutput;
use aws_sdk_ec2::operation::describe_subnets::DescribeSubnetsOutput;
use aws_sdk_ec2::types::{
    ArchitectureType, ArchitectureValues, CreateFleetError, CreateFleetInstance, Image,
    InstanceLifecycle, InstanceState as Ec2State, InstanceStateName, InstanceTypeInfo,
    InstanceTypeOffering, LaunchTemplateAndOverridesResponse, MemoryInfo, NetworkInfo, Placement,
    ProcessorInfo, Reservation, SecurityGroup, Subnet, VCpuInfo,
};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use capstan_cloud::ManualClock;
use capstan_model::Requirements;
use capstan_model::nodepool::NodeClassRef;

fn node_class() -> AwsNodeClassSpec {
    serde_json::from_value(serde_json::json!({
        "role": "KarpenterNodeRole-demo",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    }))
    .unwrap()
}

fn type_info(name: &str, vcpu: i32, mib: i64) -> InstanceTypeInfo {
    InstanceTypeInfo::builder()
        .instance_type(name.into())
        .v_cpu_info(VCpuInfo::builder().default_v_cpus(vcpu).build())
        .memory_info(MemoryInfo::builder().size_in_mib(mib).build())
        .processor_info(
            ProcessorInfo::builder()
                .supported_architectures(ArchitectureType::X8664)
                .build(),
        )
        .network_info(
            NetworkInfo::builder()
                .maximum_network_interfaces(3)
                .ipv4_addresses_per_interface(10)
                .build(),
        )
        .build()
}

/// A region with two zones, m5.large and m5.xlarge in both, and an AL2023 image.
fn region_rules() -> Vec<Rule> {
    vec![
        mock!(Client::describe_subnets).then_output(|| {
            DescribeSubnetsOutput::builder()
                .subnets(
                    Subnet::builder()
                        .subnet_id("subnet-a")
                        .availability_zone("us-east-1a")
                        .available_ip_address_count(100)
                        .build(),
                )
                .subnets(
                    Subnet::builder()
                        .subnet_id("subnet-b")
                        .availability_zone("us-east-1b")
                        .available_ip_address_count(100)
                        .build(),
                )
                .build()
        }),
        mock!(Client::describe_security_groups).then_output(|| {
            DescribeSecurityGroupsOutput::builder()
                .security_groups(
                    SecurityGroup::builder()
                        .group_id("sg-1")
                        .group_name("nodes")
                        .build(),
                )
                .build()
        }),
        mock!(Client::describe_images).then_output(|| {
            DescribeImagesOutput::builder()
                .images(
                    Image::builder()
                        .image_id("ami-al2023")
                        .name("amazon-eks-node-al2023-x86_64-standard-1.34-v20261101")
                        .architecture(ArchitectureValues::X8664)
                        .creation_date("2026-11-01T00:00:00.000Z")
                        .build(),
                )
                .build()
        }),
        mock!(Client::describe_instance_types).then_output(|| {
            DescribeInstanceTypesOutput::builder()
                .instance_types(type_info("m5.large", 2, 8192))
                .instance_types(type_info("m5.xlarge", 4, 16384))
                .build()
        }),
        mock!(Client::describe_instance_type_offerings).then_output(|| {
            let mut b = DescribeInstanceTypeOfferingsOutput::builder();
            for t in ["m5.large", "m5.xlarge"] {
                for z in ["us-east-1a", "us-east-1b"] {
                    b = b.instance_type_offerings(
                        InstanceTypeOffering::builder()
                            .instance_type(t.into())
                            .location(z)
                            .build(),
                    );
                }
            }
            b.build()
        }),
        mock!(Client::describe_spot_price_history)
            .then_output(|| DescribeSpotPriceHistoryOutput::builder().build()),
        mock!(Client::describe_launch_templates)
            .then_output(|| DescribeLaunchTemplatesOutput::builder().build()),
        mock!(Client::create_launch_template)
            .then_output(|| CreateLaunchTemplateOutput::builder().build()),
    ]
}

fn cloud(ec2: Client) -> AwsCloud {
    let classes = Arc::new(NodeClassMap::default());
    classes.insert("AWSNodeClass", "default", node_class());
    AwsCloud::with_clients(
        Clients::ec2_only(ec2),
        Settings {
            cluster_name: "demo".into(),
            ..Default::default()
        },
        classes,
        Arc::new(ManualClock::new()),
    )
}

fn request() -> LaunchRequest {
    LaunchRequest {
        claim_name: "default-abc12".into(),
        nodepool: "default".into(),
        client_token: "default-abc12-uid".into(),
        instance_types: vec!["m5.large".into(), "m5.xlarge".into()],
        requirements: Requirements::default(),
        labels: BTreeMap::new(),
        taints: vec![],
        node_class: Some(NodeClassRef {
            group: "capstan.dev".into(),
            kind: "AWSNodeClass".into(),
            name: "default".into(),
        }),
        warm_start: false,
    }
}

fn overrides_of(
    r: &aws_sdk_ec2::operation::create_fleet::CreateFleetInput,
) -> Vec<(String, String)> {
    r.launch_template_configs()
        .iter()
        .flat_map(|c| c.overrides())
        .map(|o| {
            (
                o.instance_type()
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_default(),
                o.availability_zone().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn ice(t: &str, zone: &str) -> CreateFleetError {
    CreateFleetError::builder()
        .error_code("InsufficientInstanceCapacity")
        .error_message("We currently do not have sufficient m5.large capacity")
        .launch_template_and_overrides(
            LaunchTemplateAndOverridesResponse::builder()
                .overrides(
                    aws_sdk_ec2::types::FleetLaunchTemplateOverrides::builder()
                        .instance_type(t.into())
                        .availability_zone(zone)
                        .build(),
                )
                .build(),
        )
        .build()
}

fn launched(id: &str, t: &str, zone: &str) -> CreateFleetInstance {
    CreateFleetInstance::builder()
        .instance_ids(id)
        .instance_type(t.into())
        .lifecycle(InstanceLifecycle::Spot)
        .launch_template_and_overrides(
            LaunchTemplateAndOverridesResponse::builder()
                .overrides(
                    aws_sdk_ec2::types::FleetLaunchTemplateOverrides::builder()
                        .instance_type(t.into())
                        .availability_zone(zone)
                        .build(),
                )
                .build(),
        )
        .build()
}

#[tokio::test]
async fn a_launch_hitting_insufficient_capacity_on_its_first_offering_lands_on_the_next() {
    let first = mock!(Client::create_fleet)
        .match_requests(|r| {
            r.client_token() == Some("default-abc12-uid")
                && overrides_of(r).first() == Some(&("m5.large".into(), "us-east-1a".into()))
        })
        .then_output(|| {
            CreateFleetOutput::builder()
                .errors(ice("m5.large", "us-east-1a"))
                .build()
        });
    let second = mock!(Client::create_fleet)
        .match_requests(|r| {
            r.client_token() == Some("default-abc12-uid-1")
                && !overrides_of(r).contains(&("m5.large".into(), "us-east-1a".into()))
        })
        .then_output(|| {
            CreateFleetOutput::builder()
                .instances(launched("i-0b", "m5.large", "us-east-1b"))
                .build()
        });
    let mut rules = region_rules();
    rules.push(first.clone());
    rules.push(second.clone());
    let ec2 = mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules.iter());
    let c = cloud(ec2);
    let inst = c.create(&request()).await.expect("a launch");
    assert_eq!(inst.provider_id, "aws:///us-east-1b/i-0b");
    assert_eq!(inst.capacity_type, "spot");
    assert_eq!((first.num_calls(), second.num_calls()), (1, 1));
    // The failed offering stays unavailable for three minutes.
    let types = c
        .catalog_for(
            &c.resolved(&node_class()).await.unwrap(),
            &Default::default(),
        )
        .await
        .unwrap()
        .1;
    let large = types.get("m5.large").unwrap();
    let a_spot = large
        .offerings
        .iter()
        .find(|o| o.zone == "us-east-1a" && o.capacity_type == "spot")
        .unwrap();
    assert!(!a_spot.available);
}

#[tokio::test]
async fn when_every_offering_is_out_of_capacity_the_launch_says_which() {
    let fleet = mock!(Client::create_fleet).then_output(|| {
        CreateFleetOutput::builder()
            .errors(ice("m5.large", "us-east-1a"))
            .errors(ice("m5.large", "us-east-1b"))
            .errors(ice("m5.xlarge", "us-east-1a"))
            .errors(ice("m5.xlarge", "us-east-1b"))
            .build()
    });
    let mut rules = region_rules();
    rules.push(fleet.clone());
    let c = cloud(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules.iter()));
    match c.create(&request()).await {
        Err(CloudError::InsufficientCapacity { offerings }) => {
            assert_eq!(offerings.len(), 4, "{offerings:?}");
            assert!(offerings.iter().all(|o| o.capacity_type == "spot"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fleet.num_calls(), 1, "nothing left to try after the first");
}

#[tokio::test]
async fn an_on_demand_only_request_goes_cheapest_first_with_lowest_price() {
    let fleet = mock!(Client::create_fleet)
        .match_requests(|r| {
            r.on_demand_options()
                .and_then(|o| o.allocation_strategy())
                .map(|s| s.as_str() == "lowest-price")
                == Some(true)
                && r.spot_options().is_none()
        })
        .then_output(|| {
            let i = CreateFleetInstance::builder()
                .instance_ids("i-0od")
                .instance_type("m5.large".into())
                .lifecycle(InstanceLifecycle::OnDemand)
                .launch_template_and_overrides(
                    LaunchTemplateAndOverridesResponse::builder()
                        .overrides(
                            aws_sdk_ec2::types::FleetLaunchTemplateOverrides::builder()
                                .availability_zone("us-east-1a")
                                .build(),
                        )
                        .build(),
                )
                .build();
            CreateFleetOutput::builder().instances(i).build()
        });
    let mut rules = region_rules();
    rules.push(fleet.clone());
    let c = cloud(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules.iter()));
    let mut r = request();
    r.requirements = [capstan_model::Requirement::new(
        labels::CAPACITY_TYPE,
        capstan_model::requirements::Operator::In,
        &["on-demand"],
    )
    .unwrap()]
    .into_iter()
    .collect();
    let inst = c.create(&r).await.expect("a launch");
    assert_eq!(inst.capacity_type, "on-demand");
    assert_eq!(
        inst.price, 0.096,
        "m5.large's on-demand price from the catalog"
    );
    assert_eq!(fleet.num_calls(), 1);
}

fn ec2_error(code: &str) -> HttpResponse {
    let body = format!(
        "<Response><Errors><Error><Code>{code}</Code><Message>{code}</Message></Error></Errors><RequestID>r</RequestID></Response>"
    );
    HttpResponse::new(StatusCode::try_from(503).unwrap(), SdkBody::from(body))
}

#[tokio::test(start_paused = true)]
async fn throttling_is_retried_with_backoff_and_then_succeeds() {
    let rule = mock!(Client::describe_instances)
        .sequence()
        .http_response(|| ec2_error("RequestLimitExceeded"))
        .times(2)
        .output(|| {
            DescribeInstancesOutput::builder()
                .reservations(
                    Reservation::builder()
                        .instances(
                            aws_sdk_ec2::types::Instance::builder()
                                .instance_id("i-0a")
                                .instance_type("m5.large".into())
                                .placement(
                                    Placement::builder().availability_zone("us-east-1a").build(),
                                )
                                .state(Ec2State::builder().name(InstanceStateName::Running).build())
                                .build(),
                        )
                        .build(),
                )
                .build()
        })
        .build();
    let ec2 = mock_client!(aws_sdk_ec2, RuleMode::Sequential, [&rule], |c| {
        c.retry_config(aws_sdk_ec2::config::retry::RetryConfig::standard().with_max_attempts(3))
    });
    let start = tokio::time::Instant::now();
    let inst = cloud(ec2)
        .get("aws:///us-east-1a/i-0a")
        .await
        .expect("after two retries");
    assert_eq!(inst.state, InstanceState::Running);
    assert_eq!(rule.num_calls(), 3);
    assert!(
        start.elapsed() > Duration::ZERO,
        "it backed off between attempts"
    );
}

#[tokio::test(start_paused = true)]
async fn throttling_that_outlasts_the_retries_is_reported_as_throttled() {
    let rule = mock!(Client::describe_instances)
        .sequence()
        .http_response(|| ec2_error("RequestLimitExceeded"))
        .times(3)
        .build();
    let ec2 = mock_client!(aws_sdk_ec2, RuleMode::Sequential, [&rule], |c| {
        c.retry_config(aws_sdk_ec2::config::retry::RetryConfig::standard().with_max_attempts(3))
    });
    let err = cloud(ec2).get("aws:///us-east-1a/i-0a").await.unwrap_err();
    assert!(matches!(err, CloudError::Throttled { .. }), "{err:?}");
}

#[test]
fn ec2_error_codes_become_the_errors_the_controller_acts_on() {
    let service = |code: &str| AwsError::Service {
        operation: "CreateFleet",
        code: code.into(),
        message: "m".into(),
    };
    let cases = [
        ("RequestLimitExceeded", "Throttled"),
        ("IdempotentParameterMismatch", "Invalid"),
        ("InvalidParameterValue", "Invalid"),
        ("UnauthorizedOperation", "Invalid"),
        ("InvalidInstanceID.NotFound", "NotFound"),
        ("InternalError", "Transient"),
    ];
    for (code, want) in cases {
        let got = match CloudError::from(service(code)) {
            CloudError::Throttled { .. } => "Throttled",
            CloudError::Invalid { .. } => "Invalid",
            CloudError::NotFound { .. } => "NotFound",
            CloudError::Transient { .. } => "Transient",
            CloudError::InsufficientCapacity { .. } => "InsufficientCapacity",
        };
        assert_eq!(got, want, "{code}");
    }
}

#[test]
fn provider_ids_round_trip_and_long_client_tokens_are_shortened() {
    assert_eq!(
        provider_id("us-east-1a", "i-0abc"),
        "aws:///us-east-1a/i-0abc"
    );
    assert_eq!(instance_id("aws:///us-east-1a/i-0abc"), Some("i-0abc"));
    assert_eq!(instance_id("fake://x"), None);
    assert_eq!(client_token("t", 0), "t");
    assert_eq!(client_token("t", 2), "t-2");
    let long = "x".repeat(80);
    assert!(client_token(&long, 0).len() <= 64);
    assert_ne!(client_token(&long, 0), client_token(&long, 1));
}

#[test]
fn the_controller_iam_policy_allows_every_call_the_provider_makes() {
    // Every AWS API the provider calls: each call's error goes through `sdk_error("<Op>", …)`,
    // so the sources name them all.
    let sources = [
        include_str!("lib.rs"),
        include_str!("launch.rs"),
        include_str!("resolve.rs"),
        include_str!("ssm.rs"),
        include_str!("pricing.rs"),
        include_str!("profile.rs"),
        include_str!("catalog.rs"),
        include_str!("interruption.rs"),
    ];
    let mut calls: BTreeSet<String> = BTreeSet::new();
    for src in sources {
        for piece in src.split("sdk_error(\"").skip(1) {
            let op: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if op.is_empty() {
                continue;
            }
            let service = match op.as_str() {
                "GetQueueUrl" | "ReceiveMessage" | "DeleteMessage" => "sqs",
                "GetParameter" => "ssm",
                "GetProducts" => "pricing",
                o if o.contains("InstanceProfile") => "iam",
                _ => "ec2",
            };
            calls.insert(format!("{service}:{op}"));
        }
    }
    assert!(calls.len() >= 20, "{calls:?}");
    // What CreateFleet needs besides: RunInstances, and CreateTags on what it makes.
    calls.insert("ec2:RunInstances".into());
    calls.insert("ec2:CreateTags".into());
    calls.insert("iam:TagInstanceProfile".into());
    let policy: serde_json::Value =
        serde_json::from_str(include_str!("../../../deploy/aws/controller-policy.json")).unwrap();
    let mut allowed = BTreeSet::new();
    for s in policy["Statement"].as_array().unwrap() {
        match &s["Action"] {
            serde_json::Value::String(a) => {
                allowed.insert(a.clone());
            }
            serde_json::Value::Array(a) => {
                allowed.extend(a.iter().filter_map(|x| x.as_str().map(String::from)));
            }
            _ => {}
        }
        assert!(s.get("Resource").is_some(), "{s}");
    }
    for call in &calls {
        assert!(allowed.contains(call), "{call} is not allowed");
    }
    assert!(allowed.contains("iam:PassRole"));
    // Mutations are scoped by the cluster's ownership tag.
    for s in policy["Statement"].as_array().unwrap() {
        let actions = s["Action"].to_string();
        if actions.contains("TerminateInstances") || actions.contains("CreateTags") {
            assert!(
                s["Condition"]
                    .to_string()
                    .contains("kubernetes.io/cluster/${CLUSTER_NAME}"),
                "{s}"
            );
        }
    }
}

#[test]
fn the_node_class_hash_changes_with_static_settings_and_not_with_selectors() {
    let base = node_class();
    let h = nodeclass_hash(&base);
    assert!(h.starts_with("v1-"), "{h}");
    // Golden: a change in what is hashed, or how, must bump the version.
    assert_eq!(h, nodeclass_hash(&node_class()));
    let mut user_data = base.clone();
    user_data.user_data = Some("#!/bin/bash".into());
    let mut tags = base.clone();
    tags.tags.insert("team".into(), "a".into());
    for changed in [user_data, tags] {
        assert_ne!(nodeclass_hash(&changed), h);
    }
    let mut selectors = base.clone();
    selectors.subnet_selector_terms[0]
        .tags
        .insert("tier".into(), "private".into());
    assert_eq!(
        nodeclass_hash(&selectors),
        h,
        "selectors drift by what they resolve to"
    );
}

fn ec2_client_error(code: &str) -> HttpResponse {
    let body = format!(
        "<Response><Errors><Error><Code>{code}</Code><Message>{code}</Message></Error></Errors><RequestID>r</RequestID></Response>"
    );
    HttpResponse::new(StatusCode::try_from(400).unwrap(), SdkBody::from(body))
}

fn cloud_with(clients: Clients, kubernetes_version: Option<&str>) -> AwsCloud {
    let classes = Arc::new(NodeClassMap::default());
    classes.insert("AWSNodeClass", "default", node_class());
    AwsCloud::with_clients(
        clients,
        Settings {
            cluster_name: "demo".into(),
            kubernetes_version: kubernetes_version.map(String::from),
            ..Default::default()
        },
        classes,
        Arc::new(ManualClock::new()),
    )
}

const AL2023_X86: &str =
    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/recommended/image_id";

fn parameter_not_found() -> aws_sdk_ssm::operation::get_parameter::GetParameterError {
    aws_sdk_ssm::operation::get_parameter::GetParameterError::ParameterNotFound(
        aws_sdk_ssm::types::error::ParameterNotFound::builder().build(),
    )
}

#[tokio::test]
async fn an_alias_resolves_to_the_image_in_the_eks_optimized_parameter_for_the_clusters_version() {
    let x86 = mock!(aws_sdk_ssm::Client::get_parameter)
        .match_requests(|r| r.name() == Some(AL2023_X86))
        .then_output(|| {
            aws_sdk_ssm::operation::get_parameter::GetParameterOutput::builder()
                .parameter(
                    aws_sdk_ssm::types::Parameter::builder()
                        .name(AL2023_X86)
                        .value("ami-from-ssm")
                        .build(),
                )
                .build()
        });
    let other = mock!(aws_sdk_ssm::Client::get_parameter).then_error(parameter_not_found);
    let ssm = mock_client!(aws_sdk_ssm, RuleMode::MatchAny, [&x86, &other]);
    let by_id = mock!(Client::describe_images)
        .match_requests(|r| r.image_ids() == ["ami-from-ssm".to_string()])
        .then_output(|| {
            DescribeImagesOutput::builder()
                .images(
                    Image::builder()
                        .image_id("ami-from-ssm")
                        .name("amazon-eks-node-al2023-x86_64-standard-1.34-v20261115")
                        .architecture(ArchitectureValues::X8664)
                        .creation_date("2026-11-15T00:00:00.000Z")
                        .build(),
                )
                .build()
        });
    let mut rules = vec![by_id.clone()];
    rules.extend(region_rules());
    let ec2 = mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules.iter());
    let mut clients = Clients::ec2_only(ec2);
    clients.ssm = Some(ssm);
    let c = cloud_with(clients, Some("1.34"));
    let r = c.resolved(&node_class()).await.expect("resolved");
    let ids: Vec<&str> = r.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["ami-from-ssm"]);
    assert_eq!(
        (x86.num_calls(), other.num_calls(), by_id.num_calls()),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn an_alias_ssm_has_no_parameter_for_selects_the_image_by_its_published_name() {
    let none = mock!(aws_sdk_ssm::Client::get_parameter).then_error(parameter_not_found);
    let ssm = mock_client!(aws_sdk_ssm, RuleMode::MatchAny, [&none]);
    let by_name = mock!(Client::describe_images)
        .match_requests(|r| {
            r.image_ids().is_empty()
                && r.filters().iter().any(|f| {
                    f.name() == Some("name")
                        && f.values() == ["amazon-eks-node-al2023-x86_64-standard-*-*".to_string()]
                })
        })
        .then_output(|| {
            DescribeImagesOutput::builder()
                .images(
                    Image::builder()
                        .image_id("ami-by-name")
                        .architecture(ArchitectureValues::X8664)
                        .creation_date("2026-11-01T00:00:00.000Z")
                        .build(),
                )
                .build()
        });
    let empty =
        mock!(Client::describe_images).then_output(|| DescribeImagesOutput::builder().build());
    let mut rules = vec![by_name.clone(), empty];
    rules.extend(region_rules());
    let ec2 = mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules.iter());
    let mut clients = Clients::ec2_only(ec2);
    clients.ssm = Some(ssm);
    let c = cloud_with(clients, Some("1.34"));
    let r = c.resolved(&node_class()).await.expect("resolved");
    let ids: Vec<&str> = r.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["ami-by-name"]);
    assert_eq!(
        none.num_calls(),
        2,
        "both architectures' parameters were asked for"
    );
}

fn price_doc(instance_type: &str, usd: &str) -> String {
    format!(
        r#"{{"product": {{"attributes": {{"instanceType": "{instance_type}"}}}},
            "terms": {{"OnDemand": {{"a": {{"priceDimensions": {{"b": {{"pricePerUnit": {{"USD": "{usd}"}}}}}}}}}}}}}}"#
    )
}

#[tokio::test]
async fn on_demand_prices_come_from_the_pricing_api_with_the_snapshot_for_types_it_does_not_list() {
    let products = mock!(aws_sdk_pricing::Client::get_products)
        .match_requests(|r| {
            r.service_code() == Some("AmazonEC2")
                && r.filters()
                    .iter()
                    .any(|f| f.field() == "regionCode" && f.value() == "us-east-1")
                && r.filters()
                    .iter()
                    .any(|f| f.field() == "operatingSystem" && f.value() == "Linux")
        })
        .then_output(|| {
            aws_sdk_pricing::operation::get_products::GetProductsOutput::builder()
                .price_list(price_doc("m5.large", "0.1000000000"))
                .build()
        });
    let pricing = mock_client!(aws_sdk_pricing, RuleMode::MatchAny, [&products]);
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        region_rules().iter(),
        |c| c.region(aws_sdk_ec2::config::Region::new("us-east-1"))
    );
    let mut clients = Clients::ec2_only(ec2);
    clients.pricing = Some(pricing);
    let c = cloud_with(clients, None);
    c.refresh_on_demand_prices().await;
    let types = c.instance_types(&pool()).await.expect("types");
    let od = |name: &str| {
        types
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .offerings
            .iter()
            .find(|o| o.capacity_type == "on-demand")
            .unwrap()
            .price
    };
    assert_eq!(od("m5.large"), 0.1, "the Pricing API's price");
    assert_eq!(od("m5.xlarge"), 0.192, "the snapshot's price");
    assert_eq!(products.num_calls(), 1);
    // Within twelve hours the prices are not read again.
    c.refresh_on_demand_prices().await;
    c.instance_types(&pool()).await.unwrap();
    assert_eq!(products.num_calls(), 1);
}

#[tokio::test]
async fn when_the_pricing_api_cannot_be_read_the_snapshots_prices_serve() {
    let denied = mock!(aws_sdk_pricing::Client::get_products).then_http_response(|| {
        HttpResponse::new(
            StatusCode::try_from(400).unwrap(),
            SdkBody::from(r#"{"__type":"AccessDeniedException","message":"no"}"#),
        )
    });
    let pricing = mock_client!(aws_sdk_pricing, RuleMode::MatchAny, [&denied]);
    let ec2 = mock_client!(aws_sdk_ec2, RuleMode::MatchAny, region_rules().iter());
    let mut clients = Clients::ec2_only(ec2);
    clients.pricing = Some(pricing);
    let c = cloud_with(clients, None);
    c.refresh_on_demand_prices().await;
    c.instance_types(&pool()).await.expect("types");
    assert_eq!(c.on_demand_price("m5.large"), Some(0.096));
    assert_eq!(denied.num_calls(), 1);
}

fn pool() -> NodePool {
    let obj: capstan_model::nodepool::NodePoolObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "AWSNodeClass", "name": "default"},
            "requirements": []}}}
    }))
    .unwrap();
    NodePool::compile_fail_closed(&obj).unwrap()
}

#[tokio::test]
async fn a_launch_whose_token_was_spent_on_other_overrides_returns_the_instance_that_launch_made() {
    let mismatch = mock!(Client::create_fleet)
        .then_http_response(|| ec2_client_error("IdempotentParameterMismatch"));
    let found = mock!(Client::describe_instances)
        .match_requests(|r| {
            r.filters().iter().any(|f| {
                f.name() == Some("tag:karpenter.sh/nodeclaim")
                    && f.values() == ["default-abc12".to_string()]
            })
        })
        .then_output(|| {
            DescribeInstancesOutput::builder()
                .reservations(
                    Reservation::builder()
                        .instances(
                            aws_sdk_ec2::types::Instance::builder()
                                .instance_id("i-0earlier")
                                .instance_type("m5.large".into())
                                .placement(
                                    Placement::builder().availability_zone("us-east-1b").build(),
                                )
                                .state(Ec2State::builder().name(InstanceStateName::Pending).build())
                                .tags(
                                    aws_sdk_ec2::types::Tag::builder()
                                        .key(NODECLAIM_TAG)
                                        .value("default-abc12")
                                        .build(),
                                )
                                .build(),
                        )
                        .build(),
                )
                .build()
        });
    let mut rules = region_rules();
    rules.push(mismatch.clone());
    rules.push(found.clone());
    let c = cloud(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules.iter()));
    let inst = c
        .create(&request())
        .await
        .expect("the earlier launch's instance");
    assert_eq!(inst.provider_id, "aws:///us-east-1b/i-0earlier");
    assert_eq!(inst.claim_name, "default-abc12");
    assert_eq!((mismatch.num_calls(), found.num_calls()), (1, 1));

    // Nothing launched under the token: the next tokens are tried; when every one was spent
    // elsewhere the launch is transient, and the next call starts with tokens not yet used.
    let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = tokens.clone();
    let spent = mock!(Client::create_fleet)
        .match_requests(move |r| {
            seen.lock()
                .unwrap()
                .push(r.client_token().unwrap_or_default().to_string());
            true
        })
        .then_http_response(|| ec2_client_error("IdempotentParameterMismatch"));
    let nothing = mock!(Client::describe_instances)
        .then_output(|| DescribeInstancesOutput::builder().build());
    let mut rules = region_rules();
    rules.push(spent.clone());
    rules.push(nothing.clone());
    let c = cloud(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules.iter()));
    let err = c.create(&request()).await.unwrap_err();
    assert!(
        matches!(&err, CloudError::Transient { message } if message.contains("IdempotentParameterMismatch")),
        "{err:?}"
    );
    let _ = c.create(&request()).await.unwrap_err();
    assert_eq!(
        *tokens.lock().unwrap(),
        [
            "default-abc12-uid",
            "default-abc12-uid-1",
            "default-abc12-uid-2",
            "default-abc12-uid-3",
            "default-abc12-uid-4",
            "default-abc12-uid-5"
        ]
    );
    // Before the second call's first fleet, the claim's instance was looked for (none).
    assert_eq!(nothing.num_calls(), 6 + 1);
}
