//! Criterion bench of the packing planner on the recorded pod sets in benches/data, with the
//! built-in catalog and the default NodePool. Run with `cargo bench -p capstan-cli --bench packing`.

use capstan_cli::plan_cmd::{PlanInput, read_pods, solve_input};
use capstan_model::{Catalog, NodePool};
use capstan_pack::{PackOptions, Strategy, pack};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn packing(c: &mut Criterion) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../benches/data");
    let catalog = Catalog::builtin();
    let mut group = c.benchmark_group("packing");
    group.sample_size(10);
    for set in [
        "web-tier",
        "batch-mixed",
        "memory-heavy",
        "gpu-inference",
        "large-5200",
        "prod-cpu-1100",
        "prod-gpu-2000",
    ] {
        let pending = read_pods(&format!("{dir}/{set}.json")).expect("recorded set loads");
        let p = PlanInput {
            pending,
            snapshot: Default::default(),
            nodepools: vec![NodePool::default_pool()],
            catalog: catalog.clone(),
        };
        for strategy in [Strategy::KarpenterFfd, Strategy::Default] {
            let options = PackOptions {
                strategy,
                ..Default::default()
            };
            group.bench_with_input(BenchmarkId::new(strategy.name(), set), &p, |b, p| {
                b.iter(|| pack(solve_input(p), &options).expect("packs"))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, packing);
criterion_main!(benches);
