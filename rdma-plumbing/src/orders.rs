//! Every order of a set of events, for the permutation tests of teardown: the drain, the
//! NVMe/RDMA queue pair and request lifecycles and SRP's channel all check that whatever order
//! the adapter, the bdev and the connection manager deliver their events in, everything is
//! released exactly once.

/// Calls `f` with each permutation of `items` (`n!` calls; duplicates in `items` give repeated
/// orders).
pub fn for_each<T: Copy>(items: &[T], f: &mut impl FnMut(&[T])) {
    fn rec<T: Copy>(cur: &mut Vec<T>, rest: &mut Vec<T>, f: &mut impl FnMut(&[T])) {
        if rest.is_empty() {
            f(cur);
            return;
        }
        for i in 0..rest.len() {
            let x = rest.remove(i);
            cur.push(x);
            rec(cur, rest, f);
            cur.pop();
            rest.insert(i, x);
        }
    }
    rec(&mut Vec::new(), &mut items.to_vec(), f);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_once() {
        let mut seen = Vec::new();
        for_each(&[1, 2, 3], &mut |o| seen.push(o.to_vec()));
        seen.sort();
        assert_eq!(
            seen,
            [
                [1, 2, 3],
                [1, 3, 2],
                [2, 1, 3],
                [2, 3, 1],
                [3, 1, 2],
                [3, 2, 1]
            ]
        );
        let mut n = 0;
        for_each::<u8>(&[], &mut |o| {
            assert!(o.is_empty());
            n += 1
        });
        assert_eq!(n, 1, "the empty set has one order");
    }
}
