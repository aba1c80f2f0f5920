use std::sync::Arc;

use mthpt_engine::alarm::{AlarmFilter, AlarmKind, NewAlarm, Severity};
use mthpt_engine::app::NewApp;
use mthpt_engine::audit::NewAuditEvent;
use mthpt_engine::run::RunFilter;
use mthpt_engine::store::{Scope, Store, StoreError, UserUpdate};
use mthpt_engine::task::{DependencyCondition, TaskFilter};
use mthpt_engine::tenant::{NewApiToken, NewUser, Role};

use crate::in_tx;
use crate::support::fixtures::*;

fn not_found<T: std::fmt::Debug>(what: &str, r: Result<T, StoreError>) {
    assert!(
        matches!(r, Err(StoreError::NotFound(_))),
        "{what}: expected not found, got {r:?}"
    );
}

/// Tenant B, using every tenant-scoped call on tenant A's ids and names, sees nothing of A and
/// changes nothing of A.
pub async fn tenant_b_sees_and_changes_nothing_of_tenant_a(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let (t1, run) = create_task(store, &a, &every(a.app.id, "a-tick", MINUTE)).await;
    let run = run.unwrap();
    let (t2, _) = create_task(store, &a, &manual(a.app.id, "a-child")).await;
    let exec = executor(store, a.app.id, "a-host", T0).await;
    let (private_app, user, token, alarm) = in_tx!(store, |tx| {
        tx.add_dependency(
            a.tenant.id,
            t1.id,
            t2.id,
            DependencyCondition::OnSuccess,
            T0,
        )
        .await
        .unwrap();
        let private_app = tx
            .create_app(
                a.tenant.id,
                &NewApp {
                    name: "a-private".into(),
                    secret: "a-private-secret-0".into(),
                },
                T0,
            )
            .await
            .unwrap();
        let user = tx
            .create_user(
                &NewUser {
                    tenant_id: Some(a.tenant.id),
                    username: "alice".into(),
                    password_hash: "h".into(),
                    role: Role::TenantAdmin,
                },
                T0,
            )
            .await
            .unwrap();
        let token = tx
            .create_api_token(
                &NewApiToken {
                    user_id: user.id,
                    name: "ci".into(),
                    token_hash: "f".repeat(64),
                    expires_at: None,
                    role: None,
                },
                T0,
            )
            .await
            .unwrap();
        let alarm = tx
            .insert_alarm(
                &NewAlarm::new(
                    Some(a.tenant.id),
                    AlarmKind::RunFailed,
                    Severity::Warning,
                    "a failed",
                ),
                T0,
            )
            .await
            .unwrap()
            .unwrap();
        tx.append_audit(
            &NewAuditEvent::new(Some(a.tenant.id), "alice", "task.create", "task", None),
            T0,
        )
        .await
        .unwrap();
        (private_app, user, token, alarm)
    });
    let bob = in_tx!(store, |tx| tx
        .create_user(
            &NewUser {
                tenant_id: Some(b.tenant.id),
                username: "bob".into(),
                password_hash: "h".into(),
                role: Role::TenantAdmin
            },
            T0
        )
        .await
        .unwrap());

    let mut tx = store.begin().await.unwrap();
    let before = (
        tx.list_apps(a.tenant.id).await.unwrap(),
        tx.list_tasks(a.tenant.id, &TaskFilter::default())
            .await
            .unwrap(),
        tx.list_runs(a.tenant.id, &RunFilter::default())
            .await
            .unwrap(),
        tx.list_dependencies(a.tenant.id).await.unwrap(),
        tx.list_users(Scope::Tenant(a.tenant.id)).await.unwrap(),
        tx.list_alarms(Scope::Tenant(a.tenant.id), &AlarmFilter::default())
            .await
            .unwrap(),
        tx.list_executors(a.tenant.id, None).await.unwrap(),
        tx.list_api_tokens(user.id).await.unwrap(),
    );
    drop(tx);

    let bt = b.tenant.id;
    let bs = Scope::Tenant(bt);
    // Reads.
    let mut tx = store.begin().await.unwrap();
    not_found("get_app", tx.get_app(bt, a.app.id).await);
    assert_eq!(tx.find_app_by_name(bt, "a-private").await.unwrap(), None);
    assert_eq!(
        tx.find_app_by_name(bt, "billing")
            .await
            .unwrap()
            .map(|x| x.id),
        Some(b.app.id)
    );
    assert_eq!(
        tx.list_apps(bt)
            .await
            .unwrap()
            .iter()
            .map(|x| x.id)
            .collect::<Vec<_>>(),
        vec![b.app.id]
    );
    assert!(tx.list_executors(bt, None).await.unwrap().is_empty());
    assert!(
        tx.list_executors(bt, Some(a.app.id))
            .await
            .unwrap()
            .is_empty()
    );
    not_found("get_task", tx.get_task(bt, t1.id).await);
    assert_eq!(tx.find_task_by_name(bt, "a-tick").await.unwrap(), None);
    assert!(
        tx.list_tasks(bt, &TaskFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        tx.list_tasks(
            bt,
            &TaskFilter {
                app_id: Some(a.app.id),
                ..Default::default()
            }
        )
        .await
        .unwrap()
        .is_empty()
    );
    assert!(tx.list_dependencies(bt).await.unwrap().is_empty());
    not_found("get_run", tx.get_run(bt, run.id).await);
    assert!(
        tx.list_runs(bt, &RunFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        tx.list_runs(
            bt,
            &RunFilter {
                task_id: Some(t1.id),
                ..Default::default()
            }
        )
        .await
        .unwrap()
        .is_empty()
    );
    not_found("get_user", tx.get_user(bs, user.id).await);
    assert_eq!(
        tx.list_users(bs)
            .await
            .unwrap()
            .iter()
            .map(|u| u.id)
            .collect::<Vec<_>>(),
        vec![bob.id]
    );
    not_found("get_alarm", tx.get_alarm(bs, alarm.id).await);
    assert!(
        tx.list_alarms(bs, &AlarmFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(tx.list_audit(bs, None, 100).await.unwrap().is_empty());
    assert!(tx.list_api_tokens(bob.id).await.unwrap().is_empty());
    drop(tx);

    // Writes, each committed.
    let def = t1.definition().unwrap();
    let mut b_def = def.clone();
    b_def.app_id = b.app.id;
    // Every write runs in its own committed transaction, so a wrongly allowed one would stick.
    macro_rules! refused {
        ($what:literal, |$tx:ident| $call:expr) => {{
            let mut $tx = store.begin().await.unwrap();
            let r = $call.await;
            $tx.commit().await.unwrap();
            not_found($what, r);
        }};
    }
    refused!("set_app_secret", |tx| tx.set_app_secret(
        bt,
        a.app.id,
        "stolen-secret-00000",
        T0
    ));
    refused!("delete_app", |tx| tx.delete_app(bt, private_app.id));
    refused!("create_task with A's app", |tx| tx
        .create_task(bt, &def, T0));
    refused!("update_task", |tx| tx
        .update_task(bt, t1.id, t1.version, &b_def, T0));
    refused!("pause_task", |tx| tx.pause_task(bt, t1.id, t1.version, T0));
    refused!("resume_task", |tx| tx
        .resume_task(bt, t1.id, t1.version, T0));
    refused!("delete_task", |tx| tx
        .delete_task(bt, t1.id, t1.version, T0));
    refused!("trigger_task", |tx| tx
        .trigger_task(bt, t1.id, None, "bob", T0));
    refused!("add_dependency", |tx| tx.add_dependency(
        bt,
        t2.id,
        t1.id,
        DependencyCondition::Always,
        T0
    ));
    refused!("delete_dependency", |tx| tx
        .delete_dependency(bt, t1.id, t2.id));
    refused!("update_user", |tx| tx.update_user(
        bs,
        user.id,
        &UserUpdate {
            disabled: Some(true),
            ..Default::default()
        },
        T0
    ));
    refused!("delete_user", |tx| tx.delete_user(bs, user.id));
    refused!("acknowledge_alarm", |tx| tx
        .acknowledge_alarm(bs, alarm.id, "bob", T0));
    refused!("revoke_api_token", |tx| tx
        .revoke_api_token(bob.id, token.id, T0));
    refused!("complete_run of another app", |tx| tx.complete_run(
        run.id,
        Some(b.app.id),
        &mthpt_engine::run::RunCompletion {
            state: mthpt_engine::run::RunState::Cancelled,
            output: None,
            error: None,
            log: None,
            started_at: None,
            finished_at: T0,
            reported_by: None,
        }
    ));
    let mut tx = store.begin().await.unwrap();
    assert!(
        tx.record_progress(
            Some(b.app.id),
            &mthpt_engine::run::RunProgress {
                run_id: run.id,
                fraction: Some(0.5),
                message: None,
                log_lines: vec![]
            },
            T0
        )
        .await
        .unwrap()
        .is_none()
    );
    assert!(
        tx.heartbeat_executor(
            b.app.id,
            "a-host",
            mthpt_engine::app::ExecutorHeartbeat {
                capacity: 1,
                running: 0
            },
            T0
        )
        .await
        .unwrap()
        .is_none()
    );
    tx.commit().await.unwrap();

    // Tenant A is exactly as it was.
    let mut tx = store.begin().await.unwrap();
    let after = (
        tx.list_apps(a.tenant.id).await.unwrap(),
        tx.list_tasks(a.tenant.id, &TaskFilter::default())
            .await
            .unwrap(),
        tx.list_runs(a.tenant.id, &RunFilter::default())
            .await
            .unwrap(),
        tx.list_dependencies(a.tenant.id).await.unwrap(),
        tx.list_users(Scope::Tenant(a.tenant.id)).await.unwrap(),
        tx.list_alarms(Scope::Tenant(a.tenant.id), &AlarmFilter::default())
            .await
            .unwrap(),
        tx.list_executors(a.tenant.id, None).await.unwrap(),
        tx.list_api_tokens(user.id).await.unwrap(),
    );
    assert_eq!(after, before);
    assert_eq!(after.6[0].id, exec.id);
    assert!(
        tx.list_runs(bt, &RunFilter::default())
            .await
            .unwrap()
            .is_empty(),
        "B gained no runs"
    );
}
