//! One watch's changes for several controllers: each engine (one per served API) needs every
//! node, Job and pod change to find the objects it concerns, and the caches they fill are
//! shared, so the watch runs once.
//!
//! Whichever copy is polled reads the source and queues the item for the others; nothing runs
//! unless a copy is polled, so a standby operator (no controller running) watches nothing. A
//! copy gets the items that come after it was first polled, until it is dropped: an engine that
//! waits for its CRD queues nothing (its first pass reads the shared caches anyway).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};

struct Shared<T> {
    source: Option<BoxStream<'static, T>>,
    copy: fn(&T) -> Option<T>,
    queues: Vec<VecDeque<T>>,
    wakers: Vec<Option<Waker>>,
    /// Polled at least once, and not dropped.
    subscribed: Vec<bool>,
}

/// `n` streams, each with every item of `source` in order (as `copy` copies it for the others;
/// `None` gives it to the reader alone); the source ends them all.
pub fn tee<T: Send + 'static>(
    source: BoxStream<'static, T>,
    n: usize,
    copy: fn(&T) -> Option<T>,
) -> Vec<BoxStream<'static, T>> {
    if n <= 1 {
        return vec![source];
    }
    let shared = Arc::new(Mutex::new(Shared {
        source: Some(source),
        copy,
        queues: (0..n).map(|_| VecDeque::new()).collect(),
        wakers: vec![None; n],
        subscribed: vec![false; n],
    }));
    (0..n)
        .map(|i| {
            Copy {
                shared: shared.clone(),
                index: i,
            }
            .boxed()
        })
        .collect()
}

struct Copy<T> {
    shared: Arc<Mutex<Shared<T>>>,
    index: usize,
}

/// A watch's item for the other engines: a change, never an error (it is the reader's, which
/// logs it; each engine's watch of its own kind reports its own).
pub fn changes<K: Clone, E>(item: &Result<K, E>) -> Option<Result<K, E>> {
    item.as_ref().ok().map(|k| Ok(k.clone()))
}

impl<T: Send + 'static> Stream for Copy<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let i = self.index;
        s.subscribed[i] = true;
        if let Some(item) = s.queues[i].pop_front() {
            return Poll::Ready(Some(item));
        }
        s.wakers[i] = Some(cx.waker().clone());
        let Some(source) = s.source.as_mut() else {
            return Poll::Ready(None);
        };
        match source.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                s.source = None;
                for w in s.wakers.iter_mut().filter_map(Option::take) {
                    w.wake();
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(item)) => {
                let Shared {
                    queues,
                    wakers,
                    copy,
                    subscribed,
                    ..
                } = &mut *s;
                let others = queues.iter_mut().enumerate();
                for (j, q) in others.filter(|(j, _)| *j != i && subscribed[*j]) {
                    let Some(c) = copy(&item) else { continue };
                    q.push_back(c);
                    if let Some(w) = wakers[j].take() {
                        w.wake();
                    }
                }
                Poll::Ready(Some(item))
            }
        }
    }
}

impl<T> Drop for Copy<T> {
    fn drop(&mut self) {
        let mut s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        s.subscribed[self.index] = false;
        s.queues[self.index].clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_copy_sees_every_item_in_order_whoever_reads_first() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut copies = tee(rx.boxed(), 2, |x| Some(*x));
        let mut b = copies.pop().unwrap();
        let mut a = copies.pop().unwrap();
        // Both subscribe (a poll that finds nothing yet).
        assert!(futures::poll!(a.next()).is_pending());
        assert!(futures::poll!(b.next()).is_pending());
        for i in 0..3 {
            tx.unbounded_send(i).unwrap();
        }
        assert_eq!(a.next().await, Some(0));
        assert_eq!(a.next().await, Some(1));
        assert_eq!(b.next().await, Some(0));
        tx.unbounded_send(3).unwrap();
        drop(tx);
        assert_eq!(b.next().await, Some(1));
        assert_eq!(b.next().await, Some(2));
        assert_eq!(b.next().await, Some(3));
        assert_eq!(b.next().await, None);
        assert_eq!(a.next().await, Some(2));
        assert_eq!(a.next().await, Some(3));
        assert_eq!(a.next().await, None);
    }

    #[tokio::test]
    async fn a_waiting_copy_wakes_when_another_reads_its_item() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut copies = tee(rx.boxed(), 2, |x| Some(*x));
        let mut b = copies.pop().unwrap();
        let mut a = copies.pop().unwrap();
        let waiting = tokio::spawn(async move { b.next().await });
        tokio::task::yield_now().await;
        tx.unbounded_send(7).unwrap();
        assert_eq!(a.next().await, Some(7));
        assert_eq!(waiting.await.unwrap(), Some(7));
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    #[tokio::test]
    async fn a_copy_never_polled_queues_nothing_and_gets_what_comes_after() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut copies = tee(rx.boxed(), 2, |x| Some(*x));
        let mut late = copies.pop().unwrap();
        let mut a = copies.pop().unwrap();
        tx.unbounded_send(1).unwrap();
        assert_eq!(a.next().await, Some(1));
        assert!(futures::poll!(late.next()).is_pending());
        tx.unbounded_send(2).unwrap();
        assert_eq!(a.next().await, Some(2));
        assert_eq!(late.next().await, Some(2));
    }

    #[tokio::test]
    async fn an_error_goes_to_its_reader_alone() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<u32, String>>();
        let mut copies = tee(rx.boxed(), 2, changes);
        let mut b = copies.pop().unwrap();
        let mut a = copies.pop().unwrap();
        assert!(futures::poll!(a.next()).is_pending());
        assert!(futures::poll!(b.next()).is_pending());
        for item in [Ok(1), Err("e".to_string()), Ok(2)] {
            tx.unbounded_send(item).unwrap();
        }
        drop(tx);
        assert_eq!(a.next().await, Some(Ok(1)));
        assert_eq!(a.next().await, Some(Err("e".into())));
        assert_eq!(a.next().await, Some(Ok(2)));
        assert_eq!(b.next().await, Some(Ok(1)));
        assert_eq!(b.next().await, Some(Ok(2)));
        assert_eq!(b.next().await, None);
    }
}
