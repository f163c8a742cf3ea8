//! The read-only what-if on a live cluster: everything `capstan plan` and `capstan consolidate`
//! read — pods, nodes, NodePools (capstan's and Karpenter's `karpenter.sh/v1`), NodeClaims,
//! PDBs, DaemonSets, PersistentVolumeClaims, PersistentVolumes and StorageClasses (what pods'
//! volumes require of their nodes), node classes (Karpenter's `karpenter.k8s.aws/v1` EC2NodeClass and
//! capstan's) — read with list requests only. Nothing is written.

use crate::api::{KubeApi, Settings};
use crate::convert;
use crate::resources::KARPENTER_GROUP;
use capstan_controller::api::{ApiError, ClusterApi, Kind, Object};
use capstan_model::pdb::Pdb;
use capstan_model::{Node, NodeClaim, NodePool, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

/// The cluster as it is now.
#[derive(Clone, Debug, Default)]
pub struct Live {
    pub pods: Vec<Pod>,
    pub nodes: Vec<Node>,
    pub nodepools: Vec<NodePool>,
    pub claims: Vec<NodeClaim>,
    pub pdbs: Vec<Pdb>,
    pub daemonsets: Vec<Pod>,
    /// Claims, volumes and classes: every pod above carries what its volumes require.
    pub volumes: capstan_model::volume::Volumes,
    /// Node classes (Karpenter's EC2NodeClass, capstan's AWSNodeClass and EC2NodeClass).
    pub node_classes: Vec<crate::nodeclasses::Seen>,
    /// Objects skipped, one line each (kind, key, why).
    pub warnings: Vec<String>,
}

fn karpenter_nodepools() -> ApiResource {
    ApiResource {
        group: KARPENTER_GROUP.into(),
        version: "v1".into(),
        api_version: "karpenter.sh/v1".into(),
        kind: "NodePool".into(),
        plural: "nodepools".into(),
    }
}

impl Live {
    fn take(&mut self, o: Object) {
        match o {
            Object::Pod(p) => self.pods.push(Pod::clone(&p)),
            Object::Node(n) => self.nodes.push(Node::clone(&n)),
            Object::NodePool(p) => self.nodepools.push(NodePool::clone(&p)),
            Object::NodeClaim(c) => self.claims.push(NodeClaim::clone(&c)),
            Object::Pdb(p) => self.pdbs.push(Pdb::clone(&p)),
            Object::DaemonSet(p) => self.daemonsets.push(Pod::clone(&p)),
            Object::StorageClass(c) => {
                self.volumes.classes.insert(c.name.clone(), (*c).clone());
            }
            Object::PersistentVolume(v) => {
                self.volumes.volumes.insert(v.name.clone(), (*v).clone());
            }
            Object::PersistentVolumeClaim(c) => {
                self.volumes.claims.insert(c.key.clone(), (*c).clone());
            }
            Object::VolumeAttachment(_) => {}
            Object::Invalid(i) => self.warnings.push(format!(
                "{} {}: skipped: {}",
                i.kind.plural(),
                i.key,
                i.error
            )),
        }
    }
}

/// Reads the cluster. A kind whose resource the cluster does not serve (capstan's CRDs not
/// installed, no Karpenter) is read as empty.
pub async fn read(client: kube::Client) -> Result<Live, ApiError> {
    let api = KubeApi::new(client.clone(), Settings::default());
    let mut live = Live::default();
    for kind in [
        Kind::Pod,
        Kind::Node,
        Kind::NodePool,
        Kind::NodeClaim,
        Kind::Pdb,
        Kind::DaemonSet,
        Kind::StorageClass,
        Kind::PersistentVolume,
        Kind::PersistentVolumeClaim,
    ] {
        match api.list(kind).await {
            Ok(l) => {
                for (_, o) in l.objects {
                    live.take(o);
                }
            }
            Err(ApiError::NotFound { .. }) if matches!(kind, Kind::NodePool | Kind::NodeClaim) => {}
            Err(e) => return Err(e),
        }
    }
    for p in live.pods.iter_mut() {
        live.volumes.apply(p);
    }
    live.node_classes = crate::nodeclasses::seen(&client)
        .await
        .map_err(|e| crate::client::api_error("ec2nodeclasses", Kind::NodePool, e))?;
    let karpenter: Api<DynamicObject> = Api::all_with(client, &karpenter_nodepools());
    match karpenter.list(&ListParams::default()).await {
        Ok(list) => {
            for d in &list.items {
                let name = d.metadata.name.clone().unwrap_or_default();
                if live.nodepools.iter().any(|p| p.name == name) {
                    live.warnings.push(format!(
                        "nodepools.karpenter.sh {name}: skipped: a capstan.dev NodePool has the same name"
                    ));
                    continue;
                }
                live.take(convert::nodepool(d));
            }
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            return Err(crate::client::api_error(
                "nodepools.karpenter.sh",
                Kind::NodePool,
                e,
            ));
        }
    }
    Ok(live)
}
