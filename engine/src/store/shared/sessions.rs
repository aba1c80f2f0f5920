//! Console sessions and sign-in attempts: sessions started, authenticated and revoked, and the
//! failed attempts counted to slow down password guessing.
//!
//! Every operation here is shared; neither backend has its own.

/// Adds the session and sign-in operations to the `impl Tx` that [`tx_impl!`](super::tx_impl)
/// writes (see [`tx_ops!`](super::tx_ops) for how the domains join).
macro_rules! session_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, $rest:tt, { $($done:tt)* }) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, $rest, {
            $($done)*

            async fn create_session(
                &mut self,
                new: &crate::tenant::NewSession,
                now: i64,
            ) -> Result<crate::tenant::Session> {
                sqlx::query_as(
                    "INSERT INTO sessions (id, user_id, created_at, expires_at, last_seen_at)
                     VALUES ($1, $2, $3, $4, $3) RETURNING *",
                )
                .bind(&new.id)
                .bind(new.user_id)
                .bind(now)
                .bind(new.expires_at)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(|e| fk_or(e, || format!("user {}", new.user_id)))
            }

            async fn authenticate_session(
                &mut self,
                id: &str,
                now: i64,
            ) -> Result<Option<(crate::tenant::Session, User)>> {
                let session: Option<crate::tenant::Session> = sqlx::query_as(
                    "UPDATE sessions SET last_seen_at = $2
                     WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2
                       AND user_id IN (SELECT id FROM users WHERE disabled = FALSE)
                     RETURNING *",
                )
                .bind(id)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                let Some(session) = session else { return Ok(None) };
                let user: User = sqlx::query_as("SELECT * FROM users WHERE id = $1")
                    .bind(session.user_id)
                    .fetch_one(&mut *self.tx)
                    .await?;
                Ok(Some((session, user)))
            }

            async fn session_holds(&mut self, id: &str, now: i64) -> Result<bool> {
                let n: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM sessions
                     WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2
                       AND user_id IN (SELECT id FROM users WHERE disabled = FALSE)",
                )
                .bind(id)
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await?;
                Ok(n > 0)
            }

            async fn revoke_session(&mut self, id: &str, now: i64) -> Result<bool> {
                let done = sqlx::query(
                    "UPDATE sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
                )
                .bind(id)
                .bind(now)
                .execute(&mut *self.tx)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn record_login_attempt(
                &mut self,
                username: &str,
                address: &str,
                succeeded: bool,
                forget_before: i64,
                now: i64,
            ) -> Result<()> {
                sqlx::query("DELETE FROM login_attempts WHERE username = $1 AND at < $2")
                    .bind(username)
                    .bind(forget_before)
                    .execute(&mut *self.tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO login_attempts (username, address, at, succeeded) VALUES ($1, $2, $3, $4)",
                )
                .bind(username)
                .bind(address)
                .bind(now)
                .bind(succeeded)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn count_failed_logins(
                &mut self,
                username: &str,
                address: &str,
                since: i64,
            ) -> Result<(i64, i64)> {
                let (by_user,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM login_attempts WHERE username = $1 AND at >= $2 AND succeeded = FALSE",
                )
                .bind(username)
                .bind(since)
                .fetch_one(&mut *self.tx)
                .await?;
                let (by_address,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM login_attempts WHERE address = $1 AND at >= $2 AND succeeded = FALSE",
                )
                .bind(address)
                .bind(since)
                .fetch_one(&mut *self.tx)
                .await?;
                Ok((by_user, by_address))
            }
        });
    };
}
pub(crate) use session_ops;
