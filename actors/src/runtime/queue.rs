//! A stage's bounded priority queue: the hand-off between the stage actor (which
//! pushes what its mailbox delivers) and the stage's workers (which pop when free).

use std::{cmp::Ordering, collections::BinaryHeap, sync::Mutex};

use tokio::sync::Notify;

struct Entry<T> {
    priority: i32,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        self.priority == o.priority && self.seq == o.seq
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Entry<T> {
    /// Max-heap order: higher priority first, then first in, first out.
    fn cmp(&self, o: &Self) -> Ordering {
        self.priority.cmp(&o.priority).then(o.seq.cmp(&self.seq))
    }
}

struct State<T> {
    heap: BinaryHeap<Entry<T>>,
    seq: u64,
    closed: bool,
}

/// Bounded by `capacity` items; higher priority pops first, FIFO within a priority.
pub struct StageQueue<T> {
    capacity: usize,
    state: Mutex<State<T>>,
    items: Notify,
    space: Notify,
}

impl<T> StageQueue<T> {
    /// An empty queue holding at most `capacity` (≥ 1) items.
    pub fn new(capacity: usize) -> Self {
        StageQueue {
            capacity: capacity.max(1),
            state: Mutex::new(State { heap: BinaryHeap::new(), seq: 0, closed: false }),
            items: Notify::new(),
            space: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        // Critical sections only move items in and out; a poisoned lock holds a
        // consistent heap.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Items queued.
    pub fn len(&self) -> usize {
        self.lock().heap.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a push would stay within capacity.
    pub fn has_space(&self) -> bool {
        self.len() < self.capacity
    }

    /// Adds an item. Callers wait for [`StageQueue::wait_space`] first; the queue
    /// itself never drops an item.
    pub fn push(&self, priority: i32, item: T) {
        {
            let mut s = self.lock();
            let seq = s.seq;
            s.seq += 1;
            s.heap.push(Entry { priority, seq, item });
        }
        // Every waiting worker looks: an express worker that finds bulk work must not
        // swallow the wake-up a regular one needed.
        self.items.notify_waiters();
    }

    /// Adds an urgent item without waiting for room: at most `slack` items beyond
    /// the capacity (the express lane's bound); the item comes back when even that
    /// is full or the queue is closed.
    pub fn try_push_urgent(&self, priority: i32, item: T, slack: usize) -> Result<(), T> {
        {
            let mut s = self.lock();
            if s.closed || s.heap.len() >= self.capacity + slack {
                return Err(item);
            }
            let seq = s.seq;
            s.seq += 1;
            s.heap.push(Entry { priority, seq, item });
        }
        // Every waiting worker looks: an express worker that finds bulk work must not
        // swallow the wake-up a regular one needed.
        self.items.notify_waiters();
        Ok(())
    }

    /// Takes the highest-priority item, waiting for one; `None` once closed and empty.
    pub async fn pop(&self) -> Option<T> {
        self.pop_from(i32::MIN).await
    }

    /// Takes the highest-priority item once one of at least `min` priority is at the
    /// top (an express worker's pop); `None` once closed and empty.
    pub async fn pop_from(&self, min: i32) -> Option<T> {
        loop {
            let notified = self.items.notified();
            tokio::pin!(notified);
            // Register before checking, so a push between check and await is not lost.
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                if s.heap.peek().is_some_and(|e| e.priority >= min) {
                    let e = s.heap.pop().expect("peeked");
                    drop(s);
                    self.space.notify_one();
                    return Some(e.item);
                }
                if s.closed && (s.heap.is_empty() || min > i32::MIN) {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Resolves when there is room for one more item.
    pub async fn wait_space(&self) {
        loop {
            let notified = self.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_space() {
                return;
            }
            notified.await;
        }
    }

    /// Removes (and returns) every item matching `pred`.
    pub fn remove_where(&self, mut pred: impl FnMut(&T) -> bool) -> Vec<T> {
        let removed = {
            let mut s = self.lock();
            let all = std::mem::take(&mut s.heap).into_vec();
            let (gone, kept): (Vec<_>, Vec<_>) = all.into_iter().partition(|e| pred(&e.item));
            s.heap = kept.into();
            gone
        };
        if !removed.is_empty() {
            self.space.notify_one();
        }
        removed.into_iter().map(|e| e.item).collect()
    }

    /// Stops the workers once the queue is drained.
    pub fn close(&self) {
        self.lock().closed = true;
        self.items.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_then_fifo() {
        let q = StageQueue::new(8);
        q.push(0, "a");
        q.push(5, "hi1");
        q.push(0, "b");
        q.push(5, "hi2");
        let got: Vec<_> = (0..4).map(|_| futures::executor::block_on(q.pop()).unwrap()).collect();
        assert_eq!(got, ["hi1", "hi2", "a", "b"]);
        q.push(0, "x");
        assert_eq!(q.remove_where(|s| *s == "x"), vec!["x"]);
        // Urgent items pass a full queue, up to the slack.
        let q = StageQueue::new(1);
        q.push(0, "bulk");
        assert!(!q.has_space());
        assert_eq!(q.try_push_urgent(9, "urgent", 1), Ok(()));
        assert_eq!(q.try_push_urgent(9, "more", 1), Err("more"), "slack of 1 used");
        assert_eq!(futures::executor::block_on(q.pop_from(5)), Some("urgent"));
        // An express worker leaves bulk work to the others.
        let pending = q.pop_from(5);
        futures::pin_mut!(pending);
        assert!(futures::executor::block_on(futures::future::poll_immediate(&mut pending)).is_none());
        assert_eq!(futures::executor::block_on(q.pop()), Some("bulk"));
        q.close();
        assert_eq!(futures::executor::block_on(q.pop()), None);
    }
}
