//! The SQL both backends share, written once.
//!
//! [`tx_impl!`] expands the `Tx` implementation for a backend's transaction type. Its body holds
//! every operation whose SQL is the same on PostgreSQL and SQLite (`$N` placeholders work on
//! both); the backend passes its row-locking clauses and the operations whose SQL differs
//! (arrays, batch inserts, claiming).

use sqlx::error::ErrorKind;

use super::StoreError;

/// Maps a unique-constraint violation to [`StoreError::Duplicate`] with `msg`.
pub(super) fn unique_or(e: sqlx::Error, msg: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::UniqueViolation) => {
            StoreError::Duplicate(msg())
        }
        _ => StoreError::from(e),
    }
}

/// Maps a foreign-key violation to [`StoreError::NotFound`] with `what`.
pub(super) fn fk_or(e: sqlx::Error, what: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::ForeignKeyViolation) => {
            StoreError::NotFound(what())
        }
        _ => StoreError::from(e),
    }
}

/// Maps a check-constraint violation to [`StoreError::InvalidState`] with `msg`.
pub(super) fn check_or(e: sqlx::Error, msg: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::CheckViolation) => {
            StoreError::InvalidState(msg())
        }
        _ => StoreError::from(e),
    }
}

/// `Some(x)` or [`StoreError::NotFound`] naming `what`.
pub(super) fn found<T>(row: Option<T>, what: impl FnOnce() -> String) -> Result<T, StoreError> {
    row.ok_or_else(|| StoreError::NotFound(what()))
}

/// What a batch of completions does to runs locked by one read: which rows to write (run,
/// completion, new log tail) and, per item, what happened.
pub(super) struct CompletionPlan {
    pub(super) writes: Vec<(crate::run::RunId, crate::run::RunCompletion, String)>,
    items: Vec<PlannedItem>,
    before: std::collections::HashMap<crate::run::RunId, crate::run::Run>,
}

enum PlannedItem {
    Refused(StoreError),
    /// Already final before the batch.
    Final(crate::run::RunId),
    /// Written by this item.
    Write(crate::run::RunId),
    /// Written by an earlier item of the batch.
    Repeat(crate::run::RunId),
}

/// Why a completion with a state that is not final is refused.
pub(super) fn not_final(state: crate::run::RunState) -> StoreError {
    StoreError::InvalidState(format!(
        "a run cannot be completed as {state}: use one of the final states"
    ))
}

/// The log tail of `run` once `completion`'s log is added.
pub(super) fn completed_tail(
    run: &crate::run::Run,
    completion: &crate::run::RunCompletion,
) -> String {
    match &completion.log {
        Some(log) => crate::run::append_log_tail(&run.log_tail, std::slice::from_ref(log)),
        None => run.log_tail.clone(),
    }
}

/// Why a wrapper's result may not complete `run`: results are accepted only for runs that were
/// dispatched to the reporting executor instance, in the attempt the result names. `None`: it
/// may (or the engine decided the end itself).
pub(super) fn report_refused(
    run: &crate::run::Run,
    completion: &crate::run::RunCompletion,
) -> Option<StoreError> {
    let by = completion.reported_by?;
    let why = match run.executor_id {
        None => format!(
            "run {} was never dispatched to an executor instance",
            run.id
        ),
        Some(e) if e != by.executor_id => format!(
            "run {} was dispatched to another executor instance, not this one",
            run.id
        ),
        Some(_) if run.attempt != by.attempt => format!(
            "run {} is attempt {}; the result is for attempt {}",
            run.id, run.attempt, by.attempt
        ),
        Some(_) => return None,
    };
    Some(StoreError::InvalidState(why))
}

/// Plans `items` against the `locked` runs with the rules of `complete_run`.
pub(super) fn plan_completions(
    locked: Vec<crate::run::Run>,
    items: &[(crate::run::RunId, crate::run::RunCompletion)],
) -> CompletionPlan {
    let before: std::collections::HashMap<_, _> = locked.into_iter().map(|r| (r.id, r)).collect();
    let mut written = std::collections::HashSet::new();
    let mut plan = CompletionPlan {
        writes: Vec::new(),
        items: Vec::with_capacity(items.len()),
        before: std::collections::HashMap::new(),
    };
    for (id, completion) in items {
        let item = if !completion.state.is_final() {
            PlannedItem::Refused(not_final(completion.state))
        } else {
            match before.get(id) {
                None => PlannedItem::Refused(StoreError::NotFound(format!("run {id}"))),
                Some(run) => match report_refused(run, completion) {
                    Some(refused) => PlannedItem::Refused(refused),
                    None if written.contains(id) => PlannedItem::Repeat(*id),
                    None if run.state.is_final() => PlannedItem::Final(*id),
                    None => {
                        let tail = completed_tail(run, completion);
                        written.insert(*id);
                        plan.writes.push((*id, completion.clone(), tail));
                        PlannedItem::Write(*id)
                    }
                },
            }
        };
        plan.items.push(item);
    }
    plan.before = before;
    plan
}

impl CompletionPlan {
    /// Each item's outcome, given the rows the write `changed`.
    pub(super) fn outcomes(
        self,
        changed: Vec<crate::run::Run>,
    ) -> Vec<Result<super::Completion, StoreError>> {
        use super::Completion;
        let changed: std::collections::HashMap<_, _> =
            changed.into_iter().map(|r| (r.id, r)).collect();
        let before = self.before;
        let now_final = |id| changed.get(&id).or_else(|| before.get(&id)).cloned();
        self.items
            .into_iter()
            .map(|item| match item {
                PlannedItem::Refused(e) => Err(e),
                PlannedItem::Final(id) | PlannedItem::Repeat(id) => now_final(id)
                    .map(Completion::AlreadyFinal)
                    .ok_or_else(|| StoreError::NotFound(format!("run {id}"))),
                PlannedItem::Write(id) => match changed.get(&id) {
                    Some(run) => Ok(Completion::Applied(run.clone())),
                    None => before
                        .get(&id)
                        .cloned()
                        .map(Completion::AlreadyFinal)
                        .ok_or_else(|| StoreError::NotFound(format!("run {id}"))),
                },
            })
            .collect()
    }
}

/// Expands `impl Tx for $tx`. `$for_update` and `$skip_locked` are the backend's
/// row-locking clauses (empty where the backend serialises writers instead); the braces hold
/// the backend's own operations.
/// `UPDATE runs SET <set>` of a claimed run, fenced: `$1` run id, `$2` claim owner, `$3` fence
/// token, `$4` now (the lease must not have ended); the SET clause's own values start at `$5`.
/// Binds a task definition's columns, in the order `insert_task` and `update_task_row` list
/// them (from the app id to `paused`), after the statement's own leading parameters.
macro_rules! bind_task_definition {
    ($q:expr, $def:expr, $schedule:expr) => {
        $q.bind($def.app_id)
            .bind(&$def.name)
            .bind(&$def.description)
            .bind(&$def.handler)
            .bind(Json(&$def.params))
            .bind($schedule.kind.as_str())
            .bind($schedule.cron_expr.as_deref())
            .bind($schedule.interval_ms)
            .bind($schedule.anchor_at)
            .bind(&$schedule.timezone)
            .bind($def.window_start_at)
            .bind($def.window_end_at)
            .bind($def.max_fires)
            .bind($def.misfire_policy.as_str())
            .bind($def.misfire_threshold_ms)
            .bind($def.misfire_max_catch_up)
            .bind($def.overlap_policy.as_str())
            .bind($def.routing.as_str())
            .bind($def.timeout_ms)
            .bind($def.start_timeout_ms)
            .bind($def.max_retries)
            .bind($def.retry_backoff_ms)
            .bind($def.retry_backoff_max_ms)
            .bind($def.recover_lost)
            .bind($def.priority)
            .bind($def.paused)
    };
}
pub(crate) use bind_task_definition;

macro_rules! fenced_update {
    ($set:literal) => {
        concat!(
            "UPDATE runs SET ",
            $set,
            "
                         WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                           AND lease_until > $4 RETURNING *"
        )
    };
}
pub(crate) use fenced_update;

macro_rules! tx_impl {
    (
        $tx:ty,
        for_update = $for_update:literal,
        skip_locked = $skip_locked:literal,
        { $($dialect:tt)* }
    ) => {
        #[async_trait::async_trait]
        impl $crate::store::Tx for $tx {
            $($dialect)*

            // ---- tenants -------------------------------------------------------------

            async fn create_tenant(&mut self, new: &NewTenant, now: i64) -> Result<Tenant> {
                new.validate()?;
                sqlx::query_as(
                    "INSERT INTO tenants (name, display_name, node_group, disabled, created_at, updated_at)
                     VALUES ($1, $2, $3, FALSE, $4, $4) RETURNING *",
                )
                .bind(&new.name)
                .bind(&new.display_name)
                .bind(&new.node_group)
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(|e| unique_or(e, || format!("a tenant named {:?} already exists", new.name)))
            }

            async fn get_tenant(&mut self, id: TenantId) -> Result<Tenant> {
                let row = sqlx::query_as("SELECT * FROM tenants WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *self.tx)
                    .await?;
                found(row, || format!("tenant {id}"))
            }

            async fn find_tenant_by_name(&mut self, name: &str) -> Result<Option<Tenant>> {
                Ok(sqlx::query_as("SELECT * FROM tenants WHERE name = $1")
                    .bind(name)
                    .fetch_optional(&mut *self.tx)
                    .await?)
            }

            async fn list_tenants(&mut self) -> Result<Vec<Tenant>> {
                Ok(sqlx::query_as("SELECT * FROM tenants ORDER BY id")
                    .fetch_all(&mut *self.tx)
                    .await?)
            }

            async fn update_tenant(
                &mut self,
                id: TenantId,
                update: &TenantUpdate,
                now: i64,
            ) -> Result<Tenant> {
                update.validate()?;
                let row: Option<Tenant> = sqlx::query_as(
                    "UPDATE tenants SET display_name = COALESCE($2, display_name),
                         node_group = COALESCE($3, node_group), disabled = COALESCE($4, disabled),
                         updated_at = $5
                     WHERE id = $1 RETURNING *",
                )
                .bind(id)
                .bind(update.display_name.as_deref())
                .bind(update.node_group.as_deref())
                .bind(update.disabled)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                let tenant = found(row, || format!("tenant {id}"))?;
                if update.node_group.is_some() {
                    sqlx::query("UPDATE runs SET node_group = $2 WHERE tenant_id = $1 AND state = 'pending'")
                        .bind(id)
                        .bind(&tenant.node_group)
                        .execute(&mut *self.tx)
                        .await?;
                }
                Ok(tenant)
            }

            async fn delete_tenant(&mut self, id: TenantId) -> Result<()> {
                let done = sqlx::query("DELETE FROM tenants WHERE id = $1")
                    .bind(id)
                    .execute(&mut *self.tx)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("tenant {id}")));
                }
                Ok(())
            }

            async fn lock_tenant(&mut self, id: TenantId) -> Result<()> {
                let row: Option<(TenantId,)> =
                    sqlx::query_as(concat!("SELECT id FROM tenants WHERE id = $1", $for_update))
                        .bind(id)
                        .fetch_optional(&mut *self.tx)
                        .await?;
                found(row, || format!("tenant {id}")).map(|_| ())
            }

            // ---- users and tokens ------------------------------------------------------

            async fn create_user(&mut self, new: &NewUser, now: i64) -> Result<User> {
                new.validate()?;
                sqlx::query_as(
                    "INSERT INTO users (tenant_id, username, password_hash, role, disabled, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, FALSE, $5, $5) RETURNING *",
                )
                .bind(new.tenant_id)
                .bind(&new.username)
                .bind(&new.password_hash)
                .bind(new.role.as_str())
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(|e| match e {
                    e @ sqlx::Error::Database(_) if is_fk(&e) => StoreError::NotFound(format!(
                        "tenant {}",
                        new.tenant_id.map_or_else(String::new, |t| t.to_string())
                    )),
                    e => unique_or(e, || format!("username {:?} is taken", new.username)),
                })
            }

            async fn find_user_by_username(&mut self, username: &str) -> Result<Option<User>> {
                Ok(sqlx::query_as("SELECT * FROM users WHERE username = $1")
                    .bind(username)
                    .fetch_optional(&mut *self.tx)
                    .await?)
            }

            async fn list_users(&mut self, scope: Scope) -> Result<Vec<User>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM users WHERE ($1 IS NULL OR tenant_id = $1) ORDER BY id",
                )
                .bind(scope.tenant())
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn get_user(&mut self, scope: Scope, id: UserId) -> Result<User> {
                let row = sqlx::query_as(
                    "SELECT * FROM users WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)",
                )
                .bind(id)
                .bind(scope.tenant())
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("user {id}"))
            }

            async fn update_user(
                &mut self,
                scope: Scope,
                id: UserId,
                update: &UserUpdate,
                now: i64,
            ) -> Result<User> {
                let row = sqlx::query_as(
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
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(|e| {
                    check_or(e, || {
                        "role: an operator cannot become a tenant user, nor a tenant user an operator"
                            .to_owned()
                    })
                })?;
                found(row, || format!("user {id}"))
            }

            async fn delete_user(&mut self, scope: Scope, id: UserId) -> Result<()> {
                let done = sqlx::query("DELETE FROM users WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)")
                    .bind(id)
                    .bind(scope.tenant())
                    .execute(&mut *self.tx)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("user {id}")));
                }
                Ok(())
            }

            async fn create_api_token(&mut self, new: &NewApiToken, now: i64) -> Result<ApiToken> {
                new.validate()?;
                sqlx::query_as(
                    "INSERT INTO api_tokens (user_id, name, token_hash, created_at, expires_at, role)
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING *",
                )
                .bind(new.user_id)
                .bind(&new.name)
                .bind(&new.token_hash)
                .bind(now)
                .bind(new.expires_at)
                .bind(new.role.map(|r| r.as_str()))
                .fetch_one(&mut *self.tx)
                .await
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
                let token: Option<ApiToken> = sqlx::query_as(
                    "UPDATE api_tokens SET last_used_at = $2
                     WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)
                       AND user_id IN (SELECT id FROM users WHERE disabled = FALSE)
                     RETURNING *",
                )
                .bind(token_hash)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                let Some(token) = token else { return Ok(None) };
                let user: User = sqlx::query_as("SELECT * FROM users WHERE id = $1")
                    .bind(token.user_id)
                    .fetch_one(&mut *self.tx)
                    .await?;
                Ok(Some((token, user)))
            }

            async fn list_api_tokens(&mut self, user: UserId) -> Result<Vec<ApiToken>> {
                Ok(sqlx::query_as("SELECT * FROM api_tokens WHERE user_id = $1 ORDER BY id")
                    .bind(user)
                    .fetch_all(&mut *self.tx)
                    .await?)
            }

            async fn revoke_api_token(&mut self, user: UserId, id: ApiTokenId, now: i64) -> Result<()> {
                let done = sqlx::query(
                    "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $3) WHERE id = $2 AND user_id = $1",
                )
                .bind(user)
                .bind(id)
                .bind(now)
                .execute(&mut *self.tx)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("API token {id}")));
                }
                Ok(())
            }

            // ---- apps and executors ----------------------------------------------------

            async fn create_app(&mut self, tenant: TenantId, new: &NewApp, now: i64) -> Result<App> {
                new.validate()?;
                sqlx::query_as(
                    "INSERT INTO apps (tenant_id, name, secret, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $4) RETURNING *",
                )
                .bind(tenant)
                .bind(&new.name)
                .bind(&new.secret)
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(|e| match e {
                    e @ sqlx::Error::Database(_) if is_fk(&e) => {
                        StoreError::NotFound(format!("tenant {tenant}"))
                    }
                    e => unique_or(e, || format!("an app named {:?} already exists", new.name)),
                })
            }

            async fn get_app(&mut self, tenant: TenantId, id: AppId) -> Result<App> {
                let row = sqlx::query_as("SELECT * FROM apps WHERE tenant_id = $1 AND id = $2")
                    .bind(tenant)
                    .bind(id)
                    .fetch_optional(&mut *self.tx)
                    .await?;
                found(row, || format!("app {id}"))
            }

            async fn find_app_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<App>> {
                Ok(sqlx::query_as("SELECT * FROM apps WHERE tenant_id = $1 AND name = $2")
                    .bind(tenant)
                    .bind(name)
                    .fetch_optional(&mut *self.tx)
                    .await?)
            }

            async fn list_apps(&mut self, tenant: TenantId) -> Result<Vec<App>> {
                Ok(sqlx::query_as("SELECT * FROM apps WHERE tenant_id = $1 ORDER BY id")
                    .bind(tenant)
                    .fetch_all(&mut *self.tx)
                    .await?)
            }

            async fn set_app_secret(
                &mut self,
                tenant: TenantId,
                id: AppId,
                secret: &str,
                now: i64,
            ) -> Result<App> {
                $crate::app::check_secret(secret)?;
                let row = sqlx::query_as(
                    "UPDATE apps SET secret = $3, updated_at = $4 WHERE tenant_id = $1 AND id = $2 RETURNING *",
                )
                .bind(tenant)
                .bind(id)
                .bind(secret)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("app {id}"))
            }

            async fn delete_app(&mut self, tenant: TenantId, id: AppId) -> Result<()> {
                let (in_use,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM tasks WHERE tenant_id = $1 AND app_id = $2 AND deleted_at IS NULL",
                )
                .bind(tenant)
                .bind(id)
                .fetch_one(&mut *self.tx)
                .await?;
                if in_use > 0 {
                    return Err(StoreError::InvalidState(format!(
                        "app {id} is used by {in_use} task(s); delete them or move them to another app first"
                    )));
                }
                let done = sqlx::query("DELETE FROM apps WHERE tenant_id = $1 AND id = $2")
                    .bind(tenant)
                    .bind(id)
                    .execute(&mut *self.tx)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("app {id}")));
                }
                Ok(())
            }

            async fn find_app_by_key(&mut self, tenant_name: &str, app_name: &str) -> Result<Option<App>> {
                Ok(sqlx::query_as(
                    "SELECT a.* FROM apps a JOIN tenants t ON t.id = a.tenant_id
                     WHERE t.name = $1 AND a.name = $2 AND t.disabled = FALSE",
                )
                .bind(tenant_name)
                .bind(app_name)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn register_executor(&mut self, reg: &ExecutorRegistration, now: i64) -> Result<Executor> {
                reg.validate()?;
                let row = sqlx::query_as(
                    "INSERT INTO executors (tenant_id, app_id, instance_id, base_url, capacity, running,
                         handlers, labels, state, registered_at, last_heartbeat_at)
                     SELECT a.tenant_id, a.id, $2, $3, $4, 0, $5, $6, 'up', $7, $7 FROM apps a WHERE a.id = $1
                     ON CONFLICT (app_id, instance_id) DO UPDATE SET base_url = excluded.base_url,
                         capacity = excluded.capacity, running = 0, handlers = excluded.handlers,
                         labels = excluded.labels, state = 'up', registered_at = excluded.registered_at,
                         last_heartbeat_at = excluded.last_heartbeat_at
                     RETURNING *",
                )
                .bind(reg.app_id)
                .bind(&reg.instance_id)
                .bind(&reg.base_url)
                .bind(reg.capacity)
                .bind(Json(&reg.handlers))
                .bind(Json(&reg.labels))
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("app {}", reg.app_id))
            }

            async fn heartbeat_executor(
                &mut self,
                app: AppId,
                instance_id: &str,
                beat: ExecutorHeartbeat,
                now: i64,
            ) -> Result<Option<Executor>> {
                Ok(sqlx::query_as(
                    "UPDATE executors SET capacity = $3, running = $4, last_heartbeat_at = $5
                     WHERE app_id = $1 AND instance_id = $2 AND state IN ('up', 'draining') RETURNING *",
                )
                .bind(app)
                .bind(instance_id)
                .bind(beat.capacity)
                .bind(beat.running)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn set_executor_state(
                &mut self,
                app: AppId,
                instance_id: &str,
                state: ExecutorState,
                now: i64,
            ) -> Result<Option<Executor>> {
                Ok(sqlx::query_as(
                    "UPDATE executors SET state = $3, last_heartbeat_at = $4
                     WHERE app_id = $1 AND instance_id = $2 RETURNING *",
                )
                .bind(app)
                .bind(instance_id)
                .bind(state.as_str())
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn find_executor(&mut self, app: AppId, instance_id: &str) -> Result<Option<Executor>> {
                Ok(sqlx::query_as("SELECT * FROM executors WHERE app_id = $1 AND instance_id = $2")
                    .bind(app)
                    .bind(instance_id)
                    .fetch_optional(&mut *self.tx)
                    .await?)
            }

            async fn list_live_executors(&mut self, app: AppId, heartbeat_since: i64) -> Result<Vec<Executor>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM executors WHERE app_id = $1 AND state = 'up' AND last_heartbeat_at >= $2
                     ORDER BY id",
                )
                .bind(app)
                .bind(heartbeat_since)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn list_executors(&mut self, tenant: TenantId, app: Option<AppId>) -> Result<Vec<Executor>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM executors WHERE tenant_id = $1 AND ($2 IS NULL OR app_id = $2) ORDER BY id",
                )
                .bind(tenant)
                .bind(app)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn mark_executors_lost(&mut self, heartbeat_before: i64, limit: i64) -> Result<Vec<Executor>> {
                Ok(sqlx::query_as(concat!(
                    "UPDATE executors SET state = 'lost' WHERE id IN (
                         SELECT id FROM executors WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1
                         ORDER BY id LIMIT $2", $skip_locked, ")
                     RETURNING *"
                ))
                .bind(heartbeat_before)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn silent_executors(&mut self, heartbeat_before: i64, limit: i64) -> Result<Vec<Executor>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM executors WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1
                     ORDER BY last_heartbeat_at, id LIMIT $2",
                )
                .bind(heartbeat_before)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            // ---- tasks and dependencies ------------------------------------------------

            async fn insert_task(
                &mut self,
                tenant: TenantId,
                def: &TaskDefinition,
                schedule: &ScheduleColumns,
                now: i64,
            ) -> Result<Task> {
                let q = sqlx::query_as(
                    "INSERT INTO tasks (tenant_id, app_id, name, description, handler, params, schedule_kind,
                         cron_expr, interval_ms, anchor_at, timezone, window_start_at, window_end_at, max_fires,
                         fires_scheduled, misfire_policy, misfire_threshold_ms, misfire_max_catch_up,
                         overlap_policy, routing, timeout_ms, start_timeout_ms, max_retries, retry_backoff_ms,
                         retry_backoff_max_ms, recover_lost, priority, paused, version, created_at, updated_at)
                     SELECT $1, a.id, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 0, $15, $16, $17,
                         $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, 1, $28, $28
                     FROM apps a WHERE a.id = $2 AND a.tenant_id = $1
                     RETURNING *",
                )
                .bind(tenant);
                let row = $crate::store::shared::bind_task_definition!(q, def, schedule)
                    .bind(now)
                    .fetch_optional(&mut *self.tx)
                    .await
                    .map_err(|e| unique_or(e, || format!("a task named {:?} already exists", def.name)))?;
                found(row, || format!("app {}", def.app_id))
            }

            async fn get_task(&mut self, tenant: TenantId, id: TaskId) -> Result<Task> {
                let row = sqlx::query_as(
                    "SELECT * FROM tasks WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
                )
                .bind(tenant)
                .bind(id)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("task {id}"))
            }

            async fn find_task_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<Task>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM tasks WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL",
                )
                .bind(tenant)
                .bind(name)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn list_tasks(&mut self, tenant: TenantId, filter: &TaskFilter) -> Result<Vec<Task>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM tasks WHERE tenant_id = $1 AND deleted_at IS NULL
                       AND ($2 IS NULL OR app_id = $2) AND ($3 IS NULL OR paused = $3)
                       AND ($4 IS NULL OR name LIKE '%' || $4 || '%' ESCAPE '\\')
                       AND ($5 IS NULL OR id > $5)
                     ORDER BY id LIMIT $6",
                )
                .bind(tenant)
                .bind(filter.app_id)
                .bind(filter.paused)
                .bind(filter.name_contains.as_deref().map(like_escape))
                .bind(filter.after_id)
                .bind(page_limit(filter.limit))
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn update_task_row(
                &mut self,
                tenant: TenantId,
                id: TaskId,
                expected_version: i64,
                def: &TaskDefinition,
                schedule: &ScheduleColumns,
                reset_fires: bool,
                now: i64,
            ) -> Result<Task> {
                let q = sqlx::query_as(
                    "UPDATE tasks SET fires_scheduled = CASE WHEN $31 THEN 0 ELSE fires_scheduled END, app_id = $4, name = $5, description = $6, handler = $7, params = $8,
                         schedule_kind = $9, cron_expr = $10, interval_ms = $11, anchor_at = $12, timezone = $13,
                         window_start_at = $14, window_end_at = $15, max_fires = $16, misfire_policy = $17,
                         misfire_threshold_ms = $18, misfire_max_catch_up = $19, overlap_policy = $20,
                         routing = $21, timeout_ms = $22, start_timeout_ms = $23, max_retries = $24,
                         retry_backoff_ms = $25, retry_backoff_max_ms = $26, recover_lost = $27, priority = $28,
                         paused = $29, version = version + 1, updated_at = $30
                     WHERE tenant_id = $1 AND id = $2 AND version = $3 AND deleted_at IS NULL
                       AND EXISTS (SELECT 1 FROM apps WHERE id = $4 AND tenant_id = $1)
                     RETURNING *",
                )
                .bind(tenant)
                .bind(id)
                .bind(expected_version);
                let row = $crate::store::shared::bind_task_definition!(q, def, schedule)
                    .bind(now)
                    .bind(reset_fires)
                    .fetch_optional(&mut *self.tx)
                    .await
                    .map_err(|e| unique_or(e, || format!("a task named {:?} already exists", def.name)))?;
                match row {
                    Some(task) => Ok(task),
                    None => Err(self
                        .task_write_refused(tenant, id, expected_version)
                        .await?
                        .unwrap_or_else(|| StoreError::NotFound(format!("app {}", def.app_id)))),
                }
            }

            async fn set_task_paused(
                &mut self,
                tenant: TenantId,
                id: TaskId,
                expected_version: i64,
                paused: bool,
                now: i64,
            ) -> Result<Task> {
                let row = sqlx::query_as(
                    "UPDATE tasks SET paused = $4, version = version + 1, updated_at = $5
                     WHERE tenant_id = $1 AND id = $2 AND version = $3 AND deleted_at IS NULL RETURNING *",
                )
                .bind(tenant)
                .bind(id)
                .bind(expected_version)
                .bind(paused)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                match row {
                    Some(task) => Ok(task),
                    None => Err(self
                        .task_write_refused(tenant, id, expected_version)
                        .await?
                        .unwrap_or_else(|| StoreError::NotFound(format!("task {id}")))),
                }
            }

            async fn mark_task_deleted(
                &mut self,
                tenant: TenantId,
                id: TaskId,
                expected_version: i64,
                now: i64,
            ) -> Result<Task> {
                let row: Option<Task> = sqlx::query_as(
                    "UPDATE tasks SET deleted_at = $4, version = version + 1, updated_at = $4
                     WHERE tenant_id = $1 AND id = $2 AND version = $3 AND deleted_at IS NULL RETURNING *",
                )
                .bind(tenant)
                .bind(id)
                .bind(expected_version)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                let Some(task) = row else {
                    return Err(self
                        .task_write_refused(tenant, id, expected_version)
                        .await?
                        .unwrap_or_else(|| StoreError::NotFound(format!("task {id}"))));
                };
                sqlx::query("DELETE FROM task_dependencies WHERE parent_task_id = $1 OR child_task_id = $1")
                    .bind(id)
                    .execute(&mut *self.tx)
                    .await?;
                Ok(task)
            }

            async fn add_fires_scheduled(&mut self, task: TaskId, n: i64) -> Result<()> {
                sqlx::query("UPDATE tasks SET fires_scheduled = fires_scheduled + $2 WHERE id = $1")
                    .bind(task)
                    .bind(n)
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn insert_dependency(
                &mut self,
                tenant: TenantId,
                parent: TaskId,
                child: TaskId,
                condition: DependencyCondition,
                now: i64,
            ) -> Result<Dependency> {
                let row = sqlx::query_as(
                    "INSERT INTO task_dependencies (tenant_id, parent_task_id, child_task_id, condition, created_at)
                     SELECT $1, $2, $3, $4, $5
                     WHERE EXISTS (SELECT 1 FROM tasks WHERE id = $2 AND tenant_id = $1 AND deleted_at IS NULL)
                       AND EXISTS (SELECT 1 FROM tasks WHERE id = $3 AND tenant_id = $1 AND deleted_at IS NULL)
                     ON CONFLICT (parent_task_id, child_task_id) DO UPDATE SET condition = excluded.condition
                     RETURNING *",
                )
                .bind(tenant)
                .bind(parent)
                .bind(child)
                .bind(condition.as_str())
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(|e| check_or(e, || "a task cannot depend on itself".to_owned()))?;
                found(row, || format!("task {parent} or {child}"))
            }

            async fn delete_dependency(&mut self, tenant: TenantId, parent: TaskId, child: TaskId) -> Result<()> {
                let done = sqlx::query(
                    "DELETE FROM task_dependencies WHERE tenant_id = $1 AND parent_task_id = $2 AND child_task_id = $3",
                )
                .bind(tenant)
                .bind(parent)
                .bind(child)
                .execute(&mut *self.tx)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("dependency {parent} → {child}")));
                }
                Ok(())
            }

            async fn list_dependencies(&mut self, tenant: TenantId) -> Result<Vec<Dependency>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM task_dependencies WHERE tenant_id = $1 ORDER BY parent_task_id, child_task_id",
                )
                .bind(tenant)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn children_of(&mut self, parent: TaskId) -> Result<Vec<Dependency>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM task_dependencies WHERE parent_task_id = $1 ORDER BY child_task_id",
                )
                .bind(parent)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn parents_of(&mut self, child: TaskId) -> Result<Vec<Dependency>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM task_dependencies WHERE child_task_id = $1 ORDER BY parent_task_id",
                )
                .bind(child)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            // ---- runs -----------------------------------------------------------------

            async fn insert_run(&mut self, run: &NewRun, now: i64) -> Result<Option<Run>> {
                sqlx::query_as(
                    "INSERT INTO runs (tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index,
                         shard_total, trigger_kind, state, priority, parent_run_id, chain_root_id, params,
                         triggered_by, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $12, $13, $14, $15)
                     ON CONFLICT (task_id, scheduled_at, attempt, shard_index) DO NOTHING
                     RETURNING *",
                )
                .bind(run.tenant_id)
                .bind(run.task_id)
                .bind(&run.node_group)
                .bind(run.scheduled_at)
                .bind(run.due_at)
                .bind(run.attempt)
                .bind(run.shard_index)
                .bind(run.shard_total)
                .bind(run.trigger_kind.as_str())
                .bind(run.priority)
                .bind(run.parent_run_id)
                .bind(run.chain_root_id)
                .bind(run.params.as_ref().map(Json))
                .bind(run.triggered_by.as_deref())
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(|e| fk_or(e, || format!("task {} of tenant {}", run.task_id, run.tenant_id)))
            }

            async fn get_run(&mut self, tenant: TenantId, id: RunId) -> Result<Run> {
                let row = sqlx::query_as("SELECT * FROM runs WHERE tenant_id = $1 AND id = $2")
                    .bind(tenant)
                    .bind(id)
                    .fetch_optional(&mut *self.tx)
                    .await?;
                found(row, || format!("run {id}"))
            }

            async fn list_runs(&mut self, tenant: TenantId, filter: &RunFilter) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM runs WHERE tenant_id = $1
                       AND ($2 IS NULL OR task_id = $2) AND ($3 IS NULL OR state = $3)
                       AND ($4 IS NULL OR scheduled_at >= $4) AND ($5 IS NULL OR scheduled_at < $5)
                       AND ($6 IS NULL OR id < $6)
                       AND ($8 IS NULL OR trigger_kind = $8) AND ($9 IS NULL OR executor_id = $9)
                       AND ($10 IS NULL OR finished_at >= $10) AND ($11 IS NULL OR finished_at < $11)
                     ORDER BY id DESC LIMIT $7",
                )
                .bind(tenant)
                .bind(filter.task_id)
                .bind(filter.state.map(|s| s.as_str()))
                .bind(filter.scheduled_from)
                .bind(filter.scheduled_before)
                .bind(filter.before_id)
                .bind(page_limit(filter.limit))
                .bind(filter.trigger_kind.map(|t| t.as_str()))
                .bind(filter.executor_id)
                .bind(filter.finished_from)
                .bind(filter.finished_before)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn find_run(&mut self, id: RunId) -> Result<Option<Run>> {
                Ok(sqlx::query_as("SELECT * FROM runs WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *self.tx)
                    .await?)
            }

            async fn transition_claimed(
                &mut self,
                fence: &Fence,
                to: &ClaimedTransition,
                now: i64,
            ) -> Result<Run> {
                // Every transition is fenced the same way: still claimed, by this node, with this
                // token, on a lease that has not ended ($1–$4); the transition's own values follow.
                let sql = match to {
                    ClaimedTransition::Started { .. } => $crate::store::shared::fenced_update!(
                        "state = 'running', executor_id = $5, deadline_at = $6,
                         dispatched_at = $7, started_at = $4, dispatch_attempts = dispatch_attempts + 1"
                    ),
                    ClaimedTransition::Deferred { .. } => $crate::store::shared::fenced_update!(
                        "state = 'pending', claim_owner = NULL, lease_until = NULL, due_at = $5"
                    ),
                    ClaimedTransition::Released => $crate::store::shared::fenced_update!(
                        "state = 'pending', claim_owner = NULL, lease_until = NULL,
                         dispatch_attempts = dispatch_attempts + 1"
                    ),
                    ClaimedTransition::Sharded { .. } => {
                        $crate::store::shared::fenced_update!("shard_index = $5, shard_total = $6")
                    }
                    ClaimedTransition::Skipped { .. } => $crate::store::shared::fenced_update!(
                        "state = 'skipped', finished_at = $4, error = $5"
                    ),
                    ClaimedTransition::Cancelled { .. } => $crate::store::shared::fenced_update!(
                        "state = 'cancelled', finished_at = $4, error = $5"
                    ),
                    ClaimedTransition::ExtendLease { .. } => {
                        $crate::store::shared::fenced_update!("lease_until = $5")
                    }
                };
                let q = sqlx::query_as(sql)
                    .bind(fence.run_id)
                    .bind(&fence.node)
                    .bind(fence.token)
                    .bind(now);
                let q = match to {
                    ClaimedTransition::Started { executor_id, dispatched_at, deadline_at } => {
                        q.bind(*executor_id).bind(*deadline_at).bind(*dispatched_at)
                    }
                    ClaimedTransition::Deferred { due_at } => q.bind(*due_at),
                    ClaimedTransition::Released => q,
                    ClaimedTransition::Sharded { index, total } => q.bind(*index).bind(*total),
                    ClaimedTransition::Skipped { reason } | ClaimedTransition::Cancelled { reason } => {
                        q.bind(reason.as_str())
                    }
                    ClaimedTransition::ExtendLease { lease_until } => q.bind(*lease_until),
                };
                let row = q.fetch_optional(&mut *self.tx).await?;
                row.ok_or_else(|| StoreError::Fenced {
                    run_id: fence.run_id,
                    node: fence.node.clone(),
                    token: fence.token,
                })
            }

            async fn complete_run(
                &mut self,
                id: RunId,
                app: Option<AppId>,
                completion: &RunCompletion,
            ) -> Result<Completion> {
                if !completion.state.is_final() {
                    return Err($crate::store::shared::not_final(completion.state));
                }
                let row: Option<Run> = sqlx::query_as(concat!(
                    "SELECT * FROM runs WHERE id = $1
                       AND ($2 IS NULL OR EXISTS (SELECT 1 FROM tasks t WHERE t.id = runs.task_id AND t.app_id = $2))",
                    $for_update
                ))
                .bind(id)
                .bind(app)
                .fetch_optional(&mut *self.tx)
                .await?;
                let run = found(row, || format!("run {id}"))?;
                if let Some(refused) = $crate::store::shared::report_refused(&run, completion) {
                    return Err(refused);
                }
                if run.state.is_final() {
                    return Ok(Completion::AlreadyFinal(run));
                }
                let tail = $crate::store::shared::completed_tail(&run, completion);
                let row: Option<Run> = sqlx::query_as(
                    "UPDATE runs SET state = $2, output = $3, error = $4, log_tail = $5,
                         started_at = COALESCE(started_at, $6), finished_at = $7, lease_until = NULL
                     WHERE id = $1 AND state IN ('pending', 'claimed', 'running') RETURNING *",
                )
                .bind(id)
                .bind(completion.state.as_str())
                .bind(completion.output.as_ref().map(Json))
                .bind(completion.error.as_deref())
                .bind(tail)
                .bind(completion.started_at)
                .bind(completion.finished_at)
                .fetch_optional(&mut *self.tx)
                .await?;
                match row {
                    Some(run) => Ok(Completion::Applied(run)),
                    None => Ok(Completion::AlreadyFinal(run)),
                }
            }

            async fn revive_lost_run(
                &mut self,
                lost: &Run,
                completion: &RunCompletion,
            ) -> Result<Option<Run>> {
                if lost.state != $crate::run::RunState::Lost
                    || completion.state != $crate::run::RunState::Succeeded
                {
                    return Ok(None);
                }
                let recovery: Option<(RunId,)> = sqlx::query_as(
                    "SELECT id FROM runs
                     WHERE task_id = $1 AND scheduled_at = $2 AND shard_index = $3 AND attempt = $4",
                )
                .bind(lost.task_id)
                .bind(lost.scheduled_at)
                .bind(lost.shard_index)
                .bind(lost.attempt + 1)
                .fetch_optional(&mut *self.tx)
                .await?;
                let Some((recovery,)) = recovery else { return Ok(None) };
                // Never wait on it: runs are locked in id order, and this one comes later.
                if self.try_lock_runs(&[recovery]).await?.is_empty() {
                    return Ok(None);
                }
                let withdrawn = sqlx::query(
                    "DELETE FROM runs WHERE id = $1
                       AND (state = 'pending' OR (state = 'claimed' AND executor_id IS NULL))",
                )
                .bind(recovery)
                .execute(&mut *self.tx)
                .await?;
                if withdrawn.rows_affected() == 0 {
                    return Ok(None);
                }
                let tail = $crate::store::shared::completed_tail(lost, completion);
                Ok(sqlx::query_as(
                    "UPDATE runs SET state = 'succeeded', output = $2, error = NULL, log_tail = $3,
                         started_at = COALESCE($4, started_at), finished_at = $5
                     WHERE id = $1 AND state = 'lost' RETURNING *",
                )
                .bind(lost.id)
                .bind(completion.output.as_ref().map(Json))
                .bind(tail)
                .bind(completion.started_at)
                .bind(completion.finished_at)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn record_progress(
                &mut self,
                app: Option<AppId>,
                progress: &RunProgress,
                _now: i64,
            ) -> Result<bool> {
                let id = progress.run_id;
                let row: Option<Run> = sqlx::query_as(concat!(
                    "SELECT * FROM runs WHERE id = $1 AND state = 'running'
                       AND ($2 IS NULL OR EXISTS (SELECT 1 FROM tasks t WHERE t.id = runs.task_id AND t.app_id = $2))",
                    $for_update
                ))
                .bind(id)
                .bind(app)
                .fetch_optional(&mut *self.tx)
                .await?;
                let Some(run) = row else { return Ok(false) };
                let tail = if progress.log_lines.is_empty() {
                    run.log_tail
                } else {
                    $crate::run::append_log_tail(&run.log_tail, &progress.log_lines)
                };
                let fraction = progress.fraction.map(|f| f.clamp(0.0, 1.0));
                sqlx::query(
                    "UPDATE runs SET progress = COALESCE($2, progress),
                         progress_message = COALESCE($3, progress_message), log_tail = $4
                     WHERE id = $1",
                )
                .bind(id)
                .bind(fraction)
                .bind(progress.message.as_deref())
                .bind(tail)
                .execute(&mut *self.tx)
                .await?;
                Ok(true)
            }

            async fn running_runs_past_deadline(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(concat!(
                    "SELECT * FROM runs WHERE state = 'running' AND deadline_at < $1
                     ORDER BY deadline_at, id LIMIT $2",
                    $skip_locked
                ))
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn lock_occurrence(&mut self, task: TaskId, scheduled_at: i64) -> Result<Vec<Run>> {
                let _: Option<(RunId,)> = sqlx::query_as(concat!(
                    "SELECT id FROM runs
                     WHERE task_id = $1 AND scheduled_at = $2 AND shard_index = 0 AND attempt = 1",
                    $for_update
                ))
                .bind(task)
                .bind(scheduled_at)
                .fetch_optional(&mut *self.tx)
                .await?;
                Ok(sqlx::query_as(
                    "SELECT * FROM runs WHERE task_id = $1 AND scheduled_at = $2 ORDER BY shard_index, attempt",
                )
                .bind(task)
                .bind(scheduled_at)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn runs_not_started(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(
                    "SELECT r.* FROM runs r JOIN tasks t ON t.id = r.task_id
                     WHERE r.state IN ('pending', 'claimed') AND r.due_at < $1
                       AND t.start_timeout_ms IS NOT NULL AND r.due_at + t.start_timeout_ms < $1
                       AND NOT EXISTS (SELECT 1 FROM alarms a WHERE a.dedupe_key = 'not_started:' || r.id)
                     ORDER BY r.due_at, r.id LIMIT $2",
                )
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn unfinished_runs_of_task(&mut self, task: TaskId) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM runs WHERE task_id = $1 AND state IN ('pending', 'claimed', 'running') ORDER BY id",
                )
                .bind(task)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            // ---- alarms ---------------------------------------------------------------

            async fn insert_alarm(&mut self, alarm: &NewAlarm, now: i64) -> Result<Option<Alarm>> {
                Ok(sqlx::query_as(
                    "INSERT INTO alarms (tenant_id, kind, severity, task_id, run_id, executor_id, node_id,
                         message, details, dedupe_key, created_at, muted)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
                         EXISTS (SELECT 1 FROM alarm_mutes WHERE task_id = $4 AND muted_until > $11))
                     ON CONFLICT DO NOTHING RETURNING *",
                )
                .bind(alarm.tenant_id)
                .bind(alarm.kind.as_str())
                .bind(alarm.severity.as_str())
                .bind(alarm.task_id)
                .bind(alarm.run_id)
                .bind(alarm.executor_id)
                .bind(alarm.node_id.as_deref())
                .bind(&alarm.message)
                .bind(Json(&alarm.details))
                .bind(alarm.dedupe_key.as_deref())
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn list_unpublished_alarms(&mut self, limit: i64) -> Result<Vec<Alarm>> {
                Ok(sqlx::query_as(concat!(
                    "SELECT * FROM alarms WHERE published_at IS NULL AND muted = FALSE ORDER BY id LIMIT $1",
                    $skip_locked
                ))
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn get_alarm(&mut self, scope: Scope, id: AlarmId) -> Result<Alarm> {
                let row = sqlx::query_as(
                    "SELECT * FROM alarms WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)",
                )
                .bind(id)
                .bind(scope.tenant())
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("alarm {id}"))
            }

            async fn list_alarms(&mut self, scope: Scope, filter: &AlarmFilter) -> Result<Vec<Alarm>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM alarms WHERE ($1 IS NULL OR tenant_id = $1)
                       AND ($2 IS NULL OR kind = $2)
                       AND ($3 = FALSE OR (acknowledged_at IS NULL AND muted = FALSE))
                       AND ($4 IS NULL OR id < $4)
                       AND ($6 IS NULL OR severity = $6) AND ($7 IS NULL OR task_id = $7)
                       AND ($8 = FALSE OR acknowledged_at IS NOT NULL)
                       AND ($9 IS NULL OR muted = $9)
                     ORDER BY id DESC LIMIT $5",
                )
                .bind(scope.tenant())
                .bind(filter.kind.map(|k| k.as_str()))
                .bind(filter.unacknowledged)
                .bind(filter.before_id)
                .bind(page_limit(filter.limit))
                .bind(filter.severity.map(|s| s.as_str()))
                .bind(filter.task_id)
                .bind(filter.acknowledged)
                .bind(filter.muted)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn acknowledge_alarm(&mut self, scope: Scope, id: AlarmId, by: &str, now: i64) -> Result<Alarm> {
                let row = sqlx::query_as(
                    "UPDATE alarms SET acknowledged_at = COALESCE(acknowledged_at, $3),
                         acknowledged_by = COALESCE(acknowledged_by, $4)
                     WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2) RETURNING *",
                )
                .bind(id)
                .bind(scope.tenant())
                .bind(now)
                .bind(by)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("alarm {id}"))
            }

            // ---- engine nodes and audit ----------------------------------------------

            async fn heartbeat_node(&mut self, beat: &NodeHeartbeat, now: i64) -> Result<EngineNode> {
                Ok(sqlx::query_as(
                    "INSERT INTO engine_nodes (id, node_groups, address, started_at, last_heartbeat_at, state)
                     VALUES ($1, $2, $3, $4, $4, $5)
                     ON CONFLICT (id) DO UPDATE SET node_groups = excluded.node_groups,
                         address = excluded.address, last_heartbeat_at = excluded.last_heartbeat_at,
                         state = excluded.state,
                         started_at = CASE WHEN engine_nodes.state IN ('stopped', 'lost')
                                           THEN excluded.started_at ELSE engine_nodes.started_at END
                     RETURNING *",
                )
                .bind(&beat.id)
                .bind(Json(&beat.node_groups))
                .bind(&beat.address)
                .bind(now)
                .bind(beat.state.as_str())
                .fetch_one(&mut *self.tx)
                .await?)
            }

            async fn list_nodes(&mut self) -> Result<Vec<EngineNode>> {
                Ok(sqlx::query_as("SELECT * FROM engine_nodes ORDER BY id")
                    .fetch_all(&mut *self.tx)
                    .await?)
            }

            async fn mark_nodes_lost(&mut self, heartbeat_before: i64) -> Result<Vec<EngineNode>> {
                Ok(sqlx::query_as(
                    "UPDATE engine_nodes SET state = 'lost'
                     WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1 RETURNING *",
                )
                .bind(heartbeat_before)
                .fetch_all(&mut *self.tx)
                .await?)
            }

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

            // ---- console views -------------------------------------------------------

            async fn run_samples(
                &mut self,
                tenant: TenantId,
                query: &$crate::store::RunSampleQuery,
            ) -> Result<Vec<$crate::store::RunSample>> {
                Ok(sqlx::query_as(
                    "SELECT task_id, state, scheduled_at, due_at, started_at, finished_at FROM runs
                     WHERE tenant_id = $1 AND ($2 IS NULL OR task_id = $2)
                       AND scheduled_at >= $3 AND scheduled_at < $4
                       AND state IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                     ORDER BY scheduled_at, id LIMIT $5",
                )
                .bind(tenant)
                .bind(query.task_id)
                .bind(query.scheduled_from)
                .bind(query.scheduled_before)
                .bind(query.limit.clamp(1, $crate::store::MAX_RUN_SAMPLES))
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn occurrence_runs(&mut self, tenant: TenantId, task: TaskId, scheduled_at: i64) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM runs WHERE tenant_id = $1 AND task_id = $2 AND scheduled_at = $3
                     ORDER BY shard_index, attempt",
                )
                .bind(tenant)
                .bind(task)
                .bind(scheduled_at)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn find_trigger_key(
                &mut self,
                tenant: TenantId,
                key: &str,
                created_since: i64,
            ) -> Result<Option<$crate::store::TriggerKey>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM trigger_keys WHERE tenant_id = $1 AND key = $2 AND created_at >= $3",
                )
                .bind(tenant)
                .bind(key)
                .bind(created_since)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn insert_trigger_key(&mut self, key: &$crate::store::TriggerKey, created_since: i64) -> Result<bool> {
                sqlx::query("DELETE FROM trigger_keys WHERE tenant_id = $1 AND key = $2 AND created_at < $3")
                    .bind(key.tenant_id)
                    .bind(&key.key)
                    .bind(created_since)
                    .execute(&mut *self.tx)
                    .await?;
                let inserted = sqlx::query(
                    "INSERT INTO trigger_keys (tenant_id, key, task_id, run_id, created_at)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, key) DO NOTHING",
                )
                .bind(key.tenant_id)
                .bind(&key.key)
                .bind(key.task_id)
                .bind(key.run_id)
                .bind(key.created_at)
                .execute(&mut *self.tx)
                .await
                .map_err(|e| fk_or(e, || format!("run {} of tenant {}", key.run_id, key.tenant_id)))?;
                Ok(inserted.rows_affected() == 1)
            }

            async fn set_alarm_mute(
                &mut self,
                tenant: TenantId,
                task: TaskId,
                until: Option<i64>,
                by: &str,
                now: i64,
            ) -> Result<Option<$crate::store::AlarmMute>> {
                // The task must be the tenant's: a foreign id is "not found", never muted.
                self.get_task(tenant, task).await?;
                let Some(until) = until else {
                    sqlx::query("DELETE FROM alarm_mutes WHERE tenant_id = $1 AND task_id = $2")
                        .bind(tenant)
                        .bind(task)
                        .execute(&mut *self.tx)
                        .await?;
                    return Ok(None);
                };
                Ok(Some(
                    sqlx::query_as(
                        "INSERT INTO alarm_mutes (task_id, tenant_id, muted_until, muted_by, updated_at)
                         VALUES ($1, $2, $3, $4, $5)
                         ON CONFLICT (task_id) DO UPDATE SET muted_until = excluded.muted_until,
                             muted_by = excluded.muted_by, updated_at = excluded.updated_at
                         RETURNING *",
                    )
                    .bind(task)
                    .bind(tenant)
                    .bind(until)
                    .bind(by)
                    .bind(now)
                    .fetch_one(&mut *self.tx)
                    .await?,
                ))
            }

            async fn list_alarm_mutes(&mut self, tenant: TenantId, now: i64) -> Result<Vec<$crate::store::AlarmMute>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM alarm_mutes WHERE tenant_id = $1 AND muted_until > $2 ORDER BY task_id",
                )
                .bind(tenant)
                .bind(now)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            // ---- console sessions and sign-in attempts -------------------------------

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

            // ---- cancel requests and purges --------------------------------------------

            async fn request_run_cancel(&mut self, tenant: TenantId, run: RunId, at: i64) -> Result<bool> {
                let done = sqlx::query(
                    "UPDATE runs SET cancel_pending_at = $3
                     WHERE tenant_id = $1 AND id = $2 AND state = 'cancelled' AND executor_id IS NOT NULL",
                )
                .bind(tenant)
                .bind(run)
                .bind(at)
                .execute(&mut *self.tx)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn take_cancel_requests(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(concat!(
                    "UPDATE runs SET cancel_pending_at = NULL WHERE id IN (
                         SELECT id FROM runs WHERE cancel_pending_at IS NOT NULL AND cancel_pending_at <= $1
                         ORDER BY cancel_pending_at LIMIT $2",
                    $skip_locked,
                    ") RETURNING *"
                ))
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn defer_cancel_request(&mut self, run: RunId, at: i64) -> Result<()> {
                sqlx::query("UPDATE runs SET cancel_pending_at = $2 WHERE id = $1 AND state = 'cancelled'")
                    .bind(run)
                    .bind(at)
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn purge_trigger_keys(&mut self, created_before: i64, limit: i64) -> Result<u64> {
                let done = sqlx::query(concat!(
                    "DELETE FROM trigger_keys WHERE (tenant_id, key) IN (
                         SELECT tenant_id, key FROM trigger_keys WHERE created_at < $1 LIMIT $2",
                    $skip_locked,
                    ")"
                ))
                .bind(created_before)
                .bind(limit)
                .execute(&mut *self.tx)
                .await?;
                Ok(done.rows_affected())
            }
        }

        impl $tx {
            /// Why a versioned task write matched no row: not found, or a version conflict;
            /// `None` when the task is there at that version (something else refused the write).
            async fn task_write_refused(
                &mut self,
                tenant: TenantId,
                id: TaskId,
                expected_version: i64,
            ) -> Result<Option<StoreError>> {
                let row: Option<(i64,)> = sqlx::query_as(
                    "SELECT version FROM tasks WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
                )
                .bind(tenant)
                .bind(id)
                .fetch_optional(&mut *self.tx)
                .await?;
                Ok(match row {
                    None => Some(StoreError::NotFound(format!("task {id}"))),
                    Some((actual,)) if actual != expected_version => Some(StoreError::Conflict {
                        what: format!("task {id}"),
                        expected: expected_version,
                        actual,
                    }),
                    Some(_) => None,
                })
            }
        }
    };
}

/// Whether `e` is a foreign-key violation.
pub(super) fn is_fk(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::ForeignKeyViolation))
}

pub(super) use tx_impl;
