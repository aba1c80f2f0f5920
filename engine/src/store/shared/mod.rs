//! The SQL both backends share, written once, one file per domain (the map is in the
//! [`store`](crate::store) docs).
//!
//! [`tx_impl!`] writes a backend's `impl Tx`: the backend's own operations (where the SQL
//! differs: arrays, batch inserts, claiming) and then every domain's shared ones. `$N`
//! placeholders work on both backends; a shared statement that locks rows appends the
//! backend's `for_update`/`skip_locked` clause (empty on SQLite, which has one writer at a
//! time).
//!
//! A new shared operation goes into its domain's macro (`tenant_ops!` in `tenants.rs`, …); a
//! new domain file into the list in [`tx_impl!`]. How the domains join is told at [`tx_ops!`].

pub(super) mod alarms;
pub(super) mod apps;
pub(super) mod audit;
pub(super) mod channels;
mod completion;
pub(super) mod nodes;
pub(super) mod rollups;
pub(super) mod runs;
pub(super) mod sessions;
pub(super) mod tasks;
pub(super) mod tenants;
pub(super) mod users;
pub(super) mod views;

use sqlx::error::ErrorKind;

use super::StoreError;

pub(super) use self::completion::{
    completed_tail, late_success_counts, not_final, plan_completions, report_refused,
};
pub(crate) use self::runs::fenced_update;
pub(crate) use self::tasks::bind_task_definition;

/// Maps a unique-constraint violation to [`StoreError::Duplicate`] with `msg`.
pub(super) fn unique_or(e: sqlx::Error, msg: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::UniqueViolation) => {
            StoreError::Duplicate(msg())
        }
        _ => StoreError::from(e),
    }
}

/// Maps a foreign-key violation to [`StoreError::NotFound`] with `what`.
pub(super) fn fk_or(e: sqlx::Error, what: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::ForeignKeyViolation) => {
            StoreError::NotFound(what())
        }
        _ => StoreError::from(e),
    }
}

/// Maps a check-constraint violation to [`StoreError::InvalidState`] with `msg`.
pub(super) fn check_or(e: sqlx::Error, msg: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::CheckViolation) => {
            StoreError::InvalidState(msg())
        }
        _ => StoreError::from(e),
    }
}

/// `Some(x)` or [`StoreError::NotFound`] naming `what`.
pub(super) fn found<T>(row: Option<T>, what: impl FnOnce() -> String) -> Result<T, StoreError> {
    row.ok_or_else(|| StoreError::NotFound(what()))
}

/// Writes `impl Tx for $tx`: the backend's own operations (the braces) and every domain's
/// shared ones. `$for_update` and `$skip_locked` are the backend's row-locking clauses (empty
/// where the backend serialises writers instead).
macro_rules! tx_impl {
    (
        $tx:ty,
        for_update = $for_update:literal,
        skip_locked = $skip_locked:literal,
        { $($dialect:tt)* }
    ) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, [
            tenants::tenant_ops,
            users::user_ops,
            apps::app_ops,
            tasks::task_ops,
            runs::run_ops,
            alarms::alarm_ops,
            nodes::node_ops,
            audit::audit_ops,
            views::view_ops,
            sessions::session_ops,
            channels::channel_ops,
            rollups::rollup_ops,
        ], {
            $($dialect)*
        });
    };
}
pub(crate) use tx_impl;

/// Joins the domains into one `impl Tx`. `async_trait` must see every method of the impl at
/// once, so a domain cannot add its methods by a macro call inside the impl block (that call
/// would expand after `async_trait` ran). Instead each domain's macro appends its methods to
/// the ones gathered so far (`{ … }`) and calls this one again with the rest of the list;
/// after the last domain, this writes the impl block.
macro_rules! tx_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, [], { $($done:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::store::Tx for $tx {
            $($done)*
        }
    };
    (
        $tx:ty, $for_update:literal, $skip_locked:literal,
        [$module:ident :: $domain:ident $(, $rest_module:ident :: $rest:ident)* $(,)?],
        $done:tt
    ) => {
        $crate::store::shared::$module::$domain!(
            $tx, $for_update, $skip_locked, [$($rest_module::$rest),*], $done
        );
    };
}
pub(crate) use tx_ops;

/// Whether `e` is a foreign-key violation.
pub(super) fn is_fk(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::ForeignKeyViolation))
}
