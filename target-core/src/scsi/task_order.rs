//! Task attributes and the order in which a task set's tasks enter the enabled state
//! (SAM-5 8.6, "Task set management"), as pure logic: the transport says which tasks
//! arrive and end, and is told which ones may run.
//!
//! - **SIMPLE**: enabled once every older HEAD OF QUEUE and older ORDERED task has ended;
//!   SIMPLE tasks among themselves run in any order (the control page's QUEUE ALGORITHM
//!   MODIFIER = 1, unrestricted reordering).
//! - **ORDERED**: enabled once every older task, whatever its attribute, has ended; younger
//!   SIMPLE and ORDERED tasks wait for it.
//! - **HEAD OF QUEUE**: enabled at once, ahead of every dormant task (it is not held behind
//!   an ORDERED barrier); younger SIMPLE tasks wait for it, as SAM-5 says.
//! - **ACA**: not supported (NACA = 0, no auto contingent allegiance): the transport refuses
//!   the command before it joins a task set, as Linux LIO does (ILLEGAL REQUEST, INVALID
//!   FIELD IN CDB).
//!
//! A dormant task waits in a FIFO: when a task ends, the FIFO's head enters the enabled state
//! while the rules allow (an ORDERED head only once nothing is enabled, and then nothing
//! behind it until it ends). A dormant task that is aborted leaves the FIFO
//! ([`TaskOrder::remove`]); the tasks behind it may then go.
//!
//! Nothing here allocates per task once the FIFO has grown to the largest number of tasks
//! that were ever dormant at once (bounded by the transport's queue depth).

use std::collections::VecDeque;

/// The task attribute of a command (SAM-5 8.6.1), as far as the task set goes: ACA is
/// refused before a task joins one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskAttribute {
    /// SIMPLE.
    Simple,
    /// ORDERED.
    Ordered,
    /// HEAD OF QUEUE.
    HeadOfQueue,
}

/// The enabled/dormant bookkeeping of one task set, `T` naming a task for the transport.
#[derive(Debug)]
pub struct TaskOrder<T> {
    /// Enabled tasks, whatever their attribute.
    enabled: u32,
    /// Enabled ORDERED tasks (0 or 1).
    ordered: u32,
    /// Enabled HEAD OF QUEUE tasks.
    head: u32,
    /// Dormant tasks, oldest first.
    dormant: VecDeque<(T, TaskAttribute)>,
}

impl<T> Default for TaskOrder<T> {
    fn default() -> Self {
        TaskOrder {
            enabled: 0,
            ordered: 0,
            head: 0,
            dormant: VecDeque::new(),
        }
    }
}

impl<T: Copy + PartialEq> TaskOrder<T> {
    /// An empty task set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a task with `attr` arriving now may enter the enabled state at once (nothing
    /// dormant is older than it then).
    #[inline]
    fn may_enable(&self, attr: TaskAttribute) -> bool {
        match attr {
            TaskAttribute::HeadOfQueue => true,
            TaskAttribute::Simple => self.ordered == 0 && self.head == 0,
            TaskAttribute::Ordered => self.enabled == 0,
        }
    }

    #[inline]
    fn enable(&mut self, attr: TaskAttribute) {
        self.enabled += 1;
        match attr {
            TaskAttribute::Ordered => self.ordered += 1,
            TaskAttribute::HeadOfQueue => self.head += 1,
            TaskAttribute::Simple => {}
        }
    }

    /// Task `id` with `attr` arrives: `true` if it is enabled (it runs; tell
    /// [`TaskOrder::ended`] when it ends), `false` if it is dormant (it waits until
    /// [`TaskOrder::next_enabled`] hands it out, or [`TaskOrder::remove`] takes it away).
    #[inline]
    pub fn arrive(&mut self, id: T, attr: TaskAttribute) -> bool {
        let go = match attr {
            TaskAttribute::HeadOfQueue => true,
            _ => self.dormant.is_empty() && self.may_enable(attr),
        };
        if go {
            self.enable(attr);
        } else {
            self.dormant.push_back((id, attr));
        }
        go
    }

    /// An enabled task with `attr` ended (completed or aborted). Then call
    /// [`TaskOrder::next_enabled`] until it returns `None`.
    #[inline]
    pub fn ended(&mut self, attr: TaskAttribute) {
        self.enabled = self.enabled.saturating_sub(1);
        match attr {
            TaskAttribute::Ordered => self.ordered = self.ordered.saturating_sub(1),
            TaskAttribute::HeadOfQueue => self.head = self.head.saturating_sub(1),
            TaskAttribute::Simple => {}
        }
    }

    /// The oldest dormant task if it may now enter the enabled state (it is counted
    /// enabled from now on).
    #[inline]
    pub fn next_enabled(&mut self) -> Option<T> {
        let &(id, attr) = self.dormant.front()?;
        if !self.may_enable(attr) {
            return None;
        }
        self.dormant.pop_front();
        self.enable(attr);
        Some(id)
    }

    /// A dormant task leaves the task set (aborted before it ran): whether it was there.
    /// Then call [`TaskOrder::next_enabled`]: the tasks behind it may go.
    pub fn remove(&mut self, id: T) -> bool {
        match self.dormant.iter().position(|&(t, _)| t == id) {
            Some(i) => {
                self.dormant.remove(i);
                true
            }
            None => false,
        }
    }

    /// Enabled tasks.
    pub fn enabled(&self) -> u32 {
        self.enabled
    }

    /// Dormant tasks.
    pub fn dormant(&self) -> usize {
        self.dormant.len()
    }
}

#[cfg(test)]
mod tests {
    use super::TaskAttribute::{HeadOfQueue as H, Ordered as O, Simple as S};
    use super::*;

    fn drain(t: &mut TaskOrder<u32>) -> Vec<u32> {
        std::iter::from_fn(|| t.next_enabled()).collect()
    }

    #[test]
    fn simple_tasks_all_run_at_once() {
        let mut t = TaskOrder::new();
        assert!((0..5).all(|i| t.arrive(i, S)));
        assert_eq!(t.enabled(), 5);
        assert_eq!(t.dormant(), 0);
    }

    #[test]
    fn ordered_waits_for_older_simple_and_younger_simple_waits_for_it() {
        let mut t = TaskOrder::new();
        assert!(t.arrive(1, S));
        assert!(t.arrive(2, S));
        assert!(!t.arrive(3, O), "ORDERED waits for the SIMPLE tasks");
        assert!(!t.arrive(4, S), "a younger SIMPLE waits behind the ORDERED");
        t.ended(S);
        assert_eq!(drain(&mut t), Vec::<u32>::new(), "one SIMPLE still runs");
        t.ended(S);
        assert_eq!(drain(&mut t), vec![3], "the ORDERED alone");
        t.ended(O);
        assert_eq!(drain(&mut t), vec![4]);
        assert_eq!(t.enabled(), 1);
    }

    #[test]
    fn ordered_on_an_idle_set_runs_at_once_and_blocks_the_rest() {
        let mut t = TaskOrder::new();
        assert!(t.arrive(1, O));
        assert!(!t.arrive(2, O));
        assert!(!t.arrive(3, S));
        assert!(!t.arrive(4, S));
        assert!(!t.arrive(5, O));
        assert!(!t.arrive(6, S));
        t.ended(O);
        assert_eq!(drain(&mut t), vec![2], "the next ORDERED, alone");
        t.ended(O);
        assert_eq!(
            drain(&mut t),
            vec![3, 4],
            "the SIMPLEs up to the next ORDERED"
        );
        t.ended(S);
        assert_eq!(drain(&mut t), Vec::<u32>::new());
        t.ended(S);
        assert_eq!(drain(&mut t), vec![5]);
        t.ended(O);
        assert_eq!(drain(&mut t), vec![6]);
    }

    #[test]
    fn head_of_queue_passes_the_barrier_and_younger_simple_waits_for_it() {
        let mut t = TaskOrder::new();
        assert!(t.arrive(1, S));
        assert!(!t.arrive(2, O));
        assert!(
            t.arrive(3, H),
            "HEAD OF QUEUE is not held behind the ORDERED"
        );
        assert_eq!(t.dormant(), 1);
        t.ended(S);
        assert_eq!(
            drain(&mut t),
            Vec::<u32>::new(),
            "the ORDERED waits for the older HEAD OF QUEUE too"
        );
        t.ended(H);
        assert_eq!(drain(&mut t), vec![2]);
        // On an idle set a HEAD OF QUEUE holds a younger SIMPLE until it ends.
        t.ended(O);
        assert!(t.arrive(4, H));
        assert!(!t.arrive(5, S));
        t.ended(H);
        assert_eq!(drain(&mut t), vec![5]);
    }

    #[test]
    fn a_removed_dormant_task_lets_the_ones_behind_it_go() {
        let mut t = TaskOrder::new();
        assert!(t.arrive(1, S));
        assert!(!t.arrive(2, O));
        assert!(!t.arrive(3, S));
        assert!(t.remove(2), "the ORDERED aborted while dormant");
        assert!(!t.remove(2));
        assert_eq!(drain(&mut t), vec![3], "nothing holds the SIMPLE now");
        assert_eq!(t.enabled(), 2);
        assert_eq!(t.dormant(), 0);
    }
}
