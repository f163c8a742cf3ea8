//! On-demand prices from the AWS Pricing API (GetProducts), as Karpenter reads them: shared
//! tenancy Linux with no pre-installed software, capacity status `Used`, for the cluster's
//! region. The shared catalog's prices are the fallback when the API cannot be read.

use crate::{AwsError, sdk_error};
use aws_sdk_pricing::types::{Filter, FilterType};
use std::collections::BTreeMap;

/// The Pricing API is served from a few regions only; the one nearest `region`.
pub fn endpoint_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("eu-") || region.starts_with("me-") || region.starts_with("af-") {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

fn filters(region: &str) -> Vec<Filter> {
    [
        ("regionCode", region),
        ("tenancy", "Shared"),
        ("productFamily", "Compute Instance"),
        ("operatingSystem", "Linux"),
        ("preInstalledSw", "NA"),
        ("capacitystatus", "Used"),
        ("marketoption", "OnDemand"),
    ]
    .into_iter()
    .map(|(field, value)| {
        Filter::builder()
            .r#type(FilterType::TermMatch)
            .field(field)
            .value(value)
            .build()
            .expect("field, type and value are set")
    })
    .collect()
}

/// One price-list document: the instance type and its hourly on-demand price in USD.
/// `None` for a document without both (or with a zero price: a reserved-only product).
pub fn parse_price_item(doc: &str) -> Option<(String, f64)> {
    let v: serde_json::Value = serde_json::from_str(doc).ok()?;
    let name = v
        .pointer("/product/attributes/instanceType")?
        .as_str()?
        .to_string();
    let price = v
        .pointer("/terms/OnDemand")?
        .as_object()?
        .values()
        .filter_map(|term| term.get("priceDimensions")?.as_object())
        .flat_map(|dims| dims.values())
        .filter_map(|d| {
            d.pointer("/pricePerUnit/USD")?
                .as_str()?
                .parse::<f64>()
                .ok()
        })
        .find(|p| *p > 0.0)?;
    Some((name, price))
}

/// Every instance type's on-demand price in `region`.
pub async fn on_demand_prices(
    client: &aws_sdk_pricing::Client,
    region: &str,
) -> Result<BTreeMap<String, f64>, AwsError> {
    let mut prices = BTreeMap::new();
    let mut pages = client
        .get_products()
        .service_code("AmazonEC2")
        .set_filters(Some(filters(region)))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("GetProducts", e))?;
        for doc in page.price_list() {
            if let Some((name, price)) = parse_price_item(doc) {
                prices.insert(name, price);
            }
        }
    }
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An m5.large document as GetProducts returns it (trimmed to the fields read).
    pub(crate) const M5_LARGE: &str = r#"{
      "product": {"productFamily": "Compute Instance",
        "attributes": {"instanceType": "m5.large", "regionCode": "us-east-1", "operatingSystem": "Linux",
          "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"},
        "sku": "2WTMTR9HDDT7AA73"},
      "serviceCode": "AmazonEC2",
      "terms": {"OnDemand": {"2WTMTR9HDDT7AA73.JRTCKXETXF": {
        "priceDimensions": {"2WTMTR9HDDT7AA73.JRTCKXETXF.6YS6EN2CT7": {
          "unit": "Hrs", "pricePerUnit": {"USD": "0.0960000000"},
          "description": "$0.096 per On Demand Linux m5.large Instance Hour"}},
        "sku": "2WTMTR9HDDT7AA73", "effectiveDate": "2026-11-01T00:00:00Z"}}}
    }"#;

    #[test]
    fn a_price_list_document_gives_the_type_and_its_hourly_price() {
        assert_eq!(parse_price_item(M5_LARGE), Some(("m5.large".into(), 0.096)));
    }

    #[test]
    fn documents_without_a_type_or_a_price_are_skipped() {
        let cases = [
            "not json",
            r#"{"product": {"attributes": {}}, "terms": {"OnDemand": {}}}"#,
            r#"{"product": {"attributes": {"instanceType": "m5.large"}}, "terms": {}}"#,
            r#"{"product": {"attributes": {"instanceType": "m5.large"}},
                "terms": {"OnDemand": {"a": {"priceDimensions": {"b": {"pricePerUnit": {"USD": "0.0000000000"}}}}}}}"#,
        ];
        for doc in cases {
            assert_eq!(parse_price_item(doc), None, "{doc}");
        }
    }

    #[test]
    fn each_region_reads_prices_from_its_pricing_endpoint() {
        for (region, want) in [
            ("us-east-1", "us-east-1"),
            ("us-west-2", "us-east-1"),
            ("ca-central-1", "us-east-1"),
            ("eu-west-1", "eu-central-1"),
            ("me-south-1", "eu-central-1"),
            ("ap-northeast-1", "ap-south-1"),
            ("cn-north-1", "cn-northwest-1"),
        ] {
            assert_eq!(endpoint_region(region), want, "{region}");
        }
    }
}
