//! The web console in real headless Chromium (Debian `chromium` + `chromium-driver`, driven
//! through chromedriver by fantoccini) against `mthpt standalone` with its demo app:
//!
//! - sign in through the form; create a cron task firing every 2 s through the task form, whose
//!   preview shows the next fire times before it is saved; its runs appear on the runs page
//!   without a reload;
//! - a failing task's alarm pops up in two browser sessions within 2 s, and acknowledging it in
//!   one clears it in the other;
//! - a refused task name (markup) comes back as text with its error next to the field;
//! - the pages visited are translated when switched to 中文 (no catalog key left untranslated);
//! - with JavaScript off, signing in, the task form, run-now and the run pages still work;
//! - on PostgreSQL + RabbitMQ with two console nodes (a session on each): a running run's
//!   progress bar advances without a reload, its own page follows its log tail and state live,
//!   and a failing task's alarm pops up on both nodes within 2 s and an acknowledgement on one
//!   clears it on the other; a tenant viewer is offered no controls and its forged posts are
//!   refused;
//! - a parent chosen in the task form shows in the child's dependency graph, where clicking the
//!   parent's node opens the parent's page;
//! - onboarding, drain → alarm → undrain and alarm pop-up links ([`console_actions`]).
//!
//! Its screenshots replace `docs/screenshots/` with `MTHPT_WRITE_SCREENSHOTS=1` (otherwise they
//! go to the temp folder). Chromium and chromedriver missing is a
//! failure, not a skip (`scripts/test.sh` installs them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod console_actions;

use std::io::{BufRead, BufReader};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use mthpt_testkit::{ChildGuard, free_port, wait_until};
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";
const WAIT: Duration = Duration::from_secs(10);

/// The chromedriver binary, or a failure that says how to get it.
fn chromedriver_path() -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("chromedriver"))
                .find(|p| p.is_file())
        })
        .unwrap_or_default();
    let path = found.unwrap_or_else(|| PathBuf::from("/usr/bin/chromedriver"));
    assert!(
        path.is_file() && Path::new(CHROMIUM).is_file(),
        "chromium and chromedriver are needed for the browser tests: \
         apt-get install chromium chromium-driver (scripts/test.sh installs them)"
    );
    path
}

/// Starts chromedriver on a free port; returns it and its URL.
async fn start_chromedriver() -> (ChildGuard, String) {
    let port = free_port();
    // Its own process group: the browsers it starts are killed with it.
    let driver = ChildGuard::spawn_group(
        "chromedriver",
        Command::new(chromedriver_path())
            .args([
                format!("--port={port}"),
                "--allowed-ips=127.0.0.1".to_owned(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("start chromedriver");
    let url = format!("http://127.0.0.1:{port}");
    wait_until(WAIT, || async {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await
    .expect("chromedriver listens");
    (driver, url)
}

/// A fresh headless Chromium session with its own profile (its own cookies).
async fn browser(driver: &str, profile: &Path) -> Client {
    chromium(
        driver,
        profile,
        json!({ "args": ["--window-size=1280,860"] }),
    )
    .await
}

/// A headless Chromium session with its own profile; `extra` adds arguments (`args`) and
/// other `goog:chromeOptions` (a phone's `mobileEmulation`, say).
async fn chromium(driver: &str, profile: &Path, extra: serde_json::Value) -> Client {
    let mut args = vec![
        json!("--headless=new"),
        json!("--no-sandbox"),
        json!("--disable-gpu"),
        json!("--disable-dev-shm-usage"),
        json!("--disable-quic"),
        json!("--no-first-run"),
        json!("--disable-background-networking"),
        json!("--disable-component-update"),
        json!("--disable-sync"),
        json!("--disable-extensions"),
        json!("--lang=en-US"),
        json!(format!("--user-data-dir={}", profile.display())),
    ];
    let mut options = serde_json::Map::new();
    options.insert("binary".to_owned(), json!(CHROMIUM));
    if let serde_json::Value::Object(extra) = extra {
        for (k, v) in extra {
            match (k.as_str(), v) {
                ("args", serde_json::Value::Array(more)) => args.extend(more),
                (_, v) => {
                    options.insert(k, v);
                }
            }
        }
    }
    options.insert("args".to_owned(), serde_json::Value::Array(args));
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::Value::Object(options),
    );
    ClientBuilder::rustls()
        .expect("rustls")
        .capabilities(caps)
        .connect(driver)
        .await
        .expect("a chromium session")
}

/// Starts `mthpt standalone` with its demo in `dir`; returns it, the console URL and the
/// operator password it printed.
fn start_standalone(dir: &Path) -> (ChildGuard, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args([
            "standalone",
            "--listen",
            "127.0.0.1:0",
            "--wrapper-listen",
            "127.0.0.1:0",
            "--console-listen",
            "127.0.0.1:0",
        ])
        .current_dir(dir)
        .env_remove("MTHPT_DATA")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let child = ChildGuard::new("mthpt standalone", child);
    let (mut url, mut password) = (None, None);
    while url.is_none() || password.is_none() {
        let line = lines
            .next()
            .expect("standalone printed its banner")
            .unwrap();
        if let Some(rest) = line.trim().strip_prefix("console") {
            url = rest.split_whitespace().next().map(str::to_owned);
        }
        if let Some(rest) = line.trim().strip_prefix("login") {
            password = rest.split_whitespace().nth(2).map(str::to_owned);
        }
    }
    (child, url.unwrap(), password.unwrap())
}

/// Takes a screenshot of the page. It replaces `docs/screenshots/<name>` only with
/// `MTHPT_WRITE_SCREENSHOTS=1` (a test run leaves the tree as it was); otherwise it goes to
/// `mthpt-screenshots/` in the temp folder, to look at.
async fn screenshot(c: &Client, name: &str) {
    let dir = if std::env::var_os("MTHPT_WRITE_SCREENSHOTS").is_some_and(|v| v == "1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshots")
    } else {
        std::env::temp_dir().join("mthpt-screenshots")
    };
    std::fs::create_dir_all(&dir).unwrap();
    let png = c.screenshot().await.unwrap();
    assert!(
        png.starts_with(b"\x89PNG"),
        "{name}: the browser gave no PNG"
    );
    std::fs::write(dir.join(name), png).unwrap();
}

async fn sign_in(c: &Client, base: &str, password: &str) {
    c.goto(&format!("{base}/login?next=/t/demo/tasks"))
        .await
        .unwrap();
    c.find(Locator::Id("username"))
        .await
        .unwrap()
        .send_keys("admin")
        .await
        .unwrap();
    c.find(Locator::Id("password"))
        .await
        .unwrap()
        .send_keys(password)
        .await
        .unwrap();
    c.find(Locator::Id("sign-in"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Id("task-list"))
        .await
        .expect("signed in, the task list shows");
}

async fn fill(c: &Client, id: &str, text: &str) {
    let input = c.find(Locator::Id(id)).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(text).await.unwrap();
}

/// Clicks the first element matching `css`, finding it again when live updates replaced it
/// between the find and the click (a stale element reference).
async fn click_live(c: &Client, css: &str) {
    let mut tries = 0;
    loop {
        let found = c.find(Locator::Css(css)).await.unwrap();
        match found.click().await {
            Ok(()) => return,
            Err(e) if tries < 10 && e.to_string().contains("stale element") => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("click {css}: {e}"),
        }
    }
}

async fn choose(c: &Client, select_id: &str, value: &str) {
    c.find(Locator::Css(&format!(
        "#{select_id} option[value='{value}']"
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
}

/// Waits until the page's WebSocket of live events is open.
async fn live(c: &Client) {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("body[data-ws='open']"))
        .await
        .expect("the live-event WebSocket opened");
}

/// The page has no catalog key left untranslated.
async fn translated(c: &Client) {
    let html = c.source().await.unwrap();
    assert!(
        !html.contains('⟦'),
        "an untranslated key on {}: {}",
        c.current_url().await.unwrap(),
        html.split('⟦')
            .nth(1)
            .unwrap_or_default()
            .split('⟧')
            .next()
            .unwrap_or_default()
    );
}

/// Fills the task form (name, handler, schedule kind, no retries) and saves it.
async fn create_task(c: &Client, base: &str, name: &str, handler: &str, cron: Option<&str>) {
    c.goto(&format!("{base}/t/demo/tasks/new")).await.unwrap();
    fill(c, "f-name", name).await;
    choose(c, "f-app", "demo").await;
    fill(c, "f-handler", handler).await;
    match cron {
        Some(expr) => {
            choose(c, "f-schedule-kind", "cron").await;
            fill(c, "f-schedule-expr", expr).await;
            // The preview shows the next fire times before anything is saved.
            c.wait()
                .at_most(WAIT)
                .for_element(Locator::Css("#preview ol.fire-times li:nth-child(3)"))
                .await
                .expect("the cron preview lists the next fire times");
            let words = c.find(Locator::Css("#preview .words")).await.unwrap();
            assert!(!words.text().await.unwrap().is_empty());
            screenshot(c, "task-form.png").await;
        }
        None => choose(c, "f-schedule-kind", "manual").await,
    }
    fill(c, "f-max-retries", "0").await;
    save(c).await;
}

async fn save(c: &Client) {
    c.find(Locator::Id("save-task"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

async fn saved(c: &Client) {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#task-list tr.task"))
        .await
        .expect("the task was saved and the list shows");
}

async fn task_id(c: &Client, name: &str) -> i64 {
    let xpath = format!(
        "//tr[contains(@class,'task')][.//*[contains(@class,'task-name')][text()=\"{name}\"]]"
    );
    let row = c.find(Locator::XPath(&xpath)).await.unwrap();
    row.attr("data-task-id")
        .await
        .unwrap()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_chromium_creates_tasks_shows_live_runs_and_pops_up_alarms() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, password) = tokio::task::block_in_place(|| start_standalone(dir.path()));
    let (_driver, driver_url) = start_chromedriver().await;
    let one = browser(&driver_url, &dir.path().join("profile-1")).await;
    let two = browser(&driver_url, &dir.path().join("profile-2")).await;

    // Sign in; a cron task every 2 s through the form, previewed before saving.
    sign_in(&one, &base, &password).await;
    translated(&one).await;
    create_task(&one, &base, "every-2s", "hello", Some("*/2 * * * * ?")).await;
    saved(&one).await;
    let every = task_id(&one, "every-2s").await;
    screenshot(&one, "tasks.png").await;

    // Its runs appear on the runs page without a reload.
    one.goto(&format!("{base}/t/demo/runs?task={every}"))
        .await
        .unwrap();
    live(&one).await;
    translated(&one).await;
    one.execute("window.stillHere = 'yes';", vec![])
        .await
        .unwrap();
    let before = one
        .find_all(Locator::Css("#run-rows tr.state-succeeded"))
        .await
        .unwrap()
        .len();
    let deadline = Instant::now() + WAIT;
    loop {
        let now = one
            .find_all(Locator::Css("#run-rows tr.state-succeeded"))
            .await
            .unwrap()
            .len();
        if now >= before + 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "two more succeeded runs of every-2s did not appear in 10 s ({before} → {now})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let same_page = one
        .execute("return window.stillHere;", vec![])
        .await
        .unwrap();
    assert_eq!(same_page, json!("yes"), "the runs page was not reloaded");

    // A hostile name is text, never markup; a failing task pops an alarm up in two sessions.
    create_task(&one, &base, "<img src=x onerror=alert(1)>", "flaky", None).await;
    let error = one
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Id("err-f-name"))
        .await
        .expect("the refused name has its error next to the field");
    assert!(!error.text().await.unwrap().is_empty());
    let images = one
        .execute("return document.querySelectorAll('img').length;", vec![])
        .await
        .unwrap();
    assert_eq!(images, json!(0), "the posted name was rendered as markup");
    fill(&one, "f-name", "always-fails").await;
    save(&one).await;
    saved(&one).await;
    let fails = task_id(&one, "always-fails").await;
    sign_in(&two, &base, &password).await;
    two.goto(&format!("{base}/t/demo/runs")).await.unwrap();
    live(&one).await;
    live(&two).await;
    let trigger = format!(
        "return fetch('/api/v1/tenants/demo/tasks/{fails}/trigger', {{method: 'POST', credentials: 'same-origin'}}).then(r => r.status);"
    );
    let status = one.execute(&trigger, vec![]).await.unwrap();
    assert_eq!(
        status,
        json!(201),
        "triggered through the API with the session"
    );
    let popup =
        Locator::XPath("//div[contains(@class,'alarm-popup')][.//p[contains(., 'always-fails')]]");
    let mut ids = Vec::new();
    for c in [&one, &two] {
        let shown = c
            .wait()
            .at_most(WAIT)
            .for_element(popup)
            .await
            .expect("the alarm popped up");
        let after: i64 = shown
            .attr("data-shown-after-ms")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            after <= 2000,
            "the pop-up showed {after} ms after the alarm"
        );
        ids.push(shown.attr("data-alarm-id").await.unwrap().unwrap());
    }
    assert_eq!(ids[0], ids[1], "the same alarm in both sessions");
    assert!(
        one.execute(
            "return document.querySelectorAll('img[src=x]').length;",
            vec![]
        )
        .await
        .unwrap()
            == json!(0),
        "the alarm message was rendered as markup"
    );
    screenshot(&two, "alarm-popup.png").await;

    // Acknowledged in one session, it leaves the other.
    let id = &ids[0];
    one.find(Locator::Css(&format!(
        ".alarm-popup[data-alarm-id='{id}'] button.ack"
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    let gone = Instant::now() + WAIT;
    loop {
        let left = two
            .find_all(Locator::Css(&format!(".alarm-popup[data-alarm-id='{id}']")))
            .await
            .unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < gone,
            "the acknowledged alarm stayed up in the other session"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The overview, with the runs of the tasks above.
    one.goto(&format!("{base}/t/demo")).await.unwrap();
    one.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("main svg"))
        .await
        .expect("the overview draws its charts");
    translated(&one).await;
    screenshot(&one, "overview.png").await;

    // 中文: every page the test visits is translated.
    one.goto(&format!("{base}/lang/zh-CN?back=/t/demo/tasks"))
        .await
        .unwrap();
    assert!(one.source().await.unwrap().contains("任务"));
    for page in [
        String::new(),
        "executors".to_owned(),
        "audit".to_owned(),
        "tasks".to_owned(),
        "tasks/new".to_owned(),
        format!("tasks/{every}/edit"),
        format!("runs?task={every}"),
        "alarms".to_owned(),
    ] {
        let path = if page.is_empty() {
            format!("{base}/t/demo")
        } else {
            format!("{base}/t/demo/{page}")
        };
        one.goto(&path).await.unwrap();
        translated(&one).await;
    }
    // The service's own messages too: a wrong task, each wrong field said in Chinese.
    one.goto(&format!("{base}/t/demo/tasks/new")).await.unwrap();
    fill(&one, "f-name", "bad name!").await;
    choose(&one, "f-app", "demo").await;
    fill(&one, "f-handler", "hello").await;
    choose(&one, "f-schedule-kind", "cron").await;
    fill(&one, "f-schedule-expr", "0 0 25 * * ?").await;
    save(&one).await;
    one.wait()
        .at_most(WAIT)
        .for_element(Locator::Id("err-f-schedule-expr"))
        .await
        .expect("the refused form names the wrong cron field");
    let mut said = Vec::new();
    for e in one
        .find_all(Locator::Css(".field-error, p.error"))
        .await
        .unwrap()
    {
        said.push(e.text().await.unwrap());
    }
    assert!(
        said.iter().any(|s| s.contains("小时字段")) && said.iter().any(|s| s.contains("任务名")),
        "{said:?}"
    );
    for s in &said {
        let english = s
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(3)
            .any(|w| {
                w.iter()
                    .all(|x| x.len() > 1 && x.chars().all(|c| c.is_ascii_lowercase()))
            });
        assert!(!english, "English in a Chinese page: {s:?}");
    }
    one.goto(&format!("{base}/t/demo/runs?task={fails}"))
        .await
        .unwrap();
    click_live(&one, "#run-rows a").await;
    one.wait()
        .at_most(WAIT)
        .for_element(Locator::Id("run-state"))
        .await
        .unwrap();
    translated(&one).await;

    one.close().await.unwrap();
    two.close().await.unwrap();
    // Reported, not asserted: its length follows the machine's load.
    eprintln!("the browser test took {:?}", started.elapsed());
}

/// Signs `username` (password `password-<username>`, as `TestApp::user` makes them) in on the
/// console at `base` and lands on `next`, waiting for `ready`.
async fn sign_in_to(c: &Client, base: &str, username: &str, next: &str, ready: &str) {
    c.goto(&format!("{base}/login?next={next}")).await.unwrap();
    fill(c, "username", username).await;
    fill(c, "password", &format!("password-{username}")).await;
    c.find(Locator::Id("sign-in"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(ready))
        .await
        .expect("signed in, the page shows");
}

/// The values of the progress bars on the runs page (read in one script: the rows are
/// replaced as events arrive).
/// The run log of the `slow` handler: its three lines, each once, in order.
fn assert_each_line_once(log: &str) {
    let lines: Vec<&str> = log.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines,
        ["step one of two", "step two of two", "all done"],
        "the run log shows each line once: {log:?}"
    );
}

async fn progress_values(c: &Client) -> Vec<i64> {
    let values = c
        .execute(
            "return Array.from(document.querySelectorAll('#run-rows progress')).map(p => Number(p.getAttribute('value')));",
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value(values).unwrap()
}

/// A cluster as operators run it: PostgreSQL, RabbitMQ, an engine node and two console nodes,
/// each browser session on its own node. A running run's progress bar advances without a
/// reload; a failing task's alarm pops up in both sessions within 2 s, and acknowledging it on
/// one node clears it on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_console_nodes_on_rabbitmq_move_progress_bars_and_pop_up_alarms_in_chromium() {
    use mthpt_console::testing::{ConsoleNode, spawn_app};
    use mthpt_engine::bus::Bus;
    use mthpt_engine::clock::SystemClock;
    use mthpt_engine::runtime::EngineNode;
    use mthpt_engine::schedule::ScheduleSpec;
    use mthpt_engine::store::Backend;
    use mthpt_engine::task::TaskDefinition;
    use mthpt_engine::tenant::Role;
    use mthpt_tests::{TestWrapper, create, quick_engine_config, tenancy};
    use mthpt_wrapper::HandlerError;
    use std::sync::Arc;

    let bus: Arc<dyn Bus> = Arc::new(mthpt_engine::testing::amqp_bus().await);
    let mut app = spawn_app(Backend::Postgres).await;
    let queue = |n: u8| format!("test.browser.{n}.{}", std::process::id());
    app.listen_to(bus.clone(), &queue(1));
    let second = ConsoleNode::start(app.shared_store(), bus.clone(), &queue(2));
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    app.user(Some(&t.tenant), "ada", Role::TenantAdmin).await;
    app.user(Some(&t.tenant), "bob", Role::TenantOperator).await;
    let engine = EngineNode::start_with_bus(
        app.shared_store(),
        Arc::new(SystemClock),
        quick_engine_config("engine-1"),
        Some(bus.clone()),
    )
    .await
    .unwrap();
    let wrapper = TestWrapper::start(&t, &[engine.url()], |b| {
        b.async_handler("slow", |ctx| async move {
            ctx.progress(0.2, "warming up");
            ctx.log("step one of two");
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            ctx.progress(0.7, "nearly there");
            ctx.log("step two of two");
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            // The last line may reach the engine only with the result.
            ctx.log("all done");
            Ok(json!(null))
        })
        .async_handler("fails", |_| async {
            Err(HandlerError::fatal("the ledger is closed"))
        })
    })
    .unwrap();
    wrapper.registered().await.unwrap();
    let manual = |name: &str, handler: &str| {
        let mut def = TaskDefinition::new(t.app.id, name, handler, ScheduleSpec::Manual);
        def.max_retries = 0;
        def
    };
    let slow = create(app.store(), &t, &manual("slow-report", "slow"))
        .await
        .unwrap();
    let fails = create(app.store(), &t, &manual("always-fails", "fails"))
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (_driver, driver_url) = start_chromedriver().await;
    let one = browser(&driver_url, &dir.path().join("profile-1")).await;
    let two = browser(&driver_url, &dir.path().join("profile-2")).await;
    sign_in_to(
        &one,
        &app.base_url,
        "ada",
        &format!("/t/acme/runs?task={}", slow.id),
        "#run-rows",
    )
    .await;
    sign_in_to(&two, &second.base_url, "bob", "/t/acme/alarms", "main").await;
    live(&one).await;
    live(&two).await;
    one.execute("window.stillHere = 'yes';", vec![])
        .await
        .unwrap();

    // The running run's progress bar moves without a reload.
    let trigger = |id: i64| {
        format!(
            "return fetch('/api/v1/tenants/acme/tasks/{id}/trigger', {{method: 'POST', credentials: 'same-origin'}}).then(r => r.status);"
        )
    };
    let status = one.execute(&trigger(slow.id.0), vec![]).await.unwrap();
    assert_eq!(status, json!(201));
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let values = progress_values(&one).await;
        if let Some(&v) = values.first()
            && seen.last() != Some(&v)
        {
            seen.push(v);
        }
        if seen.len() >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the progress bar did not advance in 10 s: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen[1] > seen[0], "the progress bar went {seen:?}");
    assert_eq!(
        one.execute("return window.stillHere;", vec![])
            .await
            .unwrap(),
        json!("yes"),
        "the runs page was not reloaded"
    );

    // The run's own page follows it live: the log tail grows and the state changes, no reload.
    let trigger_run = format!(
        "return fetch('/api/v1/tenants/acme/tasks/{}/trigger', {{method: 'POST', credentials: 'same-origin'}}).then(r => r.json()).then(r => r.id);",
        slow.id
    );
    let run = one.execute(&trigger_run, vec![]).await.unwrap();
    let run = run.as_i64().expect("the trigger answered the run");
    one.goto(&format!("{}/t/acme/runs/{run}", app.base_url))
        .await
        .unwrap();
    live(&one).await;
    translated(&one).await;
    one.execute("window.stillHere = 'yes';", vec![])
        .await
        .unwrap();
    let until = Instant::now() + WAIT;
    loop {
        // Read in one script: the live part of the page is replaced as events arrive.
        let seen = one
            .execute(
                "return [document.getElementById('run-log').textContent, document.getElementById('run-state').className];",
                vec![],
            )
            .await
            .unwrap();
        let (log, state): (String, String) = serde_json::from_value(seen).unwrap();
        if log.contains("all done") && state.contains("state-succeeded") {
            assert_each_line_once(&log);
            break;
        }
        assert!(
            Instant::now() < until,
            "the run page did not follow the run (log {log:?}, state {state:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        one.execute("return window.stillHere;", vec![])
            .await
            .unwrap(),
        json!("yes"),
        "the run page was not reloaded"
    );
    // After a reload the stored log holds each line once as well.
    one.refresh().await.unwrap();
    let stored = one
        .execute(
            "return document.getElementById('run-log').textContent;",
            vec![],
        )
        .await
        .unwrap();
    assert_each_line_once(stored.as_str().unwrap_or_default());

    // A failure's alarm pops up on both console nodes within 2 s.
    let status = one.execute(&trigger(fails.id.0), vec![]).await.unwrap();
    assert_eq!(status, json!(201));
    let popup =
        Locator::XPath("//div[contains(@class,'alarm-popup')][.//p[contains(., 'always-fails')]]");
    let mut ids = Vec::new();
    for c in [&one, &two] {
        let shown = c
            .wait()
            .at_most(WAIT)
            .for_element(popup)
            .await
            .expect("the alarm popped up on both console nodes");
        let after: i64 = shown
            .attr("data-shown-after-ms")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            after <= 2000,
            "the pop-up showed {after} ms after the alarm"
        );
        ids.push(shown.attr("data-alarm-id").await.unwrap().unwrap());
    }
    assert_eq!(ids[0], ids[1], "the same alarm on both nodes");

    // Acknowledged through node 2, it leaves the session on node 1.
    let id = &ids[0];
    two.find(Locator::Css(&format!(
        ".alarm-popup[data-alarm-id='{id}'] button.ack"
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    let gone = Instant::now() + WAIT;
    while !one
        .find_all(Locator::Css(&format!(".alarm-popup[data-alarm-id='{id}']")))
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < gone,
            "the alarm acknowledged on node 2 stayed up on node 1"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A tenant viewer is offered no controls, and a change forged from its session is refused.
    app.user(Some(&t.tenant), "vic", Role::TenantViewer).await;
    let three = browser(&driver_url, &dir.path().join("profile-3")).await;
    sign_in_to(
        &three,
        &second.base_url,
        "vic",
        "/t/acme/tasks",
        "#task-list",
    )
    .await;
    for control in [
        "#new-task",
        "button.trigger",
        "form[action$='/pause']",
        "a[href$='/edit']",
    ] {
        assert!(
            three
                .find_all(Locator::Css(control))
                .await
                .unwrap()
                .is_empty(),
            "a viewer is offered {control}"
        );
    }
    let runs_before = mthpt_tests::runs(app.store(), &t, &slow)
        .await
        .unwrap()
        .len();
    let forged = format!(
        "return fetch('/t/acme/tasks/{}/trigger', {{method: 'POST', credentials: 'same-origin', headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: 'key=forged', redirect: 'manual'}}).then(r => r.status);",
        slow.id
    );
    let status = three.execute(&forged, vec![]).await.unwrap();
    assert_eq!(status, json!(403), "a viewer's forged run-now");
    let api = format!(
        "return fetch('/api/v1/tenants/acme/tasks/{}/trigger', {{method: 'POST', credentials: 'same-origin'}}).then(r => r.status);",
        slow.id
    );
    assert_eq!(three.execute(&api, vec![]).await.unwrap(), json!(403));
    assert_eq!(
        mthpt_tests::runs(app.store(), &t, &slow)
            .await
            .unwrap()
            .len(),
        runs_before,
        "a viewer's forged request started a run"
    );

    one.close().await.unwrap();
    two.close().await.unwrap();
    three.close().await.unwrap();
    wrapper.stop().await;
    engine.shutdown().await;
    second.stop().await;
    app.stop().await;
}

/// A Chromium session with JavaScript switched off.
async fn browser_without_script(driver: &str, profile: &Path) -> Client {
    let no_script = json!({ "profile.managed_default_content_settings.javascript": 2 });
    chromium(
        driver,
        profile,
        json!({ "args": ["--window-size=1280,860"], "prefs": no_script }),
    )
    .await
}

/// With JavaScript off the console still reads and takes plain form posts: sign in, create a
/// manual task through the form, run it now, and read its run on the runs and run pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_without_javascript() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, password) = tokio::task::block_in_place(|| start_standalone(dir.path()));
    let (_driver, driver_url) = start_chromedriver().await;
    let c = browser_without_script(&driver_url, &dir.path().join("profile")).await;
    sign_in(&c, &base, &password).await;
    // The page's script would hide the inputs of the schedule kinds not chosen.
    c.goto(&format!("{base}/t/demo/tasks/new")).await.unwrap();
    assert!(
        c.find_all(Locator::Css("#schedule .kind[hidden]"))
            .await
            .unwrap()
            .is_empty(),
        "the page's script ran although JavaScript is off"
    );
    create_task(&c, &base, "no-script", "hello", None).await;
    saved(&c).await;
    let id = task_id(&c, "no-script").await;
    c.find(Locator::Css(&format!(
        "tr.task[data-task-id='{id}'] button.trigger"
    )))
    .await
    .expect("a run-now button on the task's row")
    .click()
    .await
    .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        c.goto(&format!("{base}/t/demo/runs?task={id}"))
            .await
            .unwrap();
        if !c
            .find_all(Locator::Css("#run-rows tr.state-succeeded"))
            .await
            .unwrap()
            .is_empty()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run did not show as succeeded within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    translated(&c).await;
    c.find(Locator::Css("#run-rows a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let state = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Id("run-state"))
        .await
        .unwrap();
    assert!(
        state
            .attr("class")
            .await
            .unwrap()
            .unwrap_or_default()
            .contains("state-succeeded")
    );
    translated(&c).await;
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_page_draws_the_chain_set_in_the_form_and_its_nodes_lead_to_their_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, password) = tokio::task::block_in_place(|| start_standalone(dir.path()));
    let (_driver, driver_url) = start_chromedriver().await;
    let c = browser(&driver_url, &dir.path().join("profile")).await;
    sign_in(&c, &base, &password).await;

    // Two tasks; the second runs after the first, chosen in its form.
    create_task(&c, &base, "chain-first", "hello", None).await;
    saved(&c).await;
    let parent = task_id(&c, "chain-first").await;
    c.goto(&format!("{base}/t/demo/tasks/new")).await.unwrap();
    fill(&c, "f-name", "chain-second").await;
    choose(&c, "f-app", "demo").await;
    fill(&c, "f-handler", "hello").await;
    choose(&c, "f-schedule-kind", "manual").await;
    fill(&c, "f-max-retries", "0").await;
    c.find(Locator::Id(&format!("f-parent-{parent}")))
        .await
        .expect("the form offers the other task as a parent")
        .click()
        .await
        .unwrap();
    save(&c).await;
    saved(&c).await;
    let child = task_id(&c, "chain-second").await;

    // Run the parent from its page; the child runs after it.
    c.goto(&format!("{base}/t/demo/tasks/{parent}"))
        .await
        .unwrap();
    c.find(Locator::Css("#task-actions button.trigger"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The click returns before the form's answer has loaded: wait for its message, or that
    // page may replace the child's page opened next.
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash[data-flash='triggered']"))
        .await
        .expect("Run now says it made a run");
    c.goto(&format!("{base}/t/demo/tasks/{child}"))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while c
        .find_all(Locator::Css("#run-list tr.state-succeeded"))
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the child did not run after its parent"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.refresh().await.unwrap();
    }
    c.find(Locator::Css("svg.chart"))
        .await
        .expect("the duration chart is drawn once a run finished");
    translated(&c).await;
    screenshot(&c, "task-detail.png").await;

    // The graph: the child highlighted, the parent a link that leads to its page.
    let current = c
        .find(Locator::Css("svg.dag a.node.current"))
        .await
        .unwrap();
    assert_eq!(
        current.attr("href").await.unwrap().as_deref(),
        Some(format!("/t/demo/tasks/{child}").as_str())
    );
    c.find(Locator::Css(&format!(
        "svg.dag a[href='/t/demo/tasks/{parent}'] text"
    )))
    .await
    .expect("the parent is a node of the graph")
    .click()
    .await
    .unwrap();
    let wanted = format!("{base}/t/demo/tasks/{parent}");
    let deadline = Instant::now() + WAIT;
    while c.current_url().await.unwrap().as_str() != wanted {
        assert!(
            Instant::now() < deadline,
            "clicking the parent node did not open the parent's page"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.find(Locator::Css(&format!(
        "#task-children a[href='/t/demo/tasks/{child}']"
    )))
    .await
    .expect("the parent's page links its child");
    c.close().await.unwrap();
}

/// A headless Chromium session that renders as a phone 390 px wide (mobile emulation: the
/// page's viewport, touch and device pixel ratio of a phone).
async fn phone(driver: &str, profile: &Path) -> Client {
    let phone = json!({ "width": 390, "height": 844, "pixelRatio": 3.0, "touch": true });
    chromium(
        driver,
        profile,
        json!({ "mobileEmulation": { "deviceMetrics": phone } }),
    )
    .await
}

/// On the page shown: the page is no wider than the screen, and every control (link, button,
/// field) that shows lies within the screen's width — nothing needs scrolling sideways.
async fn fits_the_screen(c: &Client) {
    let seen = c
        .execute(
            "const w = window.innerWidth;
             const out = [];
             for (const e of document.querySelectorAll('main a, main button, main input, main select, header a, header button')) {
               const r = e.getBoundingClientRect();
               if (r.width === 0 && r.height === 0) continue; // not shown
               if (r.left < -1 || r.right > w + 1) out.push((e.textContent || e.name || e.id).trim().slice(0, 40) + ' @' + Math.round(r.left) + '..' + Math.round(r.right));
             }
             return [w, document.documentElement.scrollWidth, out];",
            vec![],
        )
        .await
        .unwrap();
    let (width, scroll, outside): (i64, i64, Vec<String>) = serde_json::from_value(seen).unwrap();
    let url = c.current_url().await.unwrap();
    assert_eq!(width, 390, "the phone's viewport");
    assert!(
        scroll <= width,
        "{url} is {scroll} px wide on a {width} px screen"
    );
    assert!(
        outside.is_empty(),
        "{url}: controls off the screen: {outside:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_phone_the_main_pages_fit_the_screen_with_every_action_in_reach() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, password) = tokio::task::block_in_place(|| start_standalone(dir.path()));
    let (_driver, driver_url) = start_chromedriver().await;
    let c = phone(&driver_url, &dir.path().join("profile")).await;
    sign_in(&c, &base, &password).await;
    // Some history: a task that fails, so runs, alarms and charts have rows.
    create_task(&c, &base, "phone-fails", "flaky", None).await;
    saved(&c).await;
    let fails = task_id(&c, "phone-fails").await;
    let status = c
        .execute(
            &format!("return fetch('/api/v1/tenants/demo/tasks/{fails}/trigger', {{method: 'POST', credentials: 'same-origin'}}).then(r => r.status);"),
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, json!(201));
    // The run fails in a moment; the list shows its alarm once it is raised.
    console_actions::reload_until(
        &c,
        &format!("{base}/t/demo/alarms?status=open"),
        "#alarm-list tbody tr",
        Duration::from_secs(30),
        "the failure's alarm is listed",
    )
    .await;
    for path in [
        "/t/demo".to_owned(),
        "/t/demo/tasks".to_owned(),
        format!("/t/demo/tasks/{fails}"),
        "/t/demo/tasks/new".to_owned(),
        "/t/demo/runs".to_owned(),
        "/t/demo/alarms?status=open".to_owned(),
        "/t/demo/executors".to_owned(),
        "/t/demo/tasks/import".to_owned(),
    ] {
        c.goto(&format!("{base}{path}")).await.unwrap();
        c.wait()
            .at_most(WAIT)
            .for_element(Locator::Css("main h1"))
            .await
            .unwrap();
        fits_the_screen(&c).await;
    }
    // An executor's own page, from the list's link.
    c.goto(&format!("{base}/t/demo/executors")).await.unwrap();
    click_live(&c, "a.executor-link").await;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("main h1"))
        .await
        .unwrap();
    fits_the_screen(&c).await;
    c.goto(&format!("{base}/t/demo/runs")).await.unwrap();
    screenshot(&c, "phone-runs.png").await;
}
