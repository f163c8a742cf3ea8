//! Pods by the claim they wait for: the provisioner's nominations and launches. Kept indexed
//! both ways, with the pods entered since last asked, so a pass checks what changed — the
//! claims, the pods the cache says changed, the pods entered since — not every pod.

use std::collections::{BTreeMap, BTreeSet};

/// Pod key → (claim, `V`), and claim → its pods.
#[derive(Clone, Debug)]
pub(crate) struct PodsByClaim<V> {
    by_pod: BTreeMap<String, (String, V)>,
    by_claim: BTreeMap<String, BTreeSet<String>>,
    /// Pods entered since [`PodsByClaim::take_fresh`].
    fresh: Vec<String>,
}

impl<V> Default for PodsByClaim<V> {
    fn default() -> Self {
        PodsByClaim {
            by_pod: BTreeMap::new(),
            by_claim: BTreeMap::new(),
            fresh: Vec::new(),
        }
    }
}

impl<V> PodsByClaim<V> {
    /// Enters `pod` for `claim` (in place of what it had).
    pub fn insert(&mut self, pod: String, claim: String, value: V) {
        if let Some(old) = self.by_pod.get(&pod).map(|(c, _)| c.clone()) {
            if old != claim {
                self.unlink(&old, &pod);
            }
        }
        self.by_claim
            .entry(claim.clone())
            .or_default()
            .insert(pod.clone());
        self.by_pod.insert(pod.clone(), (claim, value));
        self.fresh.push(pod);
    }

    fn unlink(&mut self, claim: &str, pod: &str) {
        if let Some(pods) = self.by_claim.get_mut(claim) {
            pods.remove(pod);
            if pods.is_empty() {
                self.by_claim.remove(claim);
            }
        }
    }

    pub fn remove(&mut self, pod: &str) -> Option<(String, V)> {
        let (claim, v) = self.by_pod.remove(pod)?;
        self.unlink(&claim, pod);
        Some((claim, v))
    }

    /// Removes every pod of `claim`, in key order.
    pub fn remove_claim(&mut self, claim: &str) -> Vec<(String, V)> {
        let pods = self.by_claim.remove(claim).unwrap_or_default();
        pods.into_iter()
            .filter_map(|p| self.by_pod.remove(&p).map(|(_, v)| (p, v)))
            .collect()
    }

    pub fn clear(&mut self) {
        *self = PodsByClaim::default();
    }

    pub fn get(&self, pod: &str) -> Option<&(String, V)> {
        self.by_pod.get(pod)
    }

    pub fn contains_key(&self, pod: &str) -> bool {
        self.by_pod.contains_key(pod)
    }

    /// Pod keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.by_pod.keys()
    }

    /// (pod, claim, value), in pod key order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &String, &V)> {
        self.by_pod.iter().map(|(p, (c, v))| (p, c, v))
    }

    /// The claims that have pods, in name order.
    pub fn claims(&self) -> impl Iterator<Item = &String> {
        self.by_claim.keys()
    }

    /// The pods of `claim`, in key order.
    pub fn pods_of(&self, claim: &str) -> impl Iterator<Item = &String> {
        self.by_claim.get(claim).into_iter().flatten()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_pod.len()
    }

    /// The pods entered since last asked (repeats and all; some may have gone since).
    pub fn take_fresh(&mut self) -> Vec<String> {
        std::mem::take(&mut self.fresh)
    }

    /// Keeps the pods `keep` says to, asking of every one (in key order).
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str, &V) -> bool) {
        let by_claim = &mut self.by_claim;
        self.by_pod.retain(|pod, (claim, v)| {
            let k = keep(pod, claim, v);
            if !k {
                if let Some(pods) = by_claim.get_mut(claim.as_str()) {
                    pods.remove(pod.as_str());
                    if pods.is_empty() {
                        by_claim.remove(claim.as_str());
                    }
                }
            }
            k
        });
    }

    /// Whether the two indexes agree (for tests and debug assertions).
    pub fn consistent(&self) -> bool {
        let pairs: usize = self.by_claim.values().map(BTreeSet::len).sum();
        pairs == self.by_pod.len()
            && self.by_claim.iter().all(|(c, pods)| {
                !pods.is_empty()
                    && pods
                        .iter()
                        .all(|p| self.by_pod.get(p).is_some_and(|(pc, _)| pc == c))
            })
    }
}

impl<V> Extend<(String, String, V)> for PodsByClaim<V> {
    fn extend<I: IntoIterator<Item = (String, String, V)>>(&mut self, iter: I) {
        for (p, c, v) in iter {
            self.insert(p, c, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_index_follows_every_insert_move_and_removal() {
        let mut m: PodsByClaim<u32> = PodsByClaim::default();
        m.insert("a".into(), "c1".into(), 1);
        m.insert("b".into(), "c1".into(), 2);
        m.insert("c".into(), "c2".into(), 3);
        assert!(m.consistent());
        // A pod entered again for another claim moves.
        m.insert("b".into(), "c2".into(), 4);
        assert!(m.consistent());
        assert_eq!(m.pods_of("c2").cloned().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(m.take_fresh(), ["a", "b", "c", "b"]);
        assert!(m.take_fresh().is_empty());
        // Entered again for the same claim: still one pod of it.
        m.insert("a".into(), "c1".into(), 5);
        assert!(m.consistent());
        assert_eq!(m.get("a"), Some(&("c1".to_string(), 5)));
        assert_eq!(
            m.remove_claim("c2"),
            [("b".to_string(), 4), ("c".to_string(), 3)]
        );
        assert!(m.consistent());
        assert_eq!(m.claims().cloned().collect::<Vec<_>>(), ["c1"]);
        m.insert("d".into(), "c3".into(), 6);
        m.retain(|pod, _, _| pod != "a");
        assert!(m.consistent());
        assert_eq!(m.keys().cloned().collect::<Vec<_>>(), ["d"]);
        assert_eq!(m.remove("d"), Some(("c3".to_string(), 6)));
        assert!(m.consistent());
        assert_eq!(m.len(), 0);
        assert_eq!(m.claims().count(), 0);
    }
}
