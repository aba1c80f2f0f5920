//! A group commit: callers submit items and wait; one writer at a time takes the queued items
//! in groups and writes each group in one transaction, answering every submitter with its
//! share. Items submitted while a write is in progress are written together by the next one,
//! so a steady stream of small submissions costs one transaction at a time instead of one each.
//!
//! There is no writer task: the submitter that gets the write lock writes the groups queued so
//! far, until its own item is answered. A submission is therefore never left waiting unwritten
//! (whoever queued it will write it if nobody else did), and nothing runs when nobody submits.
//!
//! Used by the dispatcher (dispatch intents, starts and releases: every queued item in one
//! group, [`take_all`]) and by the callback API's results ([`crate::results`]: one app and at
//! most 1,000 results per group). Each caller's write splits its group into statements of a
//! bounded size, so a saturated database slows a group rather than losing it at the statement
//! timeout.

use std::future::Future;
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::directory::lock;

/// Why a submission whose ticket a write dropped unanswered failed.
const ABANDONED: &str = "the write was abandoned";

/// What a group's write answers each submitter: its share, or why the write failed.
pub type Answer<R> = Result<R, String>;

/// One submission waiting to be written, and where to send what became of it.
#[derive(Debug)]
pub struct Ticket<T, R> {
    /// What was submitted.
    pub item: T,
    reply: oneshot::Sender<Answer<R>>,
}

impl<T, R> Ticket<T, R> {
    /// A ticket whose answer nobody waits for (tests of a grouping rule).
    #[cfg(test)]
    pub fn unanswered(item: T) -> Self {
        Self {
            item,
            reply: oneshot::channel().0,
        }
    }

    /// Answers the submitter (who may have stopped waiting: then nothing happens).
    pub fn answer(self, answer: Answer<R>) {
        let _ = self.reply.send(answer);
    }

    /// Splits off the item to answer later with [`Reply::answer`].
    pub fn into_parts(self) -> (T, Reply<R>) {
        (self.item, Reply(self.reply))
    }
}

/// Where to send one submitter's answer once its item has been taken out of its ticket.
#[derive(Debug)]
pub struct Reply<R>(oneshot::Sender<Answer<R>>);

impl<R> Reply<R> {
    /// Answers the submitter (who may have stopped waiting: then nothing happens).
    pub fn answer(self, answer: Answer<R>) {
        let _ = self.0.send(answer);
    }
}

/// Takes the next group out of the queue (in submission order); an empty group when the queue
/// is empty.
pub type Grouping<T, R> = fn(&mut Vec<Ticket<T, R>>) -> Vec<Ticket<T, R>>;

/// Every queued item in one group.
pub fn take_all<T, R>(queue: &mut Vec<Ticket<T, R>>) -> Vec<Ticket<T, R>> {
    std::mem::take(queue)
}

/// A queue of submissions and the lock of the one writer (see the module docs).
pub struct GroupCommit<T, R> {
    queue: Mutex<Vec<Ticket<T, R>>>,
    writing: tokio::sync::Mutex<()>,
    grouping: Grouping<T, R>,
}

impl<T, R> std::fmt::Debug for GroupCommit<T, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("queued", &lock(&self.queue).len())
            .finish_non_exhaustive()
    }
}

impl<T, R> GroupCommit<T, R> {
    /// A group commit that groups its queue with `grouping`.
    pub fn new(grouping: Grouping<T, R>) -> Self {
        Self {
            queue: Mutex::new(Vec::new()),
            writing: tokio::sync::Mutex::new(()),
            grouping,
        }
    }

    /// Queues `item` and waits for its answer. While this call holds the write lock it writes
    /// the queued groups with `write` (which must answer every ticket of the group it is given)
    /// until `item` has been answered. `Err` when the write failed, or a write dropped the
    /// ticket unanswered.
    pub async fn submit<W, Fut>(&self, item: T, mut write: W) -> Answer<R>
    where
        W: FnMut(Vec<Ticket<T, R>>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let (reply, mut answer) = oneshot::channel();
        lock(&self.queue).push(Ticket { item, reply });
        {
            let _writing = self.writing.lock().await;
            // A ticket queued while a write is in progress is taken by that writer's next round
            // or by its own submitter once it gets the lock: it never waits unwritten.
            loop {
                match answer.try_recv() {
                    Ok(answered) => return answered,
                    // (The receiver is spent after this: it must not be awaited.)
                    Err(oneshot::error::TryRecvError::Closed) => return Err(ABANDONED.to_owned()),
                    Err(oneshot::error::TryRecvError::Empty) => {}
                }
                let group = self.next_group();
                if group.is_empty() {
                    break;
                }
                write(group).await;
            }
        }
        match answer.await {
            Ok(answered) => answered,
            Err(_) => Err(ABANDONED.to_owned()),
        }
    }

    /// The next group of the queue, by this group commit's rule.
    pub fn next_group(&self) -> Vec<Ticket<T, R>> {
        (self.grouping)(&mut lock(&self.queue))
    }

    /// Queues a ticket without waiting for it (tests of a grouping rule).
    #[cfg(test)]
    pub fn queue(&self, ticket: Ticket<T, R>) {
        lock(&self.queue).push(ticket);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn every_submitter_gets_its_own_answer() {
        let commit: Arc<GroupCommit<u32, u32>> = Arc::new(GroupCommit::new(take_all));
        let writes = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for i in 0..20u32 {
            let (commit, writes) = (commit.clone(), writes.clone());
            handles.push(tokio::spawn(async move {
                commit
                    .submit(i, |group| {
                        let writes = writes.clone();
                        async move {
                            lock(&writes).push(group.len());
                            tokio::task::yield_now().await;
                            for t in group {
                                let double = t.item * 2;
                                t.answer(Ok(double));
                            }
                        }
                    })
                    .await
            }));
        }
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.await.ok(), Some(Ok(2 * i as u32)));
        }
        assert_eq!(lock(&writes).iter().sum::<usize>(), 20);
    }

    #[tokio::test]
    async fn a_failed_write_answers_each_submitter_with_the_error() {
        let commit: GroupCommit<u32, u32> = GroupCommit::new(take_all);
        let answer = commit
            .submit(1, |group| async move {
                for t in group {
                    t.answer(Err("database down".to_owned()));
                }
            })
            .await;
        assert_eq!(answer, Err("database down".to_owned()));
        let dropped = commit.submit(2, |group| async move { drop(group) }).await;
        assert!(dropped.is_err(), "a ticket dropped unanswered is an error");
    }
}
