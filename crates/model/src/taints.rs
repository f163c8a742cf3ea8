//! Taints and tolerations, with Kubernetes' matching rules.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    pub fn parse(s: &str) -> Option<Effect> {
        Some(match s {
            "NoSchedule" => Effect::NoSchedule,
            "PreferNoSchedule" => Effect::PreferNoSchedule,
            "NoExecute" => Effect::NoExecute,
            _ => return None,
        })
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: Effect,
}

impl Taint {
    pub fn new(key: &str, value: &str, effect: Effect) -> Taint {
        Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect,
        }
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty with `Exists` tolerates every key.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` tolerates every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    pub fn exists(key: &str, effect: Option<Effect>) -> Toleration {
        Toleration {
            key: key.to_string(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect,
        }
    }

    pub fn equal(key: &str, value: &str, effect: Option<Effect>) -> Toleration {
        Toleration {
            key: key.to_string(),
            operator: TolerationOperator::Equal,
            value: value.to_string(),
            effect,
        }
    }

    /// Kubernetes' `ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first taint that keeps a pod with these tolerations off, if any. PreferNoSchedule taints
/// block only when `prefer_no_schedule_blocks` (Karpenter treats them as hard until relaxed).
pub fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    prefer_no_schedule_blocks: bool,
) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        (t.effect != Effect::PreferNoSchedule || prefer_no_schedule_blocks)
            && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerations_match_taints_by_kubernetes_rules() {
        let gpu = Taint::new("nvidia.com/gpu", "true", Effect::NoSchedule);
        let cases = [
            (
                Toleration::equal("nvidia.com/gpu", "true", Some(Effect::NoSchedule)),
                true,
            ),
            (
                Toleration::equal("nvidia.com/gpu", "false", Some(Effect::NoSchedule)),
                false,
            ),
            (
                Toleration::equal("nvidia.com/gpu", "true", Some(Effect::NoExecute)),
                false,
            ),
            (Toleration::equal("nvidia.com/gpu", "true", None), true),
            (Toleration::exists("nvidia.com/gpu", None), true),
            (Toleration::exists("", None), true),
            (Toleration::exists("other", None), false),
        ];
        for (tol, want) in cases {
            assert_eq!(tol.tolerates(&gpu), want, "{tol:?}");
        }
    }

    #[test]
    fn prefer_no_schedule_blocks_only_when_asked() {
        let taints = [Taint::new("spot", "", Effect::PreferNoSchedule)];
        assert!(untolerated(&taints, &[], false).is_none());
        assert_eq!(untolerated(&taints, &[], true), Some(&taints[0]));
    }
}
