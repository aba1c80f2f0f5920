//! Who is calling ([`Caller`]) and what they may do ([`authorize`]): the access control every
//! operation checks, whichever door (REST API, web page) the call came through.
//!
//! A caller is authenticated from an API token ([`Caller::from_token`]) or a console session
//! ([`Caller::from_session`]); reading those from a request (headers, cookies, the CSRF rule) is
//! the HTTP layer's part, [`crate::http`]. Unknown, expired and revoked credentials, and those of
//! disabled users, are 401.
//!
//! Authorisation is decided in ONE place, [`decide`], from (role, action, target) and denies by
//! default:
//!
//! | role              | read | operate (trigger, cancel, pause, ack) | administer (tenant config) | platform (tenants, nodes, operators) |
//! |-------------------|------|---------------------------------------|----------------------------|--------------------------------------|
//! | operator          | all tenants | all tenants                    | all tenants                | yes                                  |
//! | tenant_admin      | own  | own                                   | own                        | no                                   |
//! | tenant_operator   | own  | own                                   | no                         | no                                   |
//! | tenant_viewer     | own  | no                                    | no                         | no                                   |
//!
//! A tenant-scoped caller asking about another tenant gets 404 — the same answer as for a tenant
//! that does not exist — so tenant names cannot be probed and no data is ever shown.

use mthpt_engine::tenant::{ApiTokenId, Role, Tenant, TenantId, User};

use super::Services;
use super::credentials::token_hash;
use super::error::{ApiError, ApiResult, Code};

/// How the caller proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// An API token.
    Token {
        id: ApiTokenId,
        name: String,
        /// When the token stops holding (none: never); tokens it mints expire no later.
        expires_at: Option<i64>,
    },
    /// A console session (its id is the hash of the cookie value).
    Session { id: String },
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: User,
    /// What the caller may do: the user's role, or the lower role an API token is limited to.
    role: Role,
    /// The caller's own tenant (none for operators).
    pub tenant: Option<Tenant>,
    pub credential: Credential,
}

impl Caller {
    /// The role requests are authorised with : a token
    /// limited to a lower role than its user's acts with that role.
    pub fn role(&self) -> Role {
        self.role
    }

    pub fn tenant_id(&self) -> Option<TenantId> {
        self.tenant.as_ref().map(|t| t.id)
    }

    /// When the caller's credential stops holding, if it is a token that expires. A session
    /// ends with its user's sign-out and is not limited here.
    pub fn token_expires_at(&self) -> Option<i64> {
        match &self.credential {
            Credential::Token { expires_at, .. } => *expires_at,
            Credential::Session { .. } => None,
        }
    }

    /// How the caller appears in the audit log: the user name, and the token used.
    pub fn actor(&self) -> String {
        match &self.credential {
            Credential::Token { name, .. } => format!("{} (token {name})", self.user.username),
            Credential::Session { .. } => self.user.username.clone(),
        }
    }

    /// Whether the credential this caller authenticated with still holds (not signed out,
    /// revoked or expired; its user not disabled). A read only; when the database cannot
    /// answer, it is given the benefit of the doubt.
    pub async fn still_holds(&self, services: &Services) -> bool {
        let answer = async {
            let mut tx = services.read().await?;
            let now = services.now();
            let holds = match &self.credential {
                Credential::Session { id } => tx.session_holds(id, now).await?,
                Credential::Token { id, .. } => tx.api_token_holds(*id, now).await?,
            };
            Ok::<_, ApiError>(holds)
        };
        answer.await.unwrap_or(true)
    }

    /// The caller of a session cookie's value.
    pub async fn from_session(services: &Services, cookie_value: &str) -> ApiResult<Caller> {
        let id = token_hash(cookie_value);
        let mut tx = services.write().await?;
        let Some((_, user)) = tx.authenticate_session(&id, services.now()).await? else {
            return Err(ApiError::unauthenticated(
                "the session has expired or was signed out; sign in again",
            ));
        };
        let tenant = match user.tenant_id {
            Some(t) => Some(tx.get_tenant(t).await?),
            None => None,
        };
        tx.commit().await?;
        Ok(Caller {
            role: user.role,
            user,
            tenant,
            credential: Credential::Session { id },
        })
    }

    /// The caller of an API token (`mthpt_…`).
    pub async fn from_token(services: &Services, token: &str) -> ApiResult<Caller> {
        let mut tx = services.write().await?;
        let found = tx
            .authenticate_api_token(&token_hash(token), services.now())
            .await?;
        let Some((token, user)) = found else {
            return Err(ApiError::unauthenticated(
                "the API token is unknown, expired or revoked",
            ));
        };
        let tenant = match user.tenant_id {
            Some(id) => Some(tx.get_tenant(id).await?),
            None => None,
        };
        tx.commit().await?;
        Ok(Caller {
            role: token.effective_role(&user),
            user,
            tenant,
            credential: Credential::Token {
                id: token.id,
                name: token.name,
                expires_at: token.expires_at,
            },
        })
    }
}

/// What a request does, for [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Look at a tenant's data.
    Read,
    /// Run things: trigger, cancel, re-run, pause/resume, acknowledge and mute alarms, drain.
    Operate,
    /// Change a tenant's configuration: tasks, apps, users, tokens.
    Administer,
    /// Cluster-wide work: tenants, engine nodes, operator users.
    Platform,
}

/// What a request acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// One tenant's data.
    Tenant(TenantId),
    /// The cluster itself.
    Platform,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// 403: the caller may see the target but not do this.
    Forbidden,
    /// 404: the target is another tenant's; the caller must not learn it exists.
    Hidden,
}

/// Whether a role may take an action on what it can see. Deny unless listed.
fn role_allows(role: Role, action: Action) -> bool {
    use Action::*;
    matches!(
        (role, action),
        (Role::Operator, _)
            | (Role::TenantAdmin, Read | Operate | Administer)
            | (Role::TenantOperator, Read | Operate)
            | (Role::TenantViewer, Read)
    )
}

/// THE authorisation table: (role, the caller's tenant, action, target) → decision.
pub fn decide(role: Role, own: Option<TenantId>, action: Action, target: Target) -> Decision {
    let visible = match (role, target) {
        (Role::Operator, _) => true,
        (_, Target::Platform) => true,
        (_, Target::Tenant(t)) => own == Some(t),
    };
    if !visible {
        Decision::Hidden
    } else if role_allows(role, action) && (role == Role::Operator || target != Target::Platform) {
        Decision::Allow
    } else {
        Decision::Forbidden
    }
}

/// [`decide`] for a caller, as a result.
pub fn authorize(caller: &Caller, action: Action, target: Target) -> ApiResult<()> {
    match decide(caller.role(), caller.tenant_id(), action, target) {
        Decision::Allow => Ok(()),
        Decision::Forbidden => Err(ApiError::forbidden(format!(
            "a {} may not {} here",
            caller.role(),
            match action {
                Action::Read => "read",
                Action::Operate => "operate tasks",
                Action::Administer => "change configuration",
                Action::Platform => "manage the platform",
            }
        ))),
        Decision::Hidden => Err(ApiError::not_found("that resource")),
    }
}

/// The tenant a `/tenants/{tenant}/…` path names, if the caller may take `action` in it.
/// Another tenant's name answers 404 without touching the database, like an unknown one.
pub async fn tenant_access(
    services: &Services,
    caller: &Caller,
    tenant_name: &str,
    action: Action,
) -> ApiResult<Tenant> {
    let not_found = || ApiError::not_found(format!("tenant {tenant_name:?}"));
    let tenant = match &caller.tenant {
        Some(own) if own.name == tenant_name => own.clone(),
        Some(_) => return Err(not_found()),
        None => {
            let mut tx = services.read().await?;
            tx.find_tenant_by_name(tenant_name)
                .await?
                .ok_or_else(not_found)?
        }
    };
    authorize(caller, action, Target::Tenant(tenant.id)).map_err(|e| {
        if e.code == Code::NotFound {
            not_found()
        } else {
            e
        }
    })?;
    if tenant.disabled && caller.tenant.is_some() && action != Action::Read {
        return Err(ApiError::forbidden(format!(
            "tenant {tenant_name:?} is disabled: its users may look but change nothing until an \
             operator enables it again"
        )));
    }
    Ok(tenant)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: TenantId = TenantId(1);
    const B: TenantId = TenantId(2);

    #[test]
    fn operators_may_do_everything_everywhere() {
        for action in [
            Action::Read,
            Action::Operate,
            Action::Administer,
            Action::Platform,
        ] {
            for target in [Target::Tenant(A), Target::Platform] {
                assert_eq!(
                    decide(Role::Operator, None, action, target),
                    Decision::Allow
                );
            }
        }
    }

    #[test]
    fn tenant_roles_follow_the_table_in_their_own_tenant() {
        let own = Target::Tenant(A);
        let d = |role, action| decide(role, Some(A), action, own);
        assert_eq!(d(Role::TenantAdmin, Action::Administer), Decision::Allow);
        assert_eq!(d(Role::TenantOperator, Action::Operate), Decision::Allow);
        assert_eq!(
            d(Role::TenantOperator, Action::Administer),
            Decision::Forbidden
        );
        assert_eq!(d(Role::TenantViewer, Action::Read), Decision::Allow);
        assert_eq!(d(Role::TenantViewer, Action::Operate), Decision::Forbidden);
        assert_eq!(d(Role::TenantAdmin, Action::Platform), Decision::Forbidden);
    }

    #[test]
    fn another_tenant_is_hidden_from_every_tenant_role() {
        for role in [Role::TenantAdmin, Role::TenantOperator, Role::TenantViewer] {
            for action in [
                Action::Read,
                Action::Operate,
                Action::Administer,
                Action::Platform,
            ] {
                assert_eq!(
                    decide(role, Some(A), action, Target::Tenant(B)),
                    Decision::Hidden
                );
            }
        }
    }

    #[test]
    fn platform_work_is_forbidden_to_tenant_roles() {
        for role in [Role::TenantAdmin, Role::TenantOperator, Role::TenantViewer] {
            for action in [
                Action::Read,
                Action::Operate,
                Action::Administer,
                Action::Platform,
            ] {
                assert_eq!(
                    decide(role, Some(A), action, Target::Platform),
                    Decision::Forbidden
                );
            }
        }
    }
}
