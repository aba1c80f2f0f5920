//! The message a page shows after an action, with a link to what the action made or touched
//! and, where the action can be undone, an undo button.
//!
//! A form post answers with a redirect whose query names what was done
//! (`?flash=triggered&flash_id=42`); the page the browser lands on shows the message. Only the
//! kinds below and a number are read from the query, so a crafted link can show nothing but
//! one of these messages about an id of the tenant the page is about (never markup, and never
//! a link off the site); it works without JavaScript and on any console node.

use super::i18n::Tr;
use super::urlencode;

/// What an action did, and to which object (by id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// A manual run of a task (Run now) or a re-run: the run.
    Triggered(i64),
    /// A run cancelled.
    Cancelled(i64),
    /// A task paused (undo: resume).
    Paused(i64),
    /// A task resumed (undo: pause).
    Resumed(i64),
    /// A task saved.
    Saved(i64),
    /// An executor instance drained (undo: undrain).
    Drained(i64),
    /// An undrain asked for.
    Undrained(i64),
    /// A user deleted.
    UserDeleted(i64),
    /// A token revoked.
    TokenRevoked(i64),
    /// An alarm acknowledged.
    Acknowledged(i64),
    /// An app deleted.
    AppDeleted(i64),
    /// A task deleted.
    TaskDeleted(i64),
    /// A task's alarms muted (undo: unmute).
    Muted(i64),
    /// A task's alarms unmuted.
    Unmuted(i64),
    /// A task file applied: how many tasks and dependencies it changed.
    Imported(i64),
    /// The time zone typed in the footer is none (the id is not used): nothing changed.
    BadTimeZone(i64),
}

/// The message as a page shows it.
#[derive(Debug, Clone)]
pub struct Flash {
    /// `triggered`, `drained`, …: a class and test hook.
    pub kind: &'static str,
    pub text: String,
    /// (href, label) of what the action made or touched.
    pub link: Option<(String, String)>,
    /// The form action that undoes it (a post with `back`), and its label.
    pub undo: Option<(String, String)>,
}

impl Done {
    fn parts(self) -> (&'static str, i64) {
        match self {
            Done::Triggered(id) => ("triggered", id),
            Done::Cancelled(id) => ("cancelled", id),
            Done::Paused(id) => ("paused", id),
            Done::Resumed(id) => ("resumed", id),
            Done::Saved(id) => ("saved", id),
            Done::Drained(id) => ("drained", id),
            Done::Undrained(id) => ("undrained", id),
            Done::UserDeleted(id) => ("user_deleted", id),
            Done::TokenRevoked(id) => ("token_revoked", id),
            Done::Acknowledged(id) => ("acknowledged", id),
            Done::AppDeleted(id) => ("app_deleted", id),
            Done::TaskDeleted(id) => ("task_deleted", id),
            Done::Muted(id) => ("muted", id),
            Done::Unmuted(id) => ("unmuted", id),
            Done::Imported(n) => ("imported", n),
            Done::BadTimeZone(id) => ("bad_tz", id),
        }
    }

    fn parse(kind: &str, id: i64) -> Option<Done> {
        Some(match kind {
            "triggered" => Done::Triggered(id),
            "cancelled" => Done::Cancelled(id),
            "paused" => Done::Paused(id),
            "resumed" => Done::Resumed(id),
            "saved" => Done::Saved(id),
            "drained" => Done::Drained(id),
            "undrained" => Done::Undrained(id),
            "user_deleted" => Done::UserDeleted(id),
            "token_revoked" => Done::TokenRevoked(id),
            "acknowledged" => Done::Acknowledged(id),
            "app_deleted" => Done::AppDeleted(id),
            "task_deleted" => Done::TaskDeleted(id),
            "muted" => Done::Muted(id),
            "unmuted" => Done::Unmuted(id),
            "imported" => Done::Imported(id),
            "bad_tz" => Done::BadTimeZone(id),
            _ => return None,
        })
    }

    /// `path` (a local path, maybe with a query) with this message added to its query.
    pub fn on(self, path: &str) -> String {
        let (base, _) = strip(path);
        let (kind, id) = self.parts();
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}flash={kind}&flash_id={id}")
    }

    /// The message in `tr`'s language; links point into `tenant` (empty: the account pages).
    pub fn render(self, tr: Tr, tenant: &str) -> Flash {
        let (kind, id) = self.parts();
        let t = |rest: &str| format!("/t/{}/{rest}", urlencode(tenant));
        let text = tr
            .t(&format!("flash.{kind}"))
            .replace("{id}", &id.to_string());
        let run = || Some((t(&format!("runs/{id}")), tr.t("flash.open_run")));
        let task = || Some((t(&format!("tasks/{id}")), tr.t("flash.open_task")));
        let undo = |action: &str| Some((t(action), tr.t("flash.undo")));
        let (link, undo) = if tenant.is_empty() {
            (None, None)
        } else {
            match self {
                Done::Triggered(_) | Done::Cancelled(_) => (run(), None),
                Done::Paused(_) => (task(), undo(&format!("tasks/{id}/resume"))),
                Done::Resumed(_) => (task(), undo(&format!("tasks/{id}/pause"))),
                Done::Saved(_) | Done::Unmuted(_) => (task(), None),
                Done::Muted(_) => (task(), undo(&format!("tasks/{id}/unmute"))),
                Done::Drained(_) => (None, undo(&format!("executors/{id}/undrain"))),
                Done::Acknowledged(_) => (
                    Some((t("alarms?status=open"), tr.t("flash.open_alarms"))),
                    None,
                ),
                Done::Undrained(_)
                | Done::UserDeleted(_)
                | Done::TokenRevoked(_)
                | Done::AppDeleted(_)
                | Done::TaskDeleted(_)
                | Done::Imported(_)
                | Done::BadTimeZone(_) => (None, None),
            }
        };
        Flash {
            kind,
            text,
            link,
            undo,
        }
    }
}

/// `here` without the flash parameters, and the message they name (if any).
pub fn strip(here: &str) -> (String, Option<Done>) {
    let Some((path, query)) = here.split_once('?') else {
        return (here.to_owned(), None);
    };
    let (mut kind, mut id) = (None, None);
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            if let Some(v) = pair.strip_prefix("flash=") {
                kind = Some(v);
                false
            } else if let Some(v) = pair.strip_prefix("flash_id=") {
                id = v.parse::<i64>().ok();
                false
            } else {
                true
            }
        })
        .collect();
    let done = match (kind, id) {
        (Some(k), Some(i)) => Done::parse(k, i),
        _ => None,
    };
    let base = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    (base, done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::i18n::Lang;

    #[test]
    fn a_message_travels_in_the_query_and_is_read_back_once() {
        let to = Done::Triggered(42).on("/t/acme/tasks?name=x");
        assert_eq!(to, "/t/acme/tasks?name=x&flash=triggered&flash_id=42");
        let (here, done) = strip(&to);
        assert_eq!(here, "/t/acme/tasks?name=x");
        assert_eq!(done, Some(Done::Triggered(42)));
        assert_eq!(
            Done::Drained(3).on(&Done::Paused(1).on("/t/acme/executors")),
            "/t/acme/executors?flash=drained&flash_id=3",
            "a new message replaces the old"
        );
    }

    #[test]
    fn unknown_kinds_and_ids_that_are_not_numbers_show_nothing() {
        assert_eq!(strip("/t/a?flash=<b>&flash_id=1").1, None);
        assert_eq!(strip("/t/a?flash=triggered&flash_id=x").1, None);
        assert_eq!(strip("/t/a?flash=triggered").1, None);
    }

    #[test]
    fn run_now_links_to_its_run_and_drain_offers_undrain() {
        let tr = Tr::new(Lang::En);
        let f = Done::Triggered(7).render(tr, "acme");
        assert_eq!(
            f.link.map(|l| l.0).as_deref(),
            Some("/t/acme/runs/7"),
            "Run now links to the run it made"
        );
        assert!(f.text.contains("#7"), "{}", f.text);
        let f = Done::Drained(5).render(tr, "acme");
        assert_eq!(
            f.undo.map(|u| u.0).as_deref(),
            Some("/t/acme/executors/5/undrain")
        );
    }
}
