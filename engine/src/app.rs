//! Apps (business applications that embed the wrapper) and their live executor instances.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::types::Json;

use crate::macros::{id_type, text_enum};
use crate::tenant::TenantId;
use crate::validate::{FieldError, check_base_url, check_len, check_range, check_slug};

id_type!(
    /// Identifies an app.
    AppId
);
id_type!(
    /// Identifies an executor instance (one running wrapper).
    ExecutorId
);

/// A business application whose instances embed the wrapper. Its secret signs every request
/// between its wrappers and the engine, so it is stored as given and never serialised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct App {
    pub id: AppId,
    pub tenant_id: TenantId,
    pub name: String,
    #[serde(skip)]
    pub secret: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What is needed to create an app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApp {
    pub name: String,
    pub secret: String,
}

/// The shortest signing secret accepted.
pub const MIN_SECRET_LEN: usize = 16;

impl NewApp {
    /// Checks the fields.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_slug("name", &self.name)?;
        check_secret(&self.secret)
    }
}

/// Checks a signing secret's length.
pub fn check_secret(secret: &str) -> Result<(), FieldError> {
    check_len("secret", secret, MIN_SECRET_LEN, 512)
}

text_enum!(
    /// Whether an executor instance takes work.
    ExecutorState {
        /// Heartbeating and accepting runs.
        Up = "up",
        /// Shutting down: finishes its runs, takes no new ones.
        Draining = "draining",
        /// Deregistered cleanly.
        Down = "down",
        /// Stopped heartbeating; its running runs were declared lost.
        Lost = "lost",
    }
);

/// One running wrapper of an app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Executor {
    pub id: ExecutorId,
    pub tenant_id: TenantId,
    pub app_id: AppId,
    /// Chosen by the wrapper; stable across its heartbeats.
    pub instance_id: String,
    /// Where the engine reaches it.
    pub base_url: String,
    pub capacity: i32,
    /// Runs in flight at the last heartbeat.
    pub running: i32,
    pub handlers: Json<Vec<String>>,
    pub labels: Json<BTreeMap<String, String>>,
    #[sqlx(try_from = "String")]
    pub state: ExecutorState,
    pub registered_at: i64,
    pub last_heartbeat_at: i64,
    /// Draining, with an undrain asked for: `up` again at its next heartbeat unless the
    /// instance is shutting down itself.
    #[sqlx(default)]
    pub undrain_requested: bool,
}

impl Executor {
    /// Whether this instance announced a handler of that name.
    pub fn has_handler(&self, name: &str) -> bool {
        self.handlers.0.iter().any(|h| h == name)
    }
}

/// The most handlers an instance may announce.
pub const MAX_HANDLERS: usize = 1_000;
/// The most labels an instance may announce (keys 1 to 64 characters, values up to 256).
pub const MAX_LABELS: usize = 64;

/// What a wrapper announces when it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorRegistration {
    pub app_id: AppId,
    pub instance_id: String,
    pub base_url: String,
    pub capacity: i32,
    pub handlers: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

impl ExecutorRegistration {
    /// Checks the fields.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_len("instance_id", &self.instance_id, 1, 200)?;
        check_len("base_url", &self.base_url, 1, 2000)?;
        check_base_url("base_url", &self.base_url)?;
        check_range("capacity", i64::from(self.capacity), 0, 1_000_000)?;
        if self.handlers.len() > MAX_HANDLERS {
            return Err(FieldError::new(
                "handlers",
                format!(
                    "at most {MAX_HANDLERS} handlers, not {}",
                    self.handlers.len()
                ),
            ));
        }
        for h in &self.handlers {
            check_len("handlers", h, 1, 200)?;
        }
        if self.labels.len() > MAX_LABELS {
            return Err(FieldError::new(
                "labels",
                format!("at most {MAX_LABELS} labels, not {}", self.labels.len()),
            ));
        }
        for (key, value) in &self.labels {
            check_len("labels", key, 1, 64)?;
            check_len(&format!("labels.{key}"), value, 0, 256)?;
        }
        Ok(())
    }
}

/// What a wrapper reports with each heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutorHeartbeat {
    pub capacity: i32,
    pub running: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration() -> ExecutorRegistration {
        ExecutorRegistration {
            app_id: AppId(1),
            instance_id: "billing-1".into(),
            base_url: "http://10.0.0.5:9010".into(),
            capacity: 4,
            handlers: vec!["report".into()],
            labels: BTreeMap::from([("zone".into(), "eu-1".into())]),
        }
    }

    #[test]
    fn a_registration_announcing_too_much_is_refused_naming_the_field() {
        assert!(registration().validate().is_ok());
        let mut r = registration();
        r.handlers = (0..=MAX_HANDLERS).map(|i| format!("h{i}")).collect();
        assert_eq!(r.validate().unwrap_err().field, "handlers");
        let mut r = registration();
        r.labels = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        assert_eq!(r.validate().unwrap_err().field, "labels");
        let mut r = registration();
        r.labels = BTreeMap::from([("k".repeat(100_000), "v".into())]);
        assert_eq!(r.validate().unwrap_err().field, "labels");
        let mut r = registration();
        r.labels = BTreeMap::from([("zone".into(), "v".repeat(1_000_000))]);
        assert_eq!(r.validate().unwrap_err().field, "labels.zone");
    }
}
