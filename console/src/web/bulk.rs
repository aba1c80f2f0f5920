//! What the run and alarm lists share for actions on the rows people select: reading the
//! posted form (the ticked `id`s, the list's filters to go back to), the query that carries
//! the outcome back to the list (`bulk=<action>&done=<n>&failed=<id>:<code>,…`), and the
//! notice the list shows from it: how many were done, and each failure named with why.

use super::i18n::Tr;
use super::urlencode;
use crate::service::bulk::ItemOutcome;
use crate::service::error::{ApiError, ApiResult, Code};

/// A posted form's fields, in order (a field may repeat: `id`).
#[derive(Debug)]
pub struct Posted<'a>(pub &'a [(String, String)]);

impl Posted<'_> {
    /// The first value of `name` (empty: none).
    pub fn value(&self, name: &str) -> String {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// Every `id` ticked, as numbers; one that is not a number is a validation error.
    pub fn ids(&self) -> ApiResult<Vec<i64>> {
        self.0
            .iter()
            .filter(|(k, _)| k == "id")
            .map(|(_, v)| {
                v.trim()
                    .parse()
                    .map_err(|_| ApiError::field("id", format!("{v:?} is not an id")))
            })
            .collect()
    }

    /// The `id`s again, for a confirmation page to post them once more.
    pub fn id_fields(&self) -> Vec<(String, String)> {
        self.0.iter().filter(|(k, _)| k == "id").cloned().collect()
    }
}

/// The query (to add after `&`) that tells the list what `action` did.
pub fn outcome_query(action: &str, outcomes: &[ItemOutcome]) -> String {
    let done = outcomes.iter().filter(|o| o.error.is_none()).count();
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.error
                .as_ref()
                .map(|(code, _)| format!("{}:{}", o.id, code.as_str()))
        })
        .collect();
    format!(
        "bulk={action}&done={done}&failed={}",
        urlencode(&failed.join(","))
    )
}

/// The outcome of a bulk action as a list reads it back from its query.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// `cancelled 3 run(s)`; empty: no bulk action was just done.
    pub summary: String,
    /// `Run #7: already finished`, one per item it failed for.
    pub failures: Vec<String>,
}

/// The notice after `bulk` (one of `actions`, or `none` when nothing was selected) on the
/// items of `noun` (`run`, `alarm`): the catalog says `bulk.done.<action>`, `bulk.<noun>s`,
/// `bulk.none_<noun>s`, and why an item failed as `bulk.why.<noun>.<code>` where the code's
/// title says too little. `name` names an item by id.
pub fn outcome(
    tr: Tr,
    noun: &str,
    actions: &[&str],
    (bulk, done, failed): (&str, &str, &str),
    name: impl Fn(i64) -> String,
) -> Outcome {
    if bulk == "none" {
        return Outcome {
            summary: tr.t(&format!("bulk.none_{noun}s")),
            failures: Vec::new(),
        };
    }
    if !actions.contains(&bulk) {
        return Outcome::default();
    }
    let summary = format!(
        "{} {} {}",
        tr.t(&format!("bulk.done.{bulk}")),
        done.parse::<usize>().unwrap_or(0),
        tr.t(&format!("bulk.{noun}s"))
    );
    let failures = failed
        .split(',')
        .filter_map(|item| {
            let (id, code) = item.split_once(':')?;
            let id: i64 = id.parse().ok()?;
            let code = Code::ALL.iter().find(|c| c.as_str() == code)?;
            let why = tr
                .get(&format!("bulk.why.{noun}.{}", code.as_str()))
                .unwrap_or_else(|| tr.msg(code.title()));
            Some(format!("{}: {why}", name(id)))
        })
        .collect();
    Outcome { summary, failures }
}

/// `here` (a path with its query) without the outcome of a bulk action, so the page's own
/// forms and links come back to the list without saying it again.
pub fn without_outcome(here: &str) -> String {
    let Some((path, query)) = here.split_once('?') else {
        return here.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            !["bulk=", "done=", "failed="]
                .iter()
                .any(|p| pair.starts_with(p))
        })
        .collect();
    if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::i18n::Lang;

    #[test]
    fn an_outcome_travels_in_the_query_and_names_each_failure() {
        let outcomes = vec![
            ItemOutcome {
                id: 1,
                made: None,
                error: None,
            },
            ItemOutcome {
                id: 2,
                made: None,
                error: Some((Code::Conflict, "finished".to_owned())),
            },
            ItemOutcome {
                id: 3,
                made: None,
                error: Some((Code::NotFound, "run 3".to_owned())),
            },
        ];
        let q = outcome_query("cancel", &outcomes);
        assert_eq!(q, "bulk=cancel&done=1&failed=2%3Aconflict%2C3%3Anot_found");
        let tr = Tr::new(Lang::En);
        let o = outcome(
            tr,
            "run",
            &["cancel"],
            ("cancel", "1", "2:conflict,3:not_found,x:y,4:nonsense"),
            |id| format!("#{id}"),
        );
        assert!(o.summary.contains('1'), "{}", o.summary);
        assert_eq!(o.failures.len(), 2, "{:?}", o.failures);
        assert!(o.failures[0].starts_with("#2: "), "{:?}", o.failures);
        assert!(
            !o.failures.iter().any(|f| f.contains('⟦')),
            "{:?}",
            o.failures
        );
        assert_eq!(
            without_outcome("/t/a/alarms?status=open&bulk=ack&done=2&failed="),
            "/t/a/alarms?status=open"
        );
        assert_eq!(without_outcome("/t/a/alarms?bulk=none"), "/t/a/alarms");
        assert!(
            outcome(tr, "run", &["cancel"], ("drop", "1", ""), |_| String::new())
                .summary
                .is_empty()
        );
    }
}
