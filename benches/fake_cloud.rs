//! Criterion bench: launching and then deleting 1,000 instances through the CloudProvider
//! trait on the fake cloud. Run with `cargo bench -p capstan-fake-cloud --bench fake_cloud`.

use capstan_cloud::CloudProvider;
use capstan_fake_cloud::FakeCloudConfig;
use capstan_fake_cloud::testkit::{Builder, request, small_catalog};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

fn launch_and_delete(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let requests: Vec<_> = (0..1000)
        .map(|i| {
            request(
                &format!("claim-{i}"),
                &["m7i.large", "m7i.xlarge", "c7i.large"],
            )
        })
        .collect();
    let catalog = small_catalog();
    let mut config = FakeCloudConfig::default();
    config.api.rate_per_second = 1_000_000;
    config.api.burst = 1_000_000;
    c.bench_function("fake_cloud/launch_then_delete_1000", |b| {
        b.iter_batched(
            || {
                Builder::new()
                    .config(config.clone())
                    .catalog(catalog.clone())
                    .build()
            },
            |cloud| {
                rt.block_on(async {
                    let mut ids = Vec::with_capacity(requests.len());
                    for r in &requests {
                        ids.push(cloud.create(r).await.unwrap().provider_id);
                    }
                    for id in &ids {
                        cloud.delete(id).await.unwrap();
                    }
                });
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, launch_and_delete);
criterion_main!(benches);
