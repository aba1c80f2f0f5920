//! Alarms: the outbox the relay publishes from (raised once per dedupe key, taken by one relay
//! at a time), and the alarm list people read and acknowledge. Mutes are in
//! [`views`](super::views).
//!
//! Dialect-specific (in `postgres.rs`/`sqlite.rs`): `mark_alarms_published` (a list of ids).

/// Adds the alarm operations to the `impl Tx` that [`tx_impl!`](super::tx_impl)
/// writes (see [`tx_ops!`](super::tx_ops) for how the domains join).
macro_rules! alarm_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, $rest:tt, { $($done:tt)* }) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, $rest, {
            $($done)*

            async fn insert_alarm(&mut self, alarm: &NewAlarm, now: i64) -> Result<Option<Alarm>> {
                Ok(sqlx::query_as(
                    "INSERT INTO alarms (tenant_id, kind, severity, task_id, run_id, executor_id, node_id,
                         message, details, dedupe_key, created_at, muted)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
                         EXISTS (SELECT 1 FROM alarm_mutes WHERE task_id = $4 AND muted_until > $11))
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
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn list_unpublished_alarms(&mut self, limit: i64) -> Result<Vec<Alarm>> {
                Ok(sqlx::query_as(concat!(
                    "SELECT * FROM alarms WHERE published_at IS NULL AND muted = FALSE ORDER BY id LIMIT $1",
                    $skip_locked
                ))
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn get_alarm(&mut self, scope: Scope, id: AlarmId) -> Result<Alarm> {
                let row = sqlx::query_as(
                    "SELECT * FROM alarms WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)",
                )
                .bind(id)
                .bind(scope.tenant())
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("alarm {id}"))
            }

            async fn list_alarms(&mut self, scope: Scope, filter: &AlarmFilter) -> Result<Vec<Alarm>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM alarms WHERE ($1 IS NULL OR tenant_id = $1)
                       AND ($2 IS NULL OR kind = $2)
                       AND ($3 = FALSE OR (acknowledged_at IS NULL AND muted = FALSE))
                       AND ($4 IS NULL OR id < $4)
                       AND ($6 IS NULL OR severity = $6) AND ($7 IS NULL OR task_id = $7)
                       AND ($8 = FALSE OR acknowledged_at IS NOT NULL)
                       AND ($9 IS NULL OR muted = $9)
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
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn acknowledge_alarm(&mut self, scope: Scope, id: AlarmId, by: &str, now: i64) -> Result<Alarm> {
                let row = sqlx::query_as(
                    "UPDATE alarms SET acknowledged_at = COALESCE(acknowledged_at, $3),
                         acknowledged_by = COALESCE(acknowledged_by, $4)
                     WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2) RETURNING *",
                )
                .bind(id)
                .bind(scope.tenant())
                .bind(now)
                .bind(by)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("alarm {id}"))
            }
        });
    };
}
pub(crate) use alarm_ops;
