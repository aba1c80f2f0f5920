//! Users and their roles, and API tokens.
//!
//! Tenant users are managed by their tenant's admins (and operators) under
//! `/tenants/{tenant}/users`; operators manage operators under `/users`. Everyone manages their
//! own tokens; admins also issue and revoke tokens of the users they manage.

use mthpt_engine::store::{Scope, UserUpdate};
use mthpt_engine::tenant::{ApiToken, ApiTokenId, NewApiToken, NewUser, Role, User, UserId};
use serde_json::json;

use super::credentials::{hash_password, new_token, token_hash};
use super::{Change, Services, audit};
use crate::service::access::{Action, Caller, Target, authorize, tenant_access};
use crate::service::error::{ApiError, ApiResult, Code};

/// The shortest password accepted.
pub const MIN_PASSWORD_LEN: usize = 10;

/// Which users a request manages: one tenant's (`/tenants/{tenant}/users`) or the operators
/// (`/users`).
#[derive(Debug, Clone, Copy)]
pub enum Where<'a> {
    Tenant(&'a str),
    Platform,
}

async fn scope(services: &Services, caller: &Caller, at: Where<'_>) -> ApiResult<Scope> {
    match at {
        Where::Tenant(name) => Ok(Scope::Tenant(
            tenant_access(services, caller, name, Action::Administer)
                .await?
                .id,
        )),
        Where::Platform => {
            authorize(caller, Action::Platform, Target::Platform)?;
            Ok(Scope::Cluster)
        }
    }
}

fn check_password(password: &str) -> ApiResult<()> {
    if password.chars().count() < MIN_PASSWORD_LEN {
        return Err(ApiError::field(
            "password",
            format!("must have at least {MIN_PASSWORD_LEN} characters"),
        ));
    }
    if password.len() > 1000 {
        return Err(ApiError::field("password", "must have at most 1000 bytes"));
    }
    Ok(())
}

/// Operators live under `/users`, tenant roles under their tenant.
fn check_role(scope: Scope, role: Role) -> ApiResult<()> {
    match (scope, role) {
        (Scope::Cluster, Role::Operator) => Ok(()),
        (Scope::Cluster, _) => Err(ApiError::field(
            "role",
            "create tenant users under /tenants/{tenant}/users; /users holds operators",
        )),
        (Scope::Tenant(_), Role::Operator) => Err(ApiError::field(
            "role",
            "a tenant user is tenant_admin, tenant_operator or tenant_viewer",
        )),
        (Scope::Tenant(_), _) => Ok(()),
    }
}

async fn hash(password: String) -> ApiResult<String> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}

fn tenant_of(scope: Scope) -> Option<mthpt_engine::tenant::TenantId> {
    match scope {
        Scope::Tenant(t) => Some(t),
        Scope::Cluster => None,
    }
}

pub async fn list(services: &Services, caller: &Caller, at: Where<'_>) -> ApiResult<Vec<User>> {
    let scope = scope(services, caller, at).await?;
    let mut tx = services.read().await?;
    let users = tx.list_users(scope).await?;
    // `/users` lists operators; tenant users are listed under their tenant.
    Ok(match scope {
        Scope::Cluster => users
            .into_iter()
            .filter(|u| u.role == Role::Operator)
            .collect(),
        Scope::Tenant(_) => users,
    })
}

/// The user `id` in the scope (an operator is not found under a tenant, nor a tenant user
/// under `/users`).
async fn find(services: &Services, scope: Scope, id: UserId) -> ApiResult<User> {
    let mut tx = services.read().await?;
    let user = tx.get_user(scope, id).await?;
    if scope == Scope::Cluster && user.role != Role::Operator {
        return Err(ApiError::not_found(format!("user {id}")));
    }
    Ok(user)
}

pub async fn get(
    services: &Services,
    caller: &Caller,
    at: Where<'_>,
    id: UserId,
) -> ApiResult<User> {
    let scope = scope(services, caller, at).await?;
    find(services, scope, id).await
}

/// Creates a user with a password.
pub async fn create(
    services: &Services,
    caller: &Caller,
    at: Where<'_>,
    username: &str,
    password: &str,
    role: Role,
) -> ApiResult<User> {
    let scope = scope(services, caller, at).await?;
    check_role(scope, role)?;
    check_password(password)?;
    let new = NewUser {
        tenant_id: tenant_of(scope),
        username: username.to_owned(),
        password_hash: hash(password.to_owned()).await?,
        role,
    };
    new.validate()?;
    let now = services.now();
    let mut tx = services.write().await?;
    let user = tx.create_user(&new, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: user.tenant_id,
            action: "user.create",
            target_kind: "user",
            target_id: user.id.to_string(),
            details: json!({ "username": user.username, "role": user.role }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(user)
}

/// A change to a user: role grant, disabling, a new password.
#[derive(Debug, Clone, Default)]
pub struct UserChange {
    pub role: Option<Role>,
    pub disabled: Option<bool>,
    pub password: Option<String>,
}

pub async fn update(
    services: &Services,
    caller: &Caller,
    at: Where<'_>,
    id: UserId,
    change: UserChange,
) -> ApiResult<User> {
    let scope = scope(services, caller, at).await?;
    let user = find(services, scope, id).await?;
    if let Some(role) = change.role {
        check_role(scope, role)?;
    }
    if user.id == caller.user.id && (change.disabled == Some(true) || change.role.is_some()) {
        return Err(ApiError::new(
            Code::Conflict,
            "you cannot disable yourself or change your own role; ask another admin",
        ));
    }
    let password_hash = match change.password {
        Some(p) => {
            check_password(&p)?;
            Some(hash(p).await?)
        }
        None => None,
    };
    let now = services.now();
    let mut tx = services.write().await?;
    let updated = tx
        .update_user(
            scope,
            id,
            &UserUpdate {
                password_hash: password_hash.clone(),
                role: change.role,
                disabled: change.disabled,
            },
            now,
        )
        .await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: updated.tenant_id,
            action: "user.update",
            target_kind: "user",
            target_id: id.to_string(),
            details: json!({
                "role": change.role,
                "disabled": change.disabled,
                "password_changed": password_hash.is_some(),
            }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(updated)
}

pub async fn delete(
    services: &Services,
    caller: &Caller,
    at: Where<'_>,
    id: UserId,
) -> ApiResult<()> {
    let scope = scope(services, caller, at).await?;
    let user = find(services, scope, id).await?;
    if user.id == caller.user.id {
        return Err(ApiError::new(Code::Conflict, "you cannot delete yourself"));
    }
    let now = services.now();
    let mut tx = services.write().await?;
    tx.delete_user(scope, id).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: user.tenant_id,
            action: "user.delete",
            target_kind: "user",
            target_id: id.to_string(),
            details: json!({ "username": user.username }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Whose tokens a request manages.
#[derive(Debug, Clone, Copy)]
pub enum TokenOwner<'a> {
    /// The caller's own.
    Me,
    /// A user the caller manages.
    User(Where<'a>, UserId),
}

async fn owner(services: &Services, caller: &Caller, whose: TokenOwner<'_>) -> ApiResult<User> {
    match whose {
        TokenOwner::Me => Ok(caller.user.clone()),
        TokenOwner::User(at, id) => {
            let scope = scope(services, caller, at).await?;
            find(services, scope, id).await
        }
    }
}

/// A new token and its value, shown only in this answer.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub token: ApiToken,
    pub value: String,
}

pub async fn list_tokens(
    services: &Services,
    caller: &Caller,
    whose: TokenOwner<'_>,
) -> ApiResult<Vec<ApiToken>> {
    let user = owner(services, caller, whose).await?;
    let mut tx = services.read().await?;
    Ok(tx.list_api_tokens(user.id).await?)
}

/// The role a new token of `owner` gets when `asked` for: never above what the caller may do
/// (a token limited to a lower role mints tokens no higher than that) nor above the owner's
/// role; operators' tokens are operator tokens and tenant users' tokens have tenant roles.
/// Not asked: the highest allowed.
pub fn token_role(caller: &Caller, owner: &User, asked: Option<Role>) -> ApiResult<Role> {
    let ceiling = owner.role.lower(caller.role());
    let Some(role) = asked else {
        return Ok(ceiling);
    };
    if role.is_tenant_role() != owner.role.is_tenant_role() {
        return Err(ApiError::field(
            "role",
            if owner.role.is_tenant_role() {
                "a tenant user's token has a tenant role: tenant_admin, tenant_operator or tenant_viewer"
            } else {
                "an operator's token has the operator role"
            },
        ));
    }
    if role.rank() > ceiling.rank() {
        return Err(ApiError::new(
            Code::RoleAboveOwn,
            format!(
                "a token for {} may have at most the role {ceiling}, not {role}",
                owner.username
            ),
        ));
    }
    Ok(role)
}

/// When a new token expires: as asked, but never after the token that makes it (a token that
/// expires mints no token outliving it); not asked, with the caller's token (never, when the
/// caller's credential does not expire).
fn token_expiry(caller: &Caller, asked: Option<i64>) -> ApiResult<Option<i64>> {
    let Some(limit) = caller.token_expires_at() else {
        return Ok(asked);
    };
    match asked {
        None => Ok(Some(limit)),
        Some(at) if at <= limit => Ok(Some(at)),
        Some(_) => Err(ApiError::field(
            "expires_at",
            format!(
                "must be no later than the expiry of the token making it ({})",
                crate::service::at(limit).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ),
        )),
    }
}

pub async fn create_token(
    services: &Services,
    caller: &Caller,
    whose: TokenOwner<'_>,
    name: &str,
    expires_at: Option<i64>,
    role: Option<Role>,
) -> ApiResult<IssuedToken> {
    let user = owner(services, caller, whose).await?;
    let role = token_role(caller, &user, role)?;
    let now = services.now();
    if expires_at.is_some_and(|at| at <= now) {
        return Err(ApiError::field("expires_at", "must be in the future"));
    }
    let expires_at = token_expiry(caller, expires_at)?;
    let value = new_token();
    let new = NewApiToken {
        user_id: user.id,
        name: name.to_owned(),
        token_hash: token_hash(&value),
        expires_at,
        role: Some(role),
    };
    new.validate()?;
    let mut tx = services.write().await?;
    let token = tx.create_api_token(&new, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: user.tenant_id,
            action: "token.create",
            target_kind: "api_token",
            target_id: token.id.to_string(),
            details: json!({
                "user": user.username,
                "name": token.name,
                "expires_at": expires_at,
                "role": role,
            }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(IssuedToken { token, value })
}

pub async fn revoke_token(
    services: &Services,
    caller: &Caller,
    whose: TokenOwner<'_>,
    id: ApiTokenId,
) -> ApiResult<()> {
    let user = owner(services, caller, whose).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    // A token limited to a lower role revokes no token that may do more than it.
    if let Some(token) = tx
        .list_api_tokens(user.id)
        .await?
        .into_iter()
        .find(|t| t.id == id)
    {
        let role = token.effective_role(&user);
        if role.rank() > caller.role().rank() {
            return Err(ApiError::new(
                Code::RoleAboveOwn,
                format!(
                    "token {id} has the role {role}, above this credential's {}; it cannot be revoked with it",
                    caller.role()
                ),
            ));
        }
    }
    tx.revoke_api_token(user.id, id, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: user.tenant_id,
            action: "token.revoke",
            target_kind: "api_token",
            target_id: id.to_string(),
            details: json!({ "user": user.username }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
