use std::sync::Arc;

use mthpt_engine::app::{ExecutorHeartbeat, ExecutorRegistration, ExecutorState, NewApp};
use mthpt_engine::node::{NodeHeartbeat, NodeState};
use mthpt_engine::run::RunState;
use mthpt_engine::store::{Store, StoreError};

use crate::in_tx;
use crate::support::fixtures::*;

pub async fn apps_are_created_read_and_deleted_unless_in_use(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let mut tx = store.begin().await.unwrap();
    let err = tx
        .create_app(
            w.tenant.id,
            &NewApp {
                name: "billing".into(),
                secret: "another-long-secret".into(),
            },
            T0,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Duplicate(ref m) if m.contains("billing")),
        "{err}"
    );
    drop(tx);
    let mut tx = store.begin().await.unwrap();
    let err = tx
        .create_app(
            w.tenant.id,
            &NewApp {
                name: "short".into(),
                secret: "tiny".into(),
            },
            T0,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref f) if f.field == "secret"),
        "{err}"
    );
    drop(tx);

    let reports = in_tx!(store, |tx| tx
        .create_app(
            w.tenant.id,
            &NewApp {
                name: "reports".into(),
                secret: "reports-secret-0123".into()
            },
            T0
        )
        .await
        .unwrap());
    let mut tx = read(store).await;
    assert_eq!(tx.get_app(w.tenant.id, w.app.id).await.unwrap(), w.app);
    assert_eq!(
        tx.find_app_by_name(w.tenant.id, "reports").await.unwrap(),
        Some(reports.clone())
    );
    assert_eq!(
        tx.list_apps(w.tenant.id).await.unwrap(),
        vec![w.app.clone(), reports.clone()]
    );
    assert_eq!(
        tx.find_app_by_key("acme", "reports").await.unwrap(),
        Some(reports.clone())
    );
    assert_eq!(tx.find_app_by_key("acme", "nope").await.unwrap(), None);
    assert_eq!(tx.find_app_by_key("nope", "reports").await.unwrap(), None);
    assert_eq!(
        tx.get_apps_by_ids(&[reports.id, w.app.id]).await.unwrap(),
        vec![w.app.clone(), reports.clone()]
    );
    drop(tx);

    let rotated = in_tx!(store, |tx| tx
        .set_app_secret(w.tenant.id, reports.id, "rotated-secret-0123", T0 + 1)
        .await
        .unwrap());
    assert_eq!(rotated.secret, "rotated-secret-0123");
    assert_eq!(rotated.updated_at, T0 + 1);

    // The runs of an app's deleted tasks go with the app.
    let (gone, _) = create_task(store, &w, &manual(reports.id, "gone")).await;
    let old = insert(store, &occurrence(&w, &gone, T0 - MINUTE)).await;
    in_tx!(store, |tx| {
        tx.complete_run(
            old.id,
            None,
            &done(RunState::Succeeded, T0 - MINUTE, T0 - MINUTE + 1),
        )
        .await
        .unwrap();
        tx.mark_task_deleted(w.tenant.id, gone.id, gone.version, T0)
            .await
            .unwrap();
    });

    // An app with a task cannot be deleted; without, it can.
    create_task(store, &w, &manual(w.app.id, "job")).await;
    let mut tx = store.begin().await.unwrap();
    let err = tx.delete_app(w.tenant.id, w.app.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidState(ref m) if m.contains("1 task")),
        "{err}"
    );
    tx.delete_app(w.tenant.id, reports.id).await.unwrap();
    assert!(matches!(
        tx.get_app(w.tenant.id, reports.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(
        tx.find_run(old.id).await.unwrap().is_none(),
        "its runs went too"
    );
    assert!(matches!(
        tx.delete_app(w.tenant.id, reports.id).await,
        Err(StoreError::NotFound(_))
    ));
    // A disabled tenant's apps are still found: the engines claim none of its runs, but the
    // results of runs sent before are recorded.
    tx.update_tenant(
        w.tenant.id,
        &mthpt_engine::tenant::TenantUpdate {
            disabled: Some(true),
            ..Default::default()
        },
        T0,
    )
    .await
    .unwrap();
    assert_eq!(
        tx.find_app_by_key("acme", "billing")
            .await
            .unwrap()
            .map(|a| a.id),
        Some(w.app.id)
    );
}

pub async fn executors_register_heartbeat_drain_and_get_lost(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let e1 = executor(store, w.app.id, "host-1", T0).await;
    assert_eq!(e1.state, ExecutorState::Up);
    assert_eq!(e1.tenant_id, w.tenant.id);
    assert_eq!(e1.handlers.0, vec!["noop".to_string()]);

    // Re-registering the same instance keeps its identity and takes the new facts.
    let again = in_tx!(store, |tx| tx
        .register_executor(
            &ExecutorRegistration {
                app_id: w.app.id,
                instance_id: "host-1".into(),
                base_url: "http://10.0.0.1:8080".into(),
                capacity: 16,
                handlers: vec!["a".into(), "b".into()],
                labels: [("zone".to_string(), "eu-1".to_string())].into(),
            },
            T0 + SECOND
        )
        .await
        .unwrap());
    assert_eq!(again.id, e1.id);
    assert_eq!(again.capacity, 16);
    assert_eq!(again.labels.0["zone"], "eu-1");

    let mut tx = store.begin().await.unwrap();
    let err = tx
        .register_executor(
            &ExecutorRegistration {
                app_id: w.app.id,
                instance_id: "x".into(),
                base_url: "ftp://nope".into(),
                capacity: 1,
                handlers: vec![],
                labels: Default::default(),
            },
            T0,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref f) if f.field == "base_url"),
        "{err}"
    );
    drop(tx);

    let e2 = executor(store, w.app.id, "host-2", T0).await;
    let e3 = executor(store, w.app.id, "host-3", T0).await;
    let beat = ExecutorHeartbeat {
        capacity: 16,
        running: 3,
    };
    let mut tx = store.begin().await.unwrap();
    let hb = tx
        .heartbeat_executor(w.app.id, "host-1", beat, T0 + 10 * SECOND)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((hb.running, hb.last_heartbeat_at), (3, T0 + 10 * SECOND));
    assert!(
        tx.heartbeat_executor(w.app.id, "ghost", beat, T0)
            .await
            .unwrap()
            .is_none()
    );
    tx.heartbeat_executor(w.app.id, "host-3", beat, T0 + 10 * SECOND)
        .await
        .unwrap();
    let drained = tx
        .set_executor_state(
            w.app.id,
            "host-3",
            ExecutorState::Draining,
            T0 + 10 * SECOND,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(drained.state, ExecutorState::Draining);
    tx.commit().await.unwrap();

    let mut tx = store.begin().await.unwrap();
    let live = tx
        .list_live_executors(w.app.id, T0 + 5 * SECOND)
        .await
        .unwrap();
    assert_eq!(
        live.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![e1.id],
        "host-2 is stale, host-3 draining"
    );
    assert_eq!(tx.list_executors(w.tenant.id, None).await.unwrap().len(), 3);
    assert_eq!(
        tx.list_executors(w.tenant.id, Some(w.app.id))
            .await
            .unwrap()
            .len(),
        3
    );

    // host-2 stopped heartbeating: lost exactly once.
    let lost = tx.mark_executors_lost(T0 + 5 * SECOND, 100).await.unwrap();
    assert_eq!(lost.iter().map(|e| e.id).collect::<Vec<_>>(), vec![e2.id]);
    assert_eq!(lost[0].state, ExecutorState::Lost);
    assert!(
        tx.mark_executors_lost(T0 + 5 * SECOND, 100)
            .await
            .unwrap()
            .is_empty()
    );
    // A lost instance must register again.
    assert!(
        tx.heartbeat_executor(w.app.id, "host-2", beat, T0 + 20 * SECOND)
            .await
            .unwrap()
            .is_none()
    );
    let back = tx
        .set_executor_state(w.app.id, "host-3", ExecutorState::Down, T0 + 20 * SECOND)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.id, e3.id);
    assert_eq!(back.state, ExecutorState::Down);
    tx.commit().await.unwrap();
}

pub async fn engine_nodes_heartbeat_and_are_reported_lost_once(store: Arc<dyn Store>) {
    let store = &*store;
    let beat = |id: &str, state| NodeHeartbeat {
        id: id.into(),
        node_groups: vec!["default".into(), "eu".into()],
        address: format!("http://{id}:7700"),
        state,
    };
    let mut tx = store.begin().await.unwrap();
    let a = tx
        .heartbeat_node(&beat("node-a", NodeState::Up), T0)
        .await
        .unwrap();
    assert_eq!((a.started_at, a.last_heartbeat_at), (T0, T0));
    assert_eq!(
        a.node_groups.0,
        vec!["default".to_string(), "eu".to_string()]
    );
    tx.heartbeat_node(&beat("node-b", NodeState::Up), T0)
        .await
        .unwrap();
    let a2 = tx
        .heartbeat_node(&beat("node-a", NodeState::Up), T0 + 5 * SECOND)
        .await
        .unwrap();
    assert_eq!((a2.started_at, a2.last_heartbeat_at), (T0, T0 + 5 * SECOND));
    tx.commit().await.unwrap();

    let mut tx = store.begin().await.unwrap();
    let lost = tx.mark_nodes_lost(T0 + 3 * SECOND).await.unwrap();
    assert_eq!(
        lost.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(),
        vec!["node-b"]
    );
    assert!(
        tx.mark_nodes_lost(T0 + 3 * SECOND)
            .await
            .unwrap()
            .is_empty(),
        "reported once"
    );
    // A node that comes back starts a new life.
    let b = tx
        .heartbeat_node(&beat("node-b", NodeState::Up), T0 + 9 * SECOND)
        .await
        .unwrap();
    assert_eq!(b.started_at, T0 + 9 * SECOND);
    assert_eq!(b.state, NodeState::Up);
    let nodes = tx.list_nodes().await.unwrap();
    assert_eq!(nodes.len(), 2);
    tx.commit().await.unwrap();
}
