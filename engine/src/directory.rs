//! What the dispatcher and the callback API need to know about apps, cached for a moment so the
//! hot paths do not ask the database for every run: each app's key (`<tenant>.<app>`) and
//! secret, and its live executor instances.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mthpt_wrapper::client::SignedClient;
use mthpt_wrapper::protocol::Signer;

use crate::app::{App, AppId, Executor, ExecutorId};
use crate::store::{Result, Store};
use crate::tenant::TenantId;

/// An app as the engine talks to it.
#[derive(Debug)]
pub struct AppEntry {
    pub app: App,
    /// `<tenant>.<app>`: the `X-Mthpt-App` value.
    pub key: String,
    /// Signs requests to the app's wrappers.
    pub client: SignedClient,
    /// Its instances that are up and heartbeating, oldest registration first.
    pub live: Vec<Executor>,
    fetched_at: i64,
}

impl AppEntry {
    /// The live instance with this id.
    pub fn executor(&self, id: crate::app::ExecutorId) -> Option<&Executor> {
        self.live.iter().find(|e| e.id == id)
    }
}

/// Splits an app key `<tenant>.<app>`.
pub fn split_app_key(key: &str) -> Option<(&str, &str)> {
    key.split_once('.')
        .filter(|(t, a)| !t.is_empty() && !a.is_empty())
}

/// The cache. Entries older than `ttl_ms` are fetched again on use.
#[derive(Debug)]
pub struct Directory {
    store: Arc<dyn Store>,
    http: reqwest::Client,
    ttl_ms: i64,
    executor_timeout_ms: i64,
    apps: Mutex<HashMap<AppId, Arc<AppEntry>>>,
    tenants: Mutex<HashMap<TenantId, String>>,
    keys: Mutex<HashMap<String, (i64, Option<App>)>>,
    /// Registered instances by app and instance id (an instance keeps its id for good).
    instances: Mutex<HashMap<(AppId, String), ExecutorId>>,
    /// Every app key learned so far, by app id (names never change), for log lines.
    known_keys: Mutex<HashMap<AppId, String>>,
}

impl Directory {
    /// A directory over `store`; requests to wrappers go through `http`. Instances whose last
    /// heartbeat is older than `executor_timeout_ms` are not offered.
    pub fn new(
        store: Arc<dyn Store>,
        http: reqwest::Client,
        ttl_ms: i64,
        executor_timeout_ms: i64,
    ) -> Self {
        Self {
            store,
            http,
            ttl_ms,
            executor_timeout_ms,
            apps: Mutex::default(),
            tenants: Mutex::default(),
            keys: Mutex::default(),
            instances: Mutex::default(),
            known_keys: Mutex::default(),
        }
    }

    /// The entries of `apps`, refreshing those older than the TTL (one transaction for all).
    pub async fn entries(&self, apps: &[AppId], now: i64) -> Result<HashMap<AppId, Arc<AppEntry>>> {
        self.entries_valid_at(apps, now, now).await
    }

    /// The entries of `apps` that are cached and fresh at `now`, without reading the database
    /// (an app not among them is not in the map).
    pub fn cached(&self, apps: &[AppId], now: i64) -> HashMap<AppId, Arc<AppEntry>> {
        let cached = lock(&self.apps);
        apps.iter()
            .filter_map(|id| {
                let e = cached.get(id)?;
                self.fresh_at(e, now).then(|| (*id, e.clone()))
            })
            .collect()
    }

    /// Whether a cached entry is still to be used at `at` (younger than the TTL).
    fn fresh_at(&self, e: &AppEntry, at: i64) -> bool {
        at - e.fetched_at < self.ttl_ms
    }

    /// Refreshes the entries of `apps` that will be older than the TTL at `until`, so that
    /// using them then does not wait for the database (the claim warms what the runs it just
    /// claimed will need when they fall due).
    pub async fn warm(&self, apps: &[AppId], now: i64, until: i64) -> Result<()> {
        self.entries_valid_at(apps, now, until.max(now))
            .await
            .map(|_| ())
    }

    async fn entries_valid_at(
        &self,
        apps: &[AppId],
        now: i64,
        valid_at: i64,
    ) -> Result<HashMap<AppId, Arc<AppEntry>>> {
        let mut out = HashMap::with_capacity(apps.len());
        let mut stale = Vec::new();
        {
            let cached = lock(&self.apps);
            for id in apps {
                match cached.get(id) {
                    Some(e) if self.fresh_at(e, valid_at) => {
                        out.insert(*id, e.clone());
                    }
                    _ if !stale.contains(id) => stale.push(*id),
                    _ => {}
                }
            }
        }
        if stale.is_empty() {
            return Ok(out);
        }
        let mut tx = self.store.begin_read().await?;
        let rows = tx.get_apps_by_ids(&stale).await?;
        let mut fresh = Vec::with_capacity(rows.len());
        for app in rows {
            let tenant = match self.tenant_name(app.tenant_id) {
                Some(name) => name,
                None => {
                    let name = tx.get_tenant(app.tenant_id).await?.name;
                    lock(&self.tenants).insert(app.tenant_id, name.clone());
                    name
                }
            };
            let live = tx
                .list_live_executors(app.id, now - self.executor_timeout_ms)
                .await?;
            let key = format!("{tenant}.{}", app.name);
            let signer = Signer::new(key.clone(), app.secret.clone().into_bytes());
            fresh.push(Arc::new(AppEntry {
                client: SignedClient::with_http(self.http.clone(), signer),
                key,
                live,
                app,
                fetched_at: now,
            }));
        }
        drop(tx);
        for entry in &fresh {
            self.learn_key(entry.app.id, &entry.key);
        }
        let mut cached = lock(&self.apps);
        for entry in fresh {
            cached.insert(entry.app.id, entry.clone());
            out.insert(entry.app.id, entry);
        }
        Ok(out)
    }

    /// Forgets an app, so its next use reads it again (e.g. after an executor registered).
    pub fn invalidate(&self, app: AppId) {
        lock(&self.apps).remove(&app);
    }

    /// The app a wrapper's `X-Mthpt-App` names, for verifying its signature (cached, including
    /// "no such app" so a flood of bad keys does not reach the database).
    pub async fn app_by_key(&self, key: &str, now: i64) -> Result<Option<App>> {
        if let Some((at, app)) = lock(&self.keys).get(key)
            && now - at < self.ttl_ms
        {
            return Ok(app.clone());
        }
        let app = match split_app_key(key) {
            Some((tenant, app)) => {
                let mut tx = self.store.begin_read().await?;
                tx.find_app_by_key(tenant, app).await?
            }
            None => None,
        };
        if let Some(app) = &app {
            self.learn_key(app.id, key);
        }
        let mut keys = lock(&self.keys);
        if keys.len() > 10_000 {
            keys.clear();
        }
        keys.insert(key.to_owned(), (now, app.clone()));
        Ok(app)
    }

    /// The id of an app's instance that registered as `instance_id` (in any state since);
    /// `None` when it never did. Found ids are cached for good, misses are not.
    pub async fn registered_instance(
        &self,
        app: AppId,
        instance_id: &str,
    ) -> Result<Option<ExecutorId>> {
        let key = (app, instance_id.to_owned());
        if let Some(id) = lock(&self.instances).get(&key) {
            return Ok(Some(*id));
        }
        let found = {
            let mut tx = self.store.begin_read().await?;
            tx.find_executor(app, instance_id).await?
        };
        let Some(e) = found else { return Ok(None) };
        let mut instances = lock(&self.instances);
        if instances.len() > 100_000 {
            instances.clear();
        }
        instances.insert(key, e.id);
        Ok(Some(e.id))
    }

    /// The key `<tenant>.<app>` of an app this directory has seen, without asking the database.
    pub fn known_key(&self, app: AppId) -> Option<String> {
        lock(&self.known_keys).get(&app).cloned()
    }

    fn learn_key(&self, app: AppId, key: &str) {
        let mut keys = lock(&self.known_keys);
        if keys.len() > 100_000 {
            keys.clear();
        }
        keys.entry(app).or_insert_with(|| key.to_owned());
    }

    fn tenant_name(&self, id: TenantId) -> Option<String> {
        lock(&self.tenants).get(&id).cloned()
    }
}

/// Locks a mutex, recovering the data if a panicking holder poisoned it (the caches hold
/// plain data that stays consistent).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_keys_split_at_the_first_dot() {
        assert_eq!(split_app_key("acme.billing"), Some(("acme", "billing")));
        assert_eq!(split_app_key("acme"), None);
        assert_eq!(split_app_key(".billing"), None);
        assert_eq!(split_app_key("acme."), None);
    }
}
