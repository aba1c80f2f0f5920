//! What people do in the console besides tasks, in Chromium against `mthpt standalone`:
//!
//! - onboarding without the API: an operator creates an empty tenant and its admin; the admin
//!   creates an app, sees its secret once with the `mthpt wrapper` lines to paste, runs those
//!   lines (a real `mthpt wrapper` process), sees the executor listed as up, and a task on it
//!   run from the console succeeds;
//! - drain → alarm → undrain: draining the demo app's only executor is confirmed first, the
//!   overview no longer counts it live, its waiting runs raise the backlog alarm (the pop-up
//!   links to the executors), and the message's Undo (undrain) brings the executor back up and
//!   resolves the alarm;
//! - an alarm pop-up links to its run and task, and a repeat while it is open shows the
//!   latest run;
//! - with JavaScript off, Run now's message links to the run, and a drain asks first, drains
//!   once confirmed and is undone from its message.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use mthpt_testkit::{ChildGuard, free_port};
use serde_json::json;

use super::{
    WAIT, browser, browser_without_script, choose, fill, live, saved, screenshot, sign_in,
    sign_in_to, start_chromedriver, start_standalone, task_id, translated,
};

/// How long the backlog alarm may take: runs must be 10 s late, and the demo's `heartbeat`
/// task fires every 5 s.
const BACKLOG_WAIT: Duration = Duration::from_secs(40);

/// Clicks `css` once it is there: a click that submits a form returns before the next page
/// has loaded, so the next element is waited for, not looked up at once. A live alarm pop-up
/// that happens to cover the element is closed first, as a person would close it.
async fn click(c: &Client, css: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let clicked = c
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await;
        match clicked {
            Ok(()) => return,
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::ElementClickIntercepted
                    && Instant::now() < deadline =>
            {
                c.execute(
                    "document.querySelectorAll('.alarm-popup').forEach(p => p.remove())",
                    vec![],
                )
                .await
                .unwrap();
            }
            Err(e) => panic!("{css}: {e}"),
        }
    }
}

async fn text(c: &Client, css: &str) -> String {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Reloads `url` until `css` matches something, for at most `within`.
pub(super) async fn reload_until(c: &Client, url: &str, css: &str, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        c.goto(url).await.unwrap();
        if !c.find_all(Locator::Css(css)).await.unwrap().is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} (waited for {css} on {url})"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Runs the lines the apps page shows, as a person pastes them into a shell on the executor's
/// host: here `mthpt` is this build's binary and the port is a free one.
fn run_pasted(lines: &str, dir: &Path) -> (ChildGuard, u16) {
    let port = free_port();
    let script = lines
        .replace(
            "mthpt wrapper",
            &format!("exec {} wrapper", env!("CARGO_BIN_EXE_mthpt")),
        )
        .replace("127.0.0.1:9010", &format!("127.0.0.1:{port}"));
    let child = Command::new("sh")
        .args(["-c", &script])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the pasted lines");
    (ChildGuard::new("mthpt wrapper", child), port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_admin_onboards_an_app_in_the_console_and_its_first_task_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, password) = tokio::task::block_in_place(|| start_standalone(dir.path()));
    let (_driver, driver_url) = start_chromedriver().await;
    let op = browser(&driver_url, &dir.path().join("profile-op")).await;

    // The operator makes an empty tenant and its admin.
    sign_in(&op, &base, &password).await;
    op.goto(&format!("{base}/tenants")).await.unwrap();
    fill(&op, "t-name", "onboard").await;
    click(&op, "#new-tenant button[type=submit]").await;
    op.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("form#weight-onboard"))
        .await
        .expect("the tenant was created");
    op.goto(&format!("{base}/t/onboard/users")).await.unwrap();
    fill(&op, "u-name", "ada").await;
    fill(&op, "u-password", "password-ada").await;
    choose(&op, "u-role", "tenant_admin").await;
    click(&op, "#new-user button[type=submit]").await;
    op.wait()
        .at_most(WAIT)
        .for_element(Locator::XPath(
            "//tr[contains(@class,'user')][contains(., 'ada')]",
        ))
        .await
        .expect("the admin was created");
    op.close().await.unwrap();

    // The admin finds no app and creates one: its secret and the lines to paste, once.
    let c = browser(&driver_url, &dir.path().join("profile-ada")).await;
    sign_in_to(&c, &base, "ada", "/t/onboard/apps", "#new-app").await;
    assert!(
        c.find_all(Locator::Css("section.app"))
            .await
            .unwrap()
            .is_empty(),
        "a new tenant has no app"
    );
    fill(&c, "app-name", "ops").await;
    click(&c, "#create-app").await;
    let secret = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Id("app-secret"))
        .await
        .expect("the new app's secret is shown")
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(secret.len(), 64, "the secret: {secret:?}");
    let lines = text(&c, "#wrapper-command").await;
    assert!(
        lines.contains(&secret)
            && lines.contains("mthpt wrapper --app onboard.ops --secret-file onboard.ops.secret")
            && lines.contains("--engine http://127.0.0.1:")
            && lines.contains("--enable-shell"),
        "the lines to paste: {lines}"
    );
    translated(&c).await;
    screenshot(&c, "onboarding.png").await;
    c.refresh().await.unwrap();
    assert!(
        c.find_all(Locator::Id("app-secret"))
            .await
            .unwrap()
            .is_empty(),
        "the secret is shown once"
    );

    // Pasted on a host, the lines start an executor that the page lists as up.
    let (_wrapper, port) = run_pasted(&lines, dir.path());
    reload_until(
        &c,
        &format!("{base}/t/onboard/apps"),
        "section.app[data-app='ops'] tr.executor .exec-up",
        Duration::from_secs(15),
        "the executor did not show as up",
    )
    .await;
    let row = text(&c, "section.app[data-app='ops'] tr.executor").await;
    assert!(row.contains(&format!("127.0.0.1:{port}")), "{row}");
    assert!(row.contains("shell"), "it runs the shell handler: {row}");

    // A task on the app, run from the console: the message links to its run, which succeeds.
    c.goto(&format!("{base}/t/onboard/tasks/new"))
        .await
        .unwrap();
    fill(&c, "f-name", "first-shell").await;
    choose(&c, "f-app", "ops").await;
    fill(&c, "f-handler", "shell").await;
    fill(&c, "f-params", r#"{"script": "echo onboarded"}"#).await;
    choose(&c, "f-schedule-kind", "manual").await;
    fill(&c, "f-max-retries", "0").await;
    click(&c, "#save-task").await;
    saved(&c).await;
    let id = task_id(&c, "first-shell").await;
    click(&c, &format!("tr.task[data-task-id='{id}'] button.trigger")).await;
    let link = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash[data-flash='triggered'] a#flash-link"))
        .await
        .expect("Run now says which run it made");
    let href = link.attr("href").await.unwrap().unwrap_or_default();
    assert!(href.starts_with("/t/onboard/runs/"), "{href}");
    link.click().await.unwrap();
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#run-state.state-succeeded"))
        .await
        .expect("the first run on the new executor succeeded");
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_only_executor_raises_the_backlog_alarm_and_undrain_resolves_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, password) = tokio::task::block_in_place(|| start_standalone(dir.path()));
    let (_driver, driver_url) = start_chromedriver().await;
    let c = browser(&driver_url, &dir.path().join("profile")).await;
    sign_in(&c, &base, &password).await;
    let executors = format!("{base}/t/demo/executors");
    reload_until(
        &c,
        &executors,
        "tr.executor button.drain",
        WAIT,
        "the demo executor did not register",
    )
    .await;
    let up_before = text(&c, "#main").await;

    // Drain asks first; going back drains nothing.
    click(&c, "tr.executor button.drain").await;
    let question = text(&c, "#confirm").await;
    assert!(
        question.contains("demo"),
        "the question names the app: {question}"
    );
    click(&c, "#confirm-no").await;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("tr.executor button.drain"))
        .await
        .expect("back on the executors page, still up");
    assert!(
        c.find_all(Locator::Css("tr.executor .exec-draining"))
            .await
            .unwrap()
            .is_empty(),
        "going back drained it: {up_before}"
    );

    // Confirmed, it drains; the message offers the undo.
    click(&c, "tr.executor button.drain").await;
    click(&c, "#confirm-yes").await;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash[data-flash='drained'] #flash-undo"))
        .await
        .expect("the drain's message offers its undo");
    assert!(
        !c.find_all(Locator::Css("tr.executor .exec-draining"))
            .await
            .unwrap()
            .is_empty()
    );
    let after_drain = c.current_url().await.unwrap();

    // The overview counts no live executor, and says one drains.
    c.goto(&format!("{base}/t/demo")).await.unwrap();
    let row = text(&c, "#executors tr[data-app='demo']").await;
    assert!(
        row.contains("0 / 1") && row.contains("1 draining"),
        "the overview's executors: {row}"
    );

    // Its due runs wait: the backlog alarm pops up, linking to the executors.
    c.goto(after_drain.as_str()).await.unwrap();
    live(&c).await;
    let popup = c
        .wait()
        .at_most(BACKLOG_WAIT)
        .for_element(Locator::XPath(
            "//div[contains(@class,'alarm-popup')][.//p[contains(., 'wait for capacity')]]",
        ))
        .await
        .expect("the backlog alarm popped up");
    let alarm = popup.attr("data-alarm-id").await.unwrap().unwrap();
    let to_executors = c
        .find(Locator::Css(&format!(
            ".alarm-popup[data-alarm-id='{alarm}'] a.executors-link"
        )))
        .await
        .expect("the pop-up links to the executors");
    assert_eq!(
        to_executors.attr("href").await.unwrap().as_deref(),
        Some("/t/demo/executors")
    );
    screenshot(&c, "backlog-alarm.png").await;

    // Undo: the executor is up again and the waiting runs flow, which resolves the alarm.
    click(&c, "#flash-undo").await;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash[data-flash='undrained']"))
        .await
        .expect("the undrain's message");
    reload_until(
        &c,
        &executors,
        "tr.executor .exec-up",
        WAIT,
        "the undrained executor did not come back up",
    )
    .await;
    reload_until(
        &c,
        &format!("{base}/t/demo/alarms?kind=backlog"),
        "tr.alarm[data-status='resolved']",
        BACKLOG_WAIT,
        "the backlog alarm was not resolved after the undrain",
    )
    .await;
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_pop_up_links_its_run_and_task_and_a_repeat_shows_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, password) = tokio::task::block_in_place(|| start_standalone(dir.path()));
    let (_driver, driver_url) = start_chromedriver().await;
    let c = browser(&driver_url, &dir.path().join("profile")).await;
    sign_in(&c, &base, &password).await;
    super::create_task(&c, &base, "fails-twice", "flaky", None).await;
    saved(&c).await;
    let task = task_id(&c, "fails-twice").await;
    c.goto(&format!("{base}/t/demo/runs")).await.unwrap();
    live(&c).await;
    let trigger = format!(
        "return fetch('/t/demo/tasks/{task}/trigger', {{method: 'POST', credentials: 'same-origin', headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: 'back=/t/demo/runs'}}).then(r => r.url);"
    );
    let landed = c.execute(&trigger, vec![]).await.unwrap();
    let first_run: i64 = landed
        .as_str()
        .and_then(|u| u.split("flash_id=").nth(1))
        .and_then(|id| id.parse().ok())
        .expect("Run now names the run it made");
    let popup = format!(
        "//div[contains(@class,'alarm-popup')][@data-kind='run_failed'][.//a[contains(@class,'task-link')][@href='/t/demo/tasks/{task}']]"
    );
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::XPath(&popup))
        .await
        .expect("the failure popped up, linking to its task");
    let run_link = |c: &Client| {
        let c = c.clone();
        async move {
            c.execute(
                "return Array.from(document.querySelectorAll(\".alarm-popup[data-kind='run_failed'] a.run-link\")).map(a => a.getAttribute('href'));",
                vec![],
            )
            .await
            .unwrap()
        }
    };
    assert_eq!(
        run_link(&c).await,
        json!([format!("/t/demo/runs/{first_run}")])
    );

    // The same task fails again while the pop-up is open: one pop-up, counting two, showing
    // the latest run. (Only the failure's pop-ups count: on a loaded machine a run may also
    // wait past its start timeout first and raise a `not_started` pop-up of its own.)
    let landed = c.execute(&trigger, vec![]).await.unwrap();
    let second_run: i64 = landed
        .as_str()
        .and_then(|u| u.split("flash_id=").nth(1))
        .and_then(|id| id.parse().ok())
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while run_link(&c).await != json!([format!("/t/demo/runs/{second_run}")]) {
        assert!(
            Instant::now() < deadline,
            "the pop-up did not move to the latest run: {}",
            run_link(&c).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        text(&c, ".alarm-popup[data-kind='run_failed'] .count").await,
        "×2"
    );
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_javascript_actions_ask_first_say_what_they_made_and_undo() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, password) = tokio::task::block_in_place(|| start_standalone(dir.path()));
    let (_driver, driver_url) = start_chromedriver().await;
    let c = browser_without_script(&driver_url, &dir.path().join("profile")).await;
    sign_in(&c, &base, &password).await;

    // Run now: the message links to the run it made.
    click(&c, "tr.task button.trigger").await;
    let link = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash[data-flash='triggered'] a#flash-link"))
        .await
        .expect("Run now says which run it made");
    link.click().await.unwrap();
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Id("run-state"))
        .await
        .expect("the link opens the run");
    assert!(
        c.current_url()
            .await
            .unwrap()
            .path()
            .starts_with("/t/demo/runs/")
    );

    // Drain asks first, drains once confirmed, and its message's Undo undrains.
    let executors = format!("{base}/t/demo/executors");
    reload_until(
        &c,
        &executors,
        "tr.executor button.drain",
        WAIT,
        "the demo executor did not register",
    )
    .await;
    click(&c, "tr.executor button.drain").await;
    click(&c, "#confirm-yes").await;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("tr.executor .exec-draining"))
        .await
        .expect("confirmed, it drains");
    click(&c, "#flash-undo").await;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash[data-flash='undrained']"))
        .await
        .expect("the undo was taken");
    reload_until(
        &c,
        &executors,
        "tr.executor .exec-up",
        WAIT,
        "the undrained executor did not come back up",
    )
    .await;
    translated(&c).await;
    c.close().await.unwrap();
}
