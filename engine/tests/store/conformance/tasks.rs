use std::sync::Arc;

use mthpt_engine::run::{RunFilter, RunState, TriggerKind};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{Store, StoreError};
use mthpt_engine::task::{DependencyCondition, TaskDefinition, TaskFilter};

use crate::in_tx;
use crate::support::fixtures::*;

const HOUR: i64 = 60 * MINUTE;

pub async fn creating_a_task_materialises_its_first_occurrence(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let cases: Vec<(&str, ScheduleSpec, Option<i64>)> = vec![
        (
            "rate",
            ScheduleSpec::FixedRate {
                every_ms: MINUTE,
                anchor_at: Some(T0),
            },
            Some(T0),
        ),
        (
            "noon",
            ScheduleSpec::Cron {
                expr: "0 0 12 * * ?".into(),
                timezone: "UTC".into(),
            },
            Some(T0 + 12 * HOUR),
        ),
        (
            "noon-shanghai",
            ScheduleSpec::Cron {
                expr: "0 0 12 * * ?".into(),
                timezone: "Asia/Shanghai".into(),
            },
            Some(T0 + 4 * HOUR),
        ),
        (
            "delay",
            ScheduleSpec::FixedDelay {
                delay_ms: 5 * SECOND,
            },
            Some(T0 + 5 * SECOND),
        ),
        (
            "once-past",
            ScheduleSpec::Once { at: T0 - HOUR },
            Some(T0 - HOUR),
        ),
        (
            "once-future",
            ScheduleSpec::Once { at: T0 + HOUR },
            Some(T0 + HOUR),
        ),
        ("manual", ScheduleSpec::Manual, None),
    ];
    for (name, schedule, expected) in cases {
        let def = TaskDefinition::new(w.app.id, name, "noop", schedule);
        let (task, run) = create_task(store, &w, &def).await;
        assert_eq!(run.as_ref().map(|r| r.scheduled_at), expected, "{name}");
        assert_eq!(
            task.fires_scheduled,
            i64::from(expected.is_some()),
            "{name}"
        );
        if let Some(run) = run {
            assert_eq!(run.state, RunState::Pending);
            assert_eq!(run.trigger_kind, TriggerKind::Schedule);
            assert_eq!(run.due_at, run.scheduled_at);
            assert_eq!((run.attempt, run.fence), (1, 0));
            assert_eq!(run.node_group, "default");
            let mut tx = read(store).await;
            assert_eq!(
                tx.get_task(w.tenant.id, task.id)
                    .await
                    .unwrap()
                    .fires_scheduled,
                1
            );
        }
    }
    let mut paused = every(w.app.id, "paused", MINUTE);
    paused.paused = true;
    let (task, run) = create_task(store, &w, &paused).await;
    assert!(task.paused);
    assert!(run.is_none(), "a task created paused has no occurrence");
}

pub async fn invalid_definitions_are_refused_naming_the_field(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let other = world(store, "globex").await;
    let cases: Vec<(TaskDefinition, &str)> = vec![
        (
            TaskDefinition::new(
                w.app.id,
                "x",
                "noop",
                ScheduleSpec::Cron {
                    expr: "0 0 12 * *".into(),
                    timezone: "UTC".into(),
                },
            ),
            "schedule.expr",
        ),
        (
            TaskDefinition::new(
                w.app.id,
                "x",
                "noop",
                ScheduleSpec::Cron {
                    expr: "0 0 12 * * ?".into(),
                    timezone: "Moon/Base".into(),
                },
            ),
            "schedule.timezone",
        ),
        (
            TaskDefinition::new(w.app.id, "", "noop", ScheduleSpec::Manual),
            "name",
        ),
        (
            TaskDefinition::new(w.app.id, "x", "", ScheduleSpec::Manual),
            "handler",
        ),
        (
            TaskDefinition::new(
                w.app.id,
                "x",
                "noop",
                ScheduleSpec::FixedRate {
                    every_ms: -5,
                    anchor_at: None,
                },
            ),
            "schedule.every_ms",
        ),
    ];
    for (def, field) in cases {
        let mut tx = store.begin().await.unwrap();
        let err = tx.create_task(w.tenant.id, &def, T0).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Invalid(ref f) if f.field == field),
            "{field}: {err}"
        );
    }
    // Another tenant's app is not found; a taken name is a duplicate.
    let mut tx = store.begin().await.unwrap();
    let err = tx
        .create_task(w.tenant.id, &manual(other.app.id, "x"), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(ref m) if m.contains("app")),
        "{err}"
    );
    drop(tx);
    create_task(store, &w, &manual(w.app.id, "job")).await;
    let mut tx = store.begin().await.unwrap();
    let err = tx
        .create_task(w.tenant.id, &manual(w.app.id, "job"), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Duplicate(ref m) if m.contains("job")),
        "{err}"
    );
    drop(tx);
    let mut tx = read(store).await;
    assert_eq!(
        tx.list_tasks(w.tenant.id, &TaskFilter::default())
            .await
            .unwrap()
            .len(),
        1,
        "nothing else written"
    );
}

pub async fn stale_version_is_a_conflict_and_writes_nothing(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, run) = create_task(store, &w, &every(w.app.id, "tick", MINUTE)).await;
    let run = run.unwrap();
    assert_eq!(task.version, 1);

    // Someone else edits first.
    let mut first = task.definition().unwrap();
    first.description = "edited by alice".into();
    let after_first = in_tx!(store, |tx| tx
        .update_task(w.tenant.id, task.id, 1, &first, T0 + 1)
        .await
        .unwrap());
    assert_eq!(after_first.task.version, 2);

    // The stale writer is refused with both versions named, and nothing changes.
    let mut stale = task.definition().unwrap();
    stale.description = "edited by bob".into();
    stale.schedule = ScheduleSpec::FixedRate {
        every_ms: SECOND,
        anchor_at: Some(T0),
    };
    let mut tx = store.begin().await.unwrap();
    let err = tx
        .update_task(w.tenant.id, task.id, 1, &stale, T0 + 2)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                expected: 1,
                actual: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("version 1") && err.to_string().contains("version 2"),
        "{err}"
    );
    let err = tx
        .pause_task(w.tenant.id, task.id, 1, T0 + 2)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    let err = tx
        .delete_task(w.tenant.id, task.id, 1, T0 + 2)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    drop(tx);

    let mut tx = read(store).await;
    let now = tx.get_task(w.tenant.id, task.id).await.unwrap();
    assert_eq!(now.version, 2);
    assert_eq!(now.description, "edited by alice");
    assert_eq!(now.interval_ms, Some(MINUTE));
    assert!(!now.paused);
    assert_eq!(
        tx.find_run(run.id).await.unwrap().unwrap().state,
        RunState::Pending
    );
}

pub async fn editing_a_task_replaces_its_pending_occurrence(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, run) = create_task(store, &w, &every(w.app.id, "tick", MINUTE)).await;
    let run = run.unwrap();

    // A description edit keeps the due occurrence.
    let mut def = task.definition().unwrap();
    def.description = "hello".into();
    let edited = in_tx!(store, |tx| tx
        .update_task(w.tenant.id, task.id, 1, &def, T0 + 5 * SECOND)
        .await
        .unwrap());
    assert!(edited.next_run.is_none());
    let mut tx = read(store).await;
    assert!(tx.find_run(run.id).await.unwrap().is_some());
    drop(tx);

    // A schedule edit replaces it.
    def.schedule = ScheduleSpec::FixedRate {
        every_ms: 10 * SECOND,
        anchor_at: Some(T0),
    };
    let edited = in_tx!(store, |tx| tx
        .update_task(w.tenant.id, task.id, 2, &def, T0 + 5 * SECOND)
        .await
        .unwrap());
    let next = edited.next_run.unwrap();
    assert_eq!(next.scheduled_at, T0 + 10 * SECOND);
    assert_eq!(
        edited.task.fires_scheduled, 1,
        "count restarts with the new schedule"
    );
    let mut tx = read(store).await;
    assert!(tx.find_run(run.id).await.unwrap().is_none());
    let pending = tx
        .list_runs(
            w.tenant.id,
            &RunFilter {
                task_id: Some(task.id),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        pending.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![next.id]
    );
}

pub async fn pausing_drops_the_occurrence_and_resuming_restores_it(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, run) = create_task(store, &w, &every(w.app.id, "tick", MINUTE)).await;
    let paused = in_tx!(store, |tx| tx
        .pause_task(w.tenant.id, task.id, 1, T0 + SECOND)
        .await
        .unwrap());
    assert!(paused.paused);
    assert_eq!(paused.version, 2);
    let mut tx = read(store).await;
    assert!(tx.find_run(run.unwrap().id).await.unwrap().is_none());
    drop(tx);
    let resumed = in_tx!(store, |tx| tx
        .resume_task(w.tenant.id, task.id, 2, T0 + 90 * SECOND)
        .await
        .unwrap());
    assert!(!resumed.task.paused);
    assert_eq!(
        resumed.next_run.unwrap().scheduled_at,
        T0 + 2 * MINUTE,
        "missed occurrences are not fired"
    );
}

pub async fn deleting_a_task_removes_pending_runs_and_frees_its_name(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, run) = create_task(store, &w, &every(w.app.id, "tick", MINUTE)).await;
    let (child, _) = create_task(store, &w, &manual(w.app.id, "child")).await;
    let manual_run = in_tx!(store, |tx| {
        tx.add_dependency(
            w.tenant.id,
            task.id,
            child.id,
            DependencyCondition::OnSuccess,
            T0,
        )
        .await
        .unwrap();
        tx.trigger_task(w.tenant.id, task.id, None, "alice", T0)
            .await
            .unwrap()
    });
    let deleted = in_tx!(store, |tx| tx
        .delete_task(w.tenant.id, task.id, 1, T0 + 1)
        .await
        .unwrap());
    assert_eq!(deleted.deleted_at, Some(T0 + 1));
    let mut tx = store.begin().await.unwrap();
    assert!(matches!(
        tx.get_task(w.tenant.id, task.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(tx.find_run(run.unwrap().id).await.unwrap().is_none());
    assert!(tx.find_run(manual_run.id).await.unwrap().is_none());
    assert!(tx.list_dependencies(w.tenant.id).await.unwrap().is_empty());
    assert_eq!(
        tx.lock_tasks(&[task.id]).await.unwrap()[0].deleted_at,
        Some(T0 + 1)
    );
    // The name is free again.
    let again = tx
        .create_task(w.tenant.id, &manual(w.app.id, "tick"), T0 + 2)
        .await
        .unwrap();
    assert_ne!(again.task.id, task.id);
    tx.commit().await.unwrap();
}

pub async fn tasks_are_listed_with_filters_and_pages(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let mut ids = Vec::new();
    for name in ["alpha", "beta", "100_done", "gamma", "delta"] {
        let mut def = manual(w.app.id, name);
        def.paused = name.starts_with('g');
        ids.push(create_task(store, &w, &def).await.0.id);
    }
    let mut tx = read(store).await;
    let names = |tasks: Vec<mthpt_engine::task::Task>| {
        tasks.into_iter().map(|t| t.name).collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            tx.list_tasks(w.tenant.id, &TaskFilter::default())
                .await
                .unwrap()
        )
        .len(),
        5
    );
    assert_eq!(
        names(
            tx.list_tasks(
                w.tenant.id,
                &TaskFilter {
                    paused: Some(true),
                    ..Default::default()
                }
            )
            .await
            .unwrap()
        ),
        vec!["gamma"]
    );
    assert_eq!(
        names(
            tx.list_tasks(
                w.tenant.id,
                &TaskFilter {
                    name_contains: Some("0_d".into()),
                    ..Default::default()
                }
            )
            .await
            .unwrap()
        ),
        vec!["100_done"],
        "wildcards in the filter are literal"
    );
    for wildcard in ["l_h", "%"] {
        assert_eq!(
            names(
                tx.list_tasks(
                    w.tenant.id,
                    &TaskFilter {
                        name_contains: Some(wildcard.into()),
                        ..Default::default()
                    }
                )
                .await
                .unwrap()
            ),
            Vec::<String>::new(),
            "{wildcard:?} is literal: no name contains it"
        );
    }
    assert_eq!(
        names(
            tx.list_tasks(
                w.tenant.id,
                &TaskFilter {
                    name_contains: Some("ta".into()),
                    ..Default::default()
                }
            )
            .await
            .unwrap()
        ),
        vec!["beta", "delta"]
    );
    let page = tx
        .list_tasks(
            w.tenant.id,
            &TaskFilter {
                after_id: Some(ids[1]),
                limit: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![ids[2], ids[3]]
    );
    assert_eq!(
        tx.list_tasks(
            w.tenant.id,
            &TaskFilter {
                app_id: Some(mthpt_engine::app::AppId(99_999)),
                ..Default::default()
            }
        )
        .await
        .unwrap()
        .len(),
        0
    );
}

pub async fn materialising_follows_window_and_max_fires(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let mut def = every(w.app.id, "bounded", 10 * SECOND);
    def.window_start_at = Some(T0 + 25 * SECOND);
    def.max_fires = Some(3);
    let (task, first) = create_task(store, &w, &def).await;
    assert_eq!(
        first.unwrap().scheduled_at,
        T0 + 30 * SECOND,
        "first occurrence inside the window"
    );

    let mut at = T0 + 30 * SECOND;
    let mut seen = vec![at];
    loop {
        let mut tx = store.begin().await.unwrap();
        let task = tx.lock_tasks(&[task.id]).await.unwrap().remove(0);
        let schedule = task.schedule().unwrap();
        let next = tx
            .materialise_next(&task, &schedule, "default", at, T0)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        match next {
            Some(run) => {
                at = run.scheduled_at;
                seen.push(at);
            }
            None => break,
        }
    }
    assert_eq!(
        seen,
        vec![T0 + 30 * SECOND, T0 + 40 * SECOND, T0 + 50 * SECOND],
        "max_fires = 3"
    );

    let mut def = every(w.app.id, "windowed", 10 * SECOND);
    def.window_end_at = Some(T0 + 15 * SECOND);
    let (task, first) = create_task(store, &w, &def).await;
    assert_eq!(first.unwrap().scheduled_at, T0);
    let mut tx = store.begin().await.unwrap();
    let schedule = task.schedule().unwrap();
    let task = tx.lock_tasks(&[task.id]).await.unwrap().remove(0);
    let second = tx
        .materialise_next(&task, &schedule, "default", T0, T0)
        .await
        .unwrap();
    assert_eq!(
        second.as_ref().map(|r| r.scheduled_at),
        Some(T0 + 10 * SECOND)
    );
    // The same occurrence again is not materialised twice.
    assert!(
        tx.materialise_next(&task, &schedule, "default", T0, T0)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        tx.materialise_next(&task, &schedule, "default", T0 + 10 * SECOND, T0)
            .await
            .unwrap()
            .is_none(),
        "past the window"
    );
}

pub async fn dependencies_are_kept_and_a_cycle_is_refused_naming_it(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let other = world(store, "globex").await;
    let (a, _) = create_task(store, &w, &manual(w.app.id, "extract")).await;
    let (b, _) = create_task(store, &w, &manual(w.app.id, "transform")).await;
    let (c, _) = create_task(store, &w, &manual(w.app.id, "load")).await;
    let (x, _) = create_task(store, &other, &manual(other.app.id, "foreign")).await;

    let mut tx = store.begin().await.unwrap();
    tx.add_dependency(w.tenant.id, a.id, b.id, DependencyCondition::OnSuccess, T0)
        .await
        .unwrap();
    tx.add_dependency(w.tenant.id, b.id, c.id, DependencyCondition::Always, T0)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let mut tx = store.begin().await.unwrap();
    let err = tx
        .add_dependency(w.tenant.id, c.id, a.id, DependencyCondition::OnSuccess, T0)
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Cycle(_)), "{msg}");
    assert!(
        msg.contains("extract → transform → load → extract"),
        "{msg}"
    );
    let err = tx
        .add_dependency(w.tenant.id, a.id, a.id, DependencyCondition::OnSuccess, T0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Cycle(ref m) if m.contains("itself")),
        "{err}"
    );
    let err = tx
        .add_dependency(w.tenant.id, a.id, x.id, DependencyCondition::OnSuccess, T0)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    drop(tx);

    // Changing an existing edge's condition is not a cycle.
    let mut tx = store.begin().await.unwrap();
    let edge = tx
        .add_dependency(w.tenant.id, a.id, b.id, DependencyCondition::OnFailure, T0)
        .await
        .unwrap();
    assert_eq!(edge.condition, DependencyCondition::OnFailure);
    assert_eq!(tx.list_dependencies(w.tenant.id).await.unwrap().len(), 2);
    assert_eq!(tx.children_of(b.id).await.unwrap()[0].child_task_id, c.id);
    assert_eq!(tx.parents_of(b.id).await.unwrap()[0].parent_task_id, a.id);
    tx.delete_dependency(w.tenant.id, b.id, c.id).await.unwrap();
    assert!(matches!(
        tx.delete_dependency(w.tenant.id, b.id, c.id).await,
        Err(StoreError::NotFound(_))
    ));
    // Now load → extract is allowed.
    tx.add_dependency(w.tenant.id, c.id, a.id, DependencyCondition::OnSuccess, T0)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

pub async fn manual_triggers_in_the_same_millisecond_are_distinct_runs(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "adhoc")).await;
    let mut tx = store.begin().await.unwrap();
    let r1 = tx
        .trigger_task(w.tenant.id, task.id, None, "alice", T0)
        .await
        .unwrap();
    let r2 = tx
        .trigger_task(
            w.tenant.id,
            task.id,
            Some(serde_json::json!({"full": true})),
            "bob",
            T0,
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_ne!(r1.id, r2.id);
    assert_eq!((r1.due_at, r2.due_at), (T0, T0));
    assert_eq!(r1.trigger_kind, TriggerKind::Manual);
    assert_eq!(r1.triggered_by.as_deref(), Some("alice"));
    assert_eq!(r2.params.as_ref().unwrap().0["full"], true);
}

pub async fn scheduled_fire_counts_add_up_per_task_in_one_write(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let other = world(store, "globex").await;
    let (a, _) = create_task(store, &w, &manual(w.app.id, "a")).await;
    let (b, _) = create_task(store, &w, &manual(w.app.id, "b")).await;
    let (c, _) = create_task(store, &other, &manual(other.app.id, "c")).await;
    in_tx!(store, |tx| tx
        .add_fires_scheduled_many(&[(b.id, 2), (a.id, 1), (b.id, 3), (c.id, 1)])
        .await
        .unwrap());
    in_tx!(store, |tx| tx.add_fires_scheduled_many(&[]).await.unwrap());
    let mut tx = read(store).await;
    let fires = |t: mthpt_engine::task::Task| t.fires_scheduled;
    assert_eq!(fires(tx.get_task(w.tenant.id, a.id).await.unwrap()), 1);
    assert_eq!(fires(tx.get_task(w.tenant.id, b.id).await.unwrap()), 5);
    assert_eq!(fires(tx.get_task(other.tenant.id, c.id).await.unwrap()), 1);
}

pub async fn tasks_and_their_children_are_read_for_many_at_once(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let mut ids = Vec::new();
    for name in ["a", "b", "c", "d"] {
        ids.push(create_task(store, &w, &manual(w.app.id, name)).await.0.id);
    }
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    in_tx!(store, |tx| {
        tx.add_dependency(w.tenant.id, a, c, DependencyCondition::OnSuccess, T0)
            .await
            .unwrap();
        tx.add_dependency(w.tenant.id, a, b, DependencyCondition::Always, T0)
            .await
            .unwrap();
        tx.add_dependency(w.tenant.id, c, d, DependencyCondition::OnFailure, T0)
            .await
            .unwrap();
    });
    let mut tx = store.begin().await.unwrap();
    let (tasks, parents) = tx.tasks_with_children(&[c, a, b, d], true).await.unwrap();
    assert_eq!(
        tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![a, b, c, d],
        "in id order"
    );
    assert_eq!(parents, vec![a, c]);
    let (_, none) = tx.tasks_with_children(&[b, d], false).await.unwrap();
    assert!(none.is_empty());
    tx.commit().await.unwrap();
}

pub async fn the_claims_task_lock_counts_only_schedules_that_follow_on_claim(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let w = world(store, "acme").await;
    let rate = ScheduleSpec::FixedRate {
        every_ms: MINUTE,
        anchor_at: Some(T0),
    };
    let cron = ScheduleSpec::Cron {
        expr: "0 0 12 * * ?".into(),
        timezone: "UTC".into(),
    };
    let delay = ScheduleSpec::FixedDelay {
        delay_ms: 5 * SECOND,
    };
    let mut ids = Vec::new();
    for (name, schedule) in [("rate", rate), ("cron", cron), ("delay", delay)] {
        let def = TaskDefinition::new(w.app.id, name, "noop", schedule);
        ids.push(create_task(store, &w, &def).await.0.id);
    }
    ids.push(
        create_task(store, &w, &manual(w.app.id, "manual"))
            .await
            .0
            .id,
    );
    let (rate, cron, delay, by_hand) = (ids[0], ids[1], ids[2], ids[3]);

    let mut tx = store.begin().await.unwrap();
    let mut locked = tx
        .lock_tasks_counting(&[(cron, 1), (rate, 1), (delay, 1), (by_hand, 0), (rate, 2)])
        .await
        .unwrap();
    locked.sort_by_key(|(t, _)| t.id);
    let seen: Vec<_> = locked
        .iter()
        .map(|(t, n)| (t.id, t.fires_scheduled, *n))
        .collect();
    // Each comes back as it was (one occurrence materialised at creation, none by hand), with
    // what was counted on it: the counts of a task add up; a fixed delay is not counted (its
    // next occurrence follows the result), nor is a task locked with 0.
    assert_eq!(
        seen,
        vec![(rate, 1, 3), (cron, 1, 1), (delay, 1, 0), (by_hand, 0, 0)]
    );
    assert!(tx.lock_tasks_counting(&[]).await.unwrap().is_empty());
    tx.commit().await.unwrap();
    let mut tx = read(store).await;
    let mut stored = Vec::new();
    for id in [rate, cron, delay, by_hand] {
        stored.push(tx.get_task(w.tenant.id, id).await.unwrap().fires_scheduled);
    }
    assert_eq!(stored, vec![4, 2, 1, 0], "the counts are written");
}
