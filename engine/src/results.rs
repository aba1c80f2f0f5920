//! The group commit of the results wrappers report ([`crate::api`]'s `results` callback): every
//! request queues its results; a group is the queued results of one app, at most
//! [`RESULT_GROUP_MAX`] of them, written in one transaction (see [`crate::group_commit`]). Many
//! wrappers reporting at once cost one transaction at a time instead of one each.

use std::sync::Arc;

use crate::app::AppId;
use crate::directory::Directory;
use crate::finished_here::FinishedHere;
use crate::group_commit::{GroupCommit, Ticket};
use crate::outcome::{Finish, Finished, finish_runs, log_finished};
use crate::run::RunId;
use crate::run_events::RunEvents;
use crate::store::{Store, StoreError};

/// What became of each result of a request, in order.
pub type Outcomes = Vec<Result<Finished, StoreError>>;

/// The results of one request: its app and, per run, how it finished.
#[derive(Debug)]
pub struct ResultItems {
    pub app: AppId,
    pub finishes: Vec<(RunId, Finish)>,
}

type ResultTicket = Ticket<ResultItems, Outcomes>;

/// The most results one group write takes (a single request may carry more; it is written
/// alone).
pub const RESULT_GROUP_MAX: usize = 1_000;

/// Writes the results of callback requests in groups.
#[derive(Debug)]
pub struct ResultWriter {
    commit: GroupCommit<ResultItems, Outcomes>,
    /// Where the runs it finishes are noted for the dispatcher's start writes.
    finished: Arc<FinishedHere>,
}

impl Default for ResultWriter {
    fn default() -> Self {
        Self {
            commit: GroupCommit::new(next_group),
            finished: Arc::default(),
        }
    }
}

impl ResultWriter {
    /// Notes the runs it finishes in `finished` (the dispatcher's: see [`FinishedHere`]).
    pub fn with_finished_here(mut self, finished: Arc<FinishedHere>) -> Self {
        self.finished = finished;
        self
    }

    /// Finishes `finishes` of `app` (with the results queued by other requests) and returns
    /// each item's outcome. `Err` when the database could not take them.
    pub async fn finish(
        &self,
        store: &Arc<dyn Store>,
        directory: &Directory,
        events: &RunEvents,
        app: AppId,
        finishes: Vec<(RunId, Finish)>,
    ) -> Result<Outcomes, StoreError> {
        self.commit
            .submit(ResultItems { app, finishes }, |tickets| {
                let written = Written {
                    store,
                    directory,
                    events,
                    finished: &self.finished,
                };
                write_results(written, tickets)
            })
            .await
            .map_err(StoreError::Unavailable)
    }
}

/// The queued tickets of the app queued first (one app per transaction: its runs are then
/// locked in one pass, in id order), taken in queue order while they fit in
/// [`RESULT_GROUP_MAX`] results (the first always does): a group's statements stay far below
/// the database's statement timeout when a saturated database has let many requests queue.
fn next_group(queue: &mut Vec<ResultTicket>) -> Vec<ResultTicket> {
    let first = queue.first().map(|t| t.item.app);
    let mut results = 0;
    let mut mine = Vec::new();
    let mut rest = Vec::with_capacity(queue.len());
    for t in queue.drain(..) {
        let fits = mine.is_empty() || results + t.item.finishes.len() <= RESULT_GROUP_MAX;
        if Some(t.item.app) == first && fits {
            results += t.item.finishes.len();
            mine.push(t);
        } else {
            rest.push(t);
        }
    }
    *queue = rest;
    mine
}

/// Where a group's results are written and told once committed.
#[derive(Clone, Copy)]
struct Written<'a> {
    store: &'a Arc<dyn Store>,
    directory: &'a Directory,
    events: &'a RunEvents,
    finished: &'a FinishedHere,
}

/// Writes the tickets (all of one app) in one transaction; when that fails, each ticket alone,
/// so one request's problem does not fail the others.
async fn write_results(to: Written<'_>, tickets: Vec<ResultTicket>) {
    async fn write(
        to: Written<'_>,
        app: AppId,
        finishes: &[(RunId, Finish)],
    ) -> Result<Outcomes, StoreError> {
        let mut tx = to.store.begin().await?;
        let out = finish_runs(tx.as_mut(), Some(app), finishes, &mut rand::random).await?;
        tx.commit().await?;
        log_finished(&out, Some(to.directory));
        to.events.finished(&out);
        to.finished.note(&out);
        Ok(out)
    }
    let Some(app) = tickets.first().map(|t| t.item.app) else {
        return;
    };
    let grouped = if tickets.len() == 1 {
        Err(None)
    } else {
        let all: Vec<(RunId, Finish)> = tickets
            .iter()
            .flat_map(|t| t.item.finishes.iter().cloned())
            .collect();
        write(to, app, &all).await.map_err(Some)
    };
    match grouped {
        Ok(outcomes) => {
            // Each ticket takes its own outcomes off the front, each moved once (splitting the
            // rest off instead moved every later outcome again for each ticket).
            let mut outcomes = outcomes.into_iter();
            for t in tickets {
                let mine: Outcomes = outcomes.by_ref().take(t.item.finishes.len()).collect();
                t.answer(Ok(mine));
            }
        }
        Err(e) => {
            if let Some(e) = e {
                tracing::warn!(error = %e, "writing result batches together failed; writing each alone");
            }
            for t in tickets {
                let alone = write(to, t.item.app, &t.item.finishes).await;
                t.answer(alone.map_err(|e| {
                    tracing::error!(error = %e, "store unavailable while handling a callback");
                    e.to_string()
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::RunState;

    fn ticket(app: i64, results: i64) -> ResultTicket {
        let finishes = (0..results)
            .map(|i| {
                let finish = Finish::decided(RunState::Failed, "x".to_owned(), false, 0);
                (RunId(app * 100_000 + i), finish)
            })
            .collect();
        Ticket::unanswered(ResultItems {
            app: AppId(app),
            finishes,
        })
    }

    fn sizes(group: &[ResultTicket]) -> Vec<(i64, usize)> {
        group
            .iter()
            .map(|t| (t.item.app.0, t.item.finishes.len()))
            .collect()
    }

    #[test]
    fn result_groups_are_one_app_and_at_most_a_thousand_results() {
        let writer = ResultWriter::default();
        for (app, n) in [(1, 600), (2, 10), (1, 600), (1, 300), (1, 1_500)] {
            writer.commit.queue(ticket(app, n));
        }
        let commit = &writer.commit;
        assert_eq!(sizes(&commit.next_group()), vec![(1, 600), (1, 300)]);
        assert_eq!(sizes(&commit.next_group()), vec![(2, 10)]);
        assert_eq!(sizes(&commit.next_group()), vec![(1, 600)]);
        assert_eq!(
            sizes(&commit.next_group()),
            vec![(1, 1_500)],
            "a request larger than a group is written alone"
        );
        assert!(commit.next_group().is_empty());
    }
}
