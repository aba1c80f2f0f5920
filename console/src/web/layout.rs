//! What the page frame (`templates/base.html`) shows around every page: navigation, the open
//! alarm badge, the language switch, the user and what the user's role may do here.

use mthpt_engine::alarm::AlarmFilter;
use mthpt_engine::tenant::{Role, Tenant};

use super::flash::{self, Flash};
use super::i18n::Tr;
use super::{Ctx, urlencode};
use crate::service::access::{Action, Decision, Target, decide};
use crate::service::error::ApiResult;
use crate::service::{alarms, tenants as tenant_service};

/// The most open alarms counted for the badge (more shows as "500+").
const BADGE_MAX: i64 = 500;

/// The frame of a page.
#[derive(Debug, Clone)]
pub struct Layout {
    pub tr: Tr,
    pub title: String,
    /// Empty on the sign-in page.
    pub user: String,
    pub role: String,
    /// The tenant the page is about (empty: none).
    pub tenant: String,
    pub tenant_id: i64,
    /// Other tenants an operator can switch to: (name, link).
    pub tenant_links: Vec<(String, String)>,
    /// `{"<id>":"<name>"}` of the tenants whose alarms this user may see (for the script).
    pub tenants_json: String,
    pub open_alarms: String,
    /// The caller may operate here (trigger, pause, cancel, acknowledge).
    pub can_operate: bool,
    /// The caller may change configuration here (tasks).
    pub can_admin: bool,
    /// This page, to come back to after switching language.
    pub here: String,
    /// The user's zone.
    pub tz: String,
    /// `{"<severity or kind>":"<label>"}` for the pop-ups the script builds.
    pub labels_json: String,
    /// Which navigation entry is current: `overview`, `tasks`, `runs`, `alarms`.
    pub nav: &'static str,
    /// The message about the action that led here ([`flash`]).
    pub flash: Option<Flash>,
}

impl Layout {
    /// The frame of a page without a signed-in user (sign-in, errors).
    pub fn bare(tr: Tr, title: impl Into<String>) -> Layout {
        Layout {
            tr,
            title: title.into(),
            user: String::new(),
            role: String::new(),
            tenant: String::new(),
            tenant_id: 0,
            tenant_links: Vec::new(),
            tenants_json: "{}".to_owned(),
            open_alarms: String::new(),
            can_operate: false,
            can_admin: false,
            here: "/".to_owned(),
            tz: "UTC".to_owned(),
            labels_json: labels(tr),
            nav: "",
            flash: None,
        }
    }

    /// Takes the message about the action that led here from `here` (the page's path and
    /// query, which then no longer names it).
    pub fn take_flash(&mut self, here: &str) {
        let (here, done) = flash::strip(here);
        self.flash = done.map(|d| d.render(self.tr, &self.tenant));
        self.here = here;
    }

    /// The frame of a page about `tenant`.
    pub async fn of(
        ctx: &Ctx,
        tenant: &Tenant,
        title: impl Into<String>,
        here: String,
        nav: &'static str,
    ) -> ApiResult<Layout> {
        let caller = &ctx.caller;
        let may = |action| {
            decide(
                caller.role(),
                caller.tenant_id(),
                action,
                Target::Tenant(tenant.id),
            ) == Decision::Allow
        };
        let open = alarms::list(
            &ctx.services,
            caller,
            &tenant.name,
            AlarmFilter {
                unacknowledged: true,
                muted: Some(false),
                ..Default::default()
            },
            None,
            BADGE_MAX,
        )
        .await?
        .items
        .len() as i64;
        let all = tenants(ctx).await?;
        let tenants_json = serde_json::to_string(
            &all.iter()
                .map(|t| (t.id.0.to_string(), t.name.clone()))
                .collect::<std::collections::BTreeMap<_, _>>(),
        )
        .unwrap_or_else(|_| "{}".to_owned());
        let tenant_links = if caller.role() == Role::Operator {
            all.iter()
                .filter(|t| t.id != tenant.id)
                .map(|t| {
                    let home = format!("/t/{}", urlencode(&t.name));
                    let href = match nav {
                        "overview" => home,
                        _ => format!("{home}/{nav}"),
                    };
                    (t.name.clone(), href)
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut l = Layout {
            tr: ctx.tr,
            title: title.into(),
            user: caller.user.username.clone(),
            role: format!("role.{}", caller.role()),
            tenant: tenant.name.clone(),
            tenant_id: tenant.id.0,
            tenant_links,
            tenants_json,
            // None open: an empty badge, which the style sheet hides.
            open_alarms: match open {
                0 => String::new(),
                n if n >= BADGE_MAX => format!("{BADGE_MAX}+"),
                n => n.to_string(),
            },
            can_operate: may(Action::Operate),
            can_admin: may(Action::Administer),
            here: String::new(),
            tz: ctx.tz.name().to_owned(),
            labels_json: labels(ctx.tr),
            nav,
            flash: None,
        };
        l.take_flash(&here);
        Ok(l)
    }

    /// A catalog string in the page's language.
    pub fn t(&self, key: &str) -> String {
        self.tr.t(key)
    }

    /// The link to this tenant's overview.
    pub fn link_home(&self) -> String {
        format!("/t/{}", urlencode(&self.tenant))
    }

    /// A link to this tenant's page `rest` (`tasks`, `runs/7`, …).
    pub fn link(&self, rest: &str) -> String {
        format!("/t/{}/{rest}", urlencode(&self.tenant))
    }

    /// The link that switches to language `tag` and comes back here.
    pub fn lang_link(&self, tag: &str) -> String {
        format!("/lang/{tag}?back={}", urlencode(&self.here))
    }
}

/// The tenants the caller can see (an operator: all; a tenant user: its own).
pub async fn tenants(ctx: &Ctx) -> ApiResult<Vec<Tenant>> {
    tenant_service::list(&ctx.services, &ctx.caller).await
}

/// The labels of alarm severities and kinds, for the pop-ups the script builds.
fn labels(tr: Tr) -> String {
    use mthpt_engine::alarm::{AlarmKind, Severity};
    let mut map = std::collections::BTreeMap::new();
    for s in Severity::ALL {
        map.insert(s.as_str(), tr.t(&format!("severity.{s}")));
    }
    for k in AlarmKind::ALL {
        map.insert(k.as_str(), tr.t(&format!("alarm.kind.{k}")));
    }
    serde_json::to_string(&map).unwrap_or_else(|_| "{}".to_owned())
}
