//! The figures of each PostgreSQL failover (`pg-failover`, `pg-partition`): when the primary
//! was lost, when Patroni promoted another node, when scheduling resumed, how late the
//! occurrences around it started, and when the console API answered again. Pure functions over
//! what the injector saw, the handler log and the console poller's samples.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::console::Sample;
use super::handler_log::HandlerLog;

/// Scheduling and the console API should be back this soon after the primary is lost.
pub const TARGET_MS: i64 = 15_000;

/// A run claimed before the primary was lost may be due up to the claim horizon (500 ms)
/// after: scheduling counts as resumed at the first start of an occurrence due at least this
/// long after the loss, which no engine can have claimed before it.
pub const RESUME_MARGIN_MS: i64 = 1_000;

/// What the injector saw of one failover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailoverTimes {
    /// `pg-failover` (the primary's machine died) or `pg-partition` (cut off the network).
    pub kind: String,
    /// The node that was the primary.
    pub primary: String,
    /// When it was killed or cut off (epoch ms).
    pub lost_ms: i64,
    /// The node Patroni promoted, and when the others saw it lead (`None`: not seen).
    pub new_primary: Option<String>,
    pub promoted_ms: Option<i64>,
    /// When the old primary was back (as a replica), every node running with a
    /// synchronous standby.
    pub rejoined_ms: Option<i64>,
}

/// One failover's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailoverFigures {
    #[serde(flatten)]
    pub times: FailoverTimes,
    /// `promoted_ms - lost_ms`.
    pub promoted_after_ms: Option<i64>,
    /// The first handler start of an occurrence due [`RESUME_MARGIN_MS`] or more after the
    /// loss: scheduling works again (`None`: none before the next failover or the window's
    /// end).
    pub resumed_ms: Option<i64>,
    pub resumed_after_ms: Option<i64>,
    /// Expected occurrences due from 1 s before the loss until the next failover (or the
    /// window's end), how many started, and the largest lateness of their first starts.
    pub occurrences: usize,
    pub occurrences_started: usize,
    pub max_lateness_ms: Option<i64>,
    /// The console poller's first success among the requests sent after the loss
    /// (`None`: it never answered again before the next failover or the end of polling).
    pub console_answered_ms: Option<i64>,
    pub console_answered_after_ms: Option<i64>,
    /// Requests sent after the loss that failed before that success (errors or no answer).
    pub console_failed_before: usize,
    /// After that success, until the next failover: server errors, and requests without an
    /// answer.
    pub console_5xx_after: usize,
    pub console_unanswered_after: usize,
    /// Scheduling resumed and the console answered within [`TARGET_MS`] of the loss, with no
    /// server error after.
    pub within_targets: bool,
}

/// The figures of every failover in `times` (in order). `expected` are the occurrences the
/// schedules call for, `until_ms` the end of the measured window.
pub fn figures(
    times: &[FailoverTimes],
    log: &HandlerLog,
    expected: &HashSet<(i64, i64)>,
    samples: &[Sample],
    until_ms: i64,
) -> Vec<FailoverFigures> {
    let mut first_start: HashMap<(i64, i64), i64> = HashMap::new();
    for s in &log.starts {
        let at = first_start
            .entry((s.task_id, s.scheduled_at))
            .or_insert(s.at);
        *at = (*at).min(s.at);
    }
    times
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let next = times.get(i + 1).map_or(i64::MAX, |n| n.lost_ms);
            let resumed_ms = log
                .starts
                .iter()
                .filter(|s| {
                    s.at >= t.lost_ms
                        && s.at < next
                        && s.scheduled_at >= t.lost_ms + RESUME_MARGIN_MS
                })
                .map(|s| s.at)
                .min();
            let watched_until = next.min(until_ms);
            let mut occurrences = 0;
            let mut lateness = Vec::new();
            for &(task, at) in expected {
                if at >= t.lost_ms - 1_000 && at < watched_until {
                    occurrences += 1;
                    if let Some(start) = first_start.get(&(task, at)) {
                        lateness.push(start - at);
                    }
                }
            }
            let after_loss: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.sent_ms >= t.lost_ms && s.sent_ms < next)
                .collect();
            let answered = after_loss.iter().position(|s| s.ok());
            let (console_answered_ms, failed_before, errors_after, unanswered_after) =
                match answered {
                    Some(k) => {
                        let after = &after_loss[k + 1..];
                        (
                            Some(after_loss[k].done_ms),
                            after_loss[..k].len(),
                            after.iter().filter(|s| s.server_error()).count(),
                            after.iter().filter(|s| s.status.is_none()).count(),
                        )
                    }
                    None => (None, after_loss.len(), 0, 0),
                };
            let since = |at: Option<i64>| at.map(|at| at - t.lost_ms);
            let resumed_after_ms = since(resumed_ms);
            let console_answered_after_ms = since(console_answered_ms);
            let within = |d: Option<i64>| d.is_some_and(|d| d <= TARGET_MS);
            FailoverFigures {
                times: t.clone(),
                promoted_after_ms: since(t.promoted_ms),
                resumed_ms,
                resumed_after_ms,
                occurrences,
                occurrences_started: lateness.len(),
                max_lateness_ms: lateness.iter().copied().max(),
                console_answered_ms,
                console_answered_after_ms,
                console_failed_before: failed_before,
                console_5xx_after: errors_after,
                console_unanswered_after: unanswered_after,
                within_targets: within(resumed_after_ms)
                    && within(console_answered_after_ms)
                    && errors_after == 0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(lost_ms: i64) -> FailoverTimes {
        FailoverTimes {
            kind: "pg-failover".to_owned(),
            primary: "pg0".to_owned(),
            lost_ms,
            new_primary: Some("pg1".to_owned()),
            promoted_ms: Some(lost_ms + 10_500),
            rejoined_ms: Some(lost_ms + 30_000),
        }
    }

    fn sample(sent_ms: i64, status: Option<u16>) -> Sample {
        Sample {
            sent_ms,
            done_ms: sent_ms + 5,
            status,
        }
    }

    #[test]
    fn scheduling_resumes_at_the_first_start_of_an_occurrence_claimed_after_the_loss() {
        // Task 1 is due every second from 100_000; the primary is lost at 100_200.
        // The run due at 101_000 was claimed before (within the horizon) and starts on time;
        // the one due at 102_000 is the first that needed the database after the loss.
        let log = HandlerLog::parse(
            "S 1 1 100000 1 0 11 9 100003\n\
             S 2 1 101000 1 0 12 9 101002\n\
             S 3 1 102000 1 0 13 9 112700\n\
             S 4 1 103000 1 0 14 9 112650\n\
             S 5 1 104000 1 0 15 9 112900\n",
        );
        let expected: HashSet<(i64, i64)> = [100_000, 101_000, 102_000, 103_000, 104_000, 105_000]
            .into_iter()
            .map(|at| (1, at))
            .collect();
        let samples = [
            sample(100_100, Some(200)),
            sample(100_400, None),
            sample(103_000, Some(500)),
            sample(111_000, Some(200)),
            sample(111_300, Some(200)),
            sample(111_600, Some(503)),
            sample(111_900, None),
        ];
        let f = &figures(&[times(100_200)], &log, &expected, &samples, 200_000)[0];
        assert_eq!(f.resumed_ms, Some(112_650));
        assert_eq!(f.resumed_after_ms, Some(12_450));
        assert_eq!(f.promoted_after_ms, Some(10_500));
        // Due from 99_200: all six; 105_000 never started.
        assert_eq!((f.occurrences, f.occurrences_started), (6, 5));
        assert_eq!(f.max_lateness_ms, Some(10_700));
        assert_eq!(f.console_answered_ms, Some(111_005));
        assert_eq!(f.console_answered_after_ms, Some(10_805));
        assert_eq!(f.console_failed_before, 2);
        assert_eq!((f.console_5xx_after, f.console_unanswered_after), (1, 1));
        assert!(!f.within_targets, "a 503 after the console was back");
    }

    #[test]
    fn each_failover_is_watched_until_the_next() {
        let log = HandlerLog::parse(
            "S 1 1 110000 1 0 11 9 110010\n\
             S 2 1 160000 1 0 12 9 160010\n",
        );
        let expected: HashSet<(i64, i64)> = [(1, 110_000), (1, 160_000)].into_iter().collect();
        let samples = [sample(101_000, Some(200)), sample(151_000, Some(200))];
        let f = figures(
            &[times(100_000), times(150_000)],
            &log,
            &expected,
            &samples,
            200_000,
        );
        assert_eq!(f[0].resumed_ms, Some(110_010));
        assert_eq!((f[0].occurrences, f[0].max_lateness_ms), (1, Some(10)));
        assert_eq!(f[0].console_answered_after_ms, Some(1_005));
        assert!(f[0].within_targets);
        assert_eq!(f[1].resumed_ms, Some(160_010));
        assert_eq!(f[1].occurrences, 1);
    }

    #[test]
    fn no_start_and_no_answer_after_the_loss_misses_the_targets() {
        let log = HandlerLog::parse("S 1 1 99000 1 0 11 9 99010\n");
        let expected: HashSet<(i64, i64)> = [(1, 99_000), (1, 104_000)].into_iter().collect();
        let samples = [sample(99_500, Some(200)), sample(101_000, None)];
        let f = &figures(&[times(100_000)], &log, &expected, &samples, 200_000)[0];
        assert_eq!(f.resumed_ms, None);
        assert_eq!(f.console_answered_ms, None);
        assert_eq!(f.console_failed_before, 1);
        assert_eq!((f.occurrences, f.occurrences_started), (2, 1));
        assert!(!f.within_targets);
    }
}
