//! The fake cloud's configuration: a YAML block (simulator scenarios embed it). Unknown fields
//! are errors; every error names the file and the field.

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FakeCloudConfig {
    /// Seeds prices, interruption bands, boot delays, faults and interruptions.
    pub seed: u64,
    /// Zones offered; empty means `<region>a`, `<region>b`, `<region>c`.
    pub zones: Vec<String>,
    /// Zone IDs (`topology.k8s.aws/zone-id`) by zone name. A zone not named takes the ID the
    /// catalog gives it, else the fake cloud's own: the region's short form and the zone's
    /// place in `zones` (`us-east-1b` → `use1-az2`).
    pub zone_ids: std::collections::BTreeMap<String, String>,
    pub spot: SpotConfig,
    pub capacity: CapacityConfig,
    pub api: ApiConfig,
    pub boot: BootConfig,
    pub faults: FaultConfig,
    pub interruptions: InterruptionConfig,
    pub warm_pool: WarmPoolConfig,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SpotConfig {
    pub enabled: bool,
    /// Spot prices sit between these fractions of the on-demand price.
    pub min_price_fraction: f64,
    pub max_price_fraction: f64,
    /// How far (as a fraction of on-demand) a pool's spot price swings over a day.
    pub daily_swing: f64,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CapacityConfig {
    /// Instances each pool (instance type × zone × capacity type) can hold.
    pub per_pool: u32,
    /// Per-pool overrides.
    pub pools: Vec<PoolCapacity>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolCapacity {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub capacity: u32,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiConfig {
    /// Mutating calls (create, delete) per second, as a token bucket.
    pub rate_per_second: u32,
    pub burst: u32,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BootConfig {
    /// Seconds from launch until the node registers, drawn uniformly per instance.
    pub min_seconds: f64,
    pub max_seconds: f64,
}

/// Pre-initialised, stopped instances (an EC2 Auto Scaling warm pool in its `Stopped` state,
/// or stopped persistent spot instances): a launch the planner put on one (its request's
/// `warm_start`) and one of them can serve starts it in `start` seconds instead of booting a
/// new machine; other launches boot. The pool refills at once: a new instance
/// boots (paid at its running price meanwhile), initialises and stops. A stopped instance costs
/// `stoppedHourlyCost` (its EBS volume).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WarmPoolConfig {
    pub pools: Vec<WarmPool>,
    /// Seconds from start until the node registers, drawn uniformly per instance. A measured
    /// field figure for EKS nodes with heavy user data is 80 s warm against 110 s cold
    /// (keikoproj/instance-manager#277); a lean AMI whose kubelet already joined starts faster.
    pub start: BootConfig,
    /// Dollars per hour a stopped instance costs: its root volume (20 GiB of gp3 at
    /// $0.08 per GiB-month by default).
    pub stopped_hourly_cost: f64,
    /// How much dearer per hour (a fraction) than the launch's cheapest offering a warm
    /// instance may be and still be started in its place; unset, a warm instance the launch
    /// allows is started first, as an Auto Scaling group starts its warm pool.
    pub max_premium: Option<f64>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WarmPool {
    pub instance_type: String,
    pub zone: String,
    #[serde(default = "on_demand")]
    pub capacity_type: String,
    /// Instances kept stopped.
    pub size: u32,
}

fn on_demand() -> String {
    capstan_model::labels::CAPACITY_ON_DEMAND.to_string()
}

impl Default for WarmPoolConfig {
    fn default() -> Self {
        WarmPoolConfig {
            pools: Vec::new(),
            start: BootConfig {
                min_seconds: 10.0,
                max_seconds: 20.0,
            },
            stopped_hourly_cost: 20.0 * 0.08 / 730.0,
            max_premium: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FaultConfig {
    /// Share of create calls that fail with a transient error.
    pub launch_failure_rate: f64,
    /// Share of instances whose node never becomes ready.
    pub never_ready_rate: f64,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct InterruptionConfig {
    pub enabled: bool,
    /// Scales every pool's interruption rate (a storm is a large multiplier).
    pub rate_multiplier: f64,
    /// Share of interruptions a rebalance recommendation precedes.
    pub rebalance_fraction: f64,
    /// How long before the interruption warning the recommendation comes, at most.
    pub rebalance_lead_seconds: f64,
    /// Share of instances (any capacity type) that get a scheduled retirement per month.
    pub maintenance_per_month: f64,
    /// Notice a scheduled retirement gives, in seconds.
    pub maintenance_notice_seconds: f64,
}

impl Default for SpotConfig {
    fn default() -> Self {
        SpotConfig {
            enabled: true,
            min_price_fraction: 0.25,
            max_price_fraction: 0.75,
            daily_swing: 0.05,
        }
    }
}

impl Default for CapacityConfig {
    fn default() -> Self {
        CapacityConfig {
            per_pool: 1000,
            pools: Vec::new(),
        }
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            rate_per_second: 100,
            burst: 200,
        }
    }
}

impl Default for BootConfig {
    fn default() -> Self {
        BootConfig {
            min_seconds: 30.0,
            max_seconds: 90.0,
        }
    }
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            launch_failure_rate: 0.0,
            never_ready_rate: 0.0,
        }
    }
}

impl Default for InterruptionConfig {
    fn default() -> Self {
        InterruptionConfig {
            enabled: true,
            rate_multiplier: 1.0,
            rebalance_fraction: 0.5,
            rebalance_lead_seconds: 600.0,
            maintenance_per_month: 0.0,
            maintenance_notice_seconds: 14.0 * 86_400.0,
        }
    }
}

/// A configuration that does not make sense: `file: field: message`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub field: String,
    pub message: String,
}

impl FakeCloudConfig {
    /// Parses and validates a YAML (or JSON) block.
    pub fn from_yaml(file: &str, text: &str) -> Result<FakeCloudConfig, ConfigError> {
        let de = serde_yaml::Deserializer::from_str(text);
        let cfg: FakeCloudConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let message = e.into_inner().to_string();
            // serde_yaml already prefixes the path; keep one.
            let message = match message.split_once(": ") {
                Some((path, rest)) if field.starts_with(path) => rest.to_string(),
                _ => message,
            };
            ConfigError {
                file: file.to_string(),
                field,
                message,
            }
        })?;
        cfg.validate().map_err(|(field, message)| ConfigError {
            file: file.to_string(),
            field,
            message,
        })?;
        Ok(cfg)
    }

    /// Checks ranges; returns the offending field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let fraction = |v: f64, field: &str| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err((
                    field.to_string(),
                    format!("must be between 0 and 1, got {v}"),
                ))
            }
        };
        let err = |field: &str, message: String| Err((field.to_string(), message));
        fraction(self.spot.min_price_fraction, "spot.minPriceFraction")?;
        fraction(self.spot.max_price_fraction, "spot.maxPriceFraction")?;
        fraction(self.spot.daily_swing, "spot.dailySwing")?;
        if self.spot.min_price_fraction > self.spot.max_price_fraction {
            return err(
                "spot.minPriceFraction",
                "must not exceed spot.maxPriceFraction".into(),
            );
        }
        fraction(self.faults.launch_failure_rate, "faults.launchFailureRate")?;
        fraction(self.faults.never_ready_rate, "faults.neverReadyRate")?;
        fraction(
            self.interruptions.rebalance_fraction,
            "interruptions.rebalanceFraction",
        )?;
        if self.interruptions.rate_multiplier.is_nan() || self.interruptions.rate_multiplier < 0.0 {
            return err(
                "interruptions.rateMultiplier",
                "must be zero or more".into(),
            );
        }
        if self.interruptions.rebalance_lead_seconds.is_nan()
            || self.interruptions.rebalance_lead_seconds < 0.0
        {
            return err(
                "interruptions.rebalanceLeadSeconds",
                "must be zero or more".into(),
            );
        }
        if self.interruptions.maintenance_per_month.is_nan()
            || self.interruptions.maintenance_per_month < 0.0
        {
            return err(
                "interruptions.maintenancePerMonth",
                "must be zero or more".into(),
            );
        }
        if self.interruptions.maintenance_notice_seconds.is_nan()
            || self.interruptions.maintenance_notice_seconds < 0.0
        {
            return err(
                "interruptions.maintenanceNoticeSeconds",
                "must be zero or more".into(),
            );
        }
        if self.api.rate_per_second == 0 {
            return err("api.ratePerSecond", "must be at least 1".into());
        }
        if self.api.burst == 0 {
            return err("api.burst", "must be at least 1".into());
        }
        if !(self.boot.min_seconds >= 0.0 && self.boot.min_seconds <= self.boot.max_seconds) {
            return err(
                "boot.minSeconds",
                format!(
                    "must be between 0 and boot.maxSeconds ({})",
                    self.boot.max_seconds
                ),
            );
        }
        let capacity_types = self
            .capacity
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("capacity.pools[{i}]"), &p.capacity_type))
            .chain(
                self.warm_pool
                    .pools
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (format!("warmPool.pools[{i}]"), &p.capacity_type)),
            );
        for (at, ct) in capacity_types {
            if !capstan_model::labels::CAPACITY_TYPES.contains(&ct.as_str()) {
                return err(
                    &format!("{at}.capacityType"),
                    format!("must be \"reserved\", \"spot\" or \"on-demand\", got {ct:?}"),
                );
            }
        }
        let w = &self.warm_pool;
        if !(w.start.min_seconds >= 0.0 && w.start.min_seconds <= w.start.max_seconds) {
            return err(
                "warmPool.start.minSeconds",
                format!(
                    "must be between 0 and warmPool.start.maxSeconds ({})",
                    w.start.max_seconds
                ),
            );
        }
        if w.stopped_hourly_cost.is_nan() || w.stopped_hourly_cost < 0.0 {
            return err("warmPool.stoppedHourlyCost", "must be zero or more".into());
        }
        if w.max_premium.is_some_and(|m| m.is_nan() || m < 0.0) {
            return err("warmPool.maxPremium", "must be zero or more".into());
        }
        Ok(())
    }

    /// Checks what needs the catalog: every warm pool names an instance type the cloud offers
    /// (it has an on-demand price) in one of its zones, so a pool is never silently empty.
    pub fn validate_offered(
        &self,
        catalog: &capstan_model::Catalog,
    ) -> Result<(), (String, String)> {
        for (i, p) in self.warm_pool.pools.iter().enumerate() {
            let offered = catalog.get(&p.instance_type).is_some_and(|t| {
                t.offerings
                    .iter()
                    .any(|o| o.capacity_type == capstan_model::labels::CAPACITY_ON_DEMAND)
            });
            if !offered {
                return Err((
                    format!("warmPool.pools[{i}].instanceType"),
                    format!(
                        "{:?} is not an instance type this cloud offers",
                        p.instance_type
                    ),
                ));
            }
            let zones = crate::zones_for(self, catalog);
            if !zones.contains(&p.zone) {
                return Err((
                    format!("warmPool.pools[{i}].zone"),
                    format!("{:?} is not one of the cloud's zones {zones:?}", p.zone),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_block_gives_the_defaults() {
        let c = FakeCloudConfig::from_yaml("s.yaml", "{}").unwrap();
        assert_eq!(c, FakeCloudConfig::default());
    }

    #[test]
    fn a_full_block_parses() {
        let yaml = "seed: 7\nzones: [z1, z2]\nspot: {enabled: false}\ncapacity:\n  perPool: 5\n  pools: [{instanceType: m7i.large, zone: z1, capacityType: spot, capacity: 0}]\napi: {ratePerSecond: 2, burst: 3}\nboot: {minSeconds: 10, maxSeconds: 20}\nfaults: {launchFailureRate: 0.1, neverReadyRate: 0.01}\ninterruptions: {rateMultiplier: 50, rebalanceFraction: 1}\n";
        let c = FakeCloudConfig::from_yaml("s.yaml", yaml).unwrap();
        assert_eq!(c.seed, 7);
        assert!(!c.spot.enabled);
        assert_eq!(c.capacity.pools[0].capacity, 0);
        assert_eq!(c.interruptions.rate_multiplier, 50.0);
    }

    #[test]
    fn bad_configuration_names_the_file_and_field() {
        let cases = [
            (
                "boot: {minSeconds: 100, maxSeconds: 20}",
                "s.yaml: boot.minSeconds: must be between 0 and boot.maxSeconds (20)",
            ),
            (
                "faults: {launchFailureRate: 2}",
                "s.yaml: faults.launchFailureRate: must be between 0 and 1, got 2",
            ),
            (
                "api: {ratePerSecond: fast}",
                "s.yaml: api.ratePerSecond: invalid type: string \"fast\", expected u32 at line 1 column 22",
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(
                FakeCloudConfig::from_yaml("s.yaml", yaml)
                    .unwrap_err()
                    .to_string(),
                want,
                "{yaml}"
            );
        }
        let err = FakeCloudConfig::from_yaml("s.yaml", "spot: {enabeld: true}").unwrap_err();
        assert_eq!(err.field, "spot.enabeld");
        assert!(
            err.message.starts_with("unknown field `enabeld`"),
            "{}",
            err.message
        );
    }
}
