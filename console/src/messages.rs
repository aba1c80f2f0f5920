//! Server messages in the reader's language.
//!
//! A validation problem, an error's detail or an alarm is written in English where it is made:
//! the API answers in English, and its stable `code` and field names are what clients branch on.
//! A page (and a browser's alarm pop-up) shows it in the page's language. Each entry of
//! [`MESSAGES`] is an English message with `{}` where a value goes, and the same message in
//! Simplified Chinese with the values in the same order. A value that is itself a message (the
//! "task 5" of "task 5 not found", the complaint after a cron field's name) is looked up in turn.
//! A message no entry matches is shown as written: a wrapper's own alarm text, a URL parser's.

/// (English, Simplified Chinese); `{}` stands for a value, copied over in order.
pub static MESSAGES: &[(&str, &str)] = &[
    // --- field validation (engine/src/validate.rs, task.rs, schedule, tenant, quota, hosts) ---
    ("must not contain NUL characters", "不能包含 NUL 字符"),
    (
        "must not contain NUL characters (\\u0000) in a value or a key",
        "值或键中不能包含 NUL 字符（\\u0000）",
    ),
    ("must not be empty", "不能为空"),
    ("must have at least {} characters", "至少需要 {} 个字符"),
    (
        "must have at most {} characters (has {})",
        "最多 {} 个字符（现有 {} 个）",
    ),
    (
        "{} is not a valid name: use lower-case letters, digits, '-' and '_', starting with a letter or digit",
        "{} 不是有效的名称：只能使用小写字母、数字、“-”和“_”，并以字母或数字开头",
    ),
    (
        "{} is not a valid task name: use letters, digits, '.', '_' and '-', starting with a letter or digit",
        "{} 不是有效的任务名：只能使用字母、数字、“.”、“_”和“-”，并以字母或数字开头",
    ),
    (
        "{} is not a valid user name: use letters, digits and . _ @ + -",
        "{} 不是有效的用户名：只能使用字母、数字和 . _ @ + -",
    ),
    (
        "{} must start with http:// or https://",
        "{} 必须以 http:// 或 https:// 开头",
    ),
    ("{} is not a URL: {}", "{} 不是 URL：{}"),
    ("{} has no host", "{} 没有主机名"),
    (
        "{} must not contain user-info (user:password@)",
        "{} 不能包含用户信息（user:password@）",
    ),
    (
        "{} must not contain a query (?...)",
        "{} 不能包含查询串（?...）",
    ),
    (
        "{} must not contain a fragment (#...)",
        "{} 不能包含片段（#...）",
    ),
    (
        "must be between {} and {} (is {})",
        "必须在 {} 到 {} 之间（现为 {}）",
    ),
    (
        "must be at most 256 KiB of JSON (is {} bytes)",
        "JSON 最多 256 KiB（现为 {} 字节）",
    ),
    ("is not valid", "无效"),
    (
        "must not be before window_start_at",
        "不能早于 window_start_at",
    ),
    (
        "stored {} schedule of task {} lacks {}",
        "任务 {1} 存储的 {0} 调度缺少 {2}",
    ),
    (
        "must be between 1 ms and {} ms (one year), is {}",
        "必须在 1 毫秒到 {} 毫秒（一年）之间，现为 {}",
    ),
    (
        "{} is not an IANA time zone name (e.g. UTC, Europe/London, Asia/Shanghai)",
        "{} 不是 IANA 时区名（例如 UTC、Europe/London、Asia/Shanghai）",
    ),
    (
        "{} never fires: it has no fire time from now to the end of {}, the end of the search horizon",
        "{} 永远不会触发：从现在到搜索范围的终点 {} 年底都没有触发时间",
    ),
    (
        "must be a positive integer up to {} (or null: unlimited), not {}",
        "必须是不超过 {} 的正整数（或 null：不限），而不是 {}",
    ),
    (
        "needs max_fires_per_second (a burst without a rate limits nothing)",
        "需要 max_fires_per_second（没有速率的突发上限不限制任何东西）",
    ),
    (
        "must be a whole number from 1 to {}, not {}",
        "必须是 1 到 {} 的整数，而不是 {}",
    ),
    (
        "must be from 1 hour to 3650 days ({} to {} ms), not {} ms",
        "必须在 1 小时到 3650 天（{} 到 {} 毫秒）之间，而不是 {} 毫秒",
    ),
    (
        "a tenant admin, operator or viewer needs a tenant",
        "租户管理员、操作员或只读用户必须属于一个租户",
    ),
    ("an operator belongs to no tenant", "平台运维不属于任何租户"),
    ("at most {} hosts (has {})", "最多 {} 个主机（现有 {} 个）"),
    (
        "{} is not a host name, an IP address or a *.domain wildcard: {}",
        "{} 不是主机名、IP 地址或 *.domain 通配符：{}",
    ),
    // --- notification channels (engine/src/channel.rs) ---
    (
        "must be 1 to 200 characters, none of them control characters",
        "必须为 1 到 200 个字符，且不含控制字符",
    ),
    (
        "must be 1 to 500 characters, none of them control characters",
        "必须为 1 到 500 个字符，且不含控制字符",
    ),
    ("must be 1 to 65535", "必须在 1 到 65535 之间"),
    ("must be at most 2000 characters", "最多 2000 个字符"),
    (
        "must not contain spaces or control characters",
        "不能包含空格或控制字符",
    ),
    (
        "{} is not an e-mail address (local@domain)",
        "{} 不是电子邮件地址（local@domain）",
    ),
    ("{} is not a host name or address", "{} 不是主机名或地址"),
    (
        "{} must be an http:// or https:// URL with a host",
        "{} 必须是带主机名的 http:// 或 https:// URL",
    ),
    ("give 1 to 20 recipients", "请填写 1 到 20 个收件人"),
    (
        "give the SMTP password as the secret when a username is set",
        "设置了用户名时，请把 SMTP 密码作为密钥填写",
    ),
    (
        "the channel is a {} channel; its kind cannot change (create another)",
        "该通道是 {} 通道；类型不能更改（请另建一个）",
    ),
    // --- cron expressions (engine/src/schedule/cron/parse.rs): "<field>: <why>" ---
    ("second: {}", "秒字段：{}"),
    ("minute: {}", "分钟字段：{}"),
    ("hour: {}", "小时字段：{}"),
    ("day-of-month: {}", "日期字段：{}"),
    ("month: {}", "月份字段：{}"),
    ("day-of-week: {}", "星期字段：{}"),
    ("year: {}", "年份字段：{}"),
    (
        "sec min hour day-of-month month day-of-week [year]",
        "秒 分 时 日 月 星期 [年]",
    ),
    (
        "empty expression: expected 6 or 7 fields ({})",
        "表达式为空：应有 6 或 7 个字段（{}）",
    ),
    (
        "expected 6 or 7 fields ({}), found {}: seconds field required (Quartz format, e.g. `0 0 12 * * ?` fires every day at noon)",
        "应有 6 或 7 个字段（{}），实际 {} 个：需要秒字段（Quartz 格式，例如 `0 0 12 * * ?` 表示每天中午触发）",
    ),
    (
        "expected 6 or 7 fields ({}), found {}: unexpected `{}` after the year",
        "应有 6 或 7 个字段（{}），实际 {} 个：年份之后多了 `{}`",
    ),
    ("value {} out of range {}-{}", "值 {} 超出范围 {}-{}"),
    (
        "value {} out of range {}-{} (1=JAN ... 12=DEC)",
        "值 {} 超出范围 {}-{}（1=一月 … 12=十二月）",
    ),
    (
        "value {} out of range {}-{} (1=SUN ... 7=SAT)",
        "值 {} 超出范围 {}-{}（1=星期日 … 7=星期六）",
    ),
    (
        "value {} out of range 1-31 in `{}` (nW needs a day of the month)",
        "`{1}` 中的值 {0} 超出范围 1-31（nW 需要一个月中的日期）",
    ),
    (
        "# must be followed by a number 1-5 (the n-th weekday of the month), found `{}`",
        "# 后面必须是 1-5 的数字（该月第 n 个星期几），实际为 `{}`",
    ),
    (
        "/ must be followed by a number, found `{}`",
        "/ 后面必须是数字，实际为 `{}`",
    ),
    (
        "? must stand alone in the field, found `{}`",
        "? 必须单独出现在字段中，实际为 `{}`",
    ),
    (
        "# (n-th weekday) is only allowed in day-of-week",
        "#（第 n 个星期几）只能用在星期字段",
    ),
    (
        "? is only allowed in day-of-month and day-of-week",
        "? 只能用在日期和星期字段",
    ),
    (
        "L is only allowed in day-of-month and day-of-week",
        "L 只能用在日期和星期字段",
    ),
    ("W is only allowed in day-of-month", "W 只能用在日期字段"),
    (
        "L and # cannot be combined with other days in a list, found `{}`",
        "L 和 # 不能与列表中的其他日期组合，实际为 `{}`",
    ),
    (
        "L and # need a single day before them (e.g. 6L, FRI#3), found `{}`",
        "L 和 # 前面需要一个单独的日期（例如 6L、FRI#3），实际为 `{}`",
    ),
    (
        "L and W cannot be combined with other days in a list, found `{}`",
        "L 和 W 不能与列表中的其他日期组合，实际为 `{}`",
    ),
    (
        "L-nW needs n at most 27 (L-{} falls outside February), found `{}`",
        "L-nW 中的 n 最多为 27（L-{} 落在二月之外），实际为 `{}`",
    ),
    (
        "`*` must stand alone before / or a comma, found `{}`",
        "`*` 只能单独出现在 / 或逗号之前，实际为 `{}`",
    ),
    (
        "`{}` has no start before /; write */n or a/n",
        "`{}` 在 / 之前没有起始值；请写 */n 或 a/n",
    ),
    (
        "a step cannot follow a name (`{}`); use numbers, e.g. 2-6/2",
        "名称后面不能跟步长（`{}`）；请使用数字，例如 2-6/2",
    ),
    (
        "cannot be expanded (normalised as `{}`): {}",
        "无法展开（规范化为 `{}`）：{}",
    ),
    ("empty element in list `{}`", "列表 `{}` 中有空元素"),
    (
        "? cannot be used in both day-of-month and day-of-week; give one of them a value (e.g. `0 0 12 * * ?`)",
        "日期和星期字段不能都用 ?；请给其中一个填值（例如 `0 0 12 * * ?`）",
    ),
    (
        "day-of-month and day-of-week cannot both be specified; use ? in one of them (e.g. `0 0 12 * * ?` for every day, `0 0 12 ? * MON-FRI` for weekdays)",
        "日期和星期字段不能同时指定；请在其中一个用 ?（例如 `0 0 12 * * ?` 表示每天，`0 0 12 ? * MON-FRI` 表示工作日）",
    ),
    (
        "expected L, L-n, LW, L-nW or nW",
        "应为 L、L-n、LW、L-nW 或 nW",
    ),
    (
        "expected L, nL or n#k (e.g. 6L = last Friday, 2#1 = first Monday)",
        "应为 L、nL 或 n#k（例如 6L = 最后一个星期五，2#1 = 第一个星期一）",
    ),
    ("malformed `{}`: {}", "格式错误的 `{}`：{}"),
    ("malformed range `{}`", "格式错误的范围 `{}`"),
    (
        "malformed value `{}` in `{}`",
        "`{1}` 中的值 `{0}` 格式错误",
    ),
    (
        "names are not allowed here, found `{}`",
        "这里不允许使用名称，实际为 `{}`",
    ),
    (
        "offset from the last day must be at most 30, found `{}`",
        "距最后一天的偏移最多为 30，实际为 `{}`",
    ),
    (
        "only values, ranges and steps are allowed",
        "只允许值、范围和步长",
    ),
    (
        "range `{}` mixes a name and a number; use two names or two numbers",
        "范围 `{}` 混用了名称和数字；请都用名称或都用数字",
    ),
    (
        "range {}-{} runs backwards; years cannot wrap around",
        "范围 {}-{} 是倒序的；年份不能回绕",
    ),
    ("step `{}` is too large", "步长 `{}` 太大"),
    (
        "step must be at least 1, found `{}`",
        "步长至少为 1，实际为 `{}`",
    ),
    (
        "step {} too large (at most {}), found `{}`",
        "步长 {} 太大（最多 {}），实际为 `{}`",
    ),
    (
        "unexpected character `{}` in `{}`",
        "`{1}` 中有意外的字符 `{0}`",
    ),
    (
        "unknown name `{}` (expected {}-{})",
        "未知名称 `{}`（应为 {}-{}）",
    ),
    (
        "{}/n starts after {}, the last year schedules reach",
        "{}/n 的起点晚于调度所能到达的最后一年 {}",
    ),
    // --- the task form (console/src/web/task_form.rs) ---
    ("must be a whole number", "必须是整数"),
    (
        "must be a date and time, e.g. 2026-12-01T09:30",
        "必须是日期和时间，例如 2026-12-01T09:30",
    ),
    ("is not JSON: {}", "不是 JSON：{}"),
    (
        "is required for this schedule kind",
        "该调度类型必须填写此项",
    ),
    ("is required for a cron schedule", "cron 调度必须填写此项"),
    (
        "is required for a one-off schedule",
        "一次性调度必须填写此项",
    ),
    ("choose a schedule kind", "请选择调度类型"),
    ("{} is not a task id", "{} 不是任务编号"),
    ("invalid digit found in string", "含有无效的数字"),
    (
        "cannot parse integer from empty string",
        "不能从空字符串解析整数",
    ),
    ("number too large to fit in target type", "数值太大"),
    ("number too small to fit in target type", "数值太小"),
    (
        "expected value at line {} column {}",
        "第 {} 行第 {} 列应为一个值",
    ),
    (
        "EOF while parsing a value at line {} column {}",
        "第 {} 行第 {} 列：解析值时遇到结尾",
    ),
    (
        "EOF while parsing an object at line {} column {}",
        "第 {} 行第 {} 列：解析对象时遇到结尾",
    ),
    (
        "trailing characters at line {} column {}",
        "第 {} 行第 {} 列：末尾有多余字符",
    ),
    (
        "key must be a string at line {} column {}",
        "第 {} 行第 {} 列：键必须是字符串",
    ),
    // --- the titles of error codes (console/src/service/error.rs) ---
    ("The request is not valid", "请求无效"),
    ("The request cannot be read", "无法读取请求"),
    ("Authentication is required", "需要登录认证"),
    ("This is not allowed for your role", "您的角色不允许此操作"),
    (
        "The role is above what you may grant",
        "该角色高于您可授予的角色",
    ),
    ("Not found", "未找到"),
    ("Conflict", "冲突"),
    ("Dependency cycle", "依赖成环"),
    (
        "The resource was changed by someone else",
        "该资源已被他人修改",
    ),
    ("A version precondition is required", "需要提供版本前提条件"),
    ("The request body is too large", "请求体太大"),
    (
        "The request body did not arrive in time",
        "请求体未能按时到达",
    ),
    ("A tenant quota is reached", "已达到租户配额"),
    ("Too many requests", "请求过多"),
    ("The service is unavailable", "服务不可用"),
    ("Internal server error", "服务器内部错误"),
    // --- console services (console/src/service) ---
    ("a {} may not {} here", "{} 不能在这里{}"),
    ("change configuration", "修改配置"),
    ("manage the platform", "管理平台"),
    ("operate tasks", "操作任务"),
    ("that resource", "该资源"),
    ("platform operator", "平台运维"),
    ("tenant admin", "租户管理员"),
    ("tenant operator", "租户操作员"),
    ("tenant viewer", "租户只读用户"),
    (
        "the API token is unknown, expired or revoked",
        "API 令牌未知、已过期或已吊销",
    ),
    (
        "the session has expired or was signed out; sign in again",
        "会话已过期或已退出；请重新登录",
    ),
    (
        "tenant {} is disabled: its users may look but change nothing until an operator enables it again",
        "租户 {} 已停用：在运维人员重新启用之前，其用户只能查看、不能修改",
    ),
    (
        "token {} has the role {}, above this credential's {}; it cannot be revoked with it",
        "令牌 {} 的角色为 {}，高于当前凭据的 {}；不能用它吊销",
    ),
    (
        "must be no later than the expiry of the token making it ({})",
        "不能晚于创建它的令牌的过期时间（{}）",
    ),
    (
        "too many request bodies are being received at once; retry in a moment",
        "同时接收的请求体过多；请稍后重试",
    ),
    (
        "the request body did not arrive within {} s",
        "请求体未在 {} 秒内到达",
    ),
    (
        "this console node holds {} event sockets already; try again later",
        "此控制台节点已有 {} 个事件连接；请稍后再试",
    ),
    (
        "this user has {} event sockets open already; close one first",
        "此用户已打开 {} 个事件连接；请先关闭一个",
    ),
    ("no page at {}: {}", "{} 处没有页面：{}"),
    (
        "{} does not exist in {}: the clocks skip it that day",
        "{} 在 {} 不存在：那天时钟会跳过这段时间",
    ),
    ("{} is not a number", "{} 不是数字"),
    (
        "a value that must be a whole number is not one",
        "应为整数的值不是整数",
    ),
    (
        "the form cannot be read (send it as application/x-www-form-urlencoded): {}",
        "无法读取表单（请以 application/x-www-form-urlencoded 发送）：{}",
    ),
    ("must be a task id (a number)", "必须是任务编号（数字）"),
    ("must be a run id (a number)", "必须是运行编号（数字）"),
    (
        "must be in the future and at most 90 days from now",
        "必须是将来的时间，且不超过 90 天",
    ),
    (
        "{} is not open or acknowledged",
        "{} 不是 open 或 acknowledged",
    ),
    (
        "executor {} is {}; only a draining instance can undrain (a stopped one comes back when it registers again)",
        "执行器 {} 当前为 {}；只有排空中的实例可以恢复（已停止的实例重新注册后会回来）",
    ),
    (
        "executor {} is {}; only a live instance can drain",
        "执行器 {} 当前为 {}；只有在线实例可以排空",
    ),
    (
        "request bodies are limited to {} bytes",
        "请求体最多 {} 字节",
    ),
    (
        "send the body as application/json",
        "请以 application/json 发送请求体",
    ),
    ("the body cannot be read: {}", "无法读取请求体：{}"),
    (
        "the body is not valid JSON: {}",
        "请求体不是有效的 JSON：{}",
    ),
    (
        "name between 1 and {} {} (named {})",
        "请指定 1 到 {} 个{}（现为 {} 个）",
    ),
    ("{} is not an id", "{} 不是编号"),
    (
        "must be cancel or rerun (was {})",
        "必须是 cancel 或 rerun（现为 {}）",
    ),
    ("a task file is at most {} MiB", "任务文件最大 {} MiB"),
    ("the form cannot be read: {}", "无法读取表单：{}"),
    (
        "must be 1, 4 or 24 (was {})",
        "必须是 1、4 或 24（现为 {}）",
    ),
    (
        "the task file is not valid TOML: {}",
        "任务文件不是有效的 TOML：{}",
    ),
    (
        "the task file is not valid JSON: {}",
        "任务文件不是有效的 JSON：{}",
    ),
    ("the task file is not valid: {}: {}", "任务文件无效：{}：{}"),
    ("cancelled in bulk", "已批量取消"),
    ("cancelled by a person", "已被人工取消"),
    (
        "the database is busy; retry later",
        "数据库繁忙；请稍后重试",
    ),
    (
        "the database is unavailable; retry later",
        "数据库不可用；请稍后重试",
    ),
    (
        "the request failed on the server; the log has the details under this request's id",
        "请求在服务器上失败；日志中按此请求的编号记录了详情",
    ),
    (
        "the run moved on while this request was handled; reload and try again",
        "处理请求期间运行状态已变化；请刷新后重试",
    ),
    (
        "the tenant's quota {} is {}; this would go beyond it",
        "租户配额 {} 为 {}；此操作将超出配额",
    ),
    ("{} not found", "未找到{}"),
    ("this user belongs to no tenant", "该用户不属于任何租户"),
    (
        "must be between 1 and {} (was {})",
        "必须在 1 到 {} 之间（现为 {}）",
    ),
    ("no such API path or method", "没有这个 API 路径或方法"),
    ("must be a positive integer or empty", "必须是正整数或留空"),
    ("must be 1h, 24h or 7d", "必须是 1h、24h 或 7d"),
    ("deleted task {}", "已删除的任务 {}"),
    (
        "must be a day as YYYY-MM-DD (was {})",
        "必须是 YYYY-MM-DD 格式的日期（现为 {}）",
    ),
    ("not a cursor returned by this API", "不是本 API 返回的游标"),
    ("run action {}", "运行操作 {}"),
    ("task action {}", "任务操作 {}"),
    (
        "run {} already finished as {}; nothing to cancel",
        "运行 {} 已以 {} 结束；无需取消",
    ),
    ("{} has no midnight in {}", "{} 在 {} 时区没有午夜"),
    (
        "too many failed sign-in attempts; wait and try again",
        "登录失败次数过多；请稍后再试",
    ),
    (
        "wrong user name or password, or the user is disabled",
        "用户名或密码错误，或用户已停用",
    ),
    ("must be after from", "必须晚于 from"),
    ("must be at least {} seconds", "至少 {} 秒"),
    (
        "the range holds {} or more finished runs not rolled up yet; narrow it or choose one task",
        "该范围内有 {} 个或更多尚未汇总的已结束运行；请缩小范围或只选一个任务",
    ),
    (
        "the range would have more than {} buckets; choose longer buckets or a shorter range",
        "该范围将超过 {} 个分桶；请选择更长的分桶或更短的范围",
    ),
    ("at most {} tasks per file", "每个文件最多 {} 个任务"),
    ("dependency cycle: {}", "依赖成环：{}"),
    (
        "making {} a child of {} would close the cycle {}",
        "把 {} 设为 {} 的子任务会形成环 {}",
    ),
    ("no task named {}", "没有名为 {} 的任务"),
    (
        "no task named {} in the file or the tenant",
        "文件和租户中都没有名为 {} 的任务",
    ),
    ("task {} cannot depend on itself", "任务 {} 不能依赖自身"),
    ("the file is not UTF-8 text", "文件不是 UTF-8 文本"),
    ("not UTF-8 text", "不是 UTF-8 文本"),
    ("{} appears more than once", "{} 出现了不止一次"),
    (
        "{} is already a parent of {} in dependencies[{}]; list a dependency once",
        "{} 已在 dependencies[{2}] 中是 {1} 的父任务；每个依赖只列一次",
    ),
    ("{} is not toml or json", "{} 不是 toml 或 json"),
    (
        "Idempotency-Key {} was already used to trigger task {}",
        "Idempotency-Key {} 已用于触发任务 {}",
    ),
    ("give a schedule or a task_id", "请给出 schedule 或 task_id"),
    ("must be an integer", "必须是整数"),
    (
        "must be between 1 and {} (is {})",
        "必须在 1 到 {} 之间（现为 {}）",
    ),
    (
        "must be pause, resume or trigger (was {})",
        "必须是 pause、resume 或 trigger（现为 {}）",
    ),
    (
        "must be the task's version as returned in its ETag, e.g. \"3\"",
        "必须是任务 ETag 中返回的版本，例如 \"3\"",
    ),
    ("must be visible ASCII text", "必须是可见的 ASCII 文本"),
    ("must have 1 to {} characters", "必须有 1 到 {} 个字符"),
    ("no app named {} in this tenant", "本租户没有名为 {} 的应用"),
    (
        "send If-Match with the task's version (its ETag) to update it",
        "更新任务时请在 If-Match 中发送其版本（ETag）",
    ),
    (
        "the form lacks the task's version; open the task again to edit it",
        "表单缺少任务版本；请重新打开任务再编辑",
    ),
    (
        "must be from 1 to {} hours (3650 days)",
        "必须在 1 到 {} 小时（3650 天）之间",
    ),
    (
        "a tenant user is tenant_admin, tenant_operator or tenant_viewer",
        "租户用户的角色是 tenant_admin、tenant_operator 或 tenant_viewer",
    ),
    (
        "a tenant user's token has a tenant role: tenant_admin, tenant_operator or tenant_viewer",
        "租户用户的令牌须为租户角色：tenant_admin、tenant_operator 或 tenant_viewer",
    ),
    (
        "a token for {} may have at most the role {}, not {}",
        "{} 的令牌最高只能是 {} 角色，不能是 {}",
    ),
    (
        "an operator's token has the operator role",
        "平台运维的令牌是 operator 角色",
    ),
    (
        "create tenant users under /tenants/{}/users; /users holds operators",
        "请在 /tenants/{}/users 下创建租户用户；/users 下是平台运维",
    ),
    ("is required", "必须填写"),
    (
        "must be a whole number of days from 1 to {}",
        "必须是 1 到 {} 的整数天数",
    ),
    ("must be in the future", "必须是将来的时间"),
    ("must have at most 1000 bytes", "最多 1000 字节"),
    ("you cannot delete yourself", "不能删除自己"),
    (
        "you cannot disable yourself or change your own role; ask another admin",
        "不能停用自己或修改自己的角色；请让其他管理员操作",
    ),
    (
        "this request is authenticated by an API token, not a session; revoke tokens at /api/v1/tokens",
        "此请求由 API 令牌认证，而不是会话；请在 /api/v1/tokens 吊销令牌",
    ),
    (
        "a cookie-authenticated WebSocket must come from the console's own origin; API clients use a bearer token",
        "使用 Cookie 认证的 WebSocket 必须来自控制台自己的源；API 客户端请使用 Bearer 令牌",
    ),
    // --- the store (engine/src/store) ---
    ("an app named {} already exists", "名为 {} 的应用已存在"),
    (
        "app {} is used by {} task(s); delete them or move them to another app first",
        "应用 {} 被 {} 个任务使用；请先删除这些任务或把它们移到其他应用",
    ),
    (
        "a notification channel named {} exists already",
        "名为 {} 的通知通道已存在",
    ),
    ("a task named {} already exists", "名为 {} 的任务已存在"),
    ("a tenant named {} already exists", "名为 {} 的租户已存在"),
    ("username {} is taken", "用户名 {} 已被占用"),
    ("weight {} (at least 1)", "权重 {}（至少为 1）"),
    (
        "a run cannot be completed as {}: use one of the final states",
        "运行不能以 {} 完成：请使用一种最终状态",
    ),
    (
        "run {} is attempt {}; the result is for attempt {}",
        "运行 {} 是第 {} 次尝试；该结果属于第 {} 次尝试",
    ),
    (
        "run {} was dispatched to another executor instance, not this one",
        "运行 {} 已分派给另一个执行器实例，而不是这个",
    ),
    (
        "run {} was never dispatched to an executor instance",
        "运行 {} 从未分派给执行器实例",
    ),
    ("run {} is already {}", "运行 {} 已是 {}"),
    (
        "task {} was triggered too often in the same second; try again",
        "任务 {} 在同一秒内被触发太多次；请重试",
    ),
    (
        "{} is not a database URL: use postgres://user@host:port/db or sqlite://path/to/file.db",
        "{} 不是数据库 URL：请使用 postgres://user@host:port/db 或 sqlite://path/to/file.db",
    ),
    // --- alarms (engine/src/alarm.rs, claimer.rs, watchdog.rs) ---
    (
        "task {} run {} (attempt {}) did not finish before its deadline",
        "任务 {} 的运行 {}（第 {} 次尝试）未在截止时间前完成",
    ),
    (
        "task {} failed after {} attempt(s); last error: {}",
        "任务 {} 尝试 {} 次后失败；最后的错误：{}",
    ),
    ("task {} run {} {}: {}", "任务 {} 的运行 {} 状态为 {}：{}"),
    ("no error message", "没有错误信息"),
    (
        "run {} was due at {} and has not started ({} dispatch attempt(s); no executor accepted it)",
        "运行 {} 应于 {} 开始但尚未开始（已分派 {} 次；没有执行器接受）",
    ),
    (
        "executor {} ({}) stopped heartbeating {} ms ago and does not answer; {} running run(s) lost",
        "执行器 {}（{}）已在 {} 毫秒前停止心跳且无响应；{} 个运行中的任务丢失",
    ),
    (
        "tenant {} reached its quota {} ({}); further work beyond it is refused until usage is back under it",
        "租户 {} 已达到配额 {}（{}）；在用量回落之前，超出的操作会被拒绝",
    ),
    (
        "tenant {} is at its quota {} ({}); its due runs wait, {}",
        "租户 {} 已达到配额 {}（{}）；到期的运行在等待，{}",
    ),
    (
        "the oldest due at {} ({} ms late)",
        "最早的应于 {} 开始（已晚 {} 毫秒）",
    ),
    (
        "engine node {} ({}) stopped heartbeating {} ms ago; its claims move to other nodes when their leases end",
        "引擎节点 {}（{}）已在 {} 毫秒前停止心跳；其认领在租约到期后转给其他节点",
    ),
    (
        "task {}: occurrence due at {} found {} ms late; {}",
        "任务 {}：应于 {} 触发的一次被发现已晚 {} 毫秒；{}",
    ),
    (
        "fired once now; missed occurrences dropped",
        "现在触发一次；错过的触发已丢弃",
    ),
    (
        "skipped; the schedule continues from now",
        "已跳过；调度从现在继续",
    ),
    (
        "catching up: {} occurrence(s) fire, {} skipped (bound {})",
        "补触发：触发 {} 次，跳过 {} 次（上限 {}）",
    ),
    (
        "app {}: at least {} due run(s) wait for capacity, {}; its live executors are full or draining",
        "应用 {}：至少 {} 个到期运行在等待容量，{}；其在线执行器已满或正在排空",
    ),
    (
        "app {}: {} due run(s) wait for capacity, {}; its live executors are full or draining",
        "应用 {}：{} 个到期运行在等待容量，{}；其在线执行器已满或正在排空",
    ),
    (
        "misfire: found {} ms late; policy {}",
        "错过触发：已晚 {} 毫秒；策略 {}",
    ),
    (
        "overlap: run {} of this task is still running; policy skip",
        "重叠：本任务的运行 {} 仍在进行；策略为跳过",
    ),
    (
        "replaced by run {} (overlap policy replace)",
        "已被运行 {} 取代（重叠策略 replace）",
    ),
    (
        "did not finish before its deadline ({}); {} ms over",
        "未在截止时间（{}）前完成；超出 {} 毫秒",
    ),
    (
        "executor {} stopped heartbeating and does not answer",
        "执行器 {} 已停止心跳且无响应",
    ),
    (
        "executor {} no longer holds this run (it restarted or dropped it)",
        "执行器 {} 已不再持有此运行（它已重启或放弃了该运行）",
    ),
];

/// What things are called inside messages ("task 5" in "task 5 not found"): looked up for
/// values only, never for a whole message (where "task {}" would swallow anything after it).
pub static NAMES: &[(&str, &str)] = &[
    ("task {} of tenant {}", "租户 {1} 的任务 {0}"),
    ("run {} of tenant {}", "租户 {1} 的运行 {0}"),
    ("notification channel {}", "通知通道 {}"),
    ("API token {}", "API 令牌 {}"),
    ("task {}", "任务 {}"),
    ("run {}", "运行 {}"),
    ("app {}", "应用 {}"),
    ("tenant {}", "租户 {}"),
    ("user {}", "用户 {}"),
    ("token {}", "令牌 {}"),
    ("executor {}", "执行器 {}"),
    ("path: {}", "路径：{}"),
    ("tasks", "任务"),
    ("runs", "运行"),
    ("alarms", "告警"),
];

/// How deep values are looked up in turn (a value of a value of a message).
const MAX_DEPTH: usize = 3;

/// `text` in Simplified Chinese: the matching entry's translation with the values copied over
/// (each translated in turn when it is itself a message or a name), or `text` as written.
pub fn chinese(text: &str) -> String {
    translate(text, 0).unwrap_or_else(|| text.to_owned())
}

/// The translation of `text`, if an entry matches it (the one with the most fixed text, so a
/// specific entry wins over a general one). A whole message is looked up in [`MESSAGES`]; a
/// value (`depth` > 0) in [`NAMES`] too.
fn translate(text: &str, depth: usize) -> Option<String> {
    let names = if depth > 0 { NAMES } else { &[] };
    let (zh, values) = MESSAGES
        .iter()
        .chain(names)
        .filter_map(|(en, zh)| Some((en, zh, matches(en, text)?)))
        .max_by_key(|(en, _, _)| en.len() - 2 * en.matches("{}").count())
        .map(|(_, zh, values)| (zh, values))?;
    let values: Vec<String> = values
        .into_iter()
        .map(|v| {
            (depth < MAX_DEPTH)
                .then(|| translate(v, depth + 1))
                .flatten()
                .unwrap_or_else(|| v.to_owned())
        })
        .collect();
    Some(fill(zh, &values))
}

/// The values of `text` at the `{}` of `pattern`, if `text` has the pattern's shape. Each value
/// but the last is the shortest that lets the next fixed part follow; a value is never empty.
fn matches<'t>(pattern: &str, text: &'t str) -> Option<Vec<&'t str>> {
    let parts: Vec<&str> = pattern.split("{}").collect();
    let (first, rest) = parts.split_first()?;
    let mut tail = text.strip_prefix(first)?;
    let mut values = Vec::with_capacity(rest.len());
    for (i, part) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        let end = if last {
            if !tail.ends_with(part) {
                return None;
            }
            tail.len() - part.len()
        } else {
            // At least one character of value before the next fixed part.
            let from = tail.char_indices().nth(1).map_or(tail.len(), |(at, _)| at);
            from + tail.get(from..)?.find(part)?
        };
        let value = tail.get(..end)?;
        if value.is_empty() {
            return None;
        }
        values.push(value);
        tail = &tail[end + part.len()..];
    }
    if rest.is_empty() && !tail.is_empty() {
        return None;
    }
    Some(values)
}

/// `pattern` with its `{}` (or `{n}`: the n-th value) replaced by `values`.
fn fill(pattern: &str, values: &[String]) -> String {
    let mut out = String::with_capacity(pattern.len() + 32);
    let mut next = 0;
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if after[..close].chars().all(|c| c.is_ascii_digit()) => {
                let index = if close == 0 {
                    next += 1;
                    next - 1
                } else {
                    after[..close].parse().unwrap_or(usize::MAX)
                };
                out.push_str(values.get(index).map_or("", String::as_str));
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zh(text: &str) -> String {
        chinese(text)
    }

    #[test]
    fn values_are_copied_over_and_translated_when_they_are_messages() {
        assert_eq!(zh("task 5 not found"), "未找到任务 5");
        assert_eq!(
            zh("must have at most 100 characters (has 120)"),
            "最多 100 个字符（现有 120 个）"
        );
        assert_eq!(
            zh("day-of-week: value 0 out of range 1-7 (1=SUN ... 7=SAT)"),
            "星期字段：值 0 超出范围 1-7（1=星期日 … 7=星期六）"
        );
    }

    #[test]
    fn numbered_values_may_change_places() {
        assert_eq!(
            zh("unexpected character `%` in `5%`"),
            "`5%` 中有意外的字符 `%`"
        );
    }

    #[test]
    fn the_most_specific_entry_wins() {
        assert_eq!(
            zh(
                "app 3: at least 50 due run(s) wait for capacity, the oldest due at 2026-01-01T00:00:00+00:00 (1200 ms late); its live executors are full or draining"
            ),
            "应用 3：至少 50 个到期运行在等待容量，最早的应于 2026-01-01T00:00:00+00:00 开始（已晚 1200 毫秒）；其在线执行器已满或正在排空"
        );
        assert_eq!(zh("task 7 of tenant 2 not found"), "未找到租户 2 的任务 7");
    }

    #[test]
    fn a_message_no_entry_matches_is_shown_as_written() {
        assert_eq!(zh("disk full on /var"), "disk full on /var");
        assert_eq!(zh(""), "");
    }

    /// The calls whose string arguments are messages a page may show.
    const MAKERS: &[&str] = &[
        "FieldError::new(",
        "ApiError::new(",
        "ApiError::field(",
        "ApiError::not_found(",
        "ApiError::forbidden(",
        "ApiError::bad_request(",
        "ApiError::unauthenticated(",
        "CronError::whole(",
        "CronError::in_field(",
        ".err(format!(",
        "StoreError::Duplicate(",
        "StoreError::InvalidState(",
        "StoreError::NotFound(",
        "bad(",
        "self.problem(",
        "r.problem(",
        "Self::new(",
    ];

    /// The sources whose messages reach pages (the executor protocol's and the command line's
    /// messages do not).
    const SOURCES: &[&str] = &[
        "../engine/src/validate.rs",
        "../engine/src/task.rs",
        "../engine/src/tenant.rs",
        "../engine/src/quota.rs",
        "../engine/src/hosts.rs",
        "../engine/src/channel.rs",
        "../engine/src/alarm.rs",
        "../engine/src/schedule/mod.rs",
        "../engine/src/schedule/cron/parse.rs",
        "../engine/src/store",
        "src/service",
        "src/web",
    ];

    /// The string literals inside each call of `MAKERS` in `text` (a `format!`'s placeholders
    /// as `{}`), outside `#[cfg(test)]` code.
    fn literals(text: &str) -> Vec<String> {
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut out = Vec::new();
        for maker in MAKERS {
            for (at, _) in text.match_indices(maker) {
                let body = &text[at + maker.len()..];
                let (mut depth, mut end, mut in_str) = (1, body.len(), false);
                let mut chars = body.char_indices();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' if in_str => {
                            chars.next();
                        }
                        '"' => in_str = !in_str,
                        '(' if !in_str => depth += 1,
                        ')' if !in_str => {
                            depth -= 1;
                            if depth == 0 {
                                end = i;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let call = &body[..end];
                let mut rest = call;
                while let Some(open) = rest.find('"') {
                    let after = &rest[open + 1..];
                    let mut close = None;
                    let mut escaped = false;
                    for (i, c) in after.char_indices() {
                        match c {
                            _ if escaped => escaped = false,
                            '\\' => escaped = true,
                            '"' => {
                                close = Some(i);
                                break;
                            }
                            _ => {}
                        }
                    }
                    let Some(close) = close else { break };
                    out.push(normalise(&after[..close]));
                    rest = &after[close + 1..];
                }
            }
        }
        out
    }

    /// A literal as its message reads: `{name:?}` → `{}`, a line continuation joined, `\"` → `"`.
    fn normalise(literal: &str) -> String {
        let mut s = String::new();
        let mut chars = literal.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    s.push('{');
                }
                '{' => {
                    for d in chars.by_ref() {
                        if d == '}' {
                            break;
                        }
                    }
                    s.push_str("{}");
                }
                '\\' => match chars.next() {
                    Some('\n') => {
                        while chars.peek().is_some_and(|c| c.is_whitespace()) {
                            chars.next();
                        }
                    }
                    Some(other) => s.push(other),
                    None => {}
                },
                c => s.push(c),
            }
        }
        s
    }

    /// Whether a literal reads as words (two lower-case words in a row), not a key or a format.
    fn is_prose(s: &str) -> bool {
        s.split(|c: char| !c.is_ascii_alphabetic())
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| {
                w.iter()
                    .all(|x| x.len() >= 2 && x.chars().all(|c| c.is_ascii_lowercase()))
            })
            && s.contains(' ')
    }

    #[test]
    fn every_message_a_page_may_show_has_a_translation() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        let mut stack: Vec<_> = SOURCES.iter().map(|s| root.join(s)).collect();
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                for entry in std::fs::read_dir(&path).unwrap() {
                    stack.push(entry.unwrap().path());
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
        assert!(
            files.len() > 20,
            "sources not found under {}",
            root.display()
        );
        let mut missing = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for literal in literals(&text).into_iter().filter(|l| is_prose(l)) {
                // Two values side by side (`{at_least}{waiting}`) read as one.
                let literal = literal.replace("{}{}", "{}");
                let known = MESSAGES
                    .iter()
                    .chain(NAMES)
                    .any(|(en, _)| en.contains(literal.as_str()));
                if !known {
                    missing.push(format!("{}: {literal:?}", file.display()));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "messages with no translation:\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn every_entry_has_as_many_values_in_both_languages() {
        for (en, zh) in MESSAGES.iter().chain(NAMES) {
            let n = en.matches("{}").count();
            let m = zh.matches('{').count();
            assert_eq!(n, m, "{en:?} / {zh:?}");
            assert!(!en.is_empty() && !zh.is_empty());
            assert!(
                !en.contains("{}{}"),
                "{en:?}: two values side by side cannot be told apart"
            );
            assert!(
                en.len() - 2 * n >= 3,
                "{en:?}: an entry needs some fixed text to be recognised"
            );
        }
    }
}
