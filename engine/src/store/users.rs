//! Users and API tokens: accounts (tenant users and operators, scoped by [`Scope`]) and the
//! tokens that authenticate scripts as one of them. Console sessions and sign-in attempts are
//! in [`sessions`](super::sessions).
//!
//! [`Scope`]: crate::store::Scope
//!
//! Every operation here is written once for both backends; neither has its own.

use async_trait::async_trait;

use super::tx::{StoreTx, check_or, found, is_fk, on_conn, unique_or};
use super::{Result, Scope, StoreError, UserUpdate};
use crate::tenant::{ApiToken, ApiTokenId, NewApiToken, NewUser, User, UserId};

/// Users (tenant users and operators) and the API tokens that act as them.
#[async_trait]
pub trait Users: Send {
    async fn create_user(&mut self, new: &NewUser, now: i64) -> Result<User>;
    /// For sign-in: any user by name.
    async fn find_user_by_username(&mut self, username: &str) -> Result<Option<User>>;
    /// Users of one tenant, or every user for [`Scope::Cluster`].
    async fn list_users(&mut self, scope: Scope) -> Result<Vec<User>>;
    /// A user in the scope (operators are in [`Scope::Cluster`] only).
    async fn get_user(&mut self, scope: Scope, id: UserId) -> Result<User>;
    async fn update_user(
        &mut self,
        scope: Scope,
        id: UserId,
        update: &UserUpdate,
        now: i64,
    ) -> Result<User>;
    async fn delete_user(&mut self, scope: Scope, id: UserId) -> Result<()>;
    async fn create_api_token(&mut self, new: &NewApiToken, now: i64) -> Result<ApiToken>;
    /// The valid token with this hash and its (enabled) user, marking it used; `None` when the
    /// token is unknown, revoked, expired or its user disabled.
    async fn authenticate_api_token(
        &mut self,
        token_hash: &str,
        now: i64,
    ) -> Result<Option<(ApiToken, User)>>;
    /// Whether token `id` still holds at `now`: not revoked, not expired, its user enabled.
    /// Reads only (an open WebSocket asks every few seconds).
    async fn api_token_holds(&mut self, id: ApiTokenId, now: i64) -> Result<bool>;
    async fn list_api_tokens(&mut self, user: UserId) -> Result<Vec<ApiToken>>;
    async fn revoke_api_token(&mut self, user: UserId, id: ApiTokenId, now: i64) -> Result<()>;
}

#[async_trait]
impl Users for StoreTx {
    async fn create_user(&mut self, new: &NewUser, now: i64) -> Result<User> {
        new.validate()?;
        on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO users (tenant_id, username, password_hash, role, disabled, created_at, updated_at)
             VALUES ($1, $2, $3, $4, FALSE, $5, $5) RETURNING *",
        )
        .bind(new.tenant_id)
        .bind(&new.username)
        .bind(&new.password_hash)
        .bind(new.role.as_str())
        .bind(now)
        .fetch_one(&mut **c)
        .await)
        .map_err(|e| match e {
            e @ sqlx::Error::Database(_) if is_fk(&e) => StoreError::NotFound(format!(
                "tenant {}",
                new.tenant_id.map_or_else(String::new, |t| t.to_string())
            )),
            e => unique_or(e, || format!("username {:?} is taken", new.username)),
        })
    }

    async fn find_user_by_username(&mut self, username: &str) -> Result<Option<User>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM users WHERE username = $1"
        )
        .bind(username)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn list_users(&mut self, scope: Scope) -> Result<Vec<User>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM users WHERE ($1 IS NULL OR tenant_id = $1) ORDER BY id",
        )
        .bind(scope.tenant())
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn get_user(&mut self, scope: Scope, id: UserId) -> Result<User> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM users WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)",
        )
        .bind(id)
        .bind(scope.tenant())
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("user {id}"))
    }

    async fn update_user(
        &mut self,
        scope: Scope,
        id: UserId,
        update: &UserUpdate,
        now: i64,
    ) -> Result<User> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "UPDATE users SET password_hash = COALESCE($3, password_hash),
                 role = COALESCE($4, role), disabled = COALESCE($5, disabled), updated_at = $6
             WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2) RETURNING *",
        )
        .bind(id)
        .bind(scope.tenant())
        .bind(update.password_hash.as_deref())
        .bind(update.role.map(|r| r.as_str()))
        .bind(update.disabled)
        .bind(now)
        .fetch_optional(&mut **c)
        .await)
        .map_err(|e| {
            check_or(e, || {
                "role: an operator cannot become a tenant user, nor a tenant user an operator"
                    .to_owned()
            })
        })?;
        found(row, || format!("user {id}"))
    }

    async fn delete_user(&mut self, scope: Scope, id: UserId) -> Result<()> {
        let done = on_conn!(self, |c| sqlx::query(
            "DELETE FROM users WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)"
        )
        .bind(id)
        .bind(scope.tenant())
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        if done == 0 {
            return Err(StoreError::NotFound(format!("user {id}")));
        }
        Ok(())
    }

    async fn create_api_token(&mut self, new: &NewApiToken, now: i64) -> Result<ApiToken> {
        new.validate()?;
        on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO api_tokens (user_id, name, token_hash, created_at, expires_at, role)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING *",
        )
        .bind(new.user_id)
        .bind(&new.name)
        .bind(&new.token_hash)
        .bind(now)
        .bind(new.expires_at)
        .bind(new.role.map(|r| r.as_str()))
        .fetch_one(&mut **c)
        .await)
        .map_err(|e| match e {
            e @ sqlx::Error::Database(_) if is_fk(&e) => {
                StoreError::NotFound(format!("user {}", new.user_id))
            }
            e => unique_or(e, || "that token already exists".to_owned()),
        })
    }

    async fn authenticate_api_token(
        &mut self,
        token_hash: &str,
        now: i64,
    ) -> Result<Option<(ApiToken, User)>> {
        let token: Option<ApiToken> = on_conn!(self, |c| {
            sqlx::query_as(
            "UPDATE api_tokens SET last_used_at = $2
             WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)
               AND user_id IN (SELECT id FROM users WHERE disabled = FALSE)
             RETURNING *",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&mut **c)
        .await
        })?;
        let Some(token) = token else { return Ok(None) };
        let user: User = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM users WHERE id = $1"
        )
        .bind(token.user_id)
        .fetch_one(&mut **c)
        .await)?;
        Ok(Some((token, user)))
    }

    async fn api_token_holds(&mut self, id: ApiTokenId, now: i64) -> Result<bool> {
        let n: i64 = on_conn!(self, |c| sqlx::query_scalar(
            "SELECT COUNT(*) FROM api_tokens
             WHERE id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)
               AND user_id IN (SELECT id FROM users WHERE disabled = FALSE)",
        )
        .bind(id)
        .bind(now)
        .fetch_one(&mut **c)
        .await)?;
        Ok(n > 0)
    }

    async fn list_api_tokens(&mut self, user: UserId) -> Result<Vec<ApiToken>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM api_tokens WHERE user_id = $1 ORDER BY id"
        )
        .bind(user)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn revoke_api_token(&mut self, user: UserId, id: ApiTokenId, now: i64) -> Result<()> {
        let done = on_conn!(self, |c| {
            sqlx::query(
            "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $3) WHERE id = $2 AND user_id = $1",
        )
        .bind(user)
        .bind(id)
        .bind(now)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected())
        })?;
        if done == 0 {
            return Err(StoreError::NotFound(format!("API token {id}")));
        }
        Ok(())
    }
}
