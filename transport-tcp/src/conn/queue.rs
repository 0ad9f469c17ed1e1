//! A FIFO with a fixed capacity, allocated once: pushing past it fails instead of growing.

use std::collections::VecDeque;

/// A bounded FIFO.
#[derive(Clone, Debug)]
pub(crate) struct Bounded<T> {
    items: VecDeque<T>,
    cap: usize,
}

impl<T> Bounded<T> {
    /// An empty queue that will hold up to `cap` items without allocating again.
    pub fn new(cap: usize) -> Self {
        Bounded {
            items: VecDeque::with_capacity(cap),
            cap,
        }
    }

    /// Appends `item`; gives it back when the queue is full.
    pub fn push(&mut self, item: T) -> Result<(), T> {
        if self.items.len() >= self.cap {
            return Err(item);
        }
        self.items.push_back(item);
        Ok(())
    }

    /// Removes the oldest item.
    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// The oldest item.
    pub fn front(&self) -> Option<&T> {
        self.items.front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_capacity_and_keeps_order() {
        let mut q = Bounded::new(2);
        assert_eq!(q.push(1), Ok(()));
        assert_eq!(q.push(2), Ok(()));
        assert_eq!(q.push(3), Err(3));
        assert_eq!(q.front(), Some(&1));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.push(3), Ok(()));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.pop(), None);
    }
}
