//! The task mix a chaos run loads through the store API.

use std::collections::HashSet;
use std::path::Path;

use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::Store;
use mthpt_engine::task::{DependencyCondition, TaskDefinition};

use super::{ChaosConfig, handler_log, now_ms, progress};
use crate::Tenancy;

/// Creates the task mix, anchored so fixed rates start at `from`: 40 % cron every 5 s, 30 %
/// fixed rate every 3 s, 10 % chain parents (cron every 10 s) each with a child run on
/// success, the rest long runs (fixed rate every 10 s). Returns the chain parents' ids.
pub async fn load_tasks(
    store: &dyn Store,
    t: &Tenancy,
    config: &ChaosConfig,
    log: &Path,
    from: i64,
) -> anyhow::Result<HashSet<i64>> {
    let n = config.tasks;
    let crons = n * 4 / 10;
    let fixed = n * 3 / 10;
    let chains = n / 10;
    let short = handler_log::params(log, config.short_run_ms);
    let long = handler_log::params(log, config.long_run_ms);
    let mut parents = HashSet::new();
    let mut tx = store.begin().await?;
    let now = now_ms();
    for i in 0..n {
        let i64i = i64::try_from(i).unwrap_or(0);
        let (name, schedule, params, timeout_ms) = if i < crons {
            let cron = ScheduleSpec::Cron {
                expr: format!("{}/5 * * * * ?", i % 5),
                timezone: "UTC".to_owned(),
            };
            (format!("cron{i:04}"), cron, &short, 10_000)
        } else if i < crons + fixed {
            let every = ScheduleSpec::FixedRate {
                every_ms: 3_000,
                anchor_at: Some(from + i64i * 3_000 / i64::try_from(fixed.max(1)).unwrap_or(1)),
            };
            (format!("rate{i:04}"), every, &short, 10_000)
        } else if i < crons + fixed + chains {
            let cron = ScheduleSpec::Cron {
                expr: format!("{}/10 * * * * ?", i % 10),
                timezone: "UTC".to_owned(),
            };
            (format!("parent{i:04}"), cron, &short, 10_000)
        } else {
            let every = ScheduleSpec::FixedRate {
                every_ms: 10_000,
                anchor_at: Some(from + (i64i * 997) % 10_000),
            };
            (format!("long{i:04}"), every, &long, 20_000)
        };
        let is_parent = name.starts_with("parent");
        let mut def = TaskDefinition::new(t.app.id, name.clone(), "shell", schedule);
        def.params = params.clone();
        def.timeout_ms = Some(timeout_ms);
        let task = tx.create_task(t.tenant.id, &def, now).await?.task;
        if is_parent {
            parents.insert(task.id.0);
            let mut child = TaskDefinition::new(
                t.app.id,
                format!("child{i:04}"),
                "shell",
                ScheduleSpec::Manual,
            );
            child.params = short.clone();
            child.timeout_ms = Some(10_000);
            let child = tx.create_task(t.tenant.id, &child, now).await?.task;
            tx.add_dependency(
                t.tenant.id,
                task.id,
                child.id,
                DependencyCondition::OnSuccess,
                now,
            )
            .await?;
        }
    }
    tx.commit().await?;
    progress(format_args!(
        "{n} tasks: {crons} cron every 5 s, {fixed} every 3 s, {chains} chains every 10 s, {} long ({} ms) every 10 s",
        n - crons - fixed - chains,
        config.long_run_ms
    ));
    Ok(parents)
}
