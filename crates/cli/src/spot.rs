//! Spot offerings for planning (`plan`, `consolidate`, `bench packing`). The shared catalog has
//! on-demand prices only. `--spot-prices FILE` reads the JSON `aws ec2
//! describe-spot-price-history --output json` prints: each priced pool (type × zone, the newest
//! entry winning) becomes a spot offering at its price. Without the file, and unless the
//! catalog lists its offerings itself, every (type, zone) with an on-demand offering gets a
//! spot offering priced by the fake cloud's model, and the commands say the prices are
//! estimates.

use crate::input::{InputError, read};
use capstan_model::catalog::{Catalog, Offering};
use capstan_model::labels::{CAPACITY_ON_DEMAND, CAPACITY_SPOT};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Where the spot prices a command planned with came from.
#[derive(Clone, Debug, PartialEq)]
pub enum SpotPrices {
    /// `--spot-prices FILE`, and the instance types the file names that the catalog lacks
    /// (their prices are not used).
    File {
        path: String,
        unknown_types: Vec<String>,
    },
    /// The fake cloud's model: estimates.
    Estimated,
    /// The catalog's own spot offerings: a catalog that lists every type's offerings, or
    /// any spot offering, says where spot exists, and none is added.
    Catalog,
}

impl SpotPrices {
    /// Tells the user on stderr: that the spot prices are estimates, where a NodePool allows
    /// spot; which types of the file the catalog lacks.
    pub fn report(&self, pools: &[capstan_model::NodePool]) {
        match self {
            SpotPrices::Estimated => {
                if pools.iter().any(|p| {
                    p.requirements
                        .allows(capstan_model::labels::CAPACITY_TYPE, CAPACITY_SPOT)
                }) {
                    eprintln!(
                        "note: spot prices are estimates (the fake cloud's price model); --spot-prices FILE plans on real ones"
                    );
                }
            }
            SpotPrices::Catalog => {}
            SpotPrices::File {
                path,
                unknown_types,
            } => {
                if !unknown_types.is_empty() {
                    tracing::warn!(
                        "{path}: {} instance types the catalog does not have ({}): their prices are not used",
                        unknown_types.len(),
                        unknown_types.join(", ")
                    );
                }
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct History {
    spot_price_history: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    instance_type: String,
    availability_zone: String,
    spot_price: String,
    timestamp: String,
}

/// Adds spot offerings to `catalog`: from the file at `path`, else estimated.
pub fn add(catalog: &mut Catalog, path: Option<&str>) -> Result<SpotPrices, InputError> {
    match path {
        Some(p) => from_text(catalog, p, &read(p)?),
        None if catalog.offerings_listed
            || catalog
                .instance_types
                .iter()
                .flat_map(|t| &t.offerings)
                .any(|o| o.capacity_type == CAPACITY_SPOT) =>
        {
            Ok(SpotPrices::Catalog)
        }
        None => {
            estimate(catalog);
            Ok(SpotPrices::Estimated)
        }
    }
}

/// Adds the spot offerings a price-history file (the text of `path`) lists.
pub fn from_text(catalog: &mut Catalog, path: &str, text: &str) -> Result<SpotPrices, InputError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| InputError(format!("{path}: invalid JSON: {e}")))?;
    let h: History = serde_path_to_error::deserialize(value).map_err(|e| {
        InputError(format!(
            "{path}: spot price history: {}: {}",
            e.path(),
            e.inner()
        ))
    })?;
    let mut newest: BTreeMap<(&str, &str), (Timestamp, f64)> = BTreeMap::new();
    for (i, e) in h.spot_price_history.iter().enumerate() {
        let field = |f: &str| format!("{path}: spot price history: SpotPriceHistory[{i}].{f}");
        let price: f64 = e
            .spot_price
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite() && *p >= 0.0)
            .ok_or_else(|| {
                InputError(format!(
                    "{}: expected a non-negative price, got {:?}",
                    field("SpotPrice"),
                    e.spot_price
                ))
            })?;
        let at: Timestamp = e.timestamp.parse().map_err(|err| {
            InputError(format!(
                "{}: expected an RFC 3339 time, got {:?} ({err})",
                field("Timestamp"),
                e.timestamp
            ))
        })?;
        let key = (e.instance_type.as_str(), e.availability_zone.as_str());
        if newest.get(&key).is_none_or(|(t, _)| at > *t) {
            newest.insert(key, (at, price));
        }
    }
    let mut unknown: Vec<String> = Vec::new();
    let mut by_type: BTreeMap<&str, Vec<(&str, f64)>> = BTreeMap::new();
    for ((t, z), (_, p)) in &newest {
        by_type.entry(t).or_default().push((z, *p));
    }
    for (name, zones) in by_type {
        let Some(t) = catalog.instance_types.iter_mut().find(|t| t.name == name) else {
            unknown.push(name.to_string());
            continue;
        };
        let offerings = &mut t.offerings;
        for (zone, price) in zones {
            let zone_id = zone_id_of(offerings, zone);
            match offerings
                .iter_mut()
                .find(|o| o.capacity_type == CAPACITY_SPOT && o.zone == zone)
            {
                Some(o) => o.price = price,
                None => offerings.push(Offering {
                    zone: zone.to_string(),
                    zone_id,
                    capacity_type: CAPACITY_SPOT.into(),
                    price,
                    available: true,
                }),
            }
        }
    }
    Ok(SpotPrices::File {
        path: path.to_string(),
        unknown_types: unknown,
    })
}

/// Spot offerings priced by the fake cloud's model (its default configuration, at its clock
/// zero) wherever a type has an on-demand offering and no spot one.
pub fn estimate(catalog: &mut Catalog) {
    let clock: Arc<dyn capstan_cloud::Clock> = Arc::new(capstan_cloud::ManualClock::new());
    let model = capstan_fake_cloud::FakeCloud::new(
        capstan_fake_cloud::FakeCloudConfig::default(),
        catalog.clone(),
        clock,
    );
    for t in catalog.instance_types.iter_mut() {
        let zones: Vec<String> = t
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CAPACITY_ON_DEMAND)
            .filter(|o| {
                !t.offerings
                    .iter()
                    .any(|s| s.capacity_type == CAPACITY_SPOT && s.zone == o.zone)
            })
            .map(|o| o.zone.clone())
            .collect();
        if zones.is_empty() {
            continue;
        }
        let name = t.name.clone();
        let offerings = &mut t.offerings;
        for zone in zones {
            if let Some(price) = model.spot_price(&name, &zone, Duration::ZERO) {
                offerings.push(Offering {
                    zone_id: zone_id_of(offerings, &zone),
                    zone,
                    capacity_type: CAPACITY_SPOT.into(),
                    price,
                    available: true,
                });
            }
        }
    }
}

/// The zone ID another offering of the type in that zone gives.
fn zone_id_of(offerings: &[Offering], zone: &str) -> Option<String> {
    offerings
        .iter()
        .find(|o| o.zone == zone)
        .and_then(|o| o.zone_id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(types: &str) -> Catalog {
        crate::input::catalog_from_text("c.json", &format!(r#"{{"instance_types": [{types}]}}"#))
            .unwrap()
    }

    const LISTED: &str = r#"{"name": "a.large", "arch": "amd64", "vcpu": 2, "memory_mib": 4096, "max_pods": 10,
        "offerings": [{"zone": "z1", "capacity_type": "on-demand", "price_usd_per_hour": 1.0}]}"#;
    const PRICED: &str = r#"{"name": "b.large", "arch": "amd64", "vcpu": 2, "memory_mib": 4096, "max_pods": 10,
        "on_demand_price_usd_per_hour": 1.0}"#;

    #[test]
    fn spot_is_estimated_only_where_the_catalog_does_not_list_its_offerings() {
        // (types, spot prices said, spot offerings after)
        let cases = [
            (LISTED.to_string(), SpotPrices::Catalog, 0),
            (PRICED.to_string(), SpotPrices::Estimated, 1),
            (format!("{LISTED}, {PRICED}"), SpotPrices::Estimated, 2),
        ];
        for (types, want, spot) in cases {
            let mut c = catalog(&types);
            assert_eq!(add(&mut c, None).unwrap(), want, "{types}");
            let n = c
                .instance_types
                .iter()
                .flat_map(|t| &t.offerings)
                .filter(|o| o.capacity_type == CAPACITY_SPOT)
                .count();
            assert!(
                (spot == 0 && n == 0) || (spot > 0 && n >= spot),
                "{types}: {n} spot offerings"
            );
        }
    }
}
