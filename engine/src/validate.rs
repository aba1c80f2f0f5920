//! Field validation shared by the domain types: every error names the field and says why.

/// An input field that is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// The field, as named in the API (e.g. `schedule.expr`).
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FieldError {
    /// A new error for `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Checks that `value` has between `min` and `max` characters, none of them NUL (PostgreSQL
/// cannot store a NUL in text: it would fail the write instead of naming the field).
pub fn check_len(field: &str, value: &str, min: usize, max: usize) -> Result<(), FieldError> {
    if value.contains('\0') {
        return Err(FieldError::new(field, "must not contain NUL characters"));
    }
    let n = value.chars().count();
    if n < min {
        return Err(FieldError::new(
            field,
            if min == 1 {
                "must not be empty".to_owned()
            } else {
                format!("must have at least {min} characters")
            },
        ));
    }
    if n > max {
        return Err(FieldError::new(
            field,
            format!("must have at most {max} characters (has {n})"),
        ));
    }
    Ok(())
}

/// Checks a short machine name — a tenant, an app, a node group: 1–63 of `a-z`, `0-9`, `-`,
/// `_`, starting with a letter or digit. Never a dot: the app key is `<tenant>.<app>`. The schema
/// holds the same rule (migration 0002).
pub fn check_slug(field: &str, value: &str) -> Result<(), FieldError> {
    check_len(field, value, 1, 63)?;
    let mut chars = value.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok =
        chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if first_ok && rest_ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!(
                "{value:?} is not a valid name: use lower-case letters, digits, '-' and '_', starting with a letter or digit"
            ),
        ))
    }
}

/// Checks an executor's base URL: `http` or `https`, a host, an optional port and path, and
/// nothing else. User-info, a query or a fragment would be carried into every signed request
/// the engine sends there (or change what is signed), so they are refused.
pub fn check_base_url(field: &str, value: &str) -> Result<(), FieldError> {
    let bad = |why: &str| FieldError::new(field, format!("{value:?} {why}"));
    if !(value.starts_with("http://") || value.starts_with("https://")) {
        return Err(bad("must start with http:// or https://"));
    }
    let url = reqwest::Url::parse(value).map_err(|e| bad(&format!("is not a URL: {e}")))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not contain user-info (user:password@)"));
    }
    if url.query().is_some() || value.contains('?') {
        return Err(bad("must not contain a query (?...)"));
    }
    if url.fragment().is_some() || value.contains('#') {
        return Err(bad("must not contain a fragment (#...)"));
    }
    Ok(())
}

/// Checks a user name: 1–100 of `A-Z a-z 0-9 . _ @ + -` (an e-mail address fits). The schema
/// holds the same rule (migration 0002).
pub fn check_username(field: &str, value: &str) -> Result<(), FieldError> {
    check_len(field, value, 1, 100)?;
    let ok = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '+' | '-'));
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("{value:?} is not a valid user name: use letters, digits and . _ @ + -"),
        ))
    }
}

/// Checks a task name: 1–100 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit (no
/// spaces: task names travel in command lines, task files, logs and run requests). The schema
/// holds the same rule for new names (migration 0006).
pub fn check_task_name(field: &str, value: &str) -> Result<(), FieldError> {
    check_len(field, value, 1, 100)?;
    let mut chars = value.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if first_ok && rest_ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!(
                "{value:?} is not a valid task name: use letters, digits, '.', '_' and '-', starting with a letter or digit"
            ),
        ))
    }
}

/// Checks that an optional number lies in `min..=max`.
pub fn check_range(field: &str, value: i64, min: i64, max: i64) -> Result<(), FieldError> {
    if value < min || value > max {
        Err(FieldError::new(
            field,
            format!("must be between {min} and {max} (is {value})"),
        ))
    } else {
        Ok(())
    }
}

/// The most JSON a task's or a run's parameters may hold.
pub const MAX_PARAMS_BYTES: usize = 256 * 1024;

/// Checks parameters (`field`): at most [`MAX_PARAMS_BYTES`] of JSON, and no NUL character in
/// a string or a key (PostgreSQL cannot store one in `jsonb`: the write would fail instead of
/// naming the field).
pub fn check_params(field: &str, params: &serde_json::Value) -> Result<(), FieldError> {
    let len = params.to_string().len();
    if len > MAX_PARAMS_BYTES {
        return Err(FieldError::new(
            field,
            format!("must be at most 256 KiB of JSON (is {len} bytes)"),
        ));
    }
    if has_nul(params) {
        return Err(FieldError::new(
            field,
            "must not contain NUL characters (\\u0000) in a value or a key",
        ));
    }
    Ok(())
}

/// Whether a string or a key of `value` holds a NUL character.
pub fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// Replaces every NUL character in the strings and keys of `value` with U+FFFD: what an
/// executor reports (outputs, errors, logs, progress, alarms) is stored as it came, less the one
/// character PostgreSQL cannot store, rather than refused and lost.
pub fn replace_nul(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) if s.contains('\0') => *s = s.replace('\0', "\u{FFFD}"),
        serde_json::Value::Array(items) => items.iter_mut().for_each(replace_nul),
        serde_json::Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, v)| (k.replace('\0', "\u{FFFD}"), v))
                    .collect();
            }
            map.values_mut().for_each(replace_nul);
        }
        _ => {}
    }
}

/// `text` cut to at most `max` characters, the cut marked by how many more there were (the
/// mark counts toward `max`). Shorter text comes back as it is, not copied.
pub fn clip_chars(text: impl Into<String>, max: usize) -> String {
    let text = text.into();
    let Some((cut, _)) = text.char_indices().nth(max) else {
        return text;
    };
    let total = text.chars().count();
    let mark = |kept: usize| format!("… ({} more characters)", total - kept);
    let room = max.saturating_sub(mark(0).chars().count());
    let end = text.char_indices().nth(room).map_or(cut, |(i, _)| i);
    let kept = text[..end].chars().count();
    format!("{}{}", &text[..end], mark(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipped_text_stays_within_its_bound_and_says_what_was_cut() {
        assert_eq!(clip_chars("short", 10), "short");
        assert_eq!(clip_chars("exactly10!", 10), "exactly10!");
        let long = "é".repeat(10_000);
        let clipped = clip_chars(&long, 1000);
        assert!(
            clipped.chars().count() <= 1000,
            "{}",
            clipped.chars().count()
        );
        let kept = clipped.chars().take_while(|c| *c == 'é').count();
        assert!(clipped.ends_with(&format!("… ({} more characters)", 10_000 - kept)));
        assert!(kept > 950);
    }

    #[test]
    fn slug_rules_name_the_field() {
        assert!(check_slug("name", "acme-01").is_ok());
        let err = check_slug("name", "Acme").unwrap_err();
        assert_eq!(err.field, "name");
        assert!(check_slug("name", "-x").is_err());
        assert!(check_slug("name", "").unwrap_err().reason.contains("empty"));
        assert!(check_slug("name", &"a".repeat(64)).is_err());
    }

    #[test]
    fn base_url_is_scheme_host_port_and_path_only() {
        for ok in [
            "http://10.0.0.5:9010",
            "https://jobs.example.com/mthpt-prefix",
            "http://[::1]:8080/",
        ] {
            assert_eq!(check_base_url("base_url", ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("http://10.0.0.5:9010/?x=1", "query"),
            ("http://10.0.0.5:9010/p?", "query"),
            ("http://10.0.0.5:9010/#top", "fragment"),
            ("http://user:pw@10.0.0.5:9010", "user-info"),
            ("http://user@10.0.0.5:9010", "user-info"),
            ("ftp://10.0.0.5", "http:// or https://"),
            ("10.0.0.5:9010", "http:// or https://"),
            ("http://exa mple.com", "is not a URL"),
        ] {
            let err = check_base_url("base_url", bad).expect_err(bad);
            assert_eq!(err.field, "base_url");
            assert!(err.reason.contains(why), "{bad}: {}", err.reason);
        }
    }

    #[test]
    fn tenant_and_app_names_never_contain_a_dot() {
        assert!(check_slug("name", "acme.billing").is_err());
        assert!(check_slug("name", "acme_billing-2").is_ok());
    }

    #[test]
    fn user_names_are_letters_digits_and_a_few_signs() {
        assert!(check_username("username", "alice.smith+ops@example.com").is_ok());
        for bad in ["", "alice smith", "alice\n", "ali:ce", "élise"] {
            assert!(check_username("username", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn task_names_are_letters_digits_dots_underscores_and_dashes() {
        for ok in ["nightly-report", "Billing.Sync_v2", "7am", &"a".repeat(100)] {
            assert_eq!(check_task_name("name", ok), Ok(()), "{ok:?}");
        }
        for bad in [
            "",
            "nightly report",
            "-x",
            ".hidden",
            "_x",
            "a/b",
            "a:b",
            "tâche",
            "x\n",
            &"a".repeat(101),
        ] {
            let err = check_task_name("name", bad).expect_err(bad);
            assert_eq!(err.field, "name");
        }
    }

    #[test]
    fn text_with_a_nul_character_is_refused_naming_the_field() {
        let err = check_len("name", "ci\0token", 1, 100).unwrap_err();
        assert_eq!(err.field, "name");
        assert!(err.reason.contains("NUL"), "{}", err.reason);
    }

    #[test]
    fn range_check_reports_bounds() {
        let err = check_range("max_retries", 101, 0, 100).unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_retries: must be between 0 and 100 (is 101)"
        );
    }

    #[test]
    fn params_with_a_nul_in_a_value_or_a_key_are_refused_naming_the_field() {
        for bad in [
            serde_json::json!({"script": "echo a\u{0}b"}),
            serde_json::json!({"a\u{0}": 1}),
            serde_json::json!([["x", "\u{0}"]]),
        ] {
            let err = check_params("params", &bad).unwrap_err();
            assert_eq!(err.field, "params");
            assert!(err.reason.contains("NUL"), "{}", err.reason);
        }
        assert!(check_params("params", &serde_json::json!({"ok": [1, "two"]})).is_ok());
        let big = serde_json::json!({ "x": "y".repeat(MAX_PARAMS_BYTES) });
        assert!(
            check_params("params", &big)
                .unwrap_err()
                .reason
                .contains("256 KiB")
        );
    }

    #[test]
    fn nul_characters_reported_by_executors_become_replacement_characters() {
        let mut v = serde_json::json!({"out\u{0}": ["a\u{0}b", {"k": "\u{0}"}], "n": 1});
        replace_nul(&mut v);
        assert!(!has_nul(&v));
        assert_eq!(
            v,
            serde_json::json!({"out\u{FFFD}": ["a\u{FFFD}b", {"k": "\u{FFFD}"}], "n": 1})
        );
    }
}
