//! Criterion bench of Karpenter's scheduling benchmark workload (`capstan bench scheduling`).
//! Run with `cargo bench -p capstan-cli --bench scheduling`.

use capstan_cli::bench::{instance_types, nodepool, pods, solve_workload};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn scheduling(c: &mut Criterion) {
    let types = instance_types(400);
    let pools = vec![nodepool()];
    let mut group = c.benchmark_group("scheduling");
    group.sample_size(10);
    for n in [100usize, 1000, 5000, 20000] {
        let pending = pods(n, 1);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(
            BenchmarkId::new("mixed-400-types", n),
            &pending,
            |b, pending| b.iter(|| solve_workload(pending, &types, &pools)),
        );
    }
    group.finish();
}

criterion_group!(benches, scheduling);
criterion_main!(benches);
