//! Console sessions and sign-in attempts: sessions started, authenticated and revoked, and the
//! failed attempts counted to slow down password guessing.
//!
//! Every operation here is written once for both backends; neither has its own.

use async_trait::async_trait;

use super::Result;
use super::tx::{StoreTx, fk_or, on_conn};
use crate::tenant::User;

/// Console sessions and the sign-in attempts that limit password guessing.
#[async_trait]
pub trait Sessions: Send {
    /// Starts a console session.
    async fn create_session(
        &mut self,
        new: &crate::tenant::NewSession,
        now: i64,
    ) -> Result<crate::tenant::Session>;
    /// The live session with this id and its (enabled) user, noting that it was seen; `None`
    /// when the session is unknown, revoked or expired, or its user disabled.
    async fn authenticate_session(
        &mut self,
        id: &str,
        now: i64,
    ) -> Result<Option<(crate::tenant::Session, User)>>;
    /// Whether session `id` still holds at `now`: not signed out, not expired, its user
    /// enabled. Reads only (an open WebSocket asks every few seconds).
    async fn session_holds(&mut self, id: &str, now: i64) -> Result<bool>;
    /// Revokes a session (sign-out); false when it was unknown or already revoked.
    async fn revoke_session(&mut self, id: &str, now: i64) -> Result<bool>;
    /// Records a sign-in attempt, forgetting the user name's attempts older than `forget_before`.
    async fn record_login_attempt(
        &mut self,
        username: &str,
        address: &str,
        succeeded: bool,
        forget_before: i64,
        now: i64,
    ) -> Result<()>;
    /// Failed sign-in attempts at or after `since`: (for this user name, from this address).
    async fn count_failed_logins(
        &mut self,
        username: &str,
        address: &str,
        since: i64,
    ) -> Result<(i64, i64)>;
}

#[async_trait]
impl Sessions for StoreTx {
    async fn create_session(
        &mut self,
        new: &crate::tenant::NewSession,
        now: i64,
    ) -> Result<crate::tenant::Session> {
        on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO sessions (id, user_id, created_at, expires_at, last_seen_at)
             VALUES ($1, $2, $3, $4, $3) RETURNING *",
        )
        .bind(&new.id)
        .bind(new.user_id)
        .bind(now)
        .bind(new.expires_at)
        .fetch_one(&mut **c)
        .await)
        .map_err(|e| fk_or(e, || format!("user {}", new.user_id)))
    }

    async fn authenticate_session(
        &mut self,
        id: &str,
        now: i64,
    ) -> Result<Option<(crate::tenant::Session, User)>> {
        let session: Option<crate::tenant::Session> = on_conn!(self, |c| sqlx::query_as(
            "UPDATE sessions SET last_seen_at = $2
             WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2
               AND user_id IN (SELECT id FROM users WHERE disabled = FALSE)
             RETURNING *",
        )
        .bind(id)
        .bind(now)
        .fetch_optional(&mut **c)
        .await)?;
        let Some(session) = session else {
            return Ok(None);
        };
        let user: User = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM users WHERE id = $1"
        )
        .bind(session.user_id)
        .fetch_one(&mut **c)
        .await)?;
        Ok(Some((session, user)))
    }

    async fn session_holds(&mut self, id: &str, now: i64) -> Result<bool> {
        let n: i64 = on_conn!(self, |c| sqlx::query_scalar(
            "SELECT COUNT(*) FROM sessions
             WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2
               AND user_id IN (SELECT id FROM users WHERE disabled = FALSE)",
        )
        .bind(id)
        .bind(now)
        .fetch_one(&mut **c)
        .await)?;
        Ok(n > 0)
    }

    async fn revoke_session(&mut self, id: &str, now: i64) -> Result<bool> {
        let done = on_conn!(self, |c| sqlx::query(
            "UPDATE sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
        )
        .bind(id)
        .bind(now)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(done > 0)
    }

    async fn record_login_attempt(
        &mut self,
        username: &str,
        address: &str,
        succeeded: bool,
        forget_before: i64,
        now: i64,
    ) -> Result<()> {
        on_conn!(self, |c| sqlx::query(
            "DELETE FROM login_attempts WHERE username = $1 AND at < $2"
        )
        .bind(username)
        .bind(forget_before)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        on_conn!(self, |c| sqlx::query(
            "INSERT INTO login_attempts (username, address, at, succeeded) VALUES ($1, $2, $3, $4)",
        )
        .bind(username)
        .bind(address)
        .bind(now)
        .bind(succeeded)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(())
    }

    async fn count_failed_logins(
        &mut self,
        username: &str,
        address: &str,
        since: i64,
    ) -> Result<(i64, i64)> {
        let (by_user,): (i64,) = on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT COUNT(*) FROM login_attempts WHERE username = $1 AND at >= $2 AND succeeded = FALSE",
        )
        .bind(username)
        .bind(since)
        .fetch_one(&mut **c)
        .await
        })?;
        let (by_address,): (i64,) = on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT COUNT(*) FROM login_attempts WHERE address = $1 AND at >= $2 AND succeeded = FALSE",
        )
        .bind(address)
        .bind(since)
        .fetch_one(&mut **c)
        .await
        })?;
        Ok((by_user, by_address))
    }
}
