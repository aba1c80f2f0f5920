//! Store operations behind the console's views: run and alarm listings with every filter,
//! statistics samples, attempt chains, idempotent trigger keys and alarm mutes.

use std::sync::Arc;

use mthpt_engine::alarm::{AlarmFilter, AlarmKind, NewAlarm, Severity};
use mthpt_engine::run::{Run, RunFilter, RunState, TriggerKind};
use mthpt_engine::store::{ClaimRequest, RunSampleQuery, Scope, Store, StoreError, TriggerKey};

use crate::in_tx;
use crate::support::fixtures::*;

fn ids(runs: &[Run]) -> Vec<i64> {
    runs.iter().map(|r| r.id.0).collect()
}

pub async fn runs_are_filtered_by_trigger_executor_and_finish_time(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "job")).await;
    let e = executor(store, w.app.id, "i-1", T0).await;
    let first = insert(store, &occurrence(&w, &task, T0)).await;
    let manual_run = in_tx!(store, |tx| tx
        .trigger_task(w.tenant.id, task.id, None, "ann", T0 + SECOND)
        .await
        .unwrap());
    let third = insert(store, &occurrence(&w, &task, T0 + 2 * SECOND)).await;

    // The first run is claimed, started on the executor and finishes at T0 + 10 s.
    let claimed = in_tx!(store, |tx| tx
        .claim_due_runs(&ClaimRequest {
            node: "n".into(),
            groups: vec!["default".into()],
            now: T0,
            horizon_ms: 0,
            lease_ms: 30 * SECOND,
            limit: 1,
        })
        .await
        .unwrap());
    assert_eq!(ids(&claimed), vec![first.id.0]);
    started(store, &claimed[0], e.id, T0).await;
    in_tx!(store, |tx| tx
        .complete_run(
            first.id,
            None,
            &done(RunState::Succeeded, T0, T0 + 10 * SECOND)
        )
        .await
        .unwrap());
    in_tx!(store, |tx| tx
        .complete_run(
            third.id,
            None,
            &done(RunState::Failed, T0, T0 + 20 * SECOND)
        )
        .await
        .unwrap());

    let mut tx = read(store).await;
    let list = async |tx: &mut Box<dyn mthpt_engine::store::Tx>, f: RunFilter| {
        ids(&tx.list_runs(w.tenant.id, &f).await.unwrap())
    };
    assert_eq!(
        list(
            &mut tx,
            RunFilter {
                trigger_kind: Some(TriggerKind::Manual),
                ..Default::default()
            }
        )
        .await,
        vec![manual_run.id.0]
    );
    assert_eq!(
        list(
            &mut tx,
            RunFilter {
                executor_id: Some(e.id),
                ..Default::default()
            }
        )
        .await,
        vec![first.id.0]
    );
    assert_eq!(
        list(
            &mut tx,
            RunFilter {
                finished_from: Some(T0 + 5 * SECOND),
                finished_before: Some(T0 + 15 * SECOND),
                ..Default::default()
            }
        )
        .await,
        vec![first.id.0]
    );
    assert_eq!(
        list(
            &mut tx,
            RunFilter {
                finished_from: Some(T0),
                ..Default::default()
            }
        )
        .await,
        vec![third.id.0, first.id.0],
        "unfinished runs have no finish time"
    );
    drop(tx);

    // Keyset pages stay stable when runs are inserted between two page reads.
    let page1 = in_tx!(store, |tx| tx
        .list_runs(
            w.tenant.id,
            &RunFilter {
                limit: Some(2),
                ..Default::default()
            }
        )
        .await
        .unwrap());
    assert_eq!(ids(&page1), vec![third.id.0, manual_run.id.0]);
    insert(store, &occurrence(&w, &task, T0 + 3 * SECOND)).await;
    let page2 = in_tx!(store, |tx| tx
        .list_runs(
            w.tenant.id,
            &RunFilter {
                before_id: Some(page1[1].id),
                limit: Some(2),
                ..Default::default()
            }
        )
        .await
        .unwrap());
    assert_eq!(ids(&page2), vec![first.id.0]);
}

pub async fn alarms_are_filtered_by_severity_task_and_acknowledgement(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "job")).await;
    let (other, _) = create_task(store, &w, &manual(w.app.id, "other")).await;
    let raise = |kind, severity, task_id| {
        let mut a = NewAlarm::new(Some(w.tenant.id), kind, severity, "x");
        a.task_id = Some(task_id);
        a
    };
    let (critical, warning, info) = in_tx!(store, |tx| (
        tx.insert_alarm(
            &raise(AlarmKind::RunFailed, Severity::Critical, task.id),
            T0
        )
        .await
        .unwrap()
        .unwrap(),
        tx.insert_alarm(&raise(AlarmKind::TimedOut, Severity::Warning, task.id), T0)
            .await
            .unwrap()
            .unwrap(),
        tx.insert_alarm(&raise(AlarmKind::Misfire, Severity::Info, other.id), T0)
            .await
            .unwrap()
            .unwrap(),
    ));
    in_tx!(store, |tx| tx
        .acknowledge_alarm(Scope::Tenant(w.tenant.id), warning.id, "ann", T0 + 1)
        .await
        .unwrap());

    let mut tx = read(store).await;
    let scope = Scope::Tenant(w.tenant.id);
    let mut list = async |f: AlarmFilter| {
        tx.list_alarms(scope, &f)
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list(AlarmFilter {
            severity: Some(Severity::Critical),
            ..Default::default()
        })
        .await,
        vec![critical.id]
    );
    assert_eq!(
        list(AlarmFilter {
            task_id: Some(task.id),
            ..Default::default()
        })
        .await,
        vec![warning.id, critical.id]
    );
    assert_eq!(
        list(AlarmFilter {
            acknowledged: true,
            ..Default::default()
        })
        .await,
        vec![warning.id]
    );
    assert_eq!(
        list(AlarmFilter {
            unacknowledged: true,
            ..Default::default()
        })
        .await,
        vec![info.id, critical.id]
    );
}

pub async fn samples_cover_final_runs_scheduled_in_the_range(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let (task, _) = create_task(store, &a, &manual(a.app.id, "job")).await;
    let (other, _) = create_task(store, &a, &manual(a.app.id, "other")).await;
    let (b_task, _) = create_task(store, &b, &manual(b.app.id, "job")).await;
    let mut finals = Vec::new();
    for (i, state) in [RunState::Succeeded, RunState::Failed, RunState::TimedOut]
        .into_iter()
        .enumerate()
    {
        let at = T0 + i as i64 * MINUTE;
        let run = insert(store, &occurrence(&a, &task, at)).await;
        in_tx!(store, |tx| tx
            .complete_run(run.id, None, &done(state, at + 100, at + 1_100))
            .await
            .unwrap());
        finals.push(run);
    }
    // Not final, out of range, another task, another tenant.
    insert(store, &occurrence(&a, &task, T0 + 4 * MINUTE)).await;
    let late = insert(store, &occurrence(&a, &task, T0 + 60 * MINUTE)).await;
    in_tx!(store, |tx| tx
        .complete_run(late.id, None, &done(RunState::Succeeded, T0, T0))
        .await
        .unwrap());
    let other_run = insert(store, &occurrence(&a, &other, T0)).await;
    in_tx!(store, |tx| tx
        .complete_run(other_run.id, None, &done(RunState::Succeeded, T0, T0))
        .await
        .unwrap());
    let b_run = insert(store, &occurrence(&b, &b_task, T0)).await;
    in_tx!(store, |tx| tx
        .complete_run(b_run.id, None, &done(RunState::Failed, T0, T0))
        .await
        .unwrap());

    let mut tx = read(store).await;
    let query = RunSampleQuery {
        task_id: Some(task.id),
        scheduled_from: T0,
        scheduled_before: T0 + 30 * MINUTE,
        limit: 100,
    };
    let samples = tx.run_samples(a.tenant.id, &query).await.unwrap();
    assert_eq!(
        samples.iter().map(|s| s.state).collect::<Vec<_>>(),
        vec![RunState::Succeeded, RunState::Failed, RunState::TimedOut]
    );
    assert_eq!(samples[1].scheduled_at, T0 + MINUTE);
    assert_eq!(samples[1].started_at, Some(T0 + MINUTE + 100));
    assert_eq!(samples[1].finished_at, Some(T0 + MINUTE + 1_100));
    let whole_tenant = tx
        .run_samples(
            a.tenant.id,
            &RunSampleQuery {
                task_id: None,
                ..query.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        whole_tenant.len(),
        4,
        "both tasks of tenant a, not tenant b"
    );
    let capped = tx
        .run_samples(a.tenant.id, &RunSampleQuery { limit: 2, ..query })
        .await
        .unwrap();
    assert_eq!(capped.len(), 2);
}

pub async fn occurrence_runs_list_every_attempt_of_the_tenant_only(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let (task, _) = create_task(store, &a, &manual(a.app.id, "job")).await;
    let first = insert(store, &occurrence(&a, &task, T0)).await;
    in_tx!(store, |tx| tx
        .complete_run(first.id, None, &done(RunState::Failed, T0, T0 + 1))
        .await
        .unwrap());
    let retry = insert(
        store,
        &mthpt_engine::run::NewRun::next_attempt(&first, T0 + SECOND, TriggerKind::Retry),
    )
    .await;
    insert(store, &occurrence(&a, &task, T0 + MINUTE)).await;

    let mut tx = read(store).await;
    let chain = tx.occurrence_runs(a.tenant.id, task.id, T0).await.unwrap();
    assert_eq!(ids(&chain), vec![first.id.0, retry.id.0]);
    assert!(
        tx.occurrence_runs(b.tenant.id, task.id, T0)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn trigger_keys_remember_the_first_run_until_they_expire(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let (task, _) = create_task(store, &a, &manual(a.app.id, "job")).await;
    let r1 = insert(store, &occurrence(&a, &task, T0)).await;
    let r2 = insert(store, &occurrence(&a, &task, T0 + 1)).await;
    let key = |run: &Run, at| TriggerKey {
        tenant_id: a.tenant.id,
        key: "req-1".into(),
        task_id: task.id,
        run_id: run.id,
        created_at: at,
    };
    let day = 24 * 60 * MINUTE;

    let mut tx = store.begin().await.unwrap();
    assert!(
        tx.insert_trigger_key(&key(&r1, T0), T0 - day)
            .await
            .unwrap()
    );
    assert!(
        !tx.insert_trigger_key(&key(&r2, T0 + 5), T0 - day)
            .await
            .unwrap(),
        "the key is taken"
    );
    let found = tx
        .find_trigger_key(a.tenant.id, "req-1", T0 - day)
        .await
        .unwrap();
    assert_eq!(found.map(|k| k.run_id), Some(r1.id));
    assert!(
        tx.find_trigger_key(b.tenant.id, "req-1", T0 - day)
            .await
            .unwrap()
            .is_none(),
        "keys are per tenant"
    );
    // A day later the key is free again.
    let later = T0 + day + 1;
    assert!(
        tx.find_trigger_key(a.tenant.id, "req-1", later - day)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        tx.insert_trigger_key(&key(&r2, later), later - day)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
}

pub async fn alarm_mutes_are_set_listed_cleared_and_scoped(store: Arc<dyn Store>) {
    let store = &*store;
    let a = world(store, "acme").await;
    let b = world(store, "globex").await;
    let (task, _) = create_task(store, &a, &manual(a.app.id, "job")).await;

    let mut tx = store.begin().await.unwrap();
    let mute = tx
        .set_alarm_mute(a.tenant.id, task.id, Some(T0 + MINUTE), "ann", T0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (mute.muted_until, mute.muted_by.as_str()),
        (T0 + MINUTE, "ann")
    );
    let again = tx
        .set_alarm_mute(a.tenant.id, task.id, Some(T0 + 2 * MINUTE), "bob", T0 + 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.muted_until, T0 + 2 * MINUTE);
    assert!(matches!(
        tx.set_alarm_mute(b.tenant.id, task.id, Some(T0 + MINUTE), "eve", T0)
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(tx.list_alarm_mutes(a.tenant.id, T0).await.unwrap().len(), 1);
    assert!(
        tx.list_alarm_mutes(b.tenant.id, T0)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        tx.list_alarm_mutes(a.tenant.id, T0 + 2 * MINUTE)
            .await
            .unwrap()
            .is_empty(),
        "an expired mute is not listed"
    );
    assert!(
        tx.set_alarm_mute(a.tenant.id, task.id, None, "ann", T0 + 2)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        tx.list_alarm_mutes(a.tenant.id, T0)
            .await
            .unwrap()
            .is_empty()
    );
    tx.commit().await.unwrap();
}
