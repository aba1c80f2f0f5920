//! Apps (the business applications whose wrappers run a tenant's tasks), their signing
//! secrets, and their live executor instances.

use mthpt_engine::app::{App, Executor, ExecutorState, NewApp};
use mthpt_engine::store::Tx;
use mthpt_engine::tenant::Tenant;
use serde_json::json;

use super::credentials::new_app_secret;
use super::{Change, Services, audit};
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, ApiResult};

/// An app and its signing secret, which is shown only in this answer.
#[derive(Debug, Clone)]
pub struct AppWithSecret {
    pub app: App,
    pub secret: String,
}

pub async fn list(services: &Services, caller: &Caller, tenant: &str) -> ApiResult<Vec<App>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    Ok(tx.list_apps(tenant.id).await?)
}

async fn find(services: &Services, tenant: &Tenant, name: &str) -> ApiResult<App> {
    let mut tx = services.read().await?;
    tx.find_app_by_name(tenant.id, name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("app {name:?}")))
}

pub async fn get(services: &Services, caller: &Caller, tenant: &str, name: &str) -> ApiResult<App> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    find(services, &tenant, name).await
}

/// Creates an app with a generated secret.
pub async fn create(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    name: &str,
) -> ApiResult<AppWithSecret> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let new = NewApp {
        name: name.to_owned(),
        secret: new_app_secret(),
    };
    new.validate()?;
    let now = services.now();
    let mut tx = services.write().await?;
    let app = tx.create_app(tenant.id, &new, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "app.create",
            target_kind: "app",
            target_id: app.id.to_string(),
            details: json!({ "name": app.name }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(AppWithSecret {
        app,
        secret: new.secret,
    })
}

/// Replaces an app's secret with a new generated one. Its wrappers must be given the new
/// secret; until then their requests are refused.
pub async fn rotate_secret(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    name: &str,
) -> ApiResult<AppWithSecret> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let app = find(services, &tenant, name).await?;
    let secret = new_app_secret();
    let now = services.now();
    let mut tx = services.write().await?;
    let app = tx.set_app_secret(tenant.id, app.id, &secret, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "app.rotate_secret",
            target_kind: "app",
            target_id: app.id.to_string(),
            details: json!({ "name": app.name }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(AppWithSecret { app, secret })
}

/// Deletes an app; refused (409) while a task uses it.
pub async fn delete(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    name: &str,
) -> ApiResult<()> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let app = find(services, &tenant, name).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    tx.delete_app(tenant.id, app.id).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "app.delete",
            target_kind: "app",
            target_id: app.id.to_string(),
            details: json!({ "name": app.name }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// A tenant's executor instances (every state), optionally of one app, with their apps.
pub async fn executors(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    app: Option<&str>,
) -> ApiResult<(Vec<Executor>, Vec<App>)> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    let apps = tx.list_apps(tenant.id).await?;
    let app_id = match app {
        Some(name) => Some(
            apps.iter()
                .find(|a| a.name == name)
                .ok_or_else(|| ApiError::not_found(format!("app {name:?}")))?
                .id,
        ),
        None => None,
    };
    Ok((tx.list_executors(tenant.id, app_id).await?, apps))
}

/// Executor instance `executor_id` of `tenant` (404 when the tenant has none by that id).
async fn tenant_executor(
    tx: &mut dyn Tx,
    tenant: &Tenant,
    executor_id: i64,
) -> ApiResult<Executor> {
    tx.list_executors(tenant.id, None)
        .await?
        .into_iter()
        .find(|e| e.id.0 == executor_id)
        .ok_or_else(|| ApiError::not_found(format!("executor {executor_id}")))
}

/// Audits `action` (`executor.drain`, `executor.undrain`) on `executor` of `tenant`.
async fn audit_executor(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    action: &'static str,
    executor: &Executor,
    now: i64,
) -> ApiResult<()> {
    audit(
        tx,
        caller,
        Change {
            tenant: Some(tenant.id),
            action,
            target_kind: "executor",
            target_id: executor.id.0.to_string(),
            details: json!({ "instance_id": executor.instance_id }),
        },
        now,
    )
    .await
}

/// Asks an executor instance to drain: it finishes its runs and gets no new ones.
pub async fn drain(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    executor_id: i64,
) -> ApiResult<Executor> {
    let tenant = tenant_access(services, caller, tenant, Action::Operate).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    let executor = tenant_executor(tx.as_mut(), &tenant, executor_id).await?;
    if !matches!(executor.state, ExecutorState::Up | ExecutorState::Draining) {
        return Err(ApiError::new(
            crate::service::error::Code::Conflict,
            format!(
                "executor {executor_id} is {}; only a live instance can drain",
                executor.state
            ),
        ));
    }
    let drained = tx
        .set_executor_state(
            executor.app_id,
            &executor.instance_id,
            ExecutorState::Draining,
            now,
        )
        .await?
        .ok_or_else(|| ApiError::not_found(format!("executor {executor_id}")))?;
    audit_executor(
        tx.as_mut(),
        caller,
        &tenant,
        "executor.drain",
        &executor,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(drained)
}

/// Undoes a drain: asks a draining instance to take runs again. It is `up` from its next
/// heartbeat (about a second), unless that heartbeat says the instance is shutting down itself;
/// then it stays draining. An instance already up needs nothing; one down or lost cannot.
pub async fn undrain(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    executor_id: i64,
) -> ApiResult<Executor> {
    let tenant = tenant_access(services, caller, tenant, Action::Operate).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    let executor = tenant_executor(tx.as_mut(), &tenant, executor_id).await?;
    let asked = match executor.state {
        ExecutorState::Up => return Ok(executor),
        ExecutorState::Draining => tx
            .request_executor_undrain(tenant.id, executor.id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("executor {executor_id}")))?,
        ExecutorState::Down | ExecutorState::Lost => {
            return Err(ApiError::new(
                crate::service::error::Code::Conflict,
                format!(
                    "executor {executor_id} is {}; only a draining instance can undrain (a stopped one comes back when it registers again)",
                    executor.state
                ),
            ));
        }
    };
    audit_executor(
        tx.as_mut(),
        caller,
        &tenant,
        "executor.undrain",
        &executor,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(asked)
}
