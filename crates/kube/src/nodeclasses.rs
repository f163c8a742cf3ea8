//! AWSNodeClass objects as the AWS provider reads them (and Karpenter's EC2NodeClass, which
//! has the same spec under `karpenter.k8s.aws/v1`).

use crate::api::capstan_resource;
use capstan_model::awsnodeclass::{AwsNodeClassSpec, KARPENTER_GROUP, KARPENTER_KIND};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

/// One node class as listed: its name and its spec, or why the spec does not load (the field
/// named as `spec.…`).
pub type Listed = (String, Result<AwsNodeClassSpec, String>);

fn parse(o: &DynamicObject) -> Option<Listed> {
    let name = o.metadata.name.clone()?;
    let spec = o.data.get("spec").cloned().unwrap_or_default();
    let parsed = serde_path_to_error::deserialize::<_, AwsNodeClassSpec>(spec)
        .map_err(|e| format!("spec.{}: {}", e.path(), e.inner()))
        .and_then(|s| s.validate().map(|()| s).map_err(|e| e.to_string()));
    Some((name, parsed))
}

/// Every `AWSNodeClass` and `EC2NodeClass` under `capstan.dev/v1`, by kind.
/// Each with its kind and uid (Events name the object by it).
pub async fn aws_node_classes(
    client: &kube::Client,
) -> Result<Vec<(&'static str, Listed, String)>, kube::Error> {
    let mut out = Vec::new();
    for (kind, plural) in [
        ("AWSNodeClass", "awsnodeclasses"),
        ("EC2NodeClass", "ec2nodeclasses"),
    ] {
        let api: Api<DynamicObject> =
            Api::all_with(client.clone(), &capstan_resource(kind, plural));
        let items = api.list(&ListParams::default()).await?.items;
        out.extend(items.iter().filter_map(|o| {
            let uid = o.metadata.uid.clone().unwrap_or_default();
            parse(o).map(|l| (kind, l, uid))
        }));
    }
    Ok(out)
}

/// Every Karpenter `EC2NodeClass` (`karpenter.k8s.aws/v1`), for the read-only what-if.
pub async fn karpenter_node_classes(client: &kube::Client) -> Result<Vec<Listed>, kube::Error> {
    let ar = ApiResource {
        group: KARPENTER_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{KARPENTER_GROUP}/v1"),
        kind: KARPENTER_KIND.into(),
        plural: "ec2nodeclasses".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(parse)
        .collect())
}

/// A node class as the read-only what-if reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub spec: Result<AwsNodeClassSpec, String>,
    /// The zones of the subnets its status lists (Karpenter's or capstan's resolution);
    /// empty when it has none yet.
    pub zones: Vec<String>,
}

/// Every node class a NodePool may name: Karpenter's `EC2NodeClass` (`karpenter.k8s.aws/v1`)
/// and capstan's `AWSNodeClass` and `EC2NodeClass`. A kind the cluster does not serve is
/// read as empty.
pub async fn seen(client: &kube::Client) -> Result<Vec<Seen>, kube::Error> {
    let karpenter = ApiResource {
        group: KARPENTER_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{KARPENTER_GROUP}/v1"),
        kind: KARPENTER_KIND.into(),
        plural: "ec2nodeclasses".into(),
    };
    let mut out = Vec::new();
    for ar in [
        karpenter,
        capstan_resource("AWSNodeClass", "awsnodeclasses"),
        capstan_resource("EC2NodeClass", "ec2nodeclasses"),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let items = match api.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e),
        };
        for o in &items {
            let Some((name, spec)) = parse(o) else {
                continue;
            };
            let mut zones: Vec<String> = o
                .data
                .pointer("/status/subnets")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.get("zone")?.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            zones.sort();
            zones.dedup();
            out.push(Seen {
                group: ar.group.clone(),
                kind: ar.kind.clone(),
                name,
                spec,
                zones,
            });
        }
    }
    Ok(out)
}

/// Writes a node class's status (merge patch on the status subresource).
pub async fn set_status(
    client: &kube::Client,
    kind: &str,
    name: &str,
    status: &capstan_model::awsnodeclass::AwsNodeClassStatus,
) -> Result<(), kube::Error> {
    let plural = if kind == KARPENTER_KIND {
        "ec2nodeclasses"
    } else {
        "awsnodeclasses"
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &capstan_resource(kind, plural));
    let body = serde_json::json!({ "status": status });
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(body),
    )
    .await
    .map(|_| ())
}

/// A Warning Event (events.k8s.io/v1) about a node class, in the `default` namespace (node
/// classes are cluster-scoped): what `kubectl describe awsnodeclass` and `kubectl get
/// events` show.
pub async fn warn(
    client: &kube::Client,
    kind: &str,
    name: &str,
    uid: &str,
    reason: &str,
    note: &str,
    reporter: &str,
) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;
    let now = Timestamp::now();
    let ev = Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some("default".into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(reason.into()),
        reason: Some(reason.into()),
        note: Some(note.chars().take(1000).collect()),
        type_: Some("Warning".into()),
        reporting_controller: Some("capstan.dev/controller".into()),
        reporting_instance: Some(reporter.chars().take(128).collect()),
        regarding: Some(ObjectReference {
            api_version: Some(crate::resources::API_VERSION.into()),
            kind: Some(kind.into()),
            name: Some(name.into()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    api.create(&kube::api::PostParams::default(), &ev)
        .await
        .map(|_| ())
}
