//! Label selectors (matchLabels + matchExpressions) as pods use them to select other pods.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelectorRequirement {
    pub key: String,
    pub op: SelectorOp,
    pub values: Vec<String>,
}

/// A label selector. `None` inside a pod spec means "selects nothing"; an empty selector
/// selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelSelector {
    pub requirements: Vec<SelectorRequirement>,
}

impl LabelSelector {
    pub fn from_match_labels(labels: &BTreeMap<String, String>) -> LabelSelector {
        LabelSelector {
            requirements: labels
                .iter()
                .map(|(k, v)| SelectorRequirement {
                    key: k.clone(),
                    op: SelectorOp::In,
                    values: vec![v.clone()],
                })
                .collect(),
        }
    }

    /// Adds `key In [value]` (used for matchLabelKeys).
    pub fn and_equals(&mut self, key: &str, value: &str) {
        self.requirements.push(SelectorRequirement {
            key: key.to_string(),
            op: SelectorOp::In,
            values: vec![value.to_string()],
        });
        self.requirements.sort();
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let v = labels.get(&r.key);
            match r.op {
                SelectorOp::In => v.is_some_and(|v| r.values.contains(v)),
                SelectorOp::NotIn => v.is_none_or(|v| !r.values.contains(v)),
                SelectorOp::Exists => v.is_some(),
                SelectorOp::DoesNotExist => v.is_none(),
            }
        })
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.requirements.is_empty() {
            return write!(f, "<all>");
        }
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            match r.op {
                SelectorOp::In if r.values.len() == 1 => write!(f, "{}={}", r.key, r.values[0])?,
                SelectorOp::In => write!(f, "{} in ({})", r.key, r.values.join(","))?,
                SelectorOp::NotIn => write!(f, "{} notin ({})", r.key, r.values.join(","))?,
                SelectorOp::Exists => write!(f, "{}", r.key)?,
                SelectorOp::DoesNotExist => write!(f, "!{}", r.key)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_labels_as_kubernetes_does() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())]
            .into_iter()
            .collect();
        let sel = |op, values: &[&str]| LabelSelector {
            requirements: vec![SelectorRequirement {
                key: "app".into(),
                op,
                values: values.iter().map(|s| s.to_string()).collect(),
            }],
        };
        let missing = |op| LabelSelector {
            requirements: vec![SelectorRequirement {
                key: "tier".into(),
                op,
                values: vec!["x".into()],
            }],
        };
        assert!(sel(SelectorOp::In, &["web", "api"]).matches(&labels));
        assert!(!sel(SelectorOp::In, &["api"]).matches(&labels));
        assert!(!sel(SelectorOp::NotIn, &["web"]).matches(&labels));
        assert!(sel(SelectorOp::Exists, &[]).matches(&labels));
        assert!(!sel(SelectorOp::DoesNotExist, &[]).matches(&labels));
        assert!(
            missing(SelectorOp::NotIn).matches(&labels),
            "NotIn matches a missing label"
        );
        assert!(!missing(SelectorOp::In).matches(&labels));
        assert!(
            LabelSelector::default().matches(&labels),
            "the empty selector selects everything"
        );
    }
}
