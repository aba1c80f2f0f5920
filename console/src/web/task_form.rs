//! The task form's values: filled from a [`TaskSpec`] (edit) or the engine's defaults (new),
//! read back from a form post into a [`TaskSpec`] with an error per field that cannot be read.
//! Field names are the API's (`schedule.expr`, `timeout_ms`, …), so the service's field errors
//! land next to the same inputs.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use mthpt_engine::app::AppId;
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::task::{MisfirePolicy, OverlapPolicy, Routing, TaskDefinition};

use crate::service::error::{ApiError, FieldProblem};
use crate::service::tasks::{ScheduleInput, TaskSpec};

/// The schedule kinds, as the form's `schedule.kind` spells them.
pub const KINDS: [&str; 5] = ["cron", "fixed_rate", "fixed_delay", "once", "manual"];

/// The form: every input's text, and what is wrong with it.
#[derive(Debug, Clone, Default)]
pub struct TaskForm {
    pub values: BTreeMap<&'static str, String>,
    pub errors: BTreeMap<String, String>,
    /// An error that belongs to no field.
    pub general: String,
    /// The version an edit replaces.
    pub version: String,
    /// The tasks this one runs after (ids).
    pub parents: BTreeSet<i64>,
}

/// Every input of the form.
pub const FIELDS: [&str; 28] = [
    "name",
    "app",
    "handler",
    "description",
    "params",
    "schedule.kind",
    "schedule.expr",
    "schedule.timezone",
    "schedule.every_ms",
    "schedule.anchor_at",
    "schedule.delay_ms",
    "schedule.at",
    "window_start_at",
    "window_end_at",
    "max_fires",
    "misfire_policy",
    "misfire_threshold_ms",
    "misfire_max_catch_up",
    "overlap_policy",
    "routing",
    "timeout_ms",
    "start_timeout_ms",
    "max_retries",
    "retry_backoff_ms",
    "retry_backoff_max_ms",
    "recover_lost",
    "priority",
    "paused",
];

/// `datetime-local` text of an instant in `tz`.
/// A time as a `datetime-local` input shows it, in `tz`: to the second, or to the
/// millisecond when it has milliseconds (a task made through the API), so that saving the form
/// unchanged changes nothing.
fn local(t: Option<DateTime<Utc>>, tz: Tz) -> String {
    t.map(|t| {
        let format = if t.timestamp_subsec_millis() == 0 {
            "%Y-%m-%dT%H:%M:%S"
        } else {
            "%Y-%m-%dT%H:%M:%S%.3f"
        };
        t.with_timezone(&tz).format(format).to_string()
    })
    .unwrap_or_default()
}

fn num<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl TaskForm {
    /// The `step` of time input `field`: a second, or a millisecond when its value has
    /// milliseconds (a browser refuses to send a value off its input's step).
    pub fn step(&self, field: &str) -> &'static str {
        if self.v(field).contains('.') {
            "0.001"
        } else {
            "1"
        }
    }

    /// The text of input `field`.
    pub fn v(&self, field: &str) -> String {
        self.values.get(field).cloned().unwrap_or_default()
    }

    /// What is wrong with input `field` (empty: nothing).
    pub fn err(&self, field: &str) -> String {
        self.errors.get(field).cloned().unwrap_or_default()
    }

    /// Whether a checkbox is on.
    pub fn checked(&self, field: &str) -> bool {
        self.v(field) == "true"
    }

    /// A new task's form: the engine's defaults, a cron schedule in the user's zone.
    pub fn blank(tz: Tz) -> TaskForm {
        let d = TaskDefinition::new(AppId(0), "", "", ScheduleSpec::Manual);
        let mut f = TaskForm::default();
        let mut set = |k: &'static str, v: String| {
            f.values.insert(k, v);
        };
        set("schedule.kind", "cron".to_owned());
        set("schedule.timezone", tz.name().to_owned());
        set("params", "{}".to_owned());
        set("misfire_policy", d.misfire_policy.to_string());
        set("misfire_threshold_ms", d.misfire_threshold_ms.to_string());
        set("misfire_max_catch_up", d.misfire_max_catch_up.to_string());
        set("overlap_policy", d.overlap_policy.to_string());
        set("routing", d.routing.to_string());
        set("max_retries", d.max_retries.to_string());
        set("retry_backoff_ms", d.retry_backoff_ms.to_string());
        set("retry_backoff_max_ms", d.retry_backoff_max_ms.to_string());
        set("recover_lost", d.recover_lost.to_string());
        set("priority", d.priority.to_string());
        set("paused", d.paused.to_string());
        f
    }

    /// The form of an existing task at `version`.
    pub fn of(spec: &TaskSpec, version: i64, tz: Tz) -> TaskForm {
        let mut f = TaskForm {
            version: version.to_string(),
            ..TaskForm::default()
        };
        let mut set = |k: &'static str, v: String| {
            f.values.insert(k, v);
        };
        set("name", spec.name.clone());
        set("app", spec.app.clone());
        set("handler", spec.handler.clone());
        set("description", spec.description.clone().unwrap_or_default());
        set(
            "params",
            spec.params
                .as_ref()
                .map(|p| serde_json::to_string_pretty(p).unwrap_or_default())
                .unwrap_or_else(|| "{}".to_owned()),
        );
        let kind = match &spec.schedule {
            ScheduleInput::Cron { expr, timezone } => {
                set("schedule.expr", expr.clone());
                set("schedule.timezone", timezone.clone());
                "cron"
            }
            ScheduleInput::FixedRate {
                every_ms,
                anchor_at,
            } => {
                set("schedule.every_ms", every_ms.to_string());
                set("schedule.anchor_at", local(*anchor_at, tz));
                "fixed_rate"
            }
            ScheduleInput::FixedDelay { delay_ms } => {
                set("schedule.delay_ms", delay_ms.to_string());
                "fixed_delay"
            }
            ScheduleInput::Once { at } => {
                set("schedule.at", local(Some(*at), tz));
                "once"
            }
            ScheduleInput::Manual => "manual",
        };
        set("schedule.kind", kind.to_owned());
        set("window_start_at", local(spec.window_start_at, tz));
        set("window_end_at", local(spec.window_end_at, tz));
        set("max_fires", num(spec.max_fires));
        set("misfire_policy", num(spec.misfire_policy));
        set("misfire_threshold_ms", num(spec.misfire_threshold_ms));
        set("misfire_max_catch_up", num(spec.misfire_max_catch_up));
        set("overlap_policy", num(spec.overlap_policy));
        set("routing", num(spec.routing));
        set("timeout_ms", num(spec.timeout_ms));
        set("start_timeout_ms", num(spec.start_timeout_ms));
        set("max_retries", num(spec.max_retries));
        set("retry_backoff_ms", num(spec.retry_backoff_ms));
        set("retry_backoff_max_ms", num(spec.retry_backoff_max_ms));
        set(
            "recover_lost",
            spec.recover_lost.unwrap_or(true).to_string(),
        );
        set("priority", num(spec.priority));
        set("paused", spec.paused.unwrap_or(false).to_string());
        f
    }

    /// The form as posted (checkboxes that are off are absent from a post).
    pub fn posted(input: &HashMap<String, String>) -> TaskForm {
        let mut f = TaskForm::default();
        for field in FIELDS {
            let v = input.get(field).cloned().unwrap_or_default();
            let v = match field {
                "recover_lost" | "paused" => (!v.is_empty()).to_string(),
                _ => v,
            };
            f.values.insert(field, v);
        }
        f.version = input.get("version").cloned().unwrap_or_default();
        f
    }

    /// The form as posted as `(name, value)` pairs: [`TaskForm::posted`] and the `parents`
    /// checkboxes (a value that is no task id is put next to the field).
    pub fn posted_pairs(pairs: &[(String, String)]) -> TaskForm {
        let input: HashMap<String, String> = pairs.iter().cloned().collect();
        let mut f = TaskForm::posted(&input);
        for (k, v) in pairs.iter().filter(|(k, _)| k == "parents") {
            match v.trim().parse() {
                Ok(id) => {
                    f.parents.insert(id);
                }
                Err(_) => {
                    f.errors
                        .insert(k.clone(), format!("{v:?} is not a task id"));
                }
            }
        }
        f
    }

    /// Puts a service error next to its fields (or at the top).
    pub fn add_error(&mut self, e: &ApiError) {
        if e.errors.is_empty() {
            self.general = e.detail.clone();
        }
        for p in &e.errors {
            let field = match p.field.as_str() {
                f if FIELDS.contains(&f) || f == "parents" => f.to_owned(),
                "schedule" => "schedule.kind".to_owned(),
                f if f.starts_with("schedule.") => "schedule.kind".to_owned(),
                _ => {
                    self.general = format!("{}: {}", p.field, p.message);
                    continue;
                }
            };
            self.errors.insert(field, p.message.clone());
        }
    }

    /// The schedule the form describes (also used by the live preview).
    pub fn schedule(&self, tz: Tz) -> Result<ScheduleInput, Vec<FieldProblem>> {
        let mut r = Reader::new(self, tz);
        let s = r.schedule();
        r.finish(s)
    }

    /// The task the form describes, or what is wrong with it.
    pub fn spec(&self, tz: Tz) -> Result<TaskSpec, Vec<FieldProblem>> {
        let (spec, problems) = self.read(tz);
        if problems.is_empty() {
            Ok(spec)
        } else {
            Err(problems)
        }
    }

    /// The task the form describes, each field it cannot read left to its default, and what
    /// it cannot read.
    pub fn read(&self, tz: Tz) -> (TaskSpec, Vec<FieldProblem>) {
        let mut r = Reader::new(self, tz);
        let schedule = r.schedule();
        let spec = TaskSpec {
            name: self.v("name").trim().to_owned(),
            app: self.v("app").trim().to_owned(),
            handler: self.v("handler").trim().to_owned(),
            schedule,
            description: Some(self.v("description")),
            params: Some(r.json("params")),
            window_start_at: r.time("window_start_at"),
            window_end_at: r.time("window_end_at"),
            max_fires: r.int("max_fires"),
            misfire_policy: r.parse::<MisfirePolicy>("misfire_policy"),
            misfire_threshold_ms: r.int("misfire_threshold_ms"),
            misfire_max_catch_up: r.int("misfire_max_catch_up"),
            overlap_policy: r.parse::<OverlapPolicy>("overlap_policy"),
            routing: r.parse::<Routing>("routing"),
            timeout_ms: r.int("timeout_ms"),
            start_timeout_ms: r.int("start_timeout_ms"),
            max_retries: r.int("max_retries"),
            retry_backoff_ms: r.int("retry_backoff_ms"),
            retry_backoff_max_ms: r.int("retry_backoff_max_ms"),
            recover_lost: Some(self.checked("recover_lost")),
            priority: r.int("priority"),
            paused: Some(self.checked("paused")),
        };
        (spec, r.problems)
    }
}

/// Reads typed values out of a form, collecting what cannot be read.
struct Reader<'a> {
    form: &'a TaskForm,
    tz: Tz,
    problems: Vec<FieldProblem>,
}

impl<'a> Reader<'a> {
    fn new(form: &'a TaskForm, tz: Tz) -> Self {
        Self {
            form,
            tz,
            problems: Vec::new(),
        }
    }

    fn finish<T>(self, value: T) -> Result<T, Vec<FieldProblem>> {
        if self.problems.is_empty() {
            Ok(value)
        } else {
            Err(self.problems)
        }
    }

    fn problem(&mut self, field: &str, message: &str) {
        self.problems.push(FieldProblem {
            field: field.to_owned(),
            message: message.to_owned(),
        });
    }

    fn text(&self, field: &str) -> String {
        self.form.v(field).trim().to_owned()
    }

    fn int<T: std::str::FromStr>(&mut self, field: &str) -> Option<T> {
        let text = self.text(field);
        if text.is_empty() {
            return None;
        }
        match text.parse() {
            Ok(v) => Some(v),
            Err(_) => {
                self.problem(field, "must be a whole number");
                None
            }
        }
    }

    fn parse<T: std::str::FromStr>(&mut self, field: &str) -> Option<T>
    where
        T::Err: std::fmt::Display,
    {
        let text = self.text(field);
        if text.is_empty() {
            return None;
        }
        match text.parse::<T>() {
            Ok(v) => Some(v),
            Err(e) => {
                self.problem(field, &e.to_string());
                None
            }
        }
    }

    /// RFC 3339, or a `datetime-local` value on the user's wall clock.
    fn time(&mut self, field: &str) -> Option<DateTime<Utc>> {
        let text = self.text(field);
        if text.is_empty() {
            return None;
        }
        if let Ok(t) = DateTime::parse_from_rfc3339(&text) {
            return Some(t.with_timezone(&Utc));
        }
        let naive = NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M:%S%.f")
            .or_else(|_| NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M"));
        let Ok(naive) = naive else {
            self.problem(field, "must be a date and time, e.g. 2026-12-01T09:30");
            return None;
        };
        match self.tz.from_local_datetime(&naive).earliest() {
            Some(t) => Some(t.with_timezone(&Utc)),
            None => {
                let tz = self.tz.name();
                self.problem(
                    field,
                    &format!("{text} does not exist in {tz}: the clocks skip it that day"),
                );
                None
            }
        }
    }

    fn json(&mut self, field: &str) -> serde_json::Value {
        let text = self.text(field);
        if text.is_empty() {
            return serde_json::json!({});
        }
        match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                self.problem(field, &format!("is not JSON: {e}"));
                serde_json::json!({})
            }
        }
    }

    fn schedule(&mut self) -> ScheduleInput {
        let required_int = |r: &mut Self, field: &str| {
            let v = r.int::<i64>(field);
            if v.is_none() && r.text(field).is_empty() {
                r.problem(field, "is required for this schedule kind");
            }
            v.unwrap_or(0)
        };
        match self.text("schedule.kind").as_str() {
            "cron" => {
                let expr = self.text("schedule.expr");
                if expr.is_empty() {
                    self.problem("schedule.expr", "is required for a cron schedule");
                }
                let timezone = match self.text("schedule.timezone") {
                    t if t.is_empty() => "UTC".to_owned(),
                    t => t,
                };
                ScheduleInput::Cron { expr, timezone }
            }
            "fixed_rate" => ScheduleInput::FixedRate {
                every_ms: required_int(self, "schedule.every_ms"),
                anchor_at: self.time("schedule.anchor_at"),
            },
            "fixed_delay" => ScheduleInput::FixedDelay {
                delay_ms: required_int(self, "schedule.delay_ms"),
            },
            "once" => {
                let at = self.time("schedule.at");
                if at.is_none() && self.text("schedule.at").is_empty() {
                    self.problem("schedule.at", "is required for a one-off schedule");
                }
                ScheduleInput::Once {
                    at: at.unwrap_or_default(),
                }
            }
            "manual" => ScheduleInput::Manual,
            _ => {
                self.problem("schedule.kind", "choose a schedule kind");
                ScheduleInput::Manual
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(pairs: &[(&str, &str)]) -> TaskForm {
        TaskForm::posted(
            &pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn a_cron_task_is_read_from_the_form() {
        let f = posted(&[
            ("name", " every2s "),
            ("app", "demo"),
            ("handler", "hello"),
            ("schedule.kind", "cron"),
            ("schedule.expr", "*/2 * * * * ?"),
            ("schedule.timezone", "Asia/Shanghai"),
            ("max_retries", "3"),
            ("routing", "least_busy"),
            ("recover_lost", "on"),
        ]);
        let spec = f.spec(chrono_tz::UTC).unwrap();
        assert_eq!(spec.name, "every2s");
        assert_eq!(
            spec.schedule,
            ScheduleInput::Cron {
                expr: "*/2 * * * * ?".to_owned(),
                timezone: "Asia/Shanghai".to_owned()
            }
        );
        assert_eq!(spec.max_retries, Some(3));
        assert_eq!(spec.routing, Some(Routing::LeastBusy));
        assert_eq!(spec.recover_lost, Some(true));
        assert_eq!(spec.paused, Some(false));
    }

    #[test]
    fn unreadable_inputs_are_named() {
        let f = posted(&[
            ("schedule.kind", "fixed_rate"),
            ("timeout_ms", "soon"),
            ("params", "{not json"),
            ("routing", "sideways"),
        ]);
        let fields: Vec<String> = f
            .spec(chrono_tz::UTC)
            .unwrap_err()
            .into_iter()
            .map(|p| p.field)
            .collect();
        assert_eq!(
            fields,
            ["schedule.every_ms", "params", "routing", "timeout_ms"]
        );
    }

    #[test]
    fn local_times_are_read_on_the_users_wall_clock() {
        let f = posted(&[
            ("schedule.kind", "once"),
            ("schedule.at", "2026-12-01T09:30"),
        ]);
        let s = f.schedule(chrono_tz::Asia::Shanghai).unwrap();
        assert_eq!(
            s,
            ScheduleInput::Once {
                at: "2026-12-01T01:30:00Z".parse().unwrap()
            }
        );
    }

    #[test]
    fn a_millisecond_anchor_survives_the_edit_form_and_seconds_stay_seconds() {
        let posted_at = |at: &str| {
            posted(&[
                ("schedule.kind", "fixed_rate"),
                ("schedule.every_ms", "15000"),
                ("schedule.anchor_at", at),
            ])
        };
        let spec = posted_at("2026-12-02T04:08:12.349Z").spec(chrono_tz::UTC);
        let form = TaskForm::of(&spec.clone().unwrap(), 1, chrono_tz::Europe::London);
        assert_eq!(form.v("schedule.anchor_at"), "2026-12-02T04:08:12.349");
        assert_eq!(form.step("schedule.anchor_at"), "0.001");
        assert_eq!(form.spec(chrono_tz::Europe::London), spec);
        let whole = TaskForm::of(
            &posted_at("2026-12-02T04:08:12Z")
                .spec(chrono_tz::UTC)
                .unwrap(),
            1,
            chrono_tz::UTC,
        );
        assert_eq!(whole.v("schedule.anchor_at"), "2026-12-02T04:08:12");
        assert_eq!(whole.step("schedule.anchor_at"), "1");
    }

    #[test]
    fn a_local_time_the_clocks_skip_is_named_as_such() {
        let f = posted(&[
            ("schedule.kind", "once"),
            ("schedule.at", "2027-03-28T01:30"),
        ]);
        let problems = f.schedule(chrono_tz::Europe::London).unwrap_err();
        assert!(
            problems[0]
                .message
                .contains("does not exist in Europe/London"),
            "{problems:?}"
        );
    }

    #[test]
    fn an_edit_form_round_trips_its_spec() {
        let spec = posted(&[
            ("name", "n"),
            ("app", "a"),
            ("handler", "h"),
            ("schedule.kind", "fixed_delay"),
            ("schedule.delay_ms", "5000"),
            ("window_end_at", "2027-01-01T00:00:00Z"),
        ])
        .spec(chrono_tz::UTC)
        .unwrap();
        let again = TaskForm::of(&spec, 3, chrono_tz::Europe::London)
            .spec(chrono_tz::Europe::London)
            .unwrap();
        assert_eq!(again, spec);
    }
}
