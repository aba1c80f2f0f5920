//! Console sign-in: user name and password (argon2id) → a server-side session, rate-limited
//! per user name and per client address across every console node (attempts live in the
//! database), and sign-out, which revokes the session.

use std::sync::OnceLock;

use mthpt_engine::tenant::{NewSession, User};
use serde_json::json;

use super::credentials::{hash_password, random_hex, token_hash, verify_password};
use super::{Services, audit_as};
use crate::service::error::{ApiError, ApiResult, Code};

/// How long a session lasts after sign-in.
pub const SESSION_TTL_MS: i64 = 12 * 60 * 60 * 1000;
/// The window failed attempts are counted over.
pub const LOGIN_WINDOW_MS: i64 = 15 * 60 * 1000;
/// Failed attempts per user name within the window before sign-in is refused with 429.
pub const MAX_FAILURES_PER_USER: i64 = 5;
/// Failed attempts per client address within the window before sign-in is refused with 429.
pub const MAX_FAILURES_PER_ADDRESS: i64 = 20;

/// A new session: the cookie value (shown to the browser only) and the signed-in user.
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub cookie_value: String,
    pub expires_at: i64,
    pub user: User,
    /// The name of the user's tenant (none for operators).
    pub tenant: Option<String>,
}

/// A hash that no password matches, verified when the user does not exist so that both
/// answers take the same time (user names cannot be probed by timing).
fn dummy_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| hash_password(&random_hex(16)).unwrap_or_default())
}

/// Checks the password on a blocking thread (argon2 is deliberately slow).
async fn password_matches(password: String, phc: Option<String>) -> ApiResult<bool> {
    tokio::task::spawn_blocking(move || {
        let known = phc.is_some();
        let phc = phc.unwrap_or_else(|| dummy_hash().to_owned());
        verify_password(&password, &phc) && known
    })
    .await
    .map_err(ApiError::internal)
}

/// Signs in `username` from `address`.
pub async fn sign_in(
    services: &Services,
    username: &str,
    password: &str,
    address: &str,
) -> ApiResult<SignedIn> {
    let now = services.now();
    let since = now - LOGIN_WINDOW_MS;
    let user = {
        let mut tx = services.read().await?;
        let (by_user, by_address) = tx.count_failed_logins(username, address, since).await?;
        if by_user >= MAX_FAILURES_PER_USER || by_address >= MAX_FAILURES_PER_ADDRESS {
            return Err(ApiError::new(
                Code::RateLimited,
                "too many failed sign-in attempts; wait and try again",
            )
            .with_header("Retry-After", (LOGIN_WINDOW_MS / 1000).to_string()));
        }
        tx.find_user_by_username(username).await?
    };
    let ok = password_matches(
        password.to_owned(),
        user.as_ref().map(|u| u.password_hash.clone()),
    )
    .await?;
    let mut tx = services.write().await?;
    let user = match user {
        Some(u) if ok && !u.disabled => u,
        _ => {
            tx.record_login_attempt(username, address, false, since, now)
                .await?;
            tx.commit().await?;
            return Err(ApiError::unauthenticated(
                "wrong user name or password, or the user is disabled",
            ));
        }
    };
    tx.record_login_attempt(username, address, true, since, now)
        .await?;
    let cookie_value = random_hex(32);
    let expires_at = now + SESSION_TTL_MS;
    tx.create_session(
        &NewSession {
            id: token_hash(&cookie_value),
            user_id: user.id,
            expires_at,
        },
        now,
    )
    .await?;
    audit_as(
        tx.as_mut(),
        &user.username,
        super::Change {
            tenant: user.tenant_id,
            action: "session.create",
            target_kind: "user",
            target_id: user.id.to_string(),
            details: json!({ "address": address }),
        },
        now,
    )
    .await?;
    let tenant = match user.tenant_id {
        Some(id) => Some(tx.get_tenant(id).await?.name),
        None => None,
    };
    tx.commit().await?;
    Ok(SignedIn {
        cookie_value,
        expires_at,
        user,
        tenant,
    })
}

/// Revokes the session whose cookie value is `cookie_value`.
pub async fn sign_out(services: &Services, cookie_value: &str) -> ApiResult<()> {
    let mut tx = services.write().await?;
    tx.revoke_session(&token_hash(cookie_value), services.now())
        .await?;
    tx.commit().await?;
    Ok(())
}
