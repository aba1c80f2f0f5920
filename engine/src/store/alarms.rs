//! Alarms and their events. Raising an alarm is recorded once per dedupe key; a repeat of an
//! open alarm (same task and kind) is counted on it; each transition (raised, repeated,
//! acknowledged, resolved) writes an event to the `alarm_events` outbox in the same
//! transaction, which the relay takes in batches (one relay at a time per row). Mutes are in
//! [`views`](super::views).
//!
//! Written per dialect, in `pg/alarms.rs` and `sqlite/alarms.rs`: `mark_alarms_published`,
//! `mark_alarm_events_published` and `tasks_with_unresolved_alarms` (lists of ids).

use async_trait::async_trait;
use sqlx::types::Json;

use super::tx::{Conn, Dialect, Locking, StoreTx, found, on_conn};
use super::{Result, Scope, page_limit, pg, sqlite};
use crate::alarm::{
    Alarm, AlarmEvent, AlarmEventId, AlarmEventKind, AlarmFilter, AlarmId, NewAlarm,
};
use crate::task::TaskId;
use crate::tenant::TenantId;

/// Alarms and the outbox of their events.
#[async_trait]
pub trait Alarms: Send {
    /// Raises an alarm; `None` when one with the same dedupe key exists. A repeat of an open
    /// alarm of the same task and kind is recorded against it (`repeat_of`) and counted on it
    /// (`count`, `last_seen`): the open alarm is returned, with an `repeated` event. A new
    /// alarm that is not muted gets a `raised` event.
    async fn insert_alarm(&mut self, alarm: &NewAlarm, now: i64) -> Result<Option<Alarm>>;
    /// Writes an event of `alarm` to the outbox (with a snapshot of the alarm).
    async fn insert_alarm_event(
        &mut self,
        event: AlarmEventKind,
        alarm: &Alarm,
        now: i64,
    ) -> Result<AlarmEvent>;
    /// The oldest alarms whose `raised` event was not published yet (repeats left out);
    /// concurrent callers get disjoint sets.
    async fn list_unpublished_alarms(&mut self, limit: i64) -> Result<Vec<Alarm>>;
    async fn mark_alarms_published(&mut self, ids: &[AlarmId], now: i64) -> Result<u64>;
    /// The oldest unpublished alarm events, locked until the transaction ends; concurrent
    /// relays get disjoint sets.
    async fn list_unpublished_alarm_events(&mut self, limit: i64) -> Result<Vec<AlarmEvent>>;
    /// Marks events published (and, for `raised` events, their alarms); returns how many
    /// events were not marked before.
    async fn mark_alarm_events_published(&mut self, ids: &[AlarmEventId], now: i64) -> Result<u64>;
    /// Resolves a task's unresolved alarms of the kinds a success ends
    /// ([`AlarmKind::resolved_by_success`](crate::alarm::AlarmKind::resolved_by_success)),
    /// with a `resolved` event each (muted ones excepted); returns them. Runs in the success's
    /// transaction, for the tasks [`Alarms::tasks_with_unresolved_alarms`] names.
    async fn resolve_task_alarms(&mut self, task: TaskId, now: i64) -> Result<Vec<Alarm>>;
    /// Those of `tasks` that have unresolved alarms a success resolves (one statement for a
    /// batch of results; usually none).
    async fn tasks_with_unresolved_alarms(&mut self, tasks: &[TaskId]) -> Result<Vec<TaskId>>;
    /// Resolves the tenant's unresolved alarm with this dedupe key (a wrapper saying its
    /// condition is over), with a `resolved` event unless it was muted; `None` when there is
    /// no such open alarm.
    async fn resolve_alarm_by_key(
        &mut self,
        tenant: TenantId,
        dedupe_key: &str,
        now: i64,
    ) -> Result<Option<Alarm>>;
    async fn get_alarm(&mut self, scope: Scope, id: AlarmId) -> Result<Alarm>;
    async fn list_alarms(&mut self, scope: Scope, filter: &AlarmFilter) -> Result<Vec<Alarm>>;
    /// Acknowledges an alarm (idempotent: the first acknowledgement is kept, and only it writes
    /// an `acknowledged` event).
    async fn acknowledge_alarm(
        &mut self,
        scope: Scope,
        id: AlarmId,
        by: &str,
        now: i64,
    ) -> Result<Alarm>;
}

#[async_trait]
impl Alarms for StoreTx {
    async fn insert_alarm(&mut self, alarm: &NewAlarm, now: i64) -> Result<Option<Alarm>> {
        // The open alarm this one repeats, unless the task's alarms are muted now (then
        // it is recorded muted, on its own).
        let open: Option<Alarm> = match alarm.task_id {
            None => None,
            Some(task) => on_conn!(self, |c| sqlx::query_as(c.sql(&INSERT_ALARM))
                .bind(task)
                .bind(alarm.kind.as_str())
                .bind(now)
                .bind(alarm.app_kind())
                .fetch_optional(&mut **c)
                .await)?,
        };
        let inserted: Option<Alarm> = on_conn!(self, |c| {
            sqlx::query_as(
            "INSERT INTO alarms (tenant_id, kind, severity, task_id, run_id, executor_id, node_id,
                 message, details, dedupe_key, created_at, muted, last_seen, repeat_of)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
                 EXISTS (SELECT 1 FROM alarm_mutes WHERE task_id = $4 AND muted_until > $11),
                 $11, $12)
             ON CONFLICT DO NOTHING RETURNING *",
        )
        .bind(alarm.tenant_id)
        .bind(alarm.kind.as_str())
        .bind(alarm.severity.as_str())
        .bind(alarm.task_id)
        .bind(alarm.run_id)
        .bind(alarm.executor_id)
        .bind(alarm.node_id.as_deref())
        .bind(&alarm.message)
        .bind(Json(&alarm.details))
        .bind(alarm.dedupe_key.as_deref())
        .bind(now)
        .bind(open.as_ref().map(|o| o.id))
        .fetch_optional(&mut **c)
        .await
        })?;
        let Some(inserted) = inserted else {
            return Ok(None);
        };
        if let Some(open) = open {
            let bumped: Alarm = on_conn!(self, |c| sqlx::query_as(
                "UPDATE alarms SET count = count + 1, last_seen = $2 WHERE id = $1 RETURNING *",
            )
            .bind(open.id)
            .bind(now)
            .fetch_one(&mut **c)
            .await)?;
            // The event tells of the latest occurrence: its message, run and details, on the
            // open alarm's id and count (a pop-up shows what happened last).
            let latest = Alarm {
                message: inserted.message,
                run_id: inserted.run_id,
                details: inserted.details,
                ..bumped.clone()
            };
            crate::store::Alarms::insert_alarm_event(
                &mut *self,
                AlarmEventKind::Repeated,
                &latest,
                now,
            )
            .await?;
            return Ok(Some(bumped));
        }
        if !inserted.muted {
            crate::store::Alarms::insert_alarm_event(
                &mut *self,
                AlarmEventKind::Raised,
                &inserted,
                now,
            )
            .await?;
        }
        Ok(Some(inserted))
    }

    async fn insert_alarm_event(
        &mut self,
        event: AlarmEventKind,
        alarm: &Alarm,
        now: i64,
    ) -> Result<AlarmEvent> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO alarm_events (alarm_id, tenant_id, event, alarm, created_at)
             VALUES ($1, $2, $3, $4, $5) RETURNING *",
        )
        .bind(alarm.id)
        .bind(alarm.tenant_id)
        .bind(event.as_str())
        .bind(Json(alarm))
        .bind(now)
        .fetch_one(&mut **c)
        .await)?)
    }

    async fn list_unpublished_alarms(&mut self, limit: i64) -> Result<Vec<Alarm>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            c.sql(&LIST_UNPUBLISHED_ALARMS)
        )
        .bind(limit)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn mark_alarms_published(&mut self, ids: &[AlarmId], now: i64) -> Result<u64> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::alarms::mark_alarms_published(c, ids, now).await,
            Conn::Sqlite(c) => sqlite::alarms::mark_alarms_published(c, ids, now).await,
        }
    }

    async fn list_unpublished_alarm_events(&mut self, limit: i64) -> Result<Vec<AlarmEvent>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            c.sql(&LIST_UNPUBLISHED_ALARM_EVENTS)
        )
        .bind(limit)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn mark_alarm_events_published(&mut self, ids: &[AlarmEventId], now: i64) -> Result<u64> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::alarms::mark_alarm_events_published(c, ids, now).await,
            Conn::Sqlite(c) => sqlite::alarms::mark_alarm_events_published(c, ids, now).await,
        }
    }

    async fn resolve_task_alarms(&mut self, task: TaskId, now: i64) -> Result<Vec<Alarm>> {
        let resolved: Vec<Alarm> = on_conn!(self, |c| {
            // Never before the alarm was raised: the success resolving it may carry an
            // executor's finish time older than an alarm the engine raised since.
            sqlx::query_as("UPDATE alarms
             SET resolved_at = CASE WHEN created_at > $2 THEN created_at ELSE $2 END
             WHERE task_id = $1 AND resolved_at IS NULL AND repeat_of IS NULL
               AND kind IN ('run_failed', 'retries_exhausted', 'timed_out', 'not_started') RETURNING *")
        .bind(task)
        .bind(now)
        .fetch_all(&mut **c)
        .await
        })?;
        for alarm in resolved.iter().filter(|a| !a.muted) {
            crate::store::Alarms::insert_alarm_event(
                &mut *self,
                AlarmEventKind::Resolved,
                alarm,
                alarm.resolved_at.unwrap_or(now),
            )
            .await?;
        }
        Ok(resolved)
    }

    async fn tasks_with_unresolved_alarms(&mut self, tasks: &[TaskId]) -> Result<Vec<TaskId>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::alarms::tasks_with_unresolved_alarms(c, tasks).await,
            Conn::Sqlite(c) => sqlite::alarms::tasks_with_unresolved_alarms(c, tasks).await,
        }
    }

    async fn resolve_alarm_by_key(
        &mut self,
        tenant: TenantId,
        dedupe_key: &str,
        now: i64,
    ) -> Result<Option<Alarm>> {
        let resolved: Option<Alarm> = on_conn!(self, |c| sqlx::query_as(
            "UPDATE alarms SET resolved_at = $3
             WHERE tenant_id = $1 AND dedupe_key = $2 AND resolved_at IS NULL
               AND repeat_of IS NULL
             RETURNING *",
        )
        .bind(tenant)
        .bind(dedupe_key)
        .bind(now)
        .fetch_optional(&mut **c)
        .await)?;
        if let Some(alarm) = resolved.as_ref().filter(|a| !a.muted) {
            crate::store::Alarms::insert_alarm_event(
                &mut *self,
                AlarmEventKind::Resolved,
                alarm,
                alarm.resolved_at.unwrap_or(now),
            )
            .await?;
        }
        Ok(resolved)
    }

    async fn get_alarm(&mut self, scope: Scope, id: AlarmId) -> Result<Alarm> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM alarms WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)",
        )
        .bind(id)
        .bind(scope.tenant())
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("alarm {id}"))
    }

    async fn list_alarms(&mut self, scope: Scope, filter: &AlarmFilter) -> Result<Vec<Alarm>> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT * FROM alarms WHERE ($1 IS NULL OR tenant_id = $1) AND repeat_of IS NULL
               AND ($2 IS NULL OR kind = $2)
               AND ($3 = FALSE OR (acknowledged_at IS NULL AND resolved_at IS NULL AND muted = FALSE))
               AND ($4 IS NULL OR id < $4)
               AND ($6 IS NULL OR severity = $6) AND ($7 IS NULL OR task_id = $7)
               AND ($8 = FALSE OR acknowledged_at IS NOT NULL)
               AND ($9 IS NULL OR muted = $9)
               AND ($10 IS NULL OR executor_id = $10)
             ORDER BY id DESC LIMIT $5",
        )
        .bind(scope.tenant())
        .bind(filter.kind.map(|k| k.as_str()))
        .bind(filter.unacknowledged)
        .bind(filter.before_id)
        .bind(page_limit(filter.limit))
        .bind(filter.severity.map(|s| s.as_str()))
        .bind(filter.task_id)
        .bind(filter.acknowledged)
        .bind(filter.muted)
        .bind(filter.executor_id)
        .fetch_all(&mut **c)
        .await
        })?)
    }

    async fn acknowledge_alarm(
        &mut self,
        scope: Scope,
        id: AlarmId,
        by: &str,
        now: i64,
    ) -> Result<Alarm> {
        let first: Option<Alarm> = on_conn!(self, |c| sqlx::query_as(
            "UPDATE alarms SET acknowledged_at = $3, acknowledged_by = $4
             WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)
               AND acknowledged_at IS NULL AND repeat_of IS NULL RETURNING *",
        )
        .bind(id)
        .bind(scope.tenant())
        .bind(now)
        .bind(by)
        .fetch_optional(&mut **c)
        .await)?;
        match first {
            Some(alarm) => {
                if !alarm.muted {
                    crate::store::Alarms::insert_alarm_event(
                        &mut *self,
                        AlarmEventKind::Acknowledged,
                        &alarm,
                        now,
                    )
                    .await?;
                }
                Ok(alarm)
            }
            None => crate::store::Alarms::get_alarm(&mut *self, scope, id).await,
        }
    }
}

/// The statement of `insert_alarm` that locks rows (on PostgreSQL; SQLite has one writer).
const INSERT_ALARM: Locking = Locking {
    postgres: "SELECT * FROM alarms WHERE task_id = $1 AND kind = $2
                   AND ($4 IS NULL OR details ->> 'app_kind' = $4)
                   AND resolved_at IS NULL AND repeat_of IS NULL
                   AND acknowledged_at IS NULL AND muted = FALSE
                   AND NOT EXISTS (SELECT 1 FROM alarm_mutes m WHERE m.task_id = $1 AND m.muted_until > $3)
                 ORDER BY id DESC LIMIT 1 FOR UPDATE",
    sqlite: "SELECT * FROM alarms WHERE task_id = $1 AND kind = $2
                   AND ($4 IS NULL OR details ->> 'app_kind' = $4)
                   AND resolved_at IS NULL AND repeat_of IS NULL
                   AND acknowledged_at IS NULL AND muted = FALSE
                   AND NOT EXISTS (SELECT 1 FROM alarm_mutes m WHERE m.task_id = $1 AND m.muted_until > $3)
                 ORDER BY id DESC LIMIT 1",
};

/// The statement of `list_unpublished_alarms` that locks rows (on PostgreSQL; SQLite has one writer).
const LIST_UNPUBLISHED_ALARMS: Locking = Locking {
    postgres:
        "SELECT * FROM alarms WHERE published_at IS NULL AND muted = FALSE AND repeat_of IS NULL
             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
    sqlite:
        "SELECT * FROM alarms WHERE published_at IS NULL AND muted = FALSE AND repeat_of IS NULL
             ORDER BY id LIMIT $1",
};

/// The statement of `list_unpublished_alarm_events` that locks rows (on PostgreSQL; SQLite has one writer).
const LIST_UNPUBLISHED_ALARM_EVENTS: Locking = Locking {
    postgres: "SELECT * FROM alarm_events WHERE published_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
    sqlite: "SELECT * FROM alarm_events WHERE published_at IS NULL ORDER BY id LIMIT $1",
};
