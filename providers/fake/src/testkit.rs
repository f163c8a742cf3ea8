//! Builders so tests, benches and other crates set up a cloud, a catalog and a clock in one line:
//!
//! ```
//! let (cloud, clock) = capstan_fake_cloud::testkit::cloud(7);
//! # let _ = (cloud, clock);
//! ```

use crate::{FakeCloud, FakeCloudConfig};
use capstan_cloud::{Clock, LaunchRequest, ManualClock};
use capstan_model::{Catalog, Requirement, Requirements};
use std::sync::Arc;

/// Instance types the small catalog keeps from the built-in one.
pub const SMALL: [&str; 6] = [
    "m7i.large",
    "m7i.xlarge",
    "m7i.2xlarge",
    "c7i.large",
    "r7i.large",
    "m7g.large",
];

/// A few real AWS types (from the built-in catalog), for fast tests.
pub fn small_catalog() -> Catalog {
    let mut c = Catalog::builtin();
    c.instance_types
        .retain(|t| SMALL.contains(&t.name.as_str()));
    c
}

/// A fake cloud over the small catalog with default settings, and the manual clock it reads.
pub fn cloud(seed: u64) -> (FakeCloud, ManualClock) {
    let clock = ManualClock::new();
    let cloud = Builder::new()
        .seed(seed)
        .clock(Arc::new(clock.clone()))
        .build();
    (cloud, clock)
}

/// A launch request whose client token is its name.
pub fn request(name: &str, types: &[&str]) -> LaunchRequest {
    LaunchRequest {
        claim_name: name.to_string(),
        nodepool: "default".into(),
        client_token: name.to_string(),
        instance_types: types.iter().map(|t| t.to_string()).collect(),
        requirements: Requirements::new(),
        labels: Default::default(),
        taints: Vec::new(),
        node_class: None,
        warm_start: false,
    }
}

/// The same request restricted to one capacity type.
pub fn with_capacity_type(mut r: LaunchRequest, ct: &str) -> LaunchRequest {
    r.requirements.add(Requirement::in_values(
        capstan_model::labels::CAPACITY_TYPE,
        [ct],
    ));
    r
}

/// Builds a [`FakeCloud`].
pub struct Builder {
    config: FakeCloudConfig,
    catalog: Option<Catalog>,
    clock: Option<Arc<dyn Clock>>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    pub fn new() -> Builder {
        Builder {
            config: FakeCloudConfig::default(),
            catalog: None,
            clock: None,
        }
    }

    pub fn config(mut self, config: FakeCloudConfig) -> Builder {
        self.config = config;
        self
    }

    pub fn seed(mut self, seed: u64) -> Builder {
        self.config.seed = seed;
        self
    }

    /// Default: [`small_catalog`].
    pub fn catalog(mut self, catalog: Catalog) -> Builder {
        self.catalog = Some(catalog);
        self
    }

    /// Default: a fresh [`ManualClock`] at zero.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Builder {
        self.clock = Some(clock);
        self
    }

    pub fn build(self) -> FakeCloud {
        FakeCloud::new(
            self.config,
            self.catalog.unwrap_or_else(small_catalog),
            self.clock.unwrap_or_else(|| Arc::new(ManualClock::new())),
        )
    }
}
