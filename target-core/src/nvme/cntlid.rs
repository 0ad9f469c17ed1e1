//! Dynamic controller id allocation for one subsystem.

use super::spec::{CNTLID_MAX, CNTLID_MIN};

/// Hands out controller ids from a range, next-fit, so that a freed id is not reused at once
/// (a host reconnecting quickly then never sees its old CNTLID on a new association).
#[derive(Clone, Debug)]
pub struct CntlidAllocator {
    min: u16,
    max: u16,
    next: u16,
    used: Vec<u64>,
    count: usize,
}

impl Default for CntlidAllocator {
    fn default() -> Self {
        CntlidAllocator::new(CNTLID_MIN, CNTLID_MAX)
    }
}

impl CntlidAllocator {
    /// Allocator over `min..=max`, clamped to 1..=0xFFEF (SPDK's `min_cntlid`/`max_cntlid`).
    pub fn new(min: u16, max: u16) -> CntlidAllocator {
        let min = min.clamp(CNTLID_MIN, CNTLID_MAX);
        let max = max.clamp(min, CNTLID_MAX);
        CntlidAllocator {
            min,
            max,
            next: min,
            used: vec![0; 65536 / 64],
            count: 0,
        }
    }

    fn is_set(&self, id: u16) -> bool {
        self.used[usize::from(id) / 64] & 1 << (id % 64) != 0
    }

    /// A free id, or `None` when all are in use (answer Connect with Controller Busy).
    pub fn alloc(&mut self) -> Option<u16> {
        let span = usize::from(self.max - self.min) + 1;
        if self.count >= span {
            return None;
        }
        let mut id = self.next;
        for _ in 0..span {
            if !self.is_set(id) {
                self.used[usize::from(id) / 64] |= 1 << (id % 64);
                self.count += 1;
                self.next = if id == self.max { self.min } else { id + 1 };
                return Some(id);
            }
            id = if id == self.max { self.min } else { id + 1 };
        }
        None
    }

    /// Releases an id (unknown ids are ignored).
    pub fn free(&mut self, id: u16) {
        if (self.min..=self.max).contains(&id) && self.is_set(id) {
            self.used[usize::from(id) / 64] &= !(1 << (id % 64));
            self.count -= 1;
        }
    }

    /// True if `id` is allocated.
    pub fn in_use(&self, id: u16) -> bool {
        (self.min..=self.max).contains(&id) && self.is_set(id)
    }

    /// Number of ids in use.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if no id is in use.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_fit_without_quick_reuse() {
        let mut a = CntlidAllocator::default();
        assert_eq!(a.alloc(), Some(1));
        assert_eq!(a.alloc(), Some(2));
        a.free(1);
        assert_eq!(a.alloc(), Some(3), "a freed id is not reused at once");
        assert!(a.in_use(2) && !a.in_use(1));
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn small_range_exhaustion_and_wrap() {
        let mut a = CntlidAllocator::new(10, 12);
        assert_eq!(a.alloc(), Some(10));
        assert_eq!(a.alloc(), Some(11));
        assert_eq!(a.alloc(), Some(12));
        assert_eq!(a.alloc(), None);
        a.free(11);
        a.free(11);
        a.free(500);
        assert_eq!(a.alloc(), Some(11));
        assert_eq!(a.alloc(), None);
        a.free(10);
        a.free(12);
        assert_eq!(a.alloc(), Some(12));
        assert_eq!(a.alloc(), Some(10));
        assert!(!a.is_empty());
    }

    #[test]
    fn range_is_clamped() {
        let mut a = CntlidAllocator::new(0, 0xFFFF);
        let mut n = 0;
        while let Some(id) = a.alloc() {
            assert!((1..=0xFFEF).contains(&id));
            n += 1;
        }
        assert_eq!(n, 0xFFEF);
        let mut b = CntlidAllocator::new(0xFFEF, 5);
        assert_eq!(b.alloc(), Some(0xFFEF));
        assert_eq!(b.alloc(), None);
    }
}
