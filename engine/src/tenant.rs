//! Tenants, the people who work in them, and their API tokens.
//!
//! A tenant is an isolated customer of the platform. It is bound to a *node group*: the engine
//! nodes that schedule its work. Users are operators (no tenant, see every tenant) or belong to
//! exactly one tenant as admin, operator or viewer.

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use crate::hosts::{normalize_hosts, refused_host};
use crate::macros::{id_type, text_enum};
use crate::validate::{FieldError, check_len, check_slug, check_username};

id_type!(
    /// Identifies a tenant.
    TenantId
);
id_type!(
    /// Identifies a user.
    UserId
);
id_type!(
    /// Identifies an API token.
    ApiTokenId
);

/// The node group used when none is given.
pub const DEFAULT_NODE_GROUP: &str = "default";

/// An isolated customer of the platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Tenant {
    pub id: TenantId,
    /// Short unique name (1–63 of `a-z 0-9 - _`, starting with a letter or digit; never a dot,
    /// since the app key is `<tenant>.<app>`), used in URLs and AMQP routing keys.
    pub name: String,
    pub display_name: String,
    /// The engine node group that schedules this tenant's runs.
    pub node_group: String,
    pub disabled: bool,
    pub created_at: i64,
    pub updated_at: i64,
    /// The hosts its executors may register with (see [`crate::hosts`]); empty: any host.
    pub executor_hosts: Json<Vec<String>>,
    /// How long its finished runs are kept after they finished, in milliseconds (their
    /// statistics are kept in rollups; see [`crate::rollup`]).
    pub retention_ms: i64,
}

impl Tenant {
    /// The host of `base_url` when this tenant's allow-list does not allow it (`None`: allowed).
    pub fn refused_executor_host(&self, base_url: &str) -> Option<String> {
        refused_host(&self.executor_hosts.0, base_url)
    }
}

/// What is needed to create a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTenant {
    pub name: String,
    pub display_name: String,
    pub node_group: String,
    /// The hosts its executors may register with; empty: any host.
    #[serde(default)]
    pub executor_hosts: Vec<String>,
}

impl NewTenant {
    /// A tenant in the default node group, displayed under its own name.
    pub fn named(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            display_name: name.clone(),
            name,
            node_group: DEFAULT_NODE_GROUP.to_owned(),
            executor_hosts: Vec::new(),
        }
    }

    /// Checks every field, naming the first one that is wrong.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_slug("name", &self.name)?;
        check_len("display_name", &self.display_name, 1, 200)?;
        check_slug("node_group", &self.node_group)?;
        normalize_hosts("executor_hosts", &self.executor_hosts).map(|_| ())
    }
}

/// A change to a tenant; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUpdate {
    pub display_name: Option<String>,
    pub node_group: Option<String>,
    pub disabled: Option<bool>,
    /// Replaces the allow-list of executor hosts (an empty list allows any host).
    #[serde(default)]
    pub executor_hosts: Option<Vec<String>>,
    /// How long finished runs are kept, in milliseconds
    /// ([`MIN_RETENTION_MS`]..=[`MAX_RETENTION_MS`]).
    #[serde(default)]
    pub retention_ms: Option<i64>,
}

/// How long a new tenant keeps its finished runs: 7 days.
pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;
/// The shortest retention: 1 hour.
pub const MIN_RETENTION_MS: i64 = 3600 * 1000;
/// The longest retention: 3650 days.
pub const MAX_RETENTION_MS: i64 = 3650 * 24 * 3600 * 1000;

impl TenantUpdate {
    /// Checks every given field, naming the first one that is wrong.
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(d) = &self.display_name {
            check_len("display_name", d, 1, 200)?;
        }
        if let Some(g) = &self.node_group {
            check_slug("node_group", g)?;
        }
        if let Some(hosts) = &self.executor_hosts {
            normalize_hosts("executor_hosts", hosts)?;
        }
        if let Some(ms) = self.retention_ms
            && !(MIN_RETENTION_MS..=MAX_RETENTION_MS).contains(&ms)
        {
            return Err(FieldError::new(
                "retention_ms",
                format!(
                    "must be from 1 hour to 3650 days ({MIN_RETENTION_MS} to {MAX_RETENTION_MS} ms), not {ms} ms"
                ),
            ));
        }
        Ok(())
    }
}

/// The largest claim weight an operator may give a tenant.
pub const MAX_WEIGHT: i32 = 1000;

/// A tenant's claim weight: its share of each claim of its node group relative to the other
/// tenants with due runs there (a tenant of weight 3 gets three runs for every one of a tenant
/// of weight 1; see docs/engine.md, "Claim order and capacity"). 1, the default, to
/// [`MAX_WEIGHT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Weight(i32);

impl Weight {
    /// Every tenant's weight until an operator changes it.
    pub const DEFAULT: Weight = Weight(1);

    /// `weight` if it is from 1 to [`MAX_WEIGHT`]; otherwise an error naming the field
    /// `weight`.
    pub fn new(weight: i64) -> Result<Weight, FieldError> {
        i32::try_from(weight)
            .ok()
            .filter(|w| (1..=MAX_WEIGHT).contains(w))
            .map(Weight)
            .ok_or_else(|| {
                FieldError::new(
                    "weight",
                    format!("must be a whole number from 1 to {MAX_WEIGHT}, not {weight}"),
                )
            })
    }

    /// A weight typed as text (a form field), as [`Weight::new`] checks it.
    pub fn parse(text: &str) -> Result<Weight, FieldError> {
        let text = text.trim();
        text.parse::<i64>()
            .map_err(|_| {
                FieldError::new(
                    "weight",
                    format!("must be a whole number from 1 to {MAX_WEIGHT}, not {text:?}"),
                )
            })
            .and_then(Weight::new)
    }

    /// The weight as stored.
    pub fn get(self) -> i32 {
        self.0
    }
}

impl std::fmt::Display for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

text_enum!(
    /// What a user may do.
    Role {
        /// Sees and manages every tenant and the cluster.
        Operator = "operator",
        /// Manages one tenant's apps, tasks, users and alarms.
        TenantAdmin = "tenant_admin",
        /// Reads one tenant's data and operates it: trigger, cancel, pause, acknowledge.
        TenantOperator = "tenant_operator",
        /// Reads one tenant's data.
        TenantViewer = "tenant_viewer",
    }
);

impl Role {
    /// How much the role may do: an operator more than a tenant admin, an admin more than a
    /// tenant operator, a tenant operator more than a viewer.
    pub fn rank(self) -> u8 {
        match self {
            Role::Operator => 3,
            Role::TenantAdmin => 2,
            Role::TenantOperator => 1,
            Role::TenantViewer => 0,
        }
    }

    /// Whether the role belongs to a tenant (every role but `operator`).
    pub fn is_tenant_role(self) -> bool {
        self != Role::Operator
    }

    /// The lower of two roles.
    pub fn lower(self, other: Role) -> Role {
        if other.rank() < self.rank() {
            other
        } else {
            self
        }
    }
}

// Read straight from a TEXT column (also as `Option<Role>` for a nullable one).
impl<DB: sqlx::Database> sqlx::Type<DB> for Role
where
    String: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <String as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <String as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for Role
where
    String: sqlx::Decode<'r, DB>,
{
    fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        Ok(<String as sqlx::Decode<DB>>::decode(value)?.parse()?)
    }
}

/// A person who signs in to the console or API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct User {
    pub id: UserId,
    /// `None` for operators.
    pub tenant_id: Option<TenantId>,
    pub username: String,
    /// Argon2id PHC string; never serialised.
    #[serde(skip)]
    pub password_hash: String,
    #[sqlx(try_from = "String")]
    pub role: Role,
    pub disabled: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What is needed to create a user. The password arrives already hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    pub tenant_id: Option<TenantId>,
    pub username: String,
    pub password_hash: String,
    pub role: Role,
}

impl NewUser {
    /// Checks the fields and that operators have no tenant and everybody else has one.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_username("username", &self.username)?;
        check_len("password_hash", &self.password_hash, 1, 1000)?;
        match (self.role, self.tenant_id) {
            (Role::Operator, Some(_)) => Err(FieldError::new(
                "tenant_id",
                "an operator belongs to no tenant",
            )),
            (Role::TenantAdmin | Role::TenantOperator | Role::TenantViewer, None) => {
                Err(FieldError::new(
                    "tenant_id",
                    "a tenant admin, operator or viewer needs a tenant",
                ))
            }
            _ => Ok(()),
        }
    }
}

/// A long-lived credential for the REST API. Only its SHA-256 hash is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ApiToken {
    pub id: ApiTokenId,
    pub user_id: UserId,
    pub name: String,
    #[serde(skip)]
    pub token_hash: String,
    /// A role below the user's that requests made with the token are limited to; `None`:
    /// the user's role. See [`ApiToken::effective_role`].
    pub role: Option<Role>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

impl ApiToken {
    /// What a request made with this token by `user` may do: the token's role, but never
    /// more than the user's role now (a user demoted after issuing a token is demoted in it
    /// too).
    pub fn effective_role(&self, user: &User) -> Role {
        self.role.map_or(user.role, |r| r.lower(user.role))
    }
}

/// What is needed to create an API token: its owner and the hash of the secret value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApiToken {
    pub user_id: UserId,
    pub name: String,
    pub token_hash: String,
    pub expires_at: Option<i64>,
    /// A role below the user's to limit the token to; `None`: the user's role.
    pub role: Option<Role>,
}

impl NewApiToken {
    /// Checks the fields.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_len("name", &self.name, 1, 100)?;
        check_len("token_hash", &self.token_hash, 16, 200)
    }
}

/// A signed-in browser session of the console. The cookie carries a random value; only its
/// SHA-256 (the `id`) is stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Session {
    pub id: String,
    pub user_id: UserId,
    pub created_at: i64,
    pub expires_at: i64,
    pub last_seen_at: i64,
    pub revoked_at: Option<i64>,
}

/// What is needed to start a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The hash of the cookie value.
    pub id: String,
    pub user_id: UserId,
    pub expires_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_from_one_to_the_maximum_are_accepted_and_others_name_the_field() {
        assert_eq!(Weight::new(1).map(Weight::get), Ok(1));
        assert_eq!(
            Weight::new(i64::from(MAX_WEIGHT)).map(Weight::get),
            Ok(MAX_WEIGHT)
        );
        assert_eq!(Weight::DEFAULT.get(), 1);
        for bad in [0, -1, i64::from(MAX_WEIGHT) + 1, i64::from(i32::MAX) + 1] {
            let e = Weight::new(bad).unwrap_err();
            assert_eq!(e.field, "weight");
            assert!(e.reason.contains(&bad.to_string()), "{e}");
        }
        assert_eq!(Weight::parse(" 12 ").map(Weight::get), Ok(12));
        for bad in ["", "heavy", "2.5", "0"] {
            let e = Weight::parse(bad).unwrap_err();
            assert_eq!(e.field, "weight", "{bad:?}");
        }
    }
}
