//! Nominations on a real cluster: as the node launched for pending pods registers, capstan
//! sets their `status.nominatedNodeName` to it (under the chart's RBAC), and the real
//! kube-scheduler binds them there.

use super::{Cluster, wait_for};
use std::time::Duration;

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn pods_a_node_was_launched_for_are_nominated_to_it_as_it_registers_and_bind_there() {
    let c = Cluster::get();
    c.pool("c7i.xlarge", "");
    let ns = c.namespace("nominate");
    c.deployment(&ns, "web", 3, "900m", "");
    let capstan = c.capstan_with_log("nominate", "info,capstan_controller=debug");
    let running = wait_for("web Running", Duration::from_secs(180), || {
        let p = c.phases(&ns, "web");
        (p.len() == 3 && p.iter().all(|(_, phase, _)| phase == "Running")).then_some(p)
    });
    let log = capstan.log_text();
    // Each pod nominated, the write accepted (one the RBAC refused is not "written").
    let written = |pod: &str| {
        log.lines()
            .filter(|l| l.contains("written") && l.contains("\"nominate pod\""))
            .filter(|l| l.contains(&format!("pods/{ns}/{pod}")))
            .count()
    };
    for (pod, _, node) in &running {
        assert!(written(pod) >= 1, "{pod} was not nominated\n{log}");
        // kube-scheduler 1.34 leaves the field after binding (ClearingNominatedNodeNameAfterBinding
        // is off), and clears it if the pod failed a cycle after it was set: either way it
        // never names another node than the one the pod runs on.
        let p = c.get_json(&["pod", "-n", &ns, pod]);
        let nominated = p["status"]["nominatedNodeName"]
            .as_str()
            .unwrap_or_default();
        assert!(
            nominated.is_empty() || nominated == node,
            "{pod} runs on {node} but is nominated to {nominated}"
        );
    }
}
