//! Criterion bench: one full disruption evaluation (all methods) of a 1,000-node cluster with
//! about 33,000 pods. Run with `cargo bench -p capstan-cli --bench disruption`.

use capstan_cli::bench::disruption_cluster;
use capstan_disrupt::{Input, evaluate};
use capstan_model::NodePool;
use criterion::{Criterion, criterion_group, criterion_main};

fn disruption(c: &mut Criterion) {
    let (nodes, pods, pdbs, types) = disruption_cluster(1000, 36, 1);
    let pools = vec![NodePool::default_pool()];
    let mut group = c.benchmark_group("disruption");
    group.sample_size(10);
    group.bench_function("evaluate_1000_nodes", |b| {
        b.iter(|| {
            evaluate(Input {
                nodes: &nodes,
                pods: &pods,
                pdbs: &pdbs,
                nodepools: &pools,
                instance_types: &types,
                daemonsets: &[],
                now: 1_796_030_100.0,
                spot_to_spot: false,
                ignore_preferences: false,
                known: None,
            })
        })
    });
    group.finish();
}

criterion_group!(benches, disruption);
criterion_main!(benches);
