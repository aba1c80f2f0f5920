use std::sync::Arc;

use mthpt_engine::audit::NewAuditEvent;
use mthpt_engine::run::RunState;
use mthpt_engine::store::{Scope, Store, StoreError, UserUpdate};
use mthpt_engine::tenant::{NewApiToken, NewSession, NewTenant, NewUser, Role, TenantUpdate};

use crate::in_tx;
use crate::support::fixtures::*;

pub async fn migrating_twice_changes_nothing(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let mut tx = read(store).await;
    assert_eq!(tx.get_tenant(w.tenant.id).await.unwrap(), w.tenant);
}

pub async fn tenants_are_created_read_updated_and_deleted(store: Arc<dyn Store>) {
    let store = &*store;
    let acme = in_tx!(store, |tx| tx
        .create_tenant(
            &NewTenant {
                name: "acme".into(),
                display_name: "ACME Corp".into(),
                node_group: "eu".into(),
                executor_hosts: Vec::new(),
            },
            T0
        )
        .await
        .unwrap());
    assert_eq!(acme.node_group, "eu");
    assert!(!acme.disabled);

    let mut tx = store.begin().await.unwrap();
    let dup = tx
        .create_tenant(&NewTenant::named("acme"), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(dup, StoreError::Duplicate(ref m) if m.contains("acme")),
        "{dup}"
    );
    drop(tx);

    let mut tx = store.begin().await.unwrap();
    let bad = tx
        .create_tenant(&NewTenant::named("Not A Slug"), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(bad, StoreError::Invalid(ref f) if f.field == "name"),
        "{bad}"
    );
    drop(tx);

    let other = in_tx!(store, |tx| tx
        .create_tenant(&NewTenant::named("other"), T0)
        .await
        .unwrap());
    let mut tx = read(store).await;
    assert_eq!(tx.get_tenant(acme.id).await.unwrap(), acme);
    assert_eq!(
        tx.find_tenant_by_name("acme").await.unwrap(),
        Some(acme.clone())
    );
    assert_eq!(tx.find_tenant_by_name("nobody").await.unwrap(), None);
    assert_eq!(
        tx.list_tenants().await.unwrap(),
        vec![acme.clone(), other.clone()]
    );
    assert!(matches!(
        tx.get_tenant(mthpt_engine::tenant::TenantId(9_999)).await,
        Err(StoreError::NotFound(_))
    ));
    drop(tx);

    let updated = in_tx!(store, |tx| tx
        .update_tenant(
            acme.id,
            &TenantUpdate {
                display_name: Some("ACME".into()),
                node_group: None,
                disabled: Some(true),
                executor_hosts: None,
                retention_ms: None,
            },
            T0 + SECOND
        )
        .await
        .unwrap());
    assert_eq!(updated.display_name, "ACME");
    assert_eq!(updated.node_group, "eu", "untouched fields stay");
    assert!(updated.disabled);
    assert_eq!(updated.updated_at, T0 + SECOND);

    // Deleting a tenant deletes what it owns.
    let w = world(store, "doomed").await;
    let (task, run) = create_task(store, &w, &every(w.app.id, "tick", MINUTE)).await;
    in_tx!(store, |tx| tx.delete_tenant(w.tenant.id).await.unwrap());
    let mut tx = read(store).await;
    assert!(tx.find_run(run.unwrap().id).await.unwrap().is_none());
    assert!(matches!(
        tx.get_task(w.tenant.id, task.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        tx.delete_tenant(w.tenant.id).await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn executor_hosts_are_stored_normalised_and_replaced_whole(store: Arc<dyn Store>) {
    let store = &*store;
    let acme = in_tx!(store, |tx| tx
        .create_tenant(
            &NewTenant {
                executor_hosts: vec![
                    "Jobs-1.Internal".into(),
                    "[::1]".into(),
                    "jobs-1.internal".into()
                ],
                ..NewTenant::named("acme")
            },
            T0
        )
        .await
        .unwrap());
    assert_eq!(acme.executor_hosts.0, ["jobs-1.internal", "::1"]);
    assert_eq!(
        acme.refused_executor_host("http://JOBS-1.internal:9010"),
        None
    );
    assert_eq!(
        acme.refused_executor_host("http://10.0.0.9:9010")
            .as_deref(),
        Some("10.0.0.9")
    );
    let open = in_tx!(store, |tx| tx
        .create_tenant(&NewTenant::named("open"), T0)
        .await
        .unwrap());
    assert!(open.executor_hosts.0.is_empty(), "no list: any host");
    assert_eq!(open.refused_executor_host("http://10.0.0.9:9010"), None);

    // Another field's change leaves the list; a new list replaces it; an empty one clears it.
    let set = |hosts: Option<Vec<String>>| TenantUpdate {
        display_name: Some("ACME".into()),
        executor_hosts: hosts,
        ..Default::default()
    };
    let kept = in_tx!(store, |tx| tx
        .update_tenant(acme.id, &set(None), T0)
        .await
        .unwrap());
    assert_eq!(kept.executor_hosts, acme.executor_hosts);
    let replaced = in_tx!(store, |tx| tx
        .update_tenant(acme.id, &set(Some(vec!["*.Jobs.Example.com".into()])), T0)
        .await
        .unwrap());
    assert_eq!(replaced.executor_hosts.0, ["*.jobs.example.com"]);
    let mut tx = read(store).await;
    assert_eq!(tx.get_tenant(acme.id).await.unwrap(), replaced);
    drop(tx);
    let cleared = in_tx!(store, |tx| tx
        .update_tenant(acme.id, &set(Some(Vec::new())), T0)
        .await
        .unwrap());
    assert!(cleared.executor_hosts.0.is_empty());

    // A bad entry is refused naming it, and nothing changes.
    let mut tx = store.begin().await.unwrap();
    let bad = tx
        .update_tenant(
            acme.id,
            &set(Some(vec!["ok.example.com".into(), "http://x:1".into()])),
            T0,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(bad, StoreError::Invalid(ref f) if f.field == "executor_hosts[1]"),
        "{bad}"
    );
}

pub async fn moving_a_tenant_to_another_node_group_moves_its_pending_runs(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (_, run) = create_task(store, &w, &every(w.app.id, "tick", MINUTE)).await;
    let run = run.unwrap();
    assert_eq!(run.node_group, "default");
    in_tx!(store, |tx| tx
        .update_tenant(
            w.tenant.id,
            &TenantUpdate {
                node_group: Some("asia".into()),
                ..Default::default()
            },
            T0
        )
        .await
        .unwrap());
    let mut tx = read(store).await;
    let moved = tx.find_run(run.id).await.unwrap().unwrap();
    assert_eq!(moved.node_group, "asia");
    assert_eq!(moved.state, RunState::Pending);
}

pub async fn users_are_scoped_to_their_tenant_and_operators_to_none(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let user = |tenant, name: &str, role| NewUser {
        tenant_id: tenant,
        username: name.into(),
        password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        role,
    };
    let mut tx = store.begin().await.unwrap();
    let op = tx
        .create_user(&user(None, "root", Role::Operator), T0)
        .await
        .unwrap();
    let alice = tx
        .create_user(&user(Some(a.tenant.id), "alice", Role::TenantAdmin), T0)
        .await
        .unwrap();
    let bob = tx
        .create_user(&user(Some(b.tenant.id), "bob", Role::TenantViewer), T0)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let mut tx = store.begin().await.unwrap();
    let err = tx
        .create_user(&user(Some(a.tenant.id), "root2", Role::Operator), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref f) if f.field == "tenant_id"),
        "{err}"
    );
    let err = tx
        .create_user(&user(None, "carol", Role::TenantAdmin), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref f) if f.field == "tenant_id"),
        "{err}"
    );
    let err = tx
        .create_user(&user(Some(a.tenant.id), "alice", Role::TenantViewer), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Duplicate(ref m) if m.contains("alice")),
        "{err}"
    );
    drop(tx);

    let mut tx = read(store).await;
    assert_eq!(
        tx.find_user_by_username("alice").await.unwrap(),
        Some(alice.clone())
    );
    assert_eq!(
        tx.list_users(Scope::Tenant(a.tenant.id)).await.unwrap(),
        vec![alice.clone()]
    );
    assert_eq!(
        tx.list_users(Scope::Cluster).await.unwrap(),
        vec![op.clone(), alice.clone(), bob.clone()]
    );
    assert_eq!(
        tx.get_user(Scope::Tenant(a.tenant.id), alice.id)
            .await
            .unwrap(),
        alice
    );
    assert!(matches!(
        tx.get_user(Scope::Tenant(a.tenant.id), bob.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        tx.get_user(Scope::Tenant(a.tenant.id), op.id).await,
        Err(StoreError::NotFound(_))
    ));
    drop(tx);

    let changed = in_tx!(store, |tx| tx
        .update_user(
            Scope::Tenant(a.tenant.id),
            alice.id,
            &UserUpdate {
                password_hash: Some("$argon2id$new".into()),
                role: Some(Role::TenantViewer),
                disabled: Some(true)
            },
            T0 + 1
        )
        .await
        .unwrap());
    assert_eq!(changed.role, Role::TenantViewer);
    assert_eq!(changed.password_hash, "$argon2id$new");
    assert!(changed.disabled);

    let mut tx = store.begin().await.unwrap();
    let err = tx
        .update_user(
            Scope::Cluster,
            alice.id,
            &UserUpdate {
                role: Some(Role::Operator),
                ..Default::default()
            },
            T0,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidState(ref m) if m.contains("role")),
        "{err}"
    );
    drop(tx);

    in_tx!(store, |tx| tx
        .delete_user(Scope::Tenant(b.tenant.id), bob.id)
        .await
        .unwrap());
    let mut tx = read(store).await;
    assert!(tx.find_user_by_username("bob").await.unwrap().is_none());
    assert!(matches!(
        tx.delete_user(Scope::Tenant(b.tenant.id), bob.id).await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn api_tokens_authenticate_until_revoked_or_expired(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let mut tx = store.begin().await.unwrap();
    let alice = tx
        .create_user(
            &NewUser {
                tenant_id: Some(a.tenant.id),
                username: "alice".into(),
                password_hash: "x".into(),
                role: Role::TenantAdmin,
            },
            T0,
        )
        .await
        .unwrap();
    let bob = tx
        .create_user(
            &NewUser {
                tenant_id: Some(a.tenant.id),
                username: "bob".into(),
                password_hash: "x".into(),
                role: Role::TenantViewer,
            },
            T0,
        )
        .await
        .unwrap();
    let forever = tx
        .create_api_token(
            &NewApiToken {
                user_id: alice.id,
                name: "ci".into(),
                token_hash: "a".repeat(64),
                expires_at: None,
                role: None,
            },
            T0,
        )
        .await
        .unwrap();
    let short = tx
        .create_api_token(
            &NewApiToken {
                user_id: alice.id,
                name: "short".into(),
                token_hash: "b".repeat(64),
                expires_at: Some(T0 + MINUTE),
                role: None,
            },
            T0,
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let (tok, user) = in_tx!(store, |tx| tx
        .authenticate_api_token(&"a".repeat(64), T0 + SECOND)
        .await
        .unwrap()
        .unwrap());
    assert_eq!(tok.id, forever.id);
    assert_eq!(tok.last_used_at, Some(T0 + SECOND));
    assert_eq!(user.id, alice.id);

    let mut tx = store.begin().await.unwrap();
    assert!(
        tx.authenticate_api_token(&"b".repeat(64), T0)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        tx.authenticate_api_token(&"b".repeat(64), T0 + MINUTE)
            .await
            .unwrap()
            .is_none(),
        "expired"
    );
    assert!(tx.api_token_holds(short.id, T0).await.unwrap());
    assert!(
        !tx.api_token_holds(short.id, T0 + MINUTE).await.unwrap(),
        "expired"
    );
    assert!(
        tx.authenticate_api_token(&"c".repeat(64), T0)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        tx.list_api_tokens(alice.id)
            .await
            .unwrap()
            .iter()
            .map(|t| t.id)
            .collect::<Vec<_>>(),
        vec![forever.id, short.id]
    );
    assert!(tx.list_api_tokens(bob.id).await.unwrap().is_empty());
    assert!(matches!(
        tx.revoke_api_token(bob.id, forever.id, T0).await,
        Err(StoreError::NotFound(_))
    ));
    tx.revoke_api_token(alice.id, forever.id, T0 + 2 * SECOND)
        .await
        .unwrap();
    assert!(
        tx.authenticate_api_token(&"a".repeat(64), T0 + 3 * SECOND)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !tx.api_token_holds(forever.id, T0 + 3 * SECOND)
            .await
            .unwrap(),
        "revoked"
    );
    tx.commit().await.unwrap();

    // A disabled user's tokens stop working.
    let mut tx = store.begin().await.unwrap();
    tx.update_user(
        Scope::Tenant(a.tenant.id),
        alice.id,
        &UserUpdate {
            disabled: Some(true),
            ..Default::default()
        },
        T0,
    )
    .await
    .unwrap();
    assert!(
        tx.authenticate_api_token(&"b".repeat(64), T0)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !tx.api_token_holds(short.id, T0).await.unwrap(),
        "its user is disabled"
    );
}

pub async fn sessions_hold_until_signed_out_expired_or_their_user_disabled(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let mut tx = store.begin().await.unwrap();
    let alice = tx
        .create_user(
            &NewUser {
                tenant_id: Some(a.tenant.id),
                username: "alice".into(),
                password_hash: "x".into(),
                role: Role::TenantViewer,
            },
            T0,
        )
        .await
        .unwrap();
    for id in ["s1", "s2"] {
        tx.create_session(
            &NewSession {
                id: id.into(),
                user_id: alice.id,
                expires_at: T0 + MINUTE,
            },
            T0,
        )
        .await
        .unwrap();
    }
    assert!(tx.session_holds("s1", T0).await.unwrap());
    assert!(
        !tx.session_holds("s1", T0 + MINUTE).await.unwrap(),
        "expired"
    );
    assert!(!tx.session_holds("nope", T0).await.unwrap(), "unknown");
    assert!(tx.revoke_session("s1", T0).await.unwrap());
    assert!(!tx.session_holds("s1", T0).await.unwrap(), "signed out");
    assert!(tx.session_holds("s2", T0).await.unwrap());
    tx.update_user(
        Scope::Tenant(a.tenant.id),
        alice.id,
        &UserUpdate {
            disabled: Some(true),
            ..Default::default()
        },
        T0,
    )
    .await
    .unwrap();
    assert!(
        !tx.session_holds("s2", T0).await.unwrap(),
        "its user is disabled"
    );
    tx.commit().await.unwrap();
}

pub async fn audit_events_are_appended_and_listed_newest_first(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let mut tx = store.begin().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut e = NewAuditEvent::new(
            Some(a.tenant.id),
            "alice",
            "task.update",
            "task",
            Some(i.to_string()),
        );
        e.details = serde_json::json!({"field": "schedule", "i": i});
        ids.push(tx.append_audit(&e, T0 + i).await.unwrap().id);
    }
    tx.append_audit(
        &NewAuditEvent::new(Some(b.tenant.id), "bob", "login", "user", None),
        T0,
    )
    .await
    .unwrap();
    tx.append_audit(
        &NewAuditEvent::new(None, "root", "tenant.create", "tenant", None),
        T0,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let mut tx = read(store).await;
    let page1 = tx
        .list_audit(Scope::Tenant(a.tenant.id), None, 3)
        .await
        .unwrap();
    assert_eq!(
        page1.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![ids[4], ids[3], ids[2]]
    );
    assert_eq!(page1[0].details.0["i"], 4);
    assert_eq!(page1[0].at, T0 + 4);
    let page2 = tx
        .list_audit(Scope::Tenant(a.tenant.id), Some(ids[2]), 3)
        .await
        .unwrap();
    assert_eq!(
        page2.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![ids[1], ids[0]]
    );
    assert_eq!(
        tx.list_audit(Scope::Cluster, None, 100)
            .await
            .unwrap()
            .len(),
        7
    );
}

pub async fn tenant_quotas_are_unlimited_until_set_and_validated(store: Arc<dyn Store>) {
    use mthpt_engine::quota::TenantQuotas;
    let store = &*store;
    let w = world(store, "acme").await;
    let other = world(store, "other").await;
    let mut tx = read(store).await;
    assert_eq!(
        tx.get_tenant_quotas(w.tenant.id).await.unwrap(),
        TenantQuotas::default()
    );
    drop(tx);

    let quotas = TenantQuotas {
        max_concurrent_runs: Some(4),
        max_fires_per_second: Some(10),
        fire_burst: Some(20),
        max_tasks: Some(100),
        max_waiting_runs: Some(50),
    };
    let set = in_tx!(store, |tx| tx
        .set_tenant_quotas(w.tenant.id, &quotas, T0 + 1)
        .await
        .unwrap());
    assert_eq!(set, quotas);
    let mut tx = read(store).await;
    assert_eq!(tx.get_tenant_quotas(w.tenant.id).await.unwrap(), quotas);
    assert_eq!(
        tx.get_tenant_quotas(other.tenant.id).await.unwrap(),
        TenantQuotas::default(),
        "another tenant's quotas are its own"
    );
    assert_eq!(tx.get_tenant(w.tenant.id).await.unwrap().updated_at, T0 + 1);
    drop(tx);

    let mut tx = store.begin().await.unwrap();
    let bad = tx
        .set_tenant_quotas(
            w.tenant.id,
            &TenantQuotas {
                max_tasks: Some(0),
                ..TenantQuotas::default()
            },
            T0,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(bad, StoreError::Invalid(ref f) if f.field == "max_tasks"),
        "{bad}"
    );
    let missing = tx
        .set_tenant_quotas(mthpt_engine::tenant::TenantId(9_999), &quotas, T0)
        .await
        .unwrap_err();
    assert!(matches!(missing, StoreError::NotFound(_)), "{missing}");
    drop(tx);

    in_tx!(store, |tx| tx
        .set_tenant_quotas(w.tenant.id, &TenantQuotas::default(), T0 + 2)
        .await
        .unwrap());
    let mut tx = read(store).await;
    assert_eq!(
        tx.get_tenant_quotas(w.tenant.id).await.unwrap(),
        TenantQuotas::default()
    );
}

pub async fn a_tenants_weight_is_one_until_set_and_stays_its_own(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let other = world(store, "other").await;
    let mut tx = read(store).await;
    assert_eq!(tx.get_tenant_weight(w.tenant.id).await.unwrap(), 1);
    drop(tx);

    in_tx!(store, |tx| tx
        .set_tenant_weight(w.tenant.id, 7)
        .await
        .unwrap());
    let mut tx = read(store).await;
    assert_eq!(tx.get_tenant_weight(w.tenant.id).await.unwrap(), 7);
    assert_eq!(
        tx.get_tenant_weight(other.tenant.id).await.unwrap(),
        1,
        "another tenant's weight is its own"
    );
    drop(tx);

    let mut tx = store.begin().await.unwrap();
    let refused = tx.set_tenant_weight(w.tenant.id, 0).await.unwrap_err();
    assert!(matches!(refused, StoreError::InvalidState(_)), "{refused}");
    drop(tx);
    let missing = mthpt_engine::tenant::TenantId(9_999);
    let mut tx = store.begin().await.unwrap();
    assert!(matches!(
        tx.get_tenant_weight(missing).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        tx.set_tenant_weight(missing, 2).await,
        Err(StoreError::NotFound(_))
    ));
    drop(tx);
    let mut tx = read(store).await;
    assert_eq!(
        tx.get_tenant_weight(w.tenant.id).await.unwrap(),
        7,
        "a refused weight changes nothing"
    );
}

pub async fn tenant_usage_counts_tasks_waiting_and_running_runs_of_that_tenant(
    store: Arc<dyn Store>,
) {
    use mthpt_engine::quota::TenantUsage;
    use mthpt_engine::store::ClaimRequest;
    let store = &*store;
    let w = world(store, "acme").await;
    let other = world(store, "other").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "one")).await;
    create_task(store, &w, &manual(w.app.id, "two")).await;
    let (foreign, _) = create_task(store, &other, &manual(other.app.id, "one")).await;
    for at in [T0 - 3, T0 - 2, T0 - 1] {
        insert(store, &occurrence(&w, &task, at)).await;
    }
    // Not yet due: not waiting.
    insert(store, &occurrence(&w, &task, T0 + 60_000)).await;
    insert(store, &occurrence(&other, &foreign, T0 - 1)).await;

    let mut tx = read(store).await;
    assert_eq!(
        tx.tenant_usage(w.tenant.id, T0).await.unwrap(),
        TenantUsage {
            tasks: 2,
            waiting_runs: 3,
            running_runs: 0
        }
    );
    // The gauge's count per tenant, whole and up to a limit.
    let by_tenant = tx.waiting_runs_by_tenant(T0, 10).await.unwrap();
    let of = |counts: &[(String, i64)], name: &str| {
        counts.iter().find(|(n, _)| n == name).map(|(_, c)| *c)
    };
    assert_eq!(of(&by_tenant, &w.tenant.name), Some(3), "{by_tenant:?}");
    assert_eq!(of(&by_tenant, &other.tenant.name), Some(1), "{by_tenant:?}");
    let capped = tx.waiting_runs_by_tenant(T0, 2).await.unwrap();
    assert_eq!(of(&capped, &w.tenant.name), Some(2), "{capped:?}");
    assert_eq!(of(&capped, &other.tenant.name), Some(1), "{capped:?}");
    drop(tx);

    let claimed = in_tx!(store, |tx| tx
        .claim_due_runs(&ClaimRequest {
            node: "node-1".into(),
            groups: vec!["default".into()],
            now: T0,
            horizon_ms: 0,
            lease_ms: 60_000,
            limit: 2,
        })
        .await
        .unwrap());
    let mine = claimed
        .iter()
        .filter(|r| r.tenant_id == w.tenant.id)
        .count() as i64;
    let mut tx = read(store).await;
    let usage = tx.tenant_usage(w.tenant.id, T0).await.unwrap();
    assert_eq!(usage.tasks, 2);
    assert_eq!(usage.running_runs, mine);
    assert_eq!(usage.waiting_runs, 3 - mine);
    let theirs = tx.tenant_usage(other.tenant.id, T0).await.unwrap();
    assert_eq!(theirs.tasks, 1);
    assert_eq!(theirs.waiting_runs + theirs.running_runs, 1);
}
