use std::sync::Arc;

use mthpt_engine::alarm::{AlarmEventKind, AlarmFilter, AlarmKind, NewAlarm, Severity};
use mthpt_engine::store::{Scope, Store, StoreError};
use mthpt_engine::task::Task;

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

fn failed(w: &World, task: &mthpt_engine::task::Task, key: &str) -> NewAlarm {
    let mut a = NewAlarm::new(
        Some(w.tenant.id),
        AlarmKind::RunFailed,
        Severity::Critical,
        format!("{} failed ({key})", task.name),
    );
    a.task_id = Some(task.id);
    a.dedupe_key = Some(key.to_owned());
    a
}

async fn events(store: &dyn Store) -> Vec<(AlarmEventKind, i64, i64)> {
    let mut tx = read(store).await;
    let events = tx
        .list_unpublished_alarm_events(1000)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.event, e.alarm_id.0, e.alarm.0.count))
        .collect();
    // Ended here: the listing locks the events (`SKIP LOCKED`), and a dropped transaction
    // keeps its locks until its connection is next used, hiding them from the next listing.
    tx.commit().await.unwrap();
    events
}

pub async fn repeats_count_on_the_open_alarm_and_every_transition_is_an_event(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let a = world(store, "acme").await;
    let (task, _) = create_task(store, &a, &manual(a.app.id, "nightly")).await;
    let (other, _) = create_task(store, &a, &manual(a.app.id, "hourly")).await;

    // Raised, then repeated twice (same task and kind): one alarm counting three.
    let first = in_tx!(store, |tx| tx
        .insert_alarm(&failed(&a, &task, "k1"), T0)
        .await
        .unwrap()
        .unwrap());
    assert_eq!(
        (first.count, first.last_seen, first.resolved_at),
        (1, Some(T0), None)
    );
    let again = in_tx!(store, |tx| tx
        .insert_alarm(&failed(&a, &task, "k2"), T0 + SECOND)
        .await
        .unwrap()
        .unwrap());
    assert_eq!(
        (again.id, again.count, again.last_seen),
        (first.id, 2, Some(T0 + SECOND))
    );
    assert!(
        in_tx!(store, |tx| tx
            .insert_alarm(&failed(&a, &task, "k2"), T0 + 2 * SECOND)
            .await
            .unwrap())
        .is_none(),
        "a repeat's dedupe key is kept: raising it again changes nothing"
    );
    let third = in_tx!(store, |tx| tx
        .insert_alarm(&failed(&a, &task, "k3"), T0 + 3 * SECOND)
        .await
        .unwrap()
        .unwrap());
    assert_eq!((third.id, third.count), (first.id, 3));
    // Another task's failure is an alarm of its own.
    let elsewhere = in_tx!(store, |tx| tx
        .insert_alarm(&failed(&a, &other, "o1"), T0 + 4 * SECOND)
        .await
        .unwrap()
        .unwrap());
    assert_ne!(elsewhere.id, first.id);
    let mut tx = read(store).await;
    let listed = tx
        .list_alarms(Scope::Tenant(a.tenant.id), &AlarmFilter::default())
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|x| (x.id, x.count)).collect::<Vec<_>>(),
        vec![(elsewhere.id, 1), (first.id, 3)],
        "repeats are not listed on their own"
    );
    drop(tx);

    // Acknowledged once (one event), then a new failure is a new alarm.
    let acked = in_tx!(store, |tx| tx
        .acknowledge_alarm(
            Scope::Tenant(a.tenant.id),
            first.id,
            "alice",
            T0 + 10 * SECOND
        )
        .await
        .unwrap());
    assert_eq!(acked.acknowledged_by.as_deref(), Some("alice"));
    in_tx!(store, |tx| tx
        .acknowledge_alarm(
            Scope::Tenant(a.tenant.id),
            first.id,
            "bob",
            T0 + 11 * SECOND
        )
        .await
        .unwrap());
    let after_ack = in_tx!(store, |tx| tx
        .insert_alarm(&failed(&a, &task, "k4"), T0 + 12 * SECOND)
        .await
        .unwrap()
        .unwrap());
    assert_ne!(after_ack.id, first.id);
    assert_eq!(after_ack.count, 1);

    // A batch of successes asks once which tasks have anything to resolve.
    let unresolved = |tasks: Vec<mthpt_engine::task::TaskId>| async move {
        let mut tx = read(store).await;
        let mut found = tx.tasks_with_unresolved_alarms(&tasks).await.unwrap();
        found.sort();
        found
    };
    assert_eq!(
        unresolved(vec![task.id, other.id]).await,
        vec![task.id, other.id]
    );

    // The task's success resolves both (acknowledged or not); the other task's stays open.
    let resolved = in_tx!(store, |tx| tx
        .resolve_task_alarms(task.id, T0 + 20 * SECOND)
        .await
        .unwrap());
    let mut ids: Vec<_> = resolved.iter().map(|x| x.id).collect();
    ids.sort();
    assert_eq!(ids, vec![first.id, after_ack.id]);
    assert!(
        resolved
            .iter()
            .all(|x| x.resolved_at == Some(T0 + 20 * SECOND))
    );
    assert!(
        in_tx!(store, |tx| tx
            .resolve_task_alarms(task.id, T0 + 21 * SECOND)
            .await
            .unwrap())
        .is_empty(),
        "resolved once"
    );
    assert_eq!(unresolved(vec![task.id, other.id]).await, vec![other.id]);
    let mut tx = read(store).await;
    let open = tx
        .list_alarms(
            Scope::Tenant(a.tenant.id),
            &AlarmFilter {
                unacknowledged: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        open.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![elsewhere.id]
    );
    drop(tx);

    // The outbox holds every transition in order, with the alarm as it was then.
    use AlarmEventKind::*;
    let mut expected = vec![
        (Raised, first.id.0, 1),
        (Repeated, first.id.0, 2),
        (Repeated, first.id.0, 3),
        (Raised, elsewhere.id.0, 1),
        (Acknowledged, first.id.0, 3),
        (Raised, after_ack.id.0, 1),
    ];
    let mut resolved_events: Vec<_> =
        vec![(Resolved, first.id.0, 3), (Resolved, after_ack.id.0, 1)];
    let got = events(store).await;
    assert_eq!(got[..expected.len()], expected[..]);
    let mut tail = got[expected.len()..].to_vec();
    tail.sort_by_key(|e| e.1);
    resolved_events.sort_by_key(|e| e.1);
    assert_eq!(tail, resolved_events);
    expected.extend(resolved_events);

    // Muted: recorded, no event, never a repeat target.
    in_tx!(store, |tx| tx
        .set_alarm_mute(a.tenant.id, other.id, Some(T0 + 60 * MINUTE), "ann", T0)
        .await
        .unwrap());
    let muted = in_tx!(store, |tx| tx
        .insert_alarm(&failed(&a, &other, "o2"), T0 + 30 * SECOND)
        .await
        .unwrap()
        .unwrap());
    assert!(muted.muted);
    assert_ne!(muted.id, elsewhere.id);
    assert_eq!(
        events(store).await.len(),
        expected.len(),
        "no event while muted"
    );

    // Published in batches: marked once; `raised` marks its alarm published too.
    let mut tx = store.begin().await.unwrap();
    let batch = tx.list_unpublished_alarm_events(3).await.unwrap();
    assert_eq!(batch.len(), 3);
    assert_eq!(
        batch[0].routing_key(),
        format!("alarm.{}.critical.run_failed", a.tenant.id)
    );
    let message = batch[0].message();
    assert_eq!(
        (message.event_id, message.kind.as_str(), message.tenant_id),
        (batch[0].id.0, "alarm.raised", Some(a.tenant.id.0))
    );
    let ids: Vec<_> = batch.iter().map(|e| e.id).collect();
    assert_eq!(
        tx.mark_alarm_events_published(&ids, T0 + MINUTE)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        tx.mark_alarm_events_published(&ids, T0 + MINUTE)
            .await
            .unwrap(),
        0
    );
    tx.commit().await.unwrap();
    assert_eq!(events(store).await.len(), expected.len() - 3);
    let mut tx = read(store).await;
    assert_eq!(
        tx.get_alarm(Scope::Cluster, first.id)
            .await
            .unwrap()
            .published_at,
        Some(T0 + MINUTE)
    );
    assert_eq!(
        tx.get_alarm(Scope::Cluster, elsewhere.id)
            .await
            .unwrap()
            .published_at,
        None
    );
}

pub async fn concurrent_relays_take_disjoint_batches_of_events(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let mut tx = store.begin().await.unwrap();
    for i in 0..10 {
        let mut alarm = NewAlarm::new(
            Some(a.tenant.id),
            AlarmKind::Misfire,
            Severity::Info,
            format!("late {i}"),
        );
        alarm.dedupe_key = Some(format!("late:{i}"));
        tx.insert_alarm(&alarm, T0 + i).await.unwrap().unwrap();
    }
    tx.commit().await.unwrap();
    let mut one = store.begin().await.unwrap();
    let first = one.list_unpublished_alarm_events(6).await.unwrap();
    assert_eq!(first.len(), 6);
    if store.backend() == mthpt_engine::store::Backend::Postgres {
        // While the first relay holds its batch, a second one gets the rest only.
        let mut two = store.begin().await.unwrap();
        let second = two.list_unpublished_alarm_events(10).await.unwrap();
        assert_eq!(second.len(), 4);
        assert!(second.iter().all(|e| first.iter().all(|f| f.id != e.id)));
        // Ended, not dropped: a dropped transaction keeps its row locks until its connection
        // is next used, and would hide these four from the listing below.
        two.commit().await.unwrap();
    }
    let ids: Vec<_> = first.iter().map(|e| e.id).collect();
    one.mark_alarm_events_published(&ids, T0 + SECOND)
        .await
        .unwrap();
    one.commit().await.unwrap();
    assert_eq!(events(store).await.len(), 4);
}

fn app_alarm(w: &World, task: Option<&Task>, app_kind: &str, id: &str) -> NewAlarm {
    let mut alarm = NewAlarm::new(
        Some(w.tenant.id),
        AlarmKind::App,
        Severity::Warning,
        format!("{app_kind} from the wrapper"),
    );
    alarm.task_id = task.map(|t| t.id);
    alarm.details =
        serde_json::json!({"app": "acme.billing", "app_kind": app_kind, "alarm_id": id});
    alarm.dedupe_key = Some(format!("app:acme.billing:{id}"));
    alarm
}

pub async fn wrapper_alarms_repeat_per_own_kind_and_are_resolved_by_their_key(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let (task, _) = create_task(store, &a, &manual(a.app.id, "disk")).await;

    let disk = in_tx!(store, |tx| tx
        .insert_alarm(&app_alarm(&a, Some(&task), "disk_full", "id-1"), T0)
        .await
        .unwrap()
        .unwrap());
    assert_eq!(disk.kind, AlarmKind::App);
    let again = in_tx!(store, |tx| tx
        .insert_alarm(
            &app_alarm(&a, Some(&task), "disk_full", "id-2"),
            T0 + SECOND
        )
        .await
        .unwrap()
        .unwrap());
    assert_eq!(
        (again.id, again.count),
        (disk.id, 2),
        "same task and own kind: a repeat"
    );
    let other_kind = in_tx!(store, |tx| tx
        .insert_alarm(&app_alarm(&a, Some(&task), "quota", "id-3"), T0 + SECOND)
        .await
        .unwrap()
        .unwrap());
    assert_ne!(
        other_kind.id, disk.id,
        "another own kind is an alarm of its own"
    );
    assert!(
        in_tx!(store, |tx| tx
            .insert_alarm(
                &app_alarm(&a, Some(&task), "disk_full", "id-1"),
                T0 + 2 * SECOND
            )
            .await
            .unwrap())
        .is_none(),
        "the same wrapper alarm id is stored once"
    );

    // Resolved by its key, within its tenant only, once.
    let unreachable = in_tx!(store, |tx| tx
        .insert_alarm(&app_alarm(&a, None, "engine_unreachable", "id-4"), T0)
        .await
        .unwrap()
        .unwrap());
    let key = "app:acme.billing:id-4";
    assert!(
        in_tx!(store, |tx| tx
            .resolve_alarm_by_key(b.tenant.id, key, T0 + 5)
            .await
            .unwrap())
        .is_none(),
        "another tenant cannot resolve it"
    );
    let resolved = in_tx!(store, |tx| tx
        .resolve_alarm_by_key(a.tenant.id, key, T0 + 10)
        .await
        .unwrap());
    assert_eq!(
        resolved.map(|r| (r.id, r.resolved_at)),
        Some((unreachable.id, Some(T0 + 10)))
    );
    assert!(
        in_tx!(store, |tx| tx
            .resolve_alarm_by_key(a.tenant.id, key, T0 + 20)
            .await
            .unwrap())
        .is_none()
    );
    let mut tx = store.begin().await.unwrap();
    let events = tx.list_unpublished_alarm_events(100).await.unwrap();
    tx.commit().await.unwrap();
    let of_unreachable: Vec<_> = events
        .iter()
        .filter(|e| e.alarm_id == unreachable.id)
        .map(|e| e.event)
        .collect();
    assert_eq!(
        of_unreachable,
        vec![AlarmEventKind::Raised, AlarmEventKind::Resolved]
    );
}
