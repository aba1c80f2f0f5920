// The console's one script: alarm pop-ups, live run rows and the live run page (state,
// progress, log tail with follow/pause) from the WebSocket of live events, acknowledging
// through the REST API, and the task form's schedule preview. Pages work
// without it (read-only views and plain form posts).
"use strict";
(function () {
  const body = document.body;
  const data = body.dataset;
  let tenants = {};
  try { tenants = JSON.parse(data.tenants || "{}"); } catch (e) { tenants = {}; }
  let labels = {};
  try { labels = JSON.parse(data.labels || "{}"); } catch (e) { labels = {}; }
  const label = (v) => labels[v] || v;
  const ownTenant = Number(data.tenantId || 0);

  // ---- open-alarm badge -------------------------------------------------------------------
  const badge = document.getElementById("alarm-badge");
  function bump(alarm, by) {
    if (!badge || alarm.tenant_id !== ownTenant) return;
    if (badge.textContent.endsWith("+")) return; // "500+": more than counted
    const n = Math.max(0, (parseInt(badge.textContent, 10) || 0) + by);
    badge.textContent = n === 0 ? "" : String(n); // an empty badge is hidden: no red "0"
  }

  // ---- pop-ups ----------------------------------------------------------------------------
  const popups = document.getElementById("popups");
  function popupOf(id) {
    return popups && popups.querySelector('.alarm-popup[data-alarm-id="' + id + '"]');
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function showAlarm(alarm) {
    if (!popups || popupOf(alarm.id)) return;
    const box = el("div", "alarm-popup sev-" + alarm.severity);
    box.dataset.alarmId = String(alarm.id);
    box.dataset.kind = alarm.kind;
    // How long after it was raised it showed here (same machine clocks; read by the tests).
    box.dataset.shownAfterMs = String(Date.now() - (alarm.last_seen || alarm.created_at));
    box.setAttribute("role", "alert");
    const tenant = tenants[String(alarm.tenant_id)] || "";
    box.appendChild(el("strong", "", data.tAlarm + " · " + label(alarm.severity) + " · " + label(alarm.kind) + (tenant ? " · " + tenant : "")));
    box.appendChild(el("p", "msg", alarm.message));
    const count = el("small", "count", alarm.count > 1 ? "×" + alarm.count : "");
    box.appendChild(count);
    box.appendChild(el("p", "links"));
    linkAlarm(box, alarm, tenant);
    const buttons = el("div", "buttons");
    // An alarm of no tenant (an engine node lost) reaches operators only; they acknowledge it
    // as an alarm of the cluster.
    if (data.canOperate === "true" && (tenant || !alarm.tenant_id)) {
      const ack = el("button", "ack", data.tAck);
      ack.type = "button";
      ack.addEventListener("click", () => acknowledge(alarm, tenant, box, ack));
      buttons.appendChild(ack);
    }
    const hide = el("button", "hide", data.tDismiss);
    hide.type = "button";
    hide.addEventListener("click", () => box.remove());
    buttons.appendChild(hide);
    box.appendChild(buttons);
    popups.appendChild(box);
  }
  // Links to what the alarm is about: its run and its task, in its tenant's pages.
  function linkAlarm(box, alarm, tenant) {
    const links = box.querySelector(".links");
    if (!links) return;
    links.textContent = "";
    if (!tenant) return;
    const base = "/t/" + encodeURIComponent(tenant) + "/";
    const add = (cls, href, text) => {
      const a = el("a", cls, text);
      a.href = href;
      links.appendChild(a);
      links.appendChild(document.createTextNode(" "));
    };
    if (alarm.run_id) add("run-link", base + "runs/" + alarm.run_id, data.tOpenRun + " #" + alarm.run_id);
    if (alarm.task_id) add("task-link", base + "tasks/" + alarm.task_id, data.tOpenTask);
    // An app's backlog, a lost instance: the executors, where a drain is undone.
    if (alarm.kind === "backlog" || alarm.executor_id) add("executors-link", base + "executors", data.tExecutors);
  }
  function acknowledge(alarm, tenant, box, button) {
    button.disabled = true;
    const path = tenant ? "/api/v1/tenants/" + encodeURIComponent(tenant) + "/alarms/" : "/api/v1/alarms/";
    fetch(path + alarm.id + "/ack", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Accept": "application/json" },
    }).then((res) => {
      if (res.ok) { box.remove(); return; }
      return res.json().then((p) => { throw new Error(p.detail || res.status); });
    }).catch((e) => {
      button.disabled = false;
      let err = box.querySelector(".ack-error");
      if (!err) { err = el("p", "ack-error"); box.appendChild(err); }
      err.textContent = data.tAckFailed + " " + e.message;
    });
  }
  function onAlarm(msg) {
    const a = msg.alarm;
    if (!a) return;
    switch (msg.type) {
      case "alarm.raised":
        if (!a.muted) { if (!popupOf(a.id)) notify(a); showAlarm(a); bump(a, 1); }
        break;
      case "alarm.repeated": {
        // A repeat while the pop-up is open: its count, and what happened last (message, run).
        const p = popupOf(a.id);
        if (p) {
          p.querySelector(".count").textContent = "×" + a.count;
          p.querySelector(".msg").textContent = a.message;
          linkAlarm(p, a, tenants[String(a.tenant_id)] || "");
        }
        break;
      }
      case "alarm.acknowledged":
      case "alarm.resolved": {
        const p = popupOf(a.id);
        if (p) p.remove();
        bump(a, -1);
        break;
      }
    }
  }

  // ---- live rows ----------------------------------------------------------------------------
  const rows = document.getElementById("run-rows");
  const liveUrl = rows && rows.dataset.live;
  let refreshTimer = null;
  let runEventsSeen = false;
  function refreshRows() {
    if (!liveUrl || refreshTimer) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      fetch(liveUrl, { credentials: "same-origin" })
        .then((res) => (res.ok ? res.text() : Promise.reject(res.status)))
        .then((html) => {
          // Rows ticked for a bulk action stay ticked across the refresh.
          const ticked = new Set(Array.from(rows.querySelectorAll("input.select:checked"), (c) => c.value));
          rows.innerHTML = html;
          rows.querySelectorAll("input.select").forEach((c) => { if (ticked.has(c.value)) c.checked = true; });
        })
        .catch(() => {});
    }, 250);
  }
  if (liveUrl) {
    // Until the first run event arrives (engine nodes without a bus publish none), re-read every 2 s.
    setInterval(() => { if (!runEventsSeen && !document.hidden) refreshRows(); }, 2000);
  }

  // ---- run detail: live state, progress, attempts and log tail ------------------------------
  const runLive = document.getElementById("run-live");
  const runId = runLive ? Number(runLive.dataset.runId) : 0;
  const runTask = runLive ? Number(runLive.dataset.taskId) : 0;
  const runLog = document.getElementById("run-log");
  const follow = document.getElementById("log-follow");
  const heldNote = document.getElementById("log-held");
  let following = true;
  let heldLines = [];
  let runTimer = null;
  function refreshRun() {
    if (!runLive || runTimer) return;
    runTimer = setTimeout(() => {
      runTimer = null;
      fetch(location.href, { credentials: "same-origin" })
        .then((res) => (res.ok ? res.text() : Promise.reject(res.status)))
        .then((html) => {
          const page = new DOMParser().parseFromString(html, "text/html");
          const fresh = page.getElementById("run-live");
          if (fresh) runLive.innerHTML = fresh.innerHTML;
          // Once the run is final its stored log is the whole story (a line the executor sent
          // only with its result reaches no live event, and no live line follows the final
          // state): while following, show it instead of what was streamed.
          const stored = page.getElementById("run-log");
          if (following && fresh && fresh.dataset.final === "true" && runLog && stored && stored.textContent.length > 0) {
            const empty = document.getElementById("log-empty");
            if (empty) empty.hidden = true;
            runLog.hidden = false;
            runLog.textContent = stored.textContent;
            runLog.scrollTop = runLog.scrollHeight;
          }
        })
        .catch(() => {});
    }, 250);
  }
  function writeLog(lines) {
    if (!runLog || lines.length === 0) return;
    const empty = document.getElementById("log-empty");
    if (empty) empty.hidden = true;
    runLog.hidden = false;
    runLog.textContent += (runLog.textContent && !runLog.textContent.endsWith("\n") ? "\n" : "") + lines.join("\n");
    runLog.scrollTop = runLog.scrollHeight;
  }
  function onRunLog(msg) {
    const lines = [];
    if (msg.dropped > 0) lines.push("… " + msg.dropped + " " + follow.dataset.tDropped);
    (Array.isArray(msg.lines) ? msg.lines : []).forEach((l) => lines.push(String(l)));
    if (following) writeLog(lines);
    else {
      heldLines = heldLines.concat(lines);
      heldNote.textContent = "+" + heldLines.length;
    }
  }
  if (follow) {
    follow.hidden = false;
    follow.addEventListener("click", () => {
      following = !following;
      follow.setAttribute("aria-pressed", String(following));
      follow.textContent = following ? follow.dataset.tPause : follow.dataset.tFollow;
      if (following) {
        writeLog(heldLines);
        heldLines = [];
        heldNote.textContent = "";
      }
    });
  }
  function onRunEvent(msg) {
    if (!runLive) return;
    if (msg.run_id === runId) {
      if (msg.type === "run.log") onRunLog(msg);
      else refreshRun();
    } else if (msg.task_id === runTask && msg.type === "run.state") {
      refreshRun(); // another attempt of the occurrence (a retry or recovery) moved
    }
  }

  // ---- the WebSocket ----------------------------------------------------------------------
  let delay = 500;
  function connect() {
    if (!data.tenant) return; // signed-out pages
    const query = new URLSearchParams();
    if (liveUrl || runLive) query.set("runs", "true");
    if (document.documentElement.lang.startsWith("zh")) query.set("lang", "zh-CN");
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/api/v1/events" + (query.toString() ? "?" + query : ""));
    ws.onopen = () => { body.dataset.ws = "open"; delay = 500; };
    ws.onmessage = (e) => {
      let msg;
      try { msg = JSON.parse(e.data); } catch (err) { return; }
      if (typeof msg.type !== "string") return;
      if (msg.type.startsWith("alarm.")) onAlarm(msg);
      else if (msg.type.startsWith("run")) { runEventsSeen = true; refreshRows(); onRunEvent(msg); }
      else if (msg.type === "resync") { refreshRows(); refreshRun(); }
    };
    ws.onclose = () => {
      body.dataset.ws = "closed";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
  }
  connect();

  // ---- forms sent back with errors: the first wrong field has the focus ----------------------
  const firstWrong = document.querySelector("main form [aria-invalid='true']");
  if (firstWrong) firstWrong.focus();

  // ---- task form: schedule kinds and live preview ---------------------------------------------
  const schedule = document.getElementById("schedule");
  if (schedule) {
    const kind = document.getElementById("f-schedule-kind");
    const showKind = () => {
      schedule.querySelectorAll(".kind").forEach((d) => {
        d.hidden = !d.classList.contains("kind-" + kind.value);
      });
    };
    kind.addEventListener("change", showKind);
    showKind();
    const preview = document.getElementById("preview");
    let timer = null;
    let asked = 0;
    const update = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        if (kind.value !== "cron") { preview.innerHTML = ""; return; }
        const q = new URLSearchParams();
        schedule.querySelectorAll("[name^='schedule.']").forEach((i) => q.set(i.name, i.value));
        const n = ++asked;
        fetch(schedule.dataset.preview + "?" + q.toString(), { credentials: "same-origin" })
          .then((res) => res.text())
          .then((html) => { if (n === asked) preview.innerHTML = html; })
          .catch(() => {});
      }, 300);
    };
    schedule.addEventListener("input", update);
    schedule.addEventListener("change", update);
  }

  // ---- alarm sound and desktop notification (opt-in, remembered in localStorage) -------------
  const NOTIFY_KEY = "mthpt.notify";
  const toggle = document.getElementById("notify-toggle");
  let audio = null;
  function notifyOn() {
    try { return localStorage.getItem(NOTIFY_KEY) === "on"; } catch (e) { return false; }
  }
  function showToggle() {
    if (!toggle) return;
    const on = notifyOn();
    toggle.textContent = on ? toggle.dataset.on : toggle.dataset.off;
    toggle.setAttribute("aria-pressed", on ? "true" : "false");
  }
  function beep() {
    if (!audio) return;
    // A short two-tone beep generated here; no audio file.
    const start = audio.currentTime;
    [880, 660].forEach((freq, i) => {
      const osc = audio.createOscillator();
      const gain = audio.createGain();
      osc.frequency.value = freq;
      gain.gain.setValueAtTime(0.15, start + i * 0.18);
      gain.gain.exponentialRampToValueAtTime(0.001, start + i * 0.18 + 0.16);
      osc.connect(gain).connect(audio.destination);
      osc.start(start + i * 0.18);
      osc.stop(start + i * 0.18 + 0.17);
    });
  }
  function notify(alarm) {
    if (!notifyOn()) return;
    beep();
    if ("Notification" in window && Notification.permission === "granted") {
      const tenant = tenants[String(alarm.tenant_id)] || "";
      try {
        new Notification(data.tAlarm + " · " + label(alarm.severity) + (tenant ? " · " + tenant : ""),
          { body: alarm.message, tag: "mthpt-alarm-" + alarm.id });
      } catch (e) { /* some browsers allow notifications only from a service worker */ }
    }
  }
  if (toggle) {
    toggle.hidden = false;
    showToggle();
    toggle.addEventListener("click", () => {
      const on = !notifyOn();
      try { localStorage.setItem(NOTIFY_KEY, on ? "on" : "off"); } catch (e) { /* storage refused */ }
      if (on) {
        // Both need the user's click: the audio context and the permission prompt.
        const Ctx = window.AudioContext || window.webkitAudioContext;
        if (Ctx && !audio) { try { audio = new Ctx(); } catch (e) { audio = null; } }
        if (audio && audio.state === "suspended") audio.resume();
        if ("Notification" in window && Notification.permission === "default") Notification.requestPermission();
        beep();
      }
      showToggle();
    });
    // A page loaded with the toggle already on gets its audio context at the first click anywhere.
    document.addEventListener("click", () => {
      if (notifyOn() && !audio) {
        const Ctx = window.AudioContext || window.webkitAudioContext;
        if (Ctx) { try { audio = new Ctx(); } catch (e) { audio = null; } }
      }
    }, { once: true });
  }
})();
