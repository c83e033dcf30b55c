//! Which partitions a node keeps a warm copy of (`--standbys N`).
//!
//! The group hands out the cluster's partitions with Kafka's range
//! assignor: members sorted by member id, which starts with the node's
//! name, each taking one contiguous run. That makes the next assignment
//! predictable: when up to `N` other nodes die, a survivor gets exactly the
//! range that the same split over the nodes left gives it. A node that
//! keeps those partitions built beside its own serves them at once after
//! such a failure. The guess only saves work: a node that gets a partition
//! it did not keep builds it as it would without standbys.

use std::collections::BTreeSet;

/// The partitions `me` keeps: those it owns, and those the range assignor
/// would give it were any `standbys` or fewer of the other `members` gone.
/// `members` are node names, `me` among them.
pub fn kept(members: &[String], me: &str, owned: &[u32], count: u32, standbys: u32) -> Vec<u32> {
    let mut kept: BTreeSet<u32> = owned.iter().copied().collect();
    if standbys > 0 && members.iter().any(|m| m == me) {
        let mut order: Vec<&String> = members.iter().collect();
        // Member ids are "<client.id>-<uuid>": sort as they sort.
        order.sort_by_key(|m| format!("{m}-"));
        order.dedup();
        let others: Vec<&String> = order.iter().copied().filter(|m| *m != me).collect();
        for gone in subsets(others.len(), standbys as usize) {
            let left: Vec<&String> = order
                .iter()
                .copied()
                .filter(|m| !gone.iter().any(|g| others[*g] == *m))
                .collect();
            let at = left.iter().position(|m| *m == me).expect("me is left");
            kept.extend(range(at, left.len(), count));
        }
    }
    kept.into_iter().collect()
}

/// The partitions the range assignor gives the `at`th of `members`.
fn range(at: usize, members: usize, count: u32) -> std::ops::Range<u32> {
    let (each, extra) = (count / members as u32, count % members as u32);
    let at = at as u32;
    let start = each * at + at.min(extra);
    start..start + each + u32::from(at < extra)
}

/// Every non-empty subset of `0..n` with at most `most` members.
fn subsets(n: usize, most: usize) -> Vec<Vec<usize>> {
    let mut all: Vec<Vec<usize>> = vec![Vec::new()];
    for i in 0..n {
        let grown: Vec<Vec<usize>> = all
            .iter()
            .filter(|s| s.len() < most)
            .map(|s| s.iter().copied().chain([i]).collect())
            .collect();
        all.extend(grown);
    }
    all.retain(|s| !s.is_empty());
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(of: &[&str]) -> Vec<String> {
        of.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn ranges_split_like_kafkas_range_assignor() {
        let split: Vec<Vec<u32>> = (0..5).map(|at| range(at, 5, 12).collect()).collect();
        assert_eq!(
            split,
            [
                vec![0, 1, 2],
                vec![3, 4, 5],
                vec![6, 7],
                vec![8, 9],
                vec![10, 11]
            ]
        );
    }

    #[test]
    fn one_standby_keeps_what_any_single_failure_would_bring() {
        let members = names(&["n1", "n2", "n3"]);
        // n1 owns 0-3; n2 or n3 gone, it gets 0-5.
        assert_eq!(
            kept(&members, "n1", &[0, 1, 2, 3], 12, 1),
            (0..6).collect::<Vec<_>>()
        );
        // n2 owns 4-7; n1 gone it gets 0-5, n3 gone 6-11.
        assert_eq!(
            kept(&members, "n2", &[4, 5, 6, 7], 12, 1),
            (0..12).collect::<Vec<_>>()
        );
        assert_eq!(
            kept(&members, "n3", &[8, 9, 10, 11], 12, 1),
            (6..12).collect::<Vec<_>>()
        );
    }

    #[test]
    fn no_standbys_or_no_others_keep_only_what_is_owned() {
        let members = names(&["n1", "n2"]);
        assert_eq!(kept(&members, "n1", &[0, 1], 4, 0), [0, 1]);
        assert_eq!(
            kept(&names(&["n1"]), "n1", &[0, 1, 2, 3], 4, 1),
            [0, 1, 2, 3]
        );
        // Not in the book yet: nothing to predict from.
        assert_eq!(kept(&names(&["n2"]), "n1", &[0, 1], 4, 1), [0, 1]);
    }

    #[test]
    fn more_standbys_cover_more_failures() {
        let members = names(&["a", "b", "c", "d"]);
        let one = kept(&members, "a", &[0, 1, 2], 12, 1);
        let two = kept(&members, "a", &[0, 1, 2], 12, 2);
        let three = kept(&members, "a", &[0, 1, 2], 12, 3);
        assert_eq!(one, [0, 1, 2, 3]);
        assert_eq!(two, [0, 1, 2, 3, 4, 5]);
        assert_eq!(three, (0..12).collect::<Vec<_>>());
        assert_eq!(subsets(3, 2).len(), 6);
    }
}
