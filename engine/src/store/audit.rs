//! The audit trail: events appended by every change people make, listed newest first.
//!
//! Every operation here is written once for both backends; neither has its own.

use async_trait::async_trait;
use sqlx::types::Json;

use super::tx::{StoreTx, on_conn};
use super::{Result, Scope, page_limit};
use crate::audit::{AuditEvent, NewAuditEvent};

/// The audit trail.
#[async_trait]
pub trait Audit: Send {
    async fn append_audit(&mut self, event: &NewAuditEvent, now: i64) -> Result<AuditEvent>;
    /// Newest first.
    async fn list_audit(
        &mut self,
        scope: Scope,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditEvent>>;
}

#[async_trait]
impl Audit for StoreTx {
    async fn append_audit(&mut self, event: &NewAuditEvent, now: i64) -> Result<AuditEvent> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
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
        .fetch_one(&mut **c)
        .await
        })?)
    }

    async fn list_audit(
        &mut self,
        scope: Scope,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditEvent>> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT * FROM audit_events WHERE ($1 IS NULL OR tenant_id = $1) AND ($2 IS NULL OR id < $2)
             ORDER BY id DESC LIMIT $3",
        )
        .bind(scope.tenant())
        .bind(before_id)
        .bind(page_limit(Some(limit)))
        .fetch_all(&mut **c)
        .await
        })?)
    }
}
