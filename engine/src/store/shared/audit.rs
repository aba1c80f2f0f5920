//! The audit trail: events appended by every change people make, listed newest first.
//!
//! Every audit operation is shared; neither backend has its own.

/// Adds the audit operations to the `impl Tx` that [`tx_impl!`](super::tx_impl)
/// writes (see [`tx_ops!`](super::tx_ops) for how the domains join).
macro_rules! audit_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, $rest:tt, { $($done:tt)* }) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, $rest, {
            $($done)*

            async fn append_audit(&mut self, event: &NewAuditEvent, now: i64) -> Result<AuditEvent> {
                Ok(sqlx::query_as(
                    "INSERT INTO audit_events (tenant_id, actor, action, target_kind, target_id, details, at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *",
                )
                .bind(event.tenant_id)
                .bind(&event.actor)
                .bind(&event.action)
                .bind(&event.target_kind)
                .bind(event.target_id.as_deref())
                .bind(Json(&event.details))
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await?)
            }

            async fn list_audit(&mut self, scope: Scope, before_id: Option<i64>, limit: i64) -> Result<Vec<AuditEvent>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM audit_events WHERE ($1 IS NULL OR tenant_id = $1) AND ($2 IS NULL OR id < $2)
                     ORDER BY id DESC LIMIT $3",
                )
                .bind(scope.tenant())
                .bind(before_id)
                .bind(page_limit(Some(limit)))
                .fetch_all(&mut *self.tx)
                .await?)
            }
        });
    };
}
pub(crate) use audit_ops;
