use std::sync::Arc;

use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
use mthpt_engine::channel::{
    AttemptOutcome, ChannelConfig, ChannelId, ChannelUpdate, DeliveryState, NewChannel,
};
use mthpt_engine::store::{Store, StoreError};
use mthpt_engine::tenant::TenantId;

use crate::in_tx;
use crate::support::fixtures::*;

fn webhook(name: &str, min: Severity) -> NewChannel {
    NewChannel {
        name: name.into(),
        min_severity: min,
        config: ChannelConfig::Webhook {
            url: "http://127.0.0.1:9/hook".into(),
        },
        secret: Some("s3cret".into()),
        enabled: true,
    }
}

async fn raise(store: &dyn Store, tenant: TenantId, severity: Severity, at: i64) -> i64 {
    let alarm = NewAlarm::new(Some(tenant), AlarmKind::RunFailed, severity, "it failed");
    in_tx!(store, |tx| tx.insert_alarm(&alarm, at).await.unwrap())
        .unwrap()
        .id
        .0
}

pub async fn channels_are_kept_per_tenant_and_deleted_with_their_log(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let hook = in_tx!(store, |tx| tx
        .create_channel(a.tenant.id, &webhook("ops", Severity::Warning), T0)
        .await
        .unwrap());
    assert_eq!(hook.config.0.kind(), hook.kind);
    assert_eq!(hook.scanned_until, T0);
    let mut tx = store.begin().await.unwrap();
    let dup = tx
        .create_channel(a.tenant.id, &webhook("ops", Severity::Info), T0)
        .await;
    assert!(matches!(dup, Err(StoreError::Duplicate(_))), "{dup:?}");
    drop(tx);
    // The same name in another tenant is another channel.
    in_tx!(store, |tx| tx
        .create_channel(b.tenant.id, &webhook("ops", Severity::Info), T0)
        .await
        .unwrap());

    let mut tx = read(store).await;
    assert_eq!(
        tx.list_channels(a.tenant.id).await.unwrap(),
        vec![hook.clone()]
    );
    // Tenant B cannot read, change or delete tenant A's channel: "not found".
    assert!(matches!(
        tx.get_channel(b.tenant.id, hook.id).await,
        Err(StoreError::NotFound(_))
    ));
    drop(tx);
    let mut tx = store.begin().await.unwrap();
    let changed = tx
        .update_channel(
            b.tenant.id,
            hook.id,
            &ChannelUpdate {
                enabled: Some(false),
                ..Default::default()
            },
            T0 + SECOND,
        )
        .await;
    assert!(
        matches!(changed, Err(StoreError::NotFound(_))),
        "{changed:?}"
    );
    assert!(matches!(
        tx.delete_channel(b.tenant.id, hook.id).await,
        Err(StoreError::NotFound(_))
    ));
    drop(tx);

    let off = in_tx!(store, |tx| tx
        .update_channel(
            a.tenant.id,
            hook.id,
            &ChannelUpdate {
                enabled: Some(false),
                min_severity: Some(Severity::Critical),
                ..Default::default()
            },
            T0 + SECOND
        )
        .await
        .unwrap());
    assert!(!off.enabled);
    assert_eq!(off.min_severity, Severity::Critical);
    assert_eq!(
        off.secret.as_deref(),
        Some("s3cret"),
        "a secret left out stays"
    );
    // Enabled again later: it starts from then.
    let on = in_tx!(store, |tx| tx
        .update_channel(
            a.tenant.id,
            hook.id,
            &ChannelUpdate {
                enabled: Some(true),
                ..Default::default()
            },
            T0 + 10 * MINUTE
        )
        .await
        .unwrap());
    assert!(on.enabled);
    assert_eq!(on.scanned_until, T0 + 10 * MINUTE);

    let alarm = raise(store, a.tenant.id, Severity::Critical, T0 + 11 * MINUTE).await;
    let made = in_tx!(store, |tx| tx
        .enqueue_notifications(T0 + 12 * MINUTE, MINUTE, 100)
        .await
        .unwrap());
    assert_eq!(made, 1);
    let mut tx = read(store).await;
    let log = tx
        .list_deliveries(a.tenant.id, hook.id, None, 10)
        .await
        .unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].alarm_id.0, alarm);
    drop(tx);
    in_tx!(store, |tx| tx
        .delete_channel(a.tenant.id, hook.id)
        .await
        .unwrap());
    let mut tx = read(store).await;
    assert!(
        tx.list_deliveries(a.tenant.id, hook.id, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        tx.delete_channel(a.tenant.id, ChannelId(hook.id.0)).await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn deliveries_follow_severity_mutes_and_tenants_and_are_claimed_once(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    // Raised before the channel existed: never sent (no flood of history).
    raise(store, a.tenant.id, Severity::Critical, T0 - MINUTE).await;
    let hook = in_tx!(store, |tx| tx
        .create_channel(a.tenant.id, &webhook("ops", Severity::Warning), T0)
        .await
        .unwrap());
    let info = raise(store, a.tenant.id, Severity::Info, T0 + SECOND).await;
    let warning = raise(store, a.tenant.id, Severity::Warning, T0 + 2 * SECOND).await;
    let critical = raise(store, a.tenant.id, Severity::Critical, T0 + 3 * SECOND).await;
    let _other_tenant = raise(store, b.tenant.id, Severity::Critical, T0 + 3 * SECOND).await;
    // A muted alarm is history only: no notification.
    let task = create_task(store, &a, &manual(a.app.id, "quiet")).await.0;
    in_tx!(store, |tx| tx
        .set_alarm_mute(a.tenant.id, task.id, Some(T0 + MINUTE), "ada", T0)
        .await
        .unwrap());
    let mut muted = NewAlarm::new(
        Some(a.tenant.id),
        AlarmKind::RunFailed,
        Severity::Critical,
        "quiet failed",
    );
    muted.task_id = Some(task.id);
    in_tx!(store, |tx| tx
        .insert_alarm(&muted, T0 + 4 * SECOND)
        .await
        .unwrap());
    let _ = info;

    let now = T0 + 5 * SECOND;
    assert_eq!(
        in_tx!(store, |tx| tx
            .enqueue_notifications(now, MINUTE, 100)
            .await
            .unwrap()),
        2
    );
    // Passes again (this node or another) make nothing twice.
    assert_eq!(
        in_tx!(store, |tx| tx
            .enqueue_notifications(now, MINUTE, 100)
            .await
            .unwrap()),
        0
    );
    // An alarm whose transaction committed late (raised before the last pass's end) is
    // still found by the look-back.
    let late = raise(store, a.tenant.id, Severity::Critical, now - 2 * SECOND).await;
    assert_eq!(
        in_tx!(store, |tx| tx
            .enqueue_notifications(now + SECOND, MINUTE, 100)
            .await
            .unwrap()),
        1
    );
    let snapshot = in_tx!(store, |tx| tx.metrics_snapshot().await.unwrap());
    assert_eq!(snapshot.notification_backlog, 3);

    // Two nodes claim: disjoint sets, each counting its attempt.
    let lease = now + 2 * SECOND + MINUTE;
    let mut tx1 = store.begin().await.unwrap();
    let first = tx1
        .claim_deliveries(now + 2 * SECOND, lease, 2)
        .await
        .unwrap();
    tx1.commit().await.unwrap();
    let mut tx2 = store.begin().await.unwrap();
    let second = tx2
        .claim_deliveries(now + 2 * SECOND, lease, 10)
        .await
        .unwrap();
    tx2.commit().await.unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(second.len(), 1);
    let mut alarms: Vec<i64> = first.iter().chain(&second).map(|d| d.alarm_id.0).collect();
    alarms.sort_unstable();
    assert_eq!(alarms, vec![warning, critical, late]);
    assert!(
        first
            .iter()
            .chain(&second)
            .all(|d| d.attempts == 1 && d.next_attempt_at == lease)
    );
    // Nothing more is due while they are held.
    let none = in_tx!(store, |tx| tx
        .claim_deliveries(now + 3 * SECOND, lease + MINUTE, 10)
        .await
        .unwrap());
    assert!(none.is_empty());

    // Outcomes: delivered, to retry, given up; a stale attempt (taken over) changes nothing.
    let t = now + 4 * SECOND;
    let outcome = |d: &mthpt_engine::channel::Delivery, delivered, retry_at| AttemptOutcome {
        delivery: d.id,
        attempt: d.attempts,
        delivered,
        status: Some(if delivered { 200 } else { 500 }),
        error: (!delivered).then(|| "the receiver answered 500".to_owned()),
        retry_at,
    };
    let mut stale = outcome(&second[0], true, None);
    stale.attempt = 7;
    let recorded = in_tx!(store, |tx| tx
        .record_attempts(
            &[
                outcome(&first[0], true, None),
                outcome(&first[1], false, Some(t + SECOND)),
                stale,
            ],
            t
        )
        .await
        .unwrap());
    assert_eq!(recorded, 2);
    let log = in_tx!(store, |tx| tx
        .list_deliveries(a.tenant.id, hook.id, None, 10)
        .await
        .unwrap());
    let state_of = |id| log.iter().find(|d| d.id == id).map(|d| d.state);
    assert_eq!(state_of(first[0].id), Some(DeliveryState::Delivered));
    assert_eq!(state_of(first[1].id), Some(DeliveryState::Pending));
    assert_eq!(state_of(second[0].id), Some(DeliveryState::Pending));
    let retried = log.iter().find(|d| d.id == first[1].id).unwrap();
    assert_eq!(retried.last_status, Some(500));
    assert_eq!(retried.next_attempt_at, t + SECOND);
    let again = in_tx!(store, |tx| tx
        .claim_deliveries(t + SECOND, t + MINUTE, 10)
        .await
        .unwrap());
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].id, again[0].attempts), (first[1].id, 2));
    in_tx!(store, |tx| tx
        .record_attempts(&[outcome(&again[0], false, None)], t + 2 * SECOND)
        .await
        .unwrap());
    let log = in_tx!(store, |tx| tx
        .list_deliveries(a.tenant.id, hook.id, None, 10)
        .await
        .unwrap());
    assert_eq!(
        log.iter().find(|d| d.id == first[1].id).map(|d| d.state),
        Some(DeliveryState::Failed)
    );
    // Tenant B's log of tenant A's channel is empty.
    let foreign = in_tx!(store, |tx| tx
        .list_deliveries(b.tenant.id, hook.id, None, 10)
        .await
        .unwrap());
    assert!(foreign.is_empty());
}

pub async fn metrics_snapshot_counts_outbox_and_live_executors(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let empty = in_tx!(store, |tx| tx.metrics_snapshot().await.unwrap());
    assert_eq!(empty.outbox_backlog, 0);
    assert_eq!(empty.outbox_oldest_at, None);
    assert!(empty.live_executors.is_empty());
    // Two alarms raised: two `raised` events; the older one's is published.
    raise(store, a.tenant.id, Severity::Warning, T0).await;
    raise(store, a.tenant.id, Severity::Warning, T0 + SECOND).await;
    let events = in_tx!(store, |tx| tx
        .list_unpublished_alarm_events(10)
        .await
        .unwrap());
    assert_eq!(events.len(), 2, "{events:?}");
    let oldest = events
        .iter()
        .min_by_key(|e| e.created_at)
        .map(|e| e.id)
        .unwrap();
    in_tx!(store, |tx| tx
        .mark_alarm_events_published(&[oldest], T0 + 2 * SECOND)
        .await
        .unwrap());
    executor(store, a.app.id, "i-1", T0).await;
    executor(store, a.app.id, "i-2", T0).await;
    let s = in_tx!(store, |tx| tx.metrics_snapshot().await.unwrap());
    assert_eq!(s.outbox_backlog, 1);
    assert_eq!(s.outbox_oldest_at, Some(T0 + SECOND));
    assert_eq!(s.live_executors, vec![("acme.billing".to_owned(), 2)]);
}
