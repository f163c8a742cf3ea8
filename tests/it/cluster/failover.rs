//! Failover: two controllers; the leader is killed with SIGKILL while launching; the standby
//! takes over within the lease and finishes the job without launching anything twice; a write
//! made on what the deposed leader last read is refused by its precondition.

use super::{Cluster, wait_for};
use capstan_controller::api::{ApiError, ClusterApi, Write};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn holder(c: &Cluster) -> Option<String> {
    let out = c.kubectl(
        &["get", "lease", "capstan", "-n", "kube-system", "-o", "json"],
        None,
    );
    if !out.status.success() {
        return None;
    }
    let l: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    l["spec"]["holderIdentity"].as_str().map(str::to_string)
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn when_the_leader_is_killed_mid_launch_the_standby_takes_over_within_the_lease_and_launches_nothing_twice()
 {
    let c = Cluster::get();
    c.default_pool("");
    let ns = c.namespace("failover");
    let mut a = c.capstan("capstan-a", &[]);
    wait_for("a leads", Duration::from_secs(30), || {
        (holder(&c).as_deref() == Some("capstan-a")).then_some(())
    });
    let b = c.capstan("capstan-b", &[]);
    c.deployment(&ns, "web", 40, "500m", "");
    // Mid-launch: claims exist, not every one has launched or registered.
    wait_for("a launching", Duration::from_secs(60), || {
        let claims = c.items(&["nodeclaims.capstan.dev"]);
        (!claims.is_empty()).then_some(())
    });
    // What a's loops last read of one claim (the deposed leader's view).
    let claim = c.items(&["nodeclaims.capstan.dev"]).remove(0);
    let name = claim["metadata"]["name"].as_str().unwrap().to_string();
    let stale_rv = claim["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    a.kill();
    let killed = Instant::now();
    let took_over = wait_for("b leads", Duration::from_secs(40), || {
        (holder(&c).as_deref() == Some("capstan-b")).then(|| killed.elapsed())
    });
    eprintln!(
        "failover: {:.1} s without a leader (lease 15 s)",
        took_over.as_secs_f64()
    );
    assert!(took_over <= Duration::from_secs(17), "{took_over:?}");
    wait_for("all 40 pods Running", Duration::from_secs(240), || {
        (c.running(&ns, "web") == 40).then_some(())
    });
    // One claim, one instance: no double launch, no leak.
    let claims = c.items(&["nodeclaims.capstan.dev"]);
    let instances = c.items(&["fakeinstances.capstan.dev"]);
    let mut per_claim: BTreeMap<String, usize> = BTreeMap::new();
    for i in &instances {
        *per_claim
            .entry(i["spec"]["claimName"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert!(per_claim.values().all(|n| *n == 1), "{per_claim:?}");
    let claim_names: Vec<&str> = claims
        .iter()
        .map(|x| x["metadata"]["name"].as_str().unwrap())
        .collect();
    for claim in per_claim.keys() {
        assert!(
            claim_names.contains(&claim.as_str()),
            "instance of {claim} leaked"
        );
    }
    assert_eq!(instances.len(), claims.len());
    // The deposed leader's write, on what it last read, is refused by its precondition.
    let now = c.get_json(&["nodeclaim.capstan.dev", &name]);
    assert_ne!(
        now["metadata"]["resourceVersion"].as_str().unwrap(),
        stale_rv
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt.block_on(async {
        let client = capstan_kube::connect(Some(&c.kubeconfig)).await.unwrap();
        let api = capstan_kube::KubeApi::new(client, Default::default());
        api.write(Write::ClaimStatus {
            name: name.clone(),
            rv: stale_rv.clone(),
            status: Box::default(),
        })
        .await
        .unwrap_err()
    });
    assert!(matches!(err, ApiError::Conflict { .. }), "{err}");
    drop(b);
}
