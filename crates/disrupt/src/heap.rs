//! A d-ary min-heap (d = 4): the disruption candidates' priority queue, ordered by disruption
//! cost. Four children per node halve the depth of a binary heap, so sift-downs touch fewer
//! levels; pops stay O(d log_d n).

use std::cmp::Ordering;

const D: usize = 4;

pub struct DaryHeap<T, F: Fn(&T, &T) -> Ordering> {
    items: Vec<T>,
    less: F,
}

impl<T, F: Fn(&T, &T) -> Ordering> DaryHeap<T, F> {
    pub fn new(less: F) -> Self {
        DaryHeap {
            items: Vec::new(),
            less,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn push(&mut self, item: T) {
        self.items.push(item);
        let mut i = self.items.len() - 1;
        while i > 0 {
            let parent = (i - 1) / D;
            if (self.less)(&self.items[i], &self.items[parent]) == Ordering::Less {
                self.items.swap(i, parent);
                i = parent;
            } else {
                break;
            }
        }
    }

    pub fn pop(&mut self) -> Option<T> {
        if self.items.is_empty() {
            return None;
        }
        let last = self.items.len() - 1;
        self.items.swap(0, last);
        let top = self.items.pop();
        let n = self.items.len();
        let mut i = 0;
        loop {
            let first = i * D + 1;
            if first >= n {
                break;
            }
            let mut best = first;
            for c in first + 1..(first + D).min(n) {
                if (self.less)(&self.items[c], &self.items[best]) == Ordering::Less {
                    best = c;
                }
            }
            if (self.less)(&self.items[best], &self.items[i]) == Ordering::Less {
                self.items.swap(i, best);
                i = best;
            } else {
                break;
            }
        }
        top
    }
}

/// All items in heap order (smallest first).
pub fn ordered<T, F: Fn(&T, &T) -> Ordering>(items: Vec<T>, less: F) -> Vec<T> {
    let mut h = DaryHeap::new(less);
    for x in items {
        h.push(x);
    }
    let mut out = Vec::with_capacity(h.len());
    while let Some(x) = h.pop() {
        out.push(x);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_come_out_in_order_for_any_input() {
        let mut x: u64 = 12345;
        let items: Vec<u64> = (0..1000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                x >> 40
            })
            .collect();
        let mut sorted = items.clone();
        sorted.sort();
        assert_eq!(ordered(items, |a, b| a.cmp(b)), sorted);
        assert!(ordered(Vec::<u64>::new(), |a, b| a.cmp(b)).is_empty());
    }
}
