//! [`Dense`]: items numbered 1, 2, 3, ... in the order they were added, never renumbered, whose
//! oldest can be dropped from the front (their numbers are then gone for good). Tasks and jobs
//! live in one each: lookup by id is an index, and forgetting old jobs frees their memory.

use std::collections::VecDeque;
use std::ops::{Index, IndexMut};

#[derive(Debug)]
pub(crate) struct Dense<T> {
    /// The id of `items[0]`.
    first: u64,
    items: VecDeque<T>,
}

impl<T> Default for Dense<T> {
    fn default() -> Dense<T> {
        Dense {
            first: 1,
            items: VecDeque::new(),
        }
    }
}

impl<T> Dense<T> {
    /// The id the next [`Dense::push`] will return.
    pub(crate) fn next_id(&self) -> u64 {
        self.first + self.items.len() as u64
    }

    /// The oldest id still held: every id below it was dropped.
    pub(crate) fn first_id(&self) -> u64 {
        self.first
    }

    /// Continue numbering at `first` (ids below it were used before); only while empty.
    pub(crate) fn start_at(&mut self, first: u64) -> bool {
        if !self.items.is_empty() || first < self.first {
            return false;
        }
        self.first = first;
        true
    }

    pub(crate) fn push(&mut self, item: T) -> u64 {
        let id = self.next_id();
        self.items.push_back(item);
        id
    }

    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        self.items
            .get(usize::try_from(id.checked_sub(self.first)?).ok()?)
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.items
            .get_mut(usize::try_from(id.checked_sub(self.first)?).ok()?)
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.items.front()
    }

    /// Drop the oldest item; its id is never used again.
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let item = self.items.pop_front()?;
        self.first += 1;
        Some(item)
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// (id, item), oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, &T)> {
        let first = self.first;
        self.items
            .iter()
            .enumerate()
            .map(move |(i, item)| (first + i as u64, item))
    }
}

/// For ids the caller knows are held (queued, running): a missing one is a bug.
impl<T> Index<u64> for Dense<T> {
    type Output = T;
    fn index(&self, id: u64) -> &T {
        self.get(id)
            .unwrap_or_else(|| panic!("id {id} is not held (first held: {})", self.first))
    }
}

impl<T> IndexMut<u64> for Dense<T> {
    fn index_mut(&mut self, id: u64) -> &mut T {
        let first = self.first;
        self.get_mut(id)
            .unwrap_or_else(|| panic!("id {id} is not held (first held: {first})"))
    }
}

#[cfg(test)]
mod tests {
    use super::Dense;

    #[test]
    fn ids_stay_put_when_the_front_is_dropped() {
        let mut dense = Dense::default();
        assert_eq!(dense.push("a"), 1);
        assert_eq!(dense.push("b"), 2);
        assert_eq!(dense.push("c"), 3);
        assert_eq!(dense.pop_front(), Some("a"));
        assert_eq!(dense.get(1), None);
        assert_eq!(dense[2], "b");
        assert_eq!(dense.first_id(), 2);
        assert_eq!(dense.push("d"), 4);
        assert_eq!(
            dense.iter().collect::<Vec<_>>(),
            [(2, &"b"), (3, &"c"), (4, &"d")]
        );
        assert_eq!(dense.get(0), None);
        assert_eq!(dense.get(u64::MAX), None);
    }
}
