//! Node-selector requirement algebra (In, NotIn, Exists, DoesNotExist, Gt, Lt, and Karpenter's
//! inclusive Gte and Lte), in the form
//! Karpenter uses: each requirement is a set of allowed values, either listed or the complement
//! of a list, optionally bounded by Gt/Lt, with an optional `minValues`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    /// Karpenter's inclusive bounds (NodePools and NodeClaims; `Gte 2` is `Gt 1`).
    Gte,
    Lte,
}

impl Operator {
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return None,
        })
    }
}

/// Why a requirement could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error(
        "unknown operator {0:?} (expected In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte)"
    )]
    UnknownOperator(String),
    #[error("operator {op:?} takes {expected}, got {got} values")]
    ValueCount {
        op: Operator,
        expected: &'static str,
        got: usize,
    },
    #[error("operator {op:?} needs an integer value, got {value:?}")]
    NotAnInteger { op: Operator, value: String },
}

/// One key's set of allowed values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: String,
    /// When true, `values` are the excluded values and everything else is allowed.
    complement: bool,
    /// Sorted, deduplicated.
    values: Vec<String>,
    /// Allowed values are integers strictly greater than this.
    greater_than: Option<i64>,
    /// Allowed values are integers strictly less than this.
    less_than: Option<i64>,
    pub min_values: Option<u32>,
}

impl Requirement {
    pub fn new(
        key: impl Into<String>,
        op: Operator,
        values: &[impl AsRef<str>],
    ) -> Result<Requirement, RequirementError> {
        let key = key.into();
        let vals: Vec<String> = values.iter().map(|v| v.as_ref().to_string()).collect();
        let count = |expected: &'static str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(RequirementError::ValueCount {
                    op,
                    expected,
                    got: vals.len(),
                })
            }
        };
        let int = |v: &String| {
            v.parse::<i64>()
                .map_err(|_| RequirementError::NotAnInteger {
                    op,
                    value: v.clone(),
                })
        };
        Ok(match op {
            Operator::In => {
                count("one or more", !vals.is_empty())?;
                Requirement::in_values(key, vals)
            }
            Operator::NotIn => {
                count("one or more", !vals.is_empty())?;
                Requirement::not_in(key, vals)
            }
            Operator::Exists => {
                count("no", vals.is_empty())?;
                Requirement::exists(key)
            }
            Operator::DoesNotExist => {
                count("no", vals.is_empty())?;
                Requirement::does_not_exist(key)
            }
            Operator::Gt => {
                count("exactly one", vals.len() == 1)?;
                let mut r = Requirement::exists(key);
                r.greater_than = Some(int(&vals[0])?);
                r
            }
            Operator::Lt => {
                count("exactly one", vals.len() == 1)?;
                let mut r = Requirement::exists(key);
                r.less_than = Some(int(&vals[0])?);
                r
            }
            Operator::Gte => {
                count("exactly one", vals.len() == 1)?;
                let mut r = Requirement::exists(key);
                r.greater_than = Some(int(&vals[0])?.saturating_sub(1));
                r
            }
            Operator::Lte => {
                count("exactly one", vals.len() == 1)?;
                let mut r = Requirement::exists(key);
                r.less_than = Some(int(&vals[0])?.saturating_add(1));
                r
            }
        })
    }

    pub fn in_values(
        key: impl Into<String>,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Requirement {
        let mut values: Vec<String> = values.into_iter().map(Into::into).collect();
        values.sort();
        values.dedup();
        Requirement {
            key: key.into(),
            complement: false,
            values,
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    pub fn not_in(
        key: impl Into<String>,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Requirement {
        let mut r = Requirement::in_values(key, values);
        r.complement = true;
        r
    }

    pub fn exists(key: impl Into<String>) -> Requirement {
        Requirement {
            key: key.into(),
            complement: true,
            values: Vec::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    pub fn does_not_exist(key: impl Into<String>) -> Requirement {
        Requirement {
            key: key.into(),
            complement: false,
            values: Vec::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    pub fn with_min_values(mut self, min: Option<u32>) -> Requirement {
        self.min_values = min;
        self
    }

    /// The operator this requirement is equivalent to.
    pub fn operator(&self) -> Operator {
        if self.complement {
            if !self.values.is_empty() {
                Operator::NotIn
            } else if self.greater_than.is_some() {
                Operator::Gt
            } else if self.less_than.is_some() {
                Operator::Lt
            } else {
                Operator::Exists
            }
        } else if self.values.is_empty() {
            Operator::DoesNotExist
        } else {
            Operator::In
        }
    }

    /// The node-selector terms (operator, values) this requirement is the conjunction of, as
    /// a manifest writes them: one term for a plain requirement, several when intersection
    /// combined NotIn with Gt or Lt.
    pub fn to_terms(&self) -> Vec<(Operator, Vec<String>)> {
        if !self.complement {
            let values: Vec<String> = self
                .values
                .iter()
                .filter(|v| self.within_bounds(v))
                .cloned()
                .collect();
            return if values.is_empty() {
                vec![(Operator::DoesNotExist, Vec::new())]
            } else {
                vec![(Operator::In, values)]
            };
        }
        let mut terms = Vec::new();
        if !self.values.is_empty() {
            terms.push((Operator::NotIn, self.values.clone()));
        }
        if let Some(g) = self.greater_than {
            // `Gte 0` stays inclusive: Karpenter's CRDs take no negative bound.
            if g < 0 {
                terms.push((Operator::Gte, vec![(g + 1).to_string()]));
            } else {
                terms.push((Operator::Gt, vec![g.to_string()]));
            }
        }
        if let Some(l) = self.less_than {
            terms.push((Operator::Lt, vec![l.to_string()]));
        }
        if terms.is_empty() {
            terms.push((Operator::Exists, Vec::new()));
        }
        terms
    }

    /// The listed values: allowed ones for In, excluded ones for NotIn.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    pub fn is_complement(&self) -> bool {
        self.complement
    }

    fn within_bounds(&self, v: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        match v.parse::<i64>() {
            Ok(n) => {
                self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
            }
            Err(_) => false,
        }
    }

    /// A value a node launched for this requirement carries (Karpenter's `Requirement.Any`):
    /// an `In` requirement's first allowed value; for Exists, NotIn, Gt and Lt a number
    /// within the bounds that is not excluded, picked by `seed` (Karpenter draws it at
    /// random; a seed keeps the simulator deterministic). `None` when no value is allowed.
    pub fn any_value(&self, seed: u64) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        if !self.complement {
            return self.values.iter().find(|v| self.within_bounds(v)).cloned();
        }
        let lo = i128::from(self.greater_than.map_or(0, |g| g.saturating_add(1)));
        let hi = i128::from(self.less_than.unwrap_or(i64::MAX));
        if hi <= lo {
            return None;
        }
        let span = (hi - lo) as u128;
        (0..=self.values.len() as u64)
            .map(|i| (lo + (u128::from(seed.wrapping_add(i)) % span) as i128).to_string())
            .find(|v| self.has(v))
    }

    /// Whether `value` is allowed.
    pub fn has(&self, value: &str) -> bool {
        let listed = self
            .values
            .binary_search_by(|v| v.as_str().cmp(value))
            .is_ok();
        listed != self.complement && self.within_bounds(value)
    }

    /// Whether no value at all is allowed (DoesNotExist, or an empty intersection).
    pub fn is_empty(&self) -> bool {
        if self.complement {
            matches!((self.greater_than, self.less_than), (Some(g), Some(l)) if l <= g.saturating_add(1))
        } else {
            self.values.is_empty()
        }
    }

    /// The number of allowed values, `None` when unbounded.
    pub fn len(&self) -> Option<usize> {
        if self.complement {
            None
        } else {
            Some(self.values.len())
        }
    }

    /// The set of values both allow. `min_values` keeps the larger of the two.
    pub fn intersect(&self, other: &Requirement) -> Requirement {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        let min_values = max_opt(self.min_values, other.min_values);
        let mut out = match (self.complement, other.complement) {
            (true, true) => {
                let mut values = self.values.clone();
                values.extend(other.values.iter().cloned());
                values.sort();
                values.dedup();
                Requirement {
                    key: self.key.clone(),
                    complement: true,
                    values,
                    greater_than,
                    less_than,
                    min_values,
                }
            }
            (true, false) | (false, true) => {
                let (c, l) = if self.complement {
                    (self, other)
                } else {
                    (other, self)
                };
                let values = l
                    .values
                    .iter()
                    .filter(|v| !c.values.contains(v))
                    .cloned()
                    .collect();
                Requirement {
                    key: self.key.clone(),
                    complement: false,
                    values,
                    greater_than,
                    less_than,
                    min_values,
                }
            }
            (false, false) => {
                let values = self
                    .values
                    .iter()
                    .filter(|v| other.values.binary_search(v).is_ok())
                    .cloned()
                    .collect();
                Requirement {
                    key: self.key.clone(),
                    complement: false,
                    values,
                    greater_than,
                    less_than,
                    min_values,
                }
            }
        };
        if !out.complement {
            // bounds only narrow a listed set; apply them now
            let (g, l) = (out.greater_than, out.less_than);
            if g.is_some() || l.is_some() {
                out.values.retain(|v| match v.parse::<i64>() {
                    Ok(n) => g.is_none_or(|g| n > g) && l.is_none_or(|l| n < l),
                    Err(_) => false,
                });
            }
            out.greater_than = None;
            out.less_than = None;
        }
        out
    }

    /// Whether the two requirements can hold at once (Karpenter's `Intersects` for one key):
    /// some value satisfies both, or both only exclude (NotIn/DoesNotExist), which a node
    /// without the label satisfies.
    pub fn intersects(&self, other: &Requirement) -> bool {
        if !self.intersect(other).is_empty() {
            return true;
        }
        let excludes = |op| matches!(op, Operator::NotIn | Operator::DoesNotExist);
        excludes(self.operator()) && excludes(other.operator())
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operator() {
            Operator::In => write!(f, "{} In [{}]", self.key, self.values.join(", ")),
            Operator::NotIn => write!(f, "{} NotIn [{}]", self.key, self.values.join(", ")),
            Operator::Exists => write!(f, "{} Exists", self.key),
            Operator::DoesNotExist => write!(f, "{} DoesNotExist", self.key),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                write!(f, "{}", self.key)?;
                if let Some(g) = self.greater_than {
                    write!(f, " Gt {g}")?;
                }
                if let Some(l) = self.less_than {
                    write!(f, " Lt {l}")?;
                }
                Ok(())
            }
        }
    }
}

/// How keys a side does not mention are treated by [`Requirements::compatible`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undefined {
    /// The other side is a real node: a missing label only satisfies NotIn/DoesNotExist.
    Deny,
    /// The other side is a template whose instance types will define the well-known labels.
    AllowWellKnown,
}

/// Why two sets of requirements cannot hold at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incompatible {
    pub key: String,
    /// What the incoming side asked for.
    pub wanted: String,
    /// What the other side offers, or `None` when it does not define the key.
    pub offered: Option<String>,
}

impl fmt::Display for Incompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.offered {
            Some(o) => write!(f, "requirement {} conflicts with {}", self.wanted, o),
            None => write!(
                f,
                "requirement {} names label {:?}, which is not defined",
                self.wanted, self.key
            ),
        }
    }
}

/// A conjunction of requirements, one per key, sorted by key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    items: Vec<Requirement>,
}

impl Requirements {
    pub fn new() -> Requirements {
        Requirements::default()
    }

    /// From labels: each label is `key In [value]`.
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Requirements {
        let labels = labels.into_iter();
        let mut r = Requirements {
            items: Vec::with_capacity(labels.size_hint().0),
        };
        for (k, v) in labels {
            let req = Requirement {
                key: k.clone(),
                complement: false,
                values: vec![v.clone()],
                greater_than: None,
                less_than: None,
                min_values: None,
            };
            // Labels mostly come sorted by key (a map's): those append.
            if r.items.last().is_none_or(|last| last.key < req.key) {
                r.items.push(req);
            } else {
                r.add(req);
            }
        }
        r
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.items.iter()
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.items
            .binary_search_by(|r| r.key.as_str().cmp(key))
            .ok()
            .map(|i| &self.items[i])
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Adds a requirement, intersecting with any existing one on the same key.
    pub fn add(&mut self, r: Requirement) {
        match self.items.binary_search_by(|x| x.key.cmp(&r.key)) {
            Ok(i) => {
                let merged = self.items[i].intersect(&r);
                self.items[i] = merged;
            }
            Err(i) => self.items.insert(i, r),
        }
    }

    /// Sets the `minValues` of the requirement on `key`, if there is one.
    pub fn set_min_values(&mut self, key: &str, min: Option<u32>) {
        if let Ok(i) = self.items.binary_search_by(|x| x.key.as_str().cmp(key)) {
            self.items[i].min_values = min;
        }
    }

    pub fn add_all(&mut self, other: &Requirements) {
        for r in &other.items {
            self.add(r.clone());
        }
    }

    /// The conjunction of both.
    pub fn intersect(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        out.add_all(other);
        out
    }

    /// Whether a value is allowed for `key` (an absent key allows anything).
    pub fn allows(&self, key: &str, value: &str) -> bool {
        self.get(key).is_none_or(|r| r.has(value))
    }

    /// Checks that `incoming` can hold together with `self`. Keys `incoming` names that
    /// `self` does not define are allowed only for NotIn/DoesNotExist, or (with
    /// [`Undefined::AllowWellKnown`]) for well-known labels.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        undefined: Undefined,
    ) -> Result<(), Incompatible> {
        self.compatible_with(incoming, undefined, &BTreeSet::new())
    }

    /// As [`Requirements::compatible`], where `provided` names further keys the instance
    /// types define (a catalog's own labels, which Karpenter's cloud providers register as
    /// well-known): with [`Undefined::AllowWellKnown`], a template that does not mention
    /// such a key meets any requirement on it, and the instance types decide.
    pub fn compatible_with(
        &self,
        incoming: &Requirements,
        undefined: Undefined,
        provided: &BTreeSet<String>,
    ) -> Result<(), Incompatible> {
        for r in &incoming.items {
            match self.get(&r.key) {
                Some(existing) => {
                    if !existing.intersects(r) {
                        return Err(Incompatible {
                            key: r.key.clone(),
                            wanted: r.to_string(),
                            offered: Some(existing.to_string()),
                        });
                    }
                }
                None => {
                    let op = r.operator();
                    let excludes = matches!(op, Operator::NotIn | Operator::DoesNotExist);
                    // A new node's hostname is not known before it exists: a template
                    // never meets `hostname In [...]` (Karpenter gives its NodeClaims a
                    // placeholder), though it does meet `hostname Exists`.
                    let named_host = r.key == crate::labels::HOSTNAME && matches!(op, Operator::In);
                    let allowed = excludes
                        || (undefined == Undefined::AllowWellKnown
                            && (crate::labels::is_well_known(&r.key) || provided.contains(&r.key))
                            && !named_host);
                    if !allowed {
                        return Err(Incompatible {
                            key: r.key.clone(),
                            wanted: r.to_string(),
                            offered: None,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The labels a NodeClaim for these requirements carries besides its template's
    /// (Karpenter's `Requirements.Labels`): a value ([`Requirement::any_value`]) for every
    /// requirement whose key is not well-known or in a restricted domain
    /// ([`labels::is_restricted`]) — the instance type gives those. So a node launched for
    /// a pod that selects `team: a` under a NodePool's `team Exists` is labelled `team=a`,
    /// and one for a pod that only asks `team Exists` carries some team.
    pub fn node_labels(&self, seed: &str) -> BTreeMap<String, String> {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in seed.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.items
            .iter()
            .filter(|r| !crate::labels::is_restricted(&r.key))
            .filter_map(|r| Some((r.key.clone(), r.any_value(h)?)))
            .collect()
    }

    /// Labels a node launched for these requirements would get: every key with exactly one
    /// allowed value.
    pub fn single_values(&self) -> BTreeMap<String, String> {
        self.items
            .iter()
            .filter(|r| !r.complement && r.values.len() == 1)
            .map(|r| (r.key.clone(), r.values[0].clone()))
            .collect()
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.items.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromIterator<Requirement> for Requirements {
    fn from_iter<T: IntoIterator<Item = Requirement>>(iter: T) -> Self {
        let mut r = Requirements::new();
        for x in iter {
            r.add(x);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operator::*;

    fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, op, values).unwrap()
    }

    #[test]
    fn a_nodeclaim_carries_a_value_for_each_custom_requirement_that_satisfies_it() {
        let mut rs = Requirements::new();
        rs.add(req("team", In, &["ml", "web"]));
        rs.add(req("tier", Exists, &[]));
        rs.add(req("rack", NotIn, &["7"]));
        rs.add(req("gen", Gt, &["4"]));
        rs.add(req("gpu-free", DoesNotExist, &[]));
        rs.add(req("node.kubernetes.io/pool", In, &["a"]));
        rs.add(req(crate::labels::ZONE, In, &["us-east-1a"]));
        rs.add(req("karpenter.sh/capacity-type", In, &["spot"]));
        rs.add(req("example.kubernetes.io/x", In, &["y"]));
        for seed in ["c-1", "c-2", "another-claim"] {
            let l = rs.node_labels(seed);
            assert_eq!(
                l.keys().map(String::as_str).collect::<Vec<_>>(),
                [
                    "example.kubernetes.io/x",
                    "gen",
                    "node.kubernetes.io/pool",
                    "rack",
                    "team",
                    "tier"
                ],
                "{seed}"
            );
            for (k, v) in &l {
                assert!(rs.get(k).unwrap().has(v), "{seed}: {k}={v}");
            }
            assert_eq!(l["team"], "ml");
            assert_eq!(rs.node_labels(seed), l, "the same seed, the same labels");
        }
        // Bounds leave one value; nothing allowed gives no label.
        assert_eq!(
            req("k", Gt, &["4"])
                .intersect(&req("k", Lt, &["6"]))
                .any_value(99),
            Some("5".into())
        );
        assert_eq!(
            req("k", In, &["a"])
                .intersect(&req("k", In, &["b"]))
                .any_value(1),
            None
        );
    }

    #[test]
    fn each_operator_allows_the_values_kubernetes_allows() {
        // (requirement, value, allowed)
        let cases = [
            (req("k", In, &["a", "b"]), "a", true),
            (req("k", In, &["a", "b"]), "c", false),
            (req("k", NotIn, &["a"]), "a", false),
            (req("k", NotIn, &["a"]), "z", true),
            (req("k", Exists, &[]), "anything", true),
            (req("k", DoesNotExist, &[]), "anything", false),
            (req("k", Gt, &["4"]), "5", true),
            (req("k", Gt, &["4"]), "4", false),
            (req("k", Gt, &["4"]), "x", false),
            (req("k", Lt, &["4"]), "3", true),
            (req("k", Lt, &["4"]), "-7", true),
            (req("k", Lt, &["4"]), "4", false),
            (req("k", Gte, &["2"]), "2", true),
            (req("k", Gte, &["2"]), "1", false),
            (req("k", Gte, &["0"]), "0", true),
            (req("k", Lte, &["8"]), "8", true),
            (req("k", Lte, &["8"]), "9", false),
            (
                req("k", Gte, &["2"]).intersect(&req("k", Lte, &["2"])),
                "2",
                true,
            ),
            (
                req("k", Gte, &["2"]).intersect(&req("k", Lte, &["2"])),
                "3",
                false,
            ),
        ];
        for (r, v, want) in cases {
            assert_eq!(r.has(v), want, "{r} has {v}");
        }
    }

    #[test]
    fn intersection_follows_set_algebra() {
        // (a, b, expected operator, expected listed values)
        let cases = [
            (
                req("k", In, &["a", "b"]),
                req("k", In, &["b", "c"]),
                In,
                vec!["b"],
            ),
            (
                req("k", In, &["a", "b"]),
                req("k", NotIn, &["b"]),
                In,
                vec!["a"],
            ),
            (
                req("k", NotIn, &["a"]),
                req("k", NotIn, &["b"]),
                NotIn,
                vec!["a", "b"],
            ),
            (req("k", Exists, &[]), req("k", In, &["x"]), In, vec!["x"]),
            (
                req("k", In, &["a"]),
                req("k", In, &["b"]),
                DoesNotExist,
                vec![],
            ),
            (
                req("k", Gt, &["2"]),
                req("k", In, &["1", "3", "x"]),
                In,
                vec!["3"],
            ),
            (req("k", Gt, &["2"]), req("k", Lt, &["10"]), Gt, vec![]),
        ];
        for (a, b, op, values) in cases {
            let got = a.intersect(&b);
            assert_eq!(got.operator(), op, "{a} ∩ {b} = {got}");
            assert_eq!(got.values(), values.as_slice(), "{a} ∩ {b}");
            let sym = b.intersect(&a);
            assert_eq!(sym.values(), values.as_slice(), "{b} ∩ {a} is symmetric");
        }
    }

    #[test]
    fn inclusive_bounds_are_written_as_manifests_take_them() {
        // (requirement, terms)
        let cases = [
            (req("k", Gte, &["2"]), vec![(Gt, vec!["1".to_string()])]),
            (req("k", Gte, &["0"]), vec![(Gte, vec!["0".to_string()])]),
            (req("k", Lte, &["8"]), vec![(Lt, vec!["9".to_string()])]),
        ];
        for (r, terms) in cases {
            assert_eq!(r.to_terms(), terms, "{r}");
        }
    }

    #[test]
    fn a_template_never_meets_a_named_hostname_but_meets_any_hostname() {
        // (operator, values, compatible with a template that says nothing of hostnames)
        let cases: [(Operator, &[&str], bool); 4] = [
            (In, &["red-node"], false),
            (Exists, &[], true),
            (NotIn, &["red-node"], true),
            (DoesNotExist, &[], true),
        ];
        for (op, values, ok) in cases {
            let mut pod = Requirements::new();
            pod.add(req(crate::labels::HOSTNAME, op, values));
            let got = Requirements::new()
                .compatible(&pod, Undefined::AllowWellKnown)
                .is_ok();
            assert_eq!(got, ok, "{op:?} {values:?}");
        }
    }

    #[test]
    fn a_template_leaves_keys_its_instance_types_define_to_the_types() {
        let provided: BTreeSet<String> = ["size".to_string()].into();
        // (incoming requirement, undefined policy, compatible with a template silent on it)
        let cases = [
            (req("size", In, &["large"]), Undefined::AllowWellKnown, true),
            (req("size", Exists, &[]), Undefined::AllowWellKnown, true),
            (req("size", In, &["large"]), Undefined::Deny, false),
            (req("team", In, &["a"]), Undefined::AllowWellKnown, false),
            (
                req("team", DoesNotExist, &[]),
                Undefined::AllowWellKnown,
                true,
            ),
        ];
        for (r, undefined, ok) in cases {
            let mut pod = Requirements::new();
            pod.add(r.clone());
            let got = Requirements::new()
                .compatible_with(&pod, undefined, &provided)
                .is_ok();
            assert_eq!(got, ok, "{r} {undefined:?}");
        }
    }

    #[test]
    fn disjoint_bounds_are_empty() {
        let r = req("k", Gt, &["5"]).intersect(&req("k", Lt, &["6"]));
        assert!(r.is_empty());
        let r = req("k", Gt, &["5"]).intersect(&req("k", Lt, &["7"]));
        assert!(!r.is_empty());
        assert!(r.has("6"));
    }

    #[test]
    fn exclusions_are_compatible_with_each_other_even_when_empty() {
        assert!(req("k", DoesNotExist, &[]).intersects(&req("k", NotIn, &["a"])));
        assert!(!req("k", DoesNotExist, &[]).intersects(&req("k", In, &["a"])));
        assert!(!req("k", In, &["a"]).intersects(&req("k", In, &["b"])));
    }

    #[test]
    fn labels_become_the_same_requirements_in_any_order_and_with_repeats() {
        let s = |a: &str| a.to_string();
        let cases: [&[(&str, &str)]; 4] = [
            &[],
            &[("a", "1"), ("b", "2"), ("c", "3")],
            &[("c", "3"), ("a", "1"), ("b", "2")],
            &[("b", "2"), ("a", "1"), ("b", "2"), ("b", "9")],
        ];
        for labels in cases {
            let owned: Vec<(String, String)> = labels.iter().map(|(k, v)| (s(k), s(v))).collect();
            let mut one_by_one = Requirements::new();
            for (k, v) in &owned {
                one_by_one.add(Requirement::in_values(k.clone(), [v.clone()]));
            }
            let fast = Requirements::from_labels(owned.iter().map(|(k, v)| (k, v)));
            assert_eq!(fast, one_by_one, "{labels:?}");
        }
    }

    #[test]
    fn undefined_keys_are_allowed_only_for_exclusions_on_real_nodes() {
        let node = Requirements::from_labels(
            &[("zone".to_string(), "a".to_string())]
                .into_iter()
                .collect::<BTreeMap<_, _>>(),
        );
        let ok: Requirements = [req("gpu", DoesNotExist, &[]), req("team", NotIn, &["x"])]
            .into_iter()
            .collect();
        assert!(node.compatible(&ok, Undefined::Deny).is_ok());
        let bad: Requirements = [req("team", In, &["x"])].into_iter().collect();
        let err = node.compatible(&bad, Undefined::Deny).unwrap_err();
        assert_eq!(err.key, "team");
        assert!(err.to_string().contains("not defined"), "{err}");
    }

    #[test]
    fn templates_allow_well_known_keys_they_do_not_mention() {
        let pool: Requirements = [req(crate::labels::ARCH, In, &["amd64"])]
            .into_iter()
            .collect();
        let pod: Requirements = [req(crate::labels::ZONE, In, &["us-east-1a"])]
            .into_iter()
            .collect();
        assert!(pool.compatible(&pod, Undefined::AllowWellKnown).is_ok());
        assert!(pool.compatible(&pod, Undefined::Deny).is_err());
        let arm: Requirements = [req(crate::labels::ARCH, In, &["arm64"])]
            .into_iter()
            .collect();
        let err = pool
            .compatible(&arm, Undefined::AllowWellKnown)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "requirement kubernetes.io/arch In [arm64] conflicts with kubernetes.io/arch In [amd64]"
        );
    }

    #[test]
    fn min_values_survive_intersection() {
        let a = req("family", Exists, &[]).with_min_values(Some(3));
        let b = req("family", In, &["m5", "m6", "m7", "c7"]);
        assert_eq!(a.intersect(&b).min_values, Some(3));
    }

    #[test]
    fn bad_requirements_are_errors() {
        assert!(matches!(
            Requirement::new("k", In, &[] as &[&str]),
            Err(RequirementError::ValueCount { .. })
        ));
        assert!(matches!(
            Requirement::new("k", Gt, &["x"]),
            Err(RequirementError::NotAnInteger { .. })
        ));
        assert!(matches!(
            Requirement::new("k", Exists, &["x"]),
            Err(RequirementError::ValueCount { .. })
        ));
    }
}
