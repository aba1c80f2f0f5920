//! The one catalog of the console's words: every string a page shows, in English and
//! Simplified Chinese. A key missing from the catalog shows as `⟦key⟧`, which the tests look
//! for on every page they visit.

use mthpt_engine::schedule::describe::Language;

use crate::service::error::ApiError;

/// A language of the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    En,
    Zh,
}

impl Lang {
    /// The BCP 47 tag (`en`, `zh-CN`), as in the language cookie and `<html lang>`.
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh-CN",
        }
    }

    /// The language of a tag (`zh` and `zh-Hans` read as Simplified Chinese).
    pub fn from_tag(tag: &str) -> Option<Lang> {
        match tag.to_ascii_lowercase().as_str() {
            "en" => Some(Lang::En),
            "zh" | "zh-cn" | "zh-hans" => Some(Lang::Zh),
            _ => None,
        }
    }

    /// The language schedule descriptions are written in.
    pub fn describe_language(self) -> Language {
        match self {
            Lang::En => Language::English,
            Lang::Zh => Language::Chinese,
        }
    }
}

/// Looks words up in one language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tr {
    lang: Lang,
}

impl Tr {
    pub fn new(lang: Lang) -> Tr {
        Tr { lang }
    }

    pub fn lang(self) -> Lang {
        self.lang
    }

    pub fn tag(self) -> &'static str {
        self.lang.tag()
    }

    /// The text of `key`; `⟦key⟧` when the catalog lacks it.
    pub fn t(self, key: &str) -> String {
        self.get(key).unwrap_or_else(|| format!("⟦{key}⟧"))
    }

    /// A server message (a field problem, an error's detail, an alarm) in this language: see
    /// [`crate::messages`].
    pub fn msg(self, text: &str) -> String {
        match self.lang {
            Lang::En => text.to_owned(),
            Lang::Zh => crate::messages::chinese(text),
        }
    }

    /// `e` as a page shows it: its detail and field problems in this language (a validation
    /// error's detail is its problems, each `field: message`).
    pub fn error(self, e: &ApiError) -> ApiError {
        let mut out = e.clone();
        for p in &mut out.errors {
            p.message = self.msg(&p.message);
        }
        out.detail = if out.errors.is_empty() {
            self.msg(&e.detail)
        } else {
            let sep = if self.lang == Lang::Zh { "；" } else { "; " };
            let colon = if self.lang == Lang::Zh { "：" } else { ": " };
            out.errors
                .iter()
                .map(|p| format!("{}{colon}{}", p.field, p.message))
                .collect::<Vec<_>>()
                .join(sep)
        };
        out
    }

    /// The text of `key`, if the catalog has it (for values whose words are optional).
    pub fn get(self, key: &str) -> Option<String> {
        CATALOG
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, en, zh)| match self.lang {
                Lang::En => (*en).to_owned(),
                Lang::Zh => (*zh).to_owned(),
            })
    }
}

/// (key, English, Simplified Chinese).
pub static CATALOG: &[(&str, &str, &str)] = &[
    // frame
    ("nav.skip", "Skip to content", "跳到正文"),
    ("nav.label", "Main", "主导航"),
    ("nav.tenant", "Tenant", "租户"),
    ("nav.tasks", "Tasks", "任务"),
    ("nav.runs", "Runs", "运行记录"),
    ("nav.alarms", "Alarms", "告警"),
    ("nav.open_alarms", "Open alarms", "未处理告警"),
    ("nav.switch_tenant", "Other tenants", "切换租户"),
    ("nav.sign_out", "Sign out", "退出登录"),
    ("prefs.tz", "Time zone", "时区"),
    ("prefs.save", "Save", "保存"),
    ("role.operator", "platform operator", "平台运维"),
    ("role.tenant_admin", "tenant admin", "租户管理员"),
    ("role.tenant_operator", "tenant operator", "租户操作员"),
    ("role.tenant_viewer", "tenant viewer", "租户只读用户"),
    ("error.title", "Something went wrong", "出错了"),
    ("error.home", "Back to the start page", "返回首页"),
    (
        "error.no_tenant",
        "There is no tenant yet; create one with the API or `mthpt admin`",
        "还没有租户；请用 API 或 `mthpt admin` 创建",
    ),
    // lists
    ("filter.any", "Any", "全部"),
    ("filter.apply", "Filter", "筛选"),
    ("list.actions", "Actions", "操作"),
    ("list.more", "More", "更多"),
    ("list.older", "Older", "更早"),
    ("list.newer", "Newer", "更新"),
    ("list.newest", "Newest", "最新"),
    ("list.pages", "Pages", "分页"),
    // sign-in
    ("login.title", "Sign in", "登录"),
    ("login.username", "User name", "用户名"),
    ("login.password", "Password", "密码"),
    ("login.submit", "Sign in", "登录"),
    (
        "login.wrong",
        "Wrong user name or password, or the user is disabled.",
        "用户名或密码错误，或该用户已被停用。",
    ),
    (
        "login.rate_limited",
        "Too many failed attempts; wait a few minutes and try again.",
        "失败次数过多，请几分钟后再试。",
    ),
    // alarms
    ("alarms.title", "Alarms", "告警"),
    ("alarms.status", "Status", "状态"),
    ("alarms.severity", "Severity", "级别"),
    ("alarms.kind", "Kind", "类型"),
    ("alarms.task", "Task id", "任务 ID"),
    ("alarms.raised", "Raised", "产生时间"),
    ("alarms.last_seen", "last seen", "最近一次"),
    ("alarms.message", "Message", "内容"),
    ("alarms.count", "Count", "次数"),
    ("alarms.none", "No alarms match.", "没有符合条件的告警。"),
    ("alarm.ack", "Acknowledge", "确认"),
    ("alarm.dismiss", "Hide", "隐藏"),
    ("alarm.popup_title", "Alarm", "告警"),
    ("alarm.ack_failed", "Could not acknowledge:", "确认失败："),
    ("alarm.status.open", "open", "未处理"),
    ("alarm.status.acknowledged", "acknowledged", "已确认"),
    ("alarm.status.resolved", "resolved", "已恢复"),
    ("alarm.status.muted", "muted", "已静音"),
    ("alarm.kind.run_failed", "run failed", "运行失败"),
    (
        "alarm.kind.retries_exhausted",
        "retries exhausted",
        "重试次数用尽",
    ),
    ("alarm.kind.timed_out", "timed out", "运行超时"),
    (
        "alarm.kind.not_started",
        "not started in time",
        "未按时启动",
    ),
    ("alarm.kind.app", "application alarm", "应用告警"),
    ("alarm.kind.executor_lost", "executor lost", "执行器失联"),
    ("alarm.kind.node_lost", "engine node lost", "引擎节点失联"),
    ("alarm.kind.misfire", "misfire", "错过触发"),
    (
        "alarm.kind.backlog",
        "backlog waiting for capacity",
        "积压等待容量",
    ),
    ("alarm.kind.quota", "tenant quota reached", "租户配额已满"),
    ("severity.info", "info", "提示"),
    ("severity.warning", "warning", "警告"),
    ("severity.critical", "critical", "严重"),
    // tasks
    ("tasks.title", "Tasks", "任务"),
    ("tasks.search", "Name contains", "名称包含"),
    ("tasks.status", "Status", "状态"),
    ("tasks.status.active", "active", "启用"),
    ("tasks.status.paused", "paused", "已暂停"),
    ("tasks.new", "New task", "新建任务"),
    ("tasks.none", "No tasks match.", "没有符合条件的任务。"),
    ("tasks.name", "Name", "名称"),
    ("tasks.handler", "App · handler", "应用 · 处理器"),
    ("tasks.schedule", "Schedule", "调度"),
    ("tasks.next_fire", "Next fire", "下次触发"),
    ("tasks.last_result", "Last result", "最近结果"),
    ("tasks.paused", "paused", "已暂停"),
    ("tasks.runs", "Runs", "运行记录"),
    ("tasks.pause", "Pause", "暂停"),
    ("tasks.resume", "Resume", "恢复"),
    ("tasks.trigger", "Run now", "立即运行"),
    // task form
    ("form.new_title", "New task", "新建任务"),
    ("form.edit_title", "Edit task", "编辑任务"),
    ("form.what", "What runs", "运行什么"),
    ("form.when", "When", "何时运行"),
    ("form.how", "How", "如何运行"),
    (
        "form.has_errors",
        "Some fields need attention; see the messages next to them.",
        "部分字段有误，请查看字段旁的提示。",
    ),
    (
        "form.cron_hint",
        "Quartz cron, seconds first: sec min hour day-of-month month day-of-week [year]; ? in one of the day fields.",
        "Quartz cron 表达式，秒在最前：秒 分 时 日 月 周 [年]；日和周之一用 ?。",
    ),
    (
        "form.times_in_zone",
        "Dates and times in this form are in your time zone:",
        "表单中的日期时间使用你的时区：",
    ),
    ("form.save", "Save", "保存"),
    ("form.cancel", "Cancel", "取消"),
    ("field.name", "Name", "名称"),
    ("field.app", "App", "应用"),
    ("field.handler", "Handler", "处理器"),
    ("field.description", "Description", "描述"),
    ("field.params", "Parameters (JSON)", "参数（JSON）"),
    ("field.schedule.kind", "Schedule kind", "调度类型"),
    ("field.schedule.expr", "Cron expression", "Cron 表达式"),
    ("field.schedule.timezone", "Schedule time zone", "调度时区"),
    ("field.schedule.every_ms", "Every (ms)", "间隔（毫秒）"),
    ("field.schedule.anchor_at", "Starting from", "起始时间"),
    (
        "field.schedule.delay_ms",
        "Delay after the previous run (ms)",
        "上次结束后延迟（毫秒）",
    ),
    ("field.schedule.at", "At", "运行时间"),
    ("field.window_start_at", "Not before", "最早开始"),
    ("field.window_end_at", "Not after", "最晚结束"),
    ("field.max_fires", "At most this many fires", "最多触发次数"),
    ("field.misfire_policy", "Misfire policy", "错过触发策略"),
    (
        "field.misfire_threshold_ms",
        "Misfire threshold (ms)",
        "错过触发阈值（毫秒）",
    ),
    (
        "field.misfire_max_catch_up",
        "Most missed fires to catch up",
        "最多补跑次数",
    ),
    (
        "field.overlap_policy",
        "When the previous run still runs",
        "上次仍在运行时",
    ),
    ("field.routing", "Routing", "路由策略"),
    ("field.timeout_ms", "Timeout (ms)", "超时（毫秒）"),
    (
        "field.start_timeout_ms",
        "Start timeout (ms)",
        "启动超时（毫秒）",
    ),
    ("field.max_retries", "Retries", "重试次数"),
    (
        "field.retry_backoff_ms",
        "First retry after (ms)",
        "首次重试间隔（毫秒）",
    ),
    (
        "field.retry_backoff_max_ms",
        "Longest retry wait (ms)",
        "最长重试间隔（毫秒）",
    ),
    (
        "field.recover_lost",
        "Run again when its executor is lost",
        "执行器失联时重新运行",
    ),
    ("field.priority", "Priority", "优先级"),
    ("field.paused", "Paused", "暂停"),
    ("kind.cron", "cron expression", "Cron 表达式"),
    ("kind.fixed_rate", "fixed rate", "固定频率"),
    ("kind.fixed_delay", "fixed delay", "固定延迟"),
    ("kind.once", "once", "仅一次"),
    ("kind.manual", "manual only", "仅手动"),
    ("misfire.fire_once_now", "fire once now", "立即补跑一次"),
    ("misfire.skip", "skip", "跳过"),
    ("misfire.fire_all", "fire every missed one", "补跑全部"),
    ("overlap.parallel", "run both", "并行运行"),
    ("overlap.skip", "skip the new one", "跳过新的"),
    ("overlap.serial", "wait for it", "排队等待"),
    (
        "overlap.replace",
        "cancel it, run the new one",
        "取消旧的并运行新的",
    ),
    ("routing.round_robin", "round robin", "轮询"),
    ("routing.random", "random", "随机"),
    ("routing.least_busy", "least busy", "最空闲"),
    (
        "routing.consistent_hash",
        "consistent hash (sticky)",
        "一致性哈希（粘滞）",
    ),
    ("routing.failover", "failover", "故障转移"),
    ("routing.broadcast", "broadcast (sharding)", "广播（分片）"),
    ("preview.next", "Next fire times", "接下来的触发时间"),
    ("preview.zone", "zone", "时区"),
    // runs
    ("runs.title", "Runs", "运行记录"),
    ("runs.run", "Run", "运行"),
    ("runs.id", "Run", "运行"),
    ("runs.task", "Task", "任务"),
    ("runs.state", "State", "状态"),
    ("runs.trigger", "Trigger", "触发方式"),
    ("runs.attempt", "Attempt", "尝试"),
    ("runs.scheduled", "Scheduled", "计划时间"),
    ("runs.finished", "Finished", "结束时间"),
    ("runs.duration", "Duration", "耗时"),
    ("runs.from", "From", "从"),
    ("runs.to", "To", "到"),
    ("runs.find", "Find a run", "查找运行"),
    ("runs.go", "Go", "前往"),
    ("runs.progress", "Progress", "进度"),
    ("runs.none", "No runs match.", "没有符合条件的运行记录。"),
    ("runs.live", "live", "实时"),
    (
        "runs.live_hint",
        "New runs and state changes appear here as they happen",
        "新的运行和状态变化会实时显示",
    ),
    ("runs.cancel", "Cancel run", "取消运行"),
    ("runs.rerun", "Run again", "重新运行"),
    ("runs.timeline", "Timeline", "时间线"),
    ("runs.error", "Error", "错误"),
    ("runs.output", "Output", "输出"),
    ("runs.attempts", "Attempts", "各次尝试"),
    ("runs.log", "Log", "日志"),
    ("runs.no_log", "Nothing logged.", "没有日志。"),
    ("runs.log_follow", "Follow", "跟随"),
    ("runs.log_pause", "Pause", "暂停"),
    ("runs.log_dropped", "lines left out", "行被省略"),
    ("state.pending", "pending", "等待中"),
    ("state.claimed", "claimed", "已领取"),
    ("state.running", "running", "运行中"),
    ("state.succeeded", "succeeded", "成功"),
    ("state.failed", "failed", "失败"),
    ("state.timed_out", "timed out", "超时"),
    ("state.lost", "lost", "丢失"),
    ("state.skipped", "skipped", "已跳过"),
    ("state.cancelled", "cancelled", "已取消"),
    ("trigger.schedule", "schedule", "定时"),
    ("trigger.manual", "manual", "手动"),
    ("trigger.retry", "retry", "重试"),
    ("trigger.chain", "chain", "依赖触发"),
    ("trigger.recovery", "recovery", "恢复"),
    ("timeline.scheduled", "scheduled", "计划"),
    ("timeline.created", "created", "创建"),
    ("timeline.due", "due", "到期"),
    ("timeline.claimed", "claimed", "领取"),
    ("timeline.dispatched", "dispatched", "派发"),
    ("timeline.started", "started", "开始"),
    ("timeline.finished", "finished", "结束"),
    // task detail, bulk actions, parents in the task form
    ("task.edit", "Edit", "编辑"),
    ("task.settings", "Settings", "设置"),
    ("task.none", "none", "无"),
    ("task.dag", "Dependencies", "依赖关系"),
    (
        "task.dag.empty",
        "This task has no parents or children.",
        "此任务没有上游或下游任务。",
    ),
    (
        "task.dag.cut",
        "Only the nearest 50 tasks of the chain are shown.",
        "仅显示依赖链上最近的 50 个任务。",
    ),
    ("task.parents", "Runs after", "上游任务"),
    ("task.children", "Starts", "下游任务"),
    (
        "task.chart",
        "Duration and fire lateness, last 24 hours (p95 per hour)",
        "最近 24 小时的运行时长与触发延迟（每小时 p95）",
    ),
    ("task.chart.duration", "duration", "运行时长"),
    ("task.chart.lateness", "lateness", "触发延迟"),
    (
        "task.chart.ms",
        "milliseconds (p95 of each hour)",
        "毫秒（每小时 p95）",
    ),
    (
        "task.chart.none",
        "No finished runs in the last 24 hours.",
        "最近 24 小时没有已结束的运行。",
    ),
    (
        "task.chart.failed",
        "The chart could not be drawn.",
        "无法绘制图表。",
    ),
    ("task.runs", "Latest runs", "最近的运行"),
    (
        "task.all_runs",
        "All runs of this task",
        "此任务的全部运行记录",
    ),
    ("bulk.select", "Select", "选择"),
    ("bulk.select_task", "Select task", "选择任务"),
    (
        "bulk.selected",
        "With the selected tasks:",
        "对选中的任务：",
    ),
    ("bulk.done.pause", "Paused", "已暂停"),
    ("bulk.done.resume", "Resumed", "已恢复"),
    ("bulk.done.trigger", "Started", "已启动"),
    ("bulk.tasks", "task(s)", "个任务"),
    ("bulk.failed", "Not done:", "未完成："),
    (
        "bulk.none_tasks",
        "Select at least one task.",
        "请至少选择一个任务。",
    ),
    ("field.parents", "Runs after (parents)", "上游任务（依赖）"),
    (
        "form.parents_hint",
        "This task runs when each chosen task's run succeeds.",
        "所选任务的运行成功后，此任务才会运行。",
    ),
    (
        "form.no_other_tasks",
        "No other tasks yet.",
        "暂无其他任务。",
    ),
    (
        "form.parents_cut",
        "Only the first 200 tasks are listed.",
        "仅列出前 200 个任务。",
    ),
    // end of task detail, bulk actions, parents
    // overview
    ("nav.overview", "Overview", "概览"),
    ("overview.title", "Overview", "概览"),
    ("overview.range", "Time range", "时间范围"),
    ("overview.range.1h", "1 h", "1 小时"),
    ("overview.range.24h", "24 h", "24 小时"),
    ("overview.range.7d", "7 d", "7 天"),
    ("overview.finished_runs", "Finished runs", "已结束的运行"),
    ("overview.success_rate", "Success rate", "成功率"),
    ("overview.lateness_p99", "Fire lateness p99", "触发延迟 p99"),
    (
        "overview.chart.runs",
        "Finished runs per interval by final state",
        "每个时段按最终状态统计的已结束运行",
    ),
    (
        "overview.chart.success",
        "Success rate per interval",
        "每个时段的成功率",
    ),
    (
        "overview.chart.lateness",
        "Fire lateness per interval (p50, p99)",
        "每个时段的触发延迟（p50、p99）",
    ),
    ("overview.axis.runs", "runs", "运行次数"),
    ("overview.axis.percent", "%", "%"),
    ("overview.axis.ms", "ms", "毫秒"),
    (
        "overview.stats_refused",
        "The charts of this range cannot be shown:",
        "无法显示此时间范围的图表：",
    ),
    (
        "overview.stats_unavailable",
        "the statistics are not available right now.",
        "统计数据暂时不可用。",
    ),
    ("overview.failing", "Failing tasks", "失败的任务"),
    (
        "overview.no_failing",
        "No task failed in this range.",
        "此时间范围内没有任务失败。",
    ),
    ("overview.failures", "Failures", "失败次数"),
    ("overview.last_failure", "Last failure", "最近一次失败"),
    (
        "overview.failing_sampled",
        "Counted among the newest failures of the range.",
        "按此时间范围内最新的失败记录统计。",
    ),
    (
        "overview.no_alarms",
        "No open alarms.",
        "没有未处理的告警。",
    ),
    ("overview.executors", "Live executors", "在线执行器"),
    ("overview.no_apps", "No apps yet.", "还没有应用。"),
    ("overview.live_total", "live / total", "在线 / 总数"),
    ("overview.nodes", "Engine nodes", "引擎节点"),
    // executors, engine nodes, tenants, users, tokens, audit log, alarm notifications
    ("nav.executors", "Executors", "执行器"),
    ("nav.users", "Users", "用户"),
    ("nav.audit", "Audit log", "审计日志"),
    ("nav.tokens", "API tokens", "API 令牌"),
    ("nav.nodes", "Engine nodes", "引擎节点"),
    ("nav.tenants", "Tenants", "租户管理"),
    (
        "notify.toggle",
        "Alarm sound and notifications",
        "告警声音和桌面通知",
    ),
    ("notify.on", "Sound on", "提示音：开"),
    ("notify.off", "Sound off", "提示音：关"),
    ("age.seconds", "{n} s ago", "{n} 秒前"),
    ("age.minutes", "{n} min ago", "{n} 分钟前"),
    ("age.hours", "{n} h ago", "{n} 小时前"),
    ("age.days", "{n} d ago", "{n} 天前"),
    ("executors.title", "Executors", "执行器"),
    ("executors.app", "App", "应用"),
    ("executors.instance", "Instance", "实例"),
    ("executors.state", "State", "状态"),
    ("executors.load", "Running / capacity", "运行中 / 容量"),
    ("executors.handlers", "Handlers", "处理器"),
    ("executors.labels", "Labels", "标签"),
    ("executors.heartbeat", "Last heartbeat", "最近心跳"),
    ("executors.drain", "Drain", "排空"),
    (
        "executors.no_apps",
        "This tenant has no apps yet.",
        "该租户还没有应用。",
    ),
    (
        "executors.none",
        "No instance of this app has registered.",
        "该应用还没有实例注册。",
    ),
    (
        "executors.register_hint",
        "Create an app on the Apps page (or with POST /api/v1/tenants/{tenant}/apps), then start its wrapper with the command shown there; its instances appear here once they register.",
        "先在“应用”页面创建应用（或调用 POST /api/v1/tenants/{tenant}/apps），再用那里给出的命令启动 wrapper；实例注册后会显示在这里。",
    ),
    ("nav.apps", "Apps", "应用"),
    ("apps.title", "Apps", "应用"),
    ("apps.new", "New app", "新建应用"),
    ("apps.name", "Name", "名称"),
    (
        "apps.name_hint",
        "Lower-case letters, digits, - and _; wrappers identify as <tenant>.<name>.",
        "小写字母、数字、- 和 _；wrapper 以 <租户>.<名称> 标识自己。",
    ),
    ("apps.create", "Create app", "创建应用"),
    ("apps.created", "App created:", "应用已创建："),
    ("apps.rotated", "New secret of", "新的密钥："),
    ("apps.secret", "Signing secret", "签名密钥"),
    (
        "apps.secret_once",
        "Copy it now: it is not shown again (Replace secret makes a new one).",
        "请立即复制：它不会再次显示（“更换密钥”会生成新的）。",
    ),
    (
        "apps.command_intro",
        "Start an executor with the built-in shell handler: paste these lines on the host that runs it.",
        "在运行执行器的主机上粘贴以下命令，启动带内置 shell 处理器的执行器：",
    ),
    (
        "apps.command_hint",
        "Engines must reach the executor at its --listen address (use --advertise http://HOST:PORT when it listens on 0.0.0.0); add --enable-http for the http handler. Its instance is listed below once it registers (reload).",
        "引擎必须能通过 --listen 地址访问执行器（监听 0.0.0.0 时请用 --advertise http://主机:端口）；需要 http 处理器时加上 --enable-http。实例注册后会列在下方（请刷新）。",
    ),
    (
        "apps.engine_unknown",
        "This console does not know the engines' address: replace <ENGINE_URL> with it (or start the console with --engine-url).",
        "本控制台不知道引擎地址：请把 <ENGINE_URL> 换成引擎地址（或用 --engine-url 启动控制台）。",
    ),
    (
        "apps.waiting",
        "No instance of this app has registered yet.",
        "该应用还没有实例注册。",
    ),
    ("apps.rotate", "Replace secret", "更换密钥"),
    ("apps.delete", "Delete app", "删除应用"),
    (
        "confirm.rotate_title",
        "Replace this app's secret?",
        "更换该应用的密钥？",
    ),
    (
        "confirm.rotate_detail",
        "App {app} gets a new signing secret, shown once. Its running wrappers are refused until they are restarted with the new one.",
        "应用 {app} 将获得新的签名密钥（只显示一次）。正在运行的 wrapper 在换用新密钥重启之前，其请求都会被拒绝。",
    ),
    (
        "confirm.delete_app_title",
        "Delete this app?",
        "删除该应用？",
    ),
    (
        "confirm.delete_app_detail",
        "App {app} and its secret are deleted; refused while a task uses it. This cannot be undone.",
        "应用 {app} 及其密钥将被删除；仍有任务使用它时会被拒绝。此操作无法撤销。",
    ),
    ("executors.undrain", "Undrain", "恢复接收"),
    (
        "executors.undrain_requested",
        "up again at its next heartbeat",
        "下次心跳时恢复在线",
    ),
    ("overview.draining", "{n} draining", "{n} 个排空中"),
    ("confirm.cancel", "Go back", "返回"),
    (
        "confirm.drain_title",
        "Drain this executor?",
        "排空该执行器？",
    ),
    (
        "confirm.drain_detail",
        "Instance {instance} of app {app} finishes the runs it holds and is sent no new ones; while no instance of the app is up, its runs wait. Undrain brings it back.",
        "应用 {app} 的实例 {instance} 会跑完手上的运行，之后不再接收新运行；应用没有在线实例时，它的运行会等待。“恢复接收”可以撤销。",
    ),
    ("confirm.cancel_title", "Cancel this run?", "取消该运行？"),
    (
        "confirm.cancel_detail",
        "Run #{id} ends as cancelled; a handler running it is told to stop. This cannot be undone (Run again starts a new run).",
        "运行 #{id} 将以“已取消”结束，正在执行它的处理器会收到停止通知。此操作无法撤销（“再次运行”会创建新的运行）。",
    ),
    (
        "confirm.delete_user_title",
        "Delete this user?",
        "删除该用户？",
    ),
    (
        "confirm.delete_user_detail",
        "User {user} is deleted with its sessions and API tokens. This cannot be undone.",
        "用户 {user} 及其会话和 API 令牌将被删除。此操作无法撤销。",
    ),
    ("confirm.revoke_title", "Revoke this token?", "吊销该令牌？"),
    (
        "confirm.revoke_detail",
        "Token {token} stops working at once. This cannot be undone; create a new token instead.",
        "令牌 {token} 将立即失效。此操作无法撤销，需要时请新建令牌。",
    ),
    (
        "flash.triggered",
        "Run #{id} created.",
        "已创建运行 #{id}。",
    ),
    (
        "flash.cancelled",
        "Run #{id} cancelled.",
        "运行 #{id} 已取消。",
    ),
    ("flash.paused", "Task paused.", "任务已暂停。"),
    ("flash.resumed", "Task resumed.", "任务已恢复。"),
    ("flash.saved", "Task saved.", "任务已保存。"),
    (
        "flash.drained",
        "Executor drained: it gets no new runs.",
        "执行器已排空：不再接收新运行。",
    ),
    (
        "flash.undrained",
        "Undrain asked for: the executor takes runs again from its next heartbeat.",
        "已请求恢复：执行器从下次心跳起重新接收运行。",
    ),
    ("flash.user_deleted", "User deleted.", "用户已删除。"),
    ("flash.token_revoked", "Token revoked.", "令牌已吊销。"),
    ("flash.acknowledged", "Alarm acknowledged.", "告警已确认。"),
    ("flash.app_deleted", "App deleted.", "应用已删除。"),
    (
        "flash.bad_tz",
        "That is not an IANA time zone name (e.g. UTC, Europe/London, Asia/Shanghai); times stay in the zone they were shown in.",
        "这不是 IANA 时区名（例如 UTC、Europe/London、Asia/Shanghai）；时间仍按原来的时区显示。",
    ),
    ("flash.open_run", "Open the run", "查看运行"),
    ("flash.open_task", "Open the task", "查看任务"),
    ("flash.open_alarms", "Open alarms", "未处理告警"),
    ("flash.undo", "Undo", "撤销"),
    ("alarm.open_run", "Run", "运行"),
    ("executor.state.up", "up", "在线"),
    ("executor.state.draining", "draining", "排空中"),
    ("executor.state.down", "down", "已下线"),
    ("executor.state.lost", "lost", "失联"),
    ("nodes.title", "Engine nodes", "引擎节点"),
    ("nodes.id", "Node", "节点"),
    ("nodes.groups", "Node groups", "节点组"),
    ("nodes.address", "Address", "地址"),
    ("nodes.state", "State", "状态"),
    ("nodes.started", "Started", "启动时间"),
    ("nodes.heartbeat", "Last heartbeat", "最近心跳"),
    (
        "nodes.none",
        "No engine node has reported.",
        "还没有引擎节点上报。",
    ),
    ("node.state.up", "up", "在线"),
    ("node.state.draining", "draining", "排空中"),
    ("node.state.stopped", "stopped", "已停止"),
    ("node.state.lost", "lost", "失联"),
    ("tenants.title", "Tenants", "租户管理"),
    ("tenants.name", "Name", "名称"),
    ("tenants.display_name", "Display name", "显示名称"),
    ("tenants.node_group", "Node group", "节点组"),
    ("tenants.created", "Created", "创建时间"),
    ("tenants.disabled", "disabled", "已停用"),
    ("tenants.new", "New tenant", "新建租户"),
    ("tenants.create", "Create tenant", "创建租户"),
    ("tenants.weight", "Claim weight", "调度权重"),
    (
        "tenants.weight_hint",
        "Each tenant's share of every claim in its node group, relative to the other tenants with due runs: 1 (the default) to 1000.",
        "租户在所属节点组每次认领中所占的份额，与组内其他有到期运行的租户相比：1（默认）到 1000。",
    ),
    ("tenants.weight_save", "Set", "设置"),
    ("quota.title", "Quotas", "配额"),
    (
        "quota.hint",
        "Empty means unlimited. Usage is shown against each quota (used / quota).",
        "留空表示不限。用量显示为“已用 / 配额”。",
    ),
    ("quota.tasks", "Tasks", "任务数"),
    ("quota.waiting_runs", "Waiting runs", "等待中的运行"),
    ("quota.running_runs", "Running runs", "运行中的运行"),
    ("quota.max_tasks", "Max tasks", "最大任务数"),
    (
        "quota.max_waiting_runs",
        "Max waiting runs",
        "最大等待运行数",
    ),
    (
        "quota.max_concurrent_runs",
        "Max concurrent runs",
        "最大并发运行数",
    ),
    (
        "quota.max_fires_per_second",
        "Max fires per second",
        "每秒最大触发数",
    ),
    ("quota.fire_burst", "Burst", "突发上限"),
    ("quota.save", "Save", "保存"),
    ("users.title", "Users", "用户"),
    ("users.username", "User name", "用户名"),
    ("users.password", "Password", "密码"),
    (
        "users.password_hint",
        "At least 10 characters",
        "至少 10 个字符",
    ),
    ("users.role", "Role", "角色"),
    ("users.created", "Created", "创建时间"),
    ("users.disabled", "disabled", "已停用"),
    ("users.you", "you", "本人"),
    ("users.change_role", "Change role", "修改角色"),
    ("users.delete", "Delete", "删除"),
    ("users.new", "New user", "新建用户"),
    ("users.create", "Create user", "创建用户"),
    ("tokens.title", "API tokens", "API 令牌"),
    ("tokens.name", "Name", "名称"),
    ("tokens.role", "Role", "角色"),
    ("tokens.role_own", "my role", "与我相同的角色"),
    ("tokens.status", "Status", "状态"),
    ("tokens.created_at", "Created", "创建时间"),
    ("tokens.expires", "Expires", "过期时间"),
    ("tokens.last_used", "Last used", "最近使用"),
    ("tokens.never", "never", "永不"),
    ("tokens.revoke", "Revoke", "吊销"),
    (
        "tokens.none",
        "You have no API tokens.",
        "你还没有 API 令牌。",
    ),
    ("tokens.new", "New token", "新建令牌"),
    ("tokens.create", "Create token", "创建令牌"),
    ("tokens.expires_days", "Expires in (days)", "有效期（天）"),
    (
        "tokens.expires_hint",
        "Empty: never expires",
        "留空：永不过期",
    ),
    ("tokens.created", "Token created:", "令牌已创建："),
    ("tokens.secret", "Secret", "密钥"),
    (
        "tokens.secret_once",
        "Copy it now: it is shown only this once and cannot be read again.",
        "请立即复制：它只显示这一次，之后无法再查看。",
    ),
    ("tokens.status.active", "active", "有效"),
    ("tokens.status.expired", "expired", "已过期"),
    ("tokens.status.revoked", "revoked", "已吊销"),
    ("audit.title", "Audit log", "审计日志"),
    ("audit.at", "When", "时间"),
    ("audit.actor", "Who", "操作人"),
    ("audit.action", "Action", "操作"),
    ("audit.target", "Target", "对象"),
    ("audit.details", "Details", "详情"),
    ("audit.none", "Nothing recorded yet.", "还没有记录。"),
    (
        "audit.action.alarm.ack",
        "acknowledged an alarm",
        "确认告警",
    ),
    ("audit.action.alarm.mute", "muted alarms", "静默告警"),
    (
        "audit.action.alarm.unmute",
        "unmuted alarms",
        "取消静默告警",
    ),
    ("audit.action.app.create", "created an app", "创建应用"),
    ("audit.action.app.delete", "deleted an app", "删除应用"),
    (
        "audit.action.app.rotate_secret",
        "rotated an app's secret",
        "轮换应用密钥",
    ),
    (
        "audit.action.channel.create",
        "created a notification channel",
        "创建通知渠道",
    ),
    (
        "audit.action.channel.delete",
        "deleted a notification channel",
        "删除通知渠道",
    ),
    (
        "audit.action.channel.update",
        "changed a notification channel",
        "修改通知渠道",
    ),
    (
        "audit.action.executor.drain",
        "drained an executor",
        "排空执行器",
    ),
    (
        "audit.action.executor.undrain",
        "undrained an executor",
        "恢复执行器",
    ),
    ("audit.action.run.cancel", "cancelled a run", "取消运行"),
    ("audit.action.run.rerun", "ran a run again", "重新运行"),
    ("audit.action.session.create", "signed in", "登录"),
    ("audit.action.task.create", "created a task", "创建任务"),
    ("audit.action.task.delete", "deleted a task", "删除任务"),
    ("audit.action.task.pause", "paused a task", "暂停任务"),
    ("audit.action.task.resume", "resumed a task", "恢复任务"),
    (
        "audit.action.task.trigger",
        "ran a task now",
        "立即运行任务",
    ),
    ("audit.action.task.update", "changed a task", "修改任务"),
    ("audit.action.tenant.create", "created a tenant", "创建租户"),
    ("audit.action.tenant.delete", "deleted a tenant", "删除租户"),
    (
        "audit.action.tenant.quotas",
        "set a tenant's quotas",
        "设置租户配额",
    ),
    ("audit.action.tenant.update", "changed a tenant", "修改租户"),
    (
        "audit.action.tenant.weight",
        "set a tenant's claim weight",
        "设置租户权重",
    ),
    (
        "audit.action.token.create",
        "created an API token",
        "创建 API 令牌",
    ),
    (
        "audit.action.token.revoke",
        "revoked an API token",
        "吊销 API 令牌",
    ),
    ("audit.action.user.create", "created a user", "创建用户"),
    ("audit.action.user.delete", "deleted a user", "删除用户"),
    ("audit.action.user.update", "changed a user", "修改用户"),
    // bulk, clone, import/export, executor detail, mutes
    ("bulk.select_run", "Select run", "选择运行"),
    (
        "bulk.selected_runs",
        "With the selected runs:",
        "对选中的运行：",
    ),
    ("runs.cancel_selected", "Cancel selected", "取消所选"),
    ("runs.rerun_selected", "Re-run selected", "重新运行所选"),
    (
        "confirm.bulk_cancel_title",
        "Cancel the selected runs?",
        "取消所选的运行？",
    ),
    (
        "confirm.bulk_cancel_detail",
        "{n} run(s) ({ids}) end as cancelled; handlers running them are told to stop. Runs already finished are left as they are. This cannot be undone (Re-run starts new runs).",
        "{n} 个运行（{ids}）将以“已取消”结束，正在执行它们的处理器会收到停止通知。已结束的运行保持不变。此操作无法撤销（“重新运行”会创建新的运行）。",
    ),
    ("bulk.done.cancel", "Cancelled", "已取消"),
    ("bulk.done.rerun", "Started again", "已重新运行"),
    ("bulk.runs", "run(s)", "个运行"),
    (
        "bulk.none_runs",
        "Select at least one run.",
        "请至少选择一个运行。",
    ),
    (
        "bulk.why.run.conflict",
        "already finished; nothing to cancel",
        "已结束，无需取消",
    ),
    ("bulk.why.run.not_found", "no such run", "运行不存在"),
    ("bulk.select_alarm", "Select alarm", "选择告警"),
    (
        "bulk.selected_alarms",
        "With the selected alarms:",
        "对选中的告警：",
    ),
    ("alarms.ack_selected", "Acknowledge selected", "确认所选"),
    ("bulk.done.ack", "Acknowledged", "已确认"),
    ("bulk.alarms", "alarm(s)", "条告警"),
    (
        "bulk.none_alarms",
        "Select at least one alarm.",
        "请至少选择一条告警。",
    ),
    ("bulk.why.alarm.not_found", "no such alarm", "告警不存在"),
    ("mute.title", "Muted tasks", "已静音的任务"),
    (
        "mute.none",
        "No task's alarms are muted.",
        "没有任务的告警被静音。",
    ),
    ("mute.until", "Muted until", "静音至"),
    ("mute.by", "By", "操作人"),
    ("mute.unmute", "Unmute", "取消静音"),
    ("mute.task", "Mute the alarms of", "静音此任务的告警："),
    ("mute.for", "for", "时长"),
    ("mute.1h", "1 h", "1 小时"),
    ("mute.4h", "4 h", "4 小时"),
    ("mute.24h", "24 h", "24 小时"),
    (
        "mute.choose_task",
        "choose the task whose alarms to mute",
        "请选择要静音告警的任务",
    ),
    ("mute.muted_until", "Alarms muted until", "告警静音至"),
    (
        "mute.this_task",
        "Mute this task's alarms for",
        "静音此任务的告警：",
    ),
    ("task.clone", "Clone", "复制"),
    ("task.delete", "Delete", "删除"),
    (
        "confirm.delete_task_title",
        "Delete this task?",
        "删除该任务？",
    ),
    (
        "confirm.delete_task_detail",
        "Task {task} is deleted with its waiting runs and dependencies; its run history stays. This cannot be undone.",
        "任务 {task} 及其等待中的运行和依赖关系将被删除，运行历史会保留。此操作无法撤销。",
    ),
    (
        "flash.task_deleted",
        "Task #{id} deleted.",
        "任务 #{id} 已删除。",
    ),
    (
        "flash.muted",
        "Alarms of task #{id} muted.",
        "任务 #{id} 的告警已静音。",
    ),
    (
        "flash.unmuted",
        "Alarms of task #{id} unmuted.",
        "任务 #{id} 的告警已取消静音。",
    ),
    (
        "flash.imported",
        "Task file applied: {id} change(s).",
        "任务文件已应用：{id} 处变更。",
    ),
    ("executors.base_url", "Address", "地址"),
    (
        "executors.recent_runs",
        "Latest runs on this instance",
        "此实例上最近的运行",
    ),
    (
        "executors.no_runs",
        "No run has been sent to this instance.",
        "还没有运行派发到此实例。",
    ),
    (
        "executors.runs_cut",
        "Only the newest 20 runs are shown.",
        "仅显示最新的 20 个运行。",
    ),
    (
        "executors.alarms",
        "Alarms about this instance",
        "关于此实例的告警",
    ),
    (
        "executors.no_alarms",
        "No alarm about this instance.",
        "没有关于此实例的告警。",
    ),
    ("tasks.export_toml", "Export (TOML)", "导出（TOML）"),
    ("tasks.export_json", "Export (JSON)", "导出（JSON）"),
    ("tasks.import", "Import", "导入"),
    ("import.title", "Import a task file", "导入任务文件"),
    (
        "import.hint",
        "Paste a task file (TOML or JSON, as Export writes it) or choose one. Tasks are matched by name. A dry run shows what would change; nothing changes until you apply it.",
        "粘贴任务文件（TOML 或 JSON，格式同“导出”），或选择文件。任务按名称匹配。先试运行查看将发生的变更；点击“应用”之前不会做任何修改。",
    ),
    (
        "import.has_errors",
        "The file cannot be applied:",
        "无法应用该文件：",
    ),
    ("import.plan", "What applying it does", "应用后的变更"),
    ("import.what", "What", "对象"),
    ("import.step", "Change", "变更"),
    ("import.changes", "Fields", "字段"),
    ("import.apply", "Apply", "应用"),
    (
        "import.no_changes",
        "The tasks already match this file; nothing to apply.",
        "任务已与该文件一致，无需应用。",
    ),
    ("import.file", "File", "文件"),
    ("import.text", "Or paste it here", "或粘贴到这里"),
    ("import.format", "Format", "格式"),
    ("import.format.auto", "recognise", "自动识别"),
    (
        "import.prune",
        "Delete tasks and dependencies the file does not name",
        "删除文件中未列出的任务和依赖",
    ),
    ("import.dry_run", "Dry run", "试运行"),
    (
        "import.empty",
        "Paste a task file or choose one.",
        "请粘贴任务文件或选择文件。",
    ),
    ("import.step.create", "create", "新建"),
    ("import.step.update", "change", "修改"),
    ("import.step.delete", "delete", "删除"),
    ("import.step.unchanged", "unchanged", "不变"),
    ("import.kind.task", "task", "任务"),
    ("import.kind.dependency", "dependency", "依赖"),
];
#[cfg(test)]
mod tests {
    use super::*;
    use mthpt_engine::alarm::{AlarmKind, Severity};
    use mthpt_engine::app::ExecutorState;
    use mthpt_engine::node::NodeState;
    use mthpt_engine::run::{RunState, TriggerKind};
    use mthpt_engine::task::{MisfirePolicy, OverlapPolicy, Routing};
    use mthpt_engine::tenant::Role;

    #[test]
    fn every_key_is_unique_and_translated() {
        for (i, (key, en, zh)) in CATALOG.iter().enumerate() {
            assert!(!en.is_empty() && !zh.is_empty(), "{key} lacks a text");
            assert!(
                CATALOG[i + 1..].iter().all(|(k, _, _)| k != key),
                "{key} is in the catalog twice"
            );
        }
    }

    #[test]
    fn every_value_the_pages_label_has_an_entry() {
        let mut keys: Vec<String> = Vec::new();
        let mut add = |prefix: &str, values: Vec<String>| {
            keys.extend(values.into_iter().map(|v| format!("{prefix}{v}")));
        };
        let all = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        add(
            "state.",
            RunState::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add(
            "trigger.",
            TriggerKind::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add(
            "alarm.kind.",
            AlarmKind::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add(
            "severity.",
            Severity::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add(
            "misfire.",
            MisfirePolicy::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add(
            "overlap.",
            OverlapPolicy::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add(
            "routing.",
            Routing::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add(
            "executor.state.",
            ExecutorState::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add(
            "node.state.",
            NodeState::ALL.iter().map(|v| v.to_string()).collect(),
        );
        add("tokens.status.", all(&["active", "expired", "revoked"]));
        add("role.", Role::ALL.iter().map(|v| v.to_string()).collect());
        add("kind.", all(&super::super::task_form::KINDS));
        add("field.", all(&super::super::task_form::FIELDS));
        add(
            "timeline.",
            all(&[
                "scheduled",
                "created",
                "due",
                "claimed",
                "dispatched",
                "started",
                "finished",
            ]),
        );
        for key in keys {
            assert!(
                CATALOG.iter().any(|(k, _, _)| *k == key),
                "{key} is not in the catalog"
            );
        }
    }

    #[test]
    fn a_missing_key_is_marked() {
        assert_eq!(Tr::new(Lang::Zh).t("no.such.key"), "⟦no.such.key⟧");
        assert_eq!(Tr::new(Lang::Zh).t("nav.tasks"), "任务");
    }
}
