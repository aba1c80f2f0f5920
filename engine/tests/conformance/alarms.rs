use std::sync::Arc;

use mthpt_engine::alarm::{AlarmFilter, AlarmKind, NewAlarm, Severity};
use mthpt_engine::store::{Scope, Store, StoreError};

use crate::in_tx;
use crate::support::fixtures::*;

pub async fn alarms_are_raised_once_published_once_and_acknowledged(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let (task, run) = create_task(store, &a, &every(a.app.id, "tick", MINUTE)).await;
    let run = run.unwrap();

    let mut exhausted = NewAlarm::new(
        Some(a.tenant.id),
        AlarmKind::RetriesExhausted,
        Severity::Critical,
        "tick failed 3 times",
    );
    exhausted.task_id = Some(task.id);
    exhausted.run_id = Some(run.id);
    exhausted.details = serde_json::json!({"attempts": 3});
    exhausted.dedupe_key = Some(format!("retries_exhausted:{}", run.id));
    let mut node_lost = NewAlarm::new(
        None,
        AlarmKind::NodeLost,
        Severity::Warning,
        "node-b stopped heartbeating",
    );
    node_lost.node_id = Some("node-b".into());
    let other = NewAlarm::new(
        Some(b.tenant.id),
        AlarmKind::Misfire,
        Severity::Info,
        "late",
    );

    let mut tx = store.begin().await.unwrap();
    let first = tx.insert_alarm(&exhausted, T0).await.unwrap().unwrap();
    assert!(
        tx.insert_alarm(&exhausted, T0 + 1).await.unwrap().is_none(),
        "same dedupe key: raised once"
    );
    let cluster = tx.insert_alarm(&node_lost, T0 + 2).await.unwrap().unwrap();
    let b_alarm = tx.insert_alarm(&other, T0 + 3).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    assert_eq!(first.details.0["attempts"], 3);
    assert_eq!((first.published_at, first.acknowledged_at), (None, None));

    // The relay publishes each alarm once, oldest first.
    let mut tx = store.begin().await.unwrap();
    let batch = tx.list_unpublished_alarms(2).await.unwrap();
    assert_eq!(
        batch.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![first.id, cluster.id]
    );
    let ids: Vec<_> = batch.iter().map(|x| x.id).collect();
    assert_eq!(tx.mark_alarms_published(&ids, T0 + 10).await.unwrap(), 2);
    assert_eq!(tx.mark_alarms_published(&ids, T0 + 11).await.unwrap(), 0);
    tx.commit().await.unwrap();
    let mut tx = store.begin().await.unwrap();
    let rest = tx.list_unpublished_alarms(10).await.unwrap();
    assert_eq!(
        rest.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![b_alarm.id]
    );
    assert_eq!(
        tx.get_alarm(Scope::Cluster, first.id)
            .await
            .unwrap()
            .published_at,
        Some(T0 + 10)
    );
    drop(tx);

    // Tenants see their own alarms; operators see all, including cluster-level ones.
    let mut tx = read(store).await;
    let mine = tx
        .list_alarms(Scope::Tenant(a.tenant.id), &AlarmFilter::default())
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![first.id]
    );
    let all = tx
        .list_alarms(Scope::Cluster, &AlarmFilter::default())
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![b_alarm.id, cluster.id, first.id]
    );
    let kind = tx
        .list_alarms(
            Scope::Cluster,
            &AlarmFilter {
                kind: Some(AlarmKind::NodeLost),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(kind.len(), 1);
    assert!(matches!(
        tx.get_alarm(Scope::Tenant(a.tenant.id), cluster.id).await,
        Err(StoreError::NotFound(_))
    ));
    drop(tx);

    // Acknowledgement: the first one is kept.
    let acked = in_tx!(store, |tx| tx
        .acknowledge_alarm(Scope::Tenant(a.tenant.id), first.id, "alice", T0 + 20)
        .await
        .unwrap());
    assert_eq!(
        (acked.acknowledged_at, acked.acknowledged_by.as_deref()),
        (Some(T0 + 20), Some("alice"))
    );
    let again = in_tx!(store, |tx| tx
        .acknowledge_alarm(Scope::Cluster, first.id, "root", T0 + 30)
        .await
        .unwrap());
    assert_eq!(
        (again.acknowledged_at, again.acknowledged_by.as_deref()),
        (Some(T0 + 20), Some("alice"))
    );
    let mut tx = read(store).await;
    let open = tx
        .list_alarms(
            Scope::Cluster,
            &AlarmFilter {
                unacknowledged: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        open.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![b_alarm.id, cluster.id]
    );
    let page = tx
        .list_alarms(
            Scope::Cluster,
            &AlarmFilter {
                before_id: Some(b_alarm.id),
                limit: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![cluster.id]
    );
}
