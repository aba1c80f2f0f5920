//! Shared set-up for the cases.

use mthpt_engine::app::{App, AppId, Executor, ExecutorId, ExecutorRegistration, NewApp};
use mthpt_engine::run::{ClaimedTransition, NewRun, Run, RunCompletion, RunState, TriggerKind};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{Store, Tx};
use mthpt_engine::task::{Task, TaskDefinition};
use mthpt_engine::tenant::{NewTenant, Tenant};

/// 2026-06-01T00:00:00Z.
pub const T0: i64 = 1_780_272_000_000;
pub const SECOND: i64 = 1_000;
pub const MINUTE: i64 = 60 * SECOND;

/// A tenant with one app.
pub struct World {
    pub tenant: Tenant,
    pub app: App,
}

pub async fn world(store: &dyn Store, name: &str) -> World {
    let mut tx = store.begin().await.unwrap();
    let tenant = tx.create_tenant(&NewTenant::named(name), T0).await.unwrap();
    let app = tx
        .create_app(
            tenant.id,
            &NewApp {
                name: "billing".into(),
                secret: "0123456789abcdef-secret".into(),
            },
            T0,
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    World { tenant, app }
}

/// A definition running `handler` by hand only.
pub fn manual(app: AppId, name: &str) -> TaskDefinition {
    TaskDefinition::new(app, name, "noop", ScheduleSpec::Manual)
}

/// A definition running every `every_ms` from T0.
pub fn every(app: AppId, name: &str, every_ms: i64) -> TaskDefinition {
    TaskDefinition::new(
        app,
        name,
        "noop",
        ScheduleSpec::FixedRate {
            every_ms,
            anchor_at: Some(T0),
        },
    )
}

pub async fn create_task(
    store: &dyn Store,
    world: &World,
    def: &TaskDefinition,
) -> (Task, Option<Run>) {
    let mut tx = store.begin().await.unwrap();
    let created = tx.create_task(world.tenant.id, def, T0).await.unwrap();
    tx.commit().await.unwrap();
    (created.task, created.next_run)
}

/// A pending run of `task` scheduled (and due) at `at`.
pub fn occurrence(world: &World, task: &Task, at: i64) -> NewRun {
    NewRun::occurrence(task, &world.tenant.node_group, at, TriggerKind::Schedule)
}

pub async fn insert(store: &dyn Store, run: &NewRun) -> Run {
    let mut tx = store.begin().await.unwrap();
    let run = tx
        .insert_run(run, T0)
        .await
        .unwrap()
        .expect("new occurrence");
    tx.commit().await.unwrap();
    run
}

pub async fn executor(store: &dyn Store, app: AppId, instance: &str, now: i64) -> Executor {
    let mut tx = store.begin().await.unwrap();
    let e = tx
        .register_executor(
            &ExecutorRegistration {
                app_id: app,
                instance_id: instance.into(),
                base_url: format!("http://127.0.0.1:9/{instance}"),
                capacity: 4,
                handlers: vec!["noop".into()],
                labels: Default::default(),
            },
            now,
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    e
}

/// Records a claimed run as accepted by `executor`, sent and acknowledged at `at`, with no
/// deadline.
pub async fn started(store: &dyn Store, run: &Run, executor: ExecutorId, at: i64) -> Run {
    let mut tx = store.begin().await.unwrap();
    let run = tx
        .transition_claimed(
            &run.fence().expect("a claimed run"),
            &ClaimedTransition::Started {
                executor_id: executor,
                dispatched_at: at,
                deadline_at: None,
            },
            at,
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    run
}

/// Runs `f` in a transaction and commits it.
#[macro_export]
macro_rules! in_tx {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let mut $tx = $store.begin().await.unwrap();
        let out = $body;
        $tx.commit().await.unwrap();
        out
    }};
}

/// Reads in a transaction that is then dropped.
pub async fn read(store: &dyn Store) -> Box<dyn Tx> {
    store.begin().await.unwrap()
}

/// An engine-decided end in `state`: started at `started_at`, finished at `finished_at`, with
/// no output, error or log.
pub fn done(state: RunState, started_at: i64, finished_at: i64) -> RunCompletion {
    RunCompletion {
        state,
        output: None,
        error: None,
        log: None,
        started_at: Some(started_at),
        finished_at,
        reported_by: None,
    }
}
