//! A tenant's allow-list of executor hosts: the hosts its wrappers may be reached at.
//!
//! An executor's `base_url` names the host the engine sends signed run requests to. A tenant
//! may restrict those hosts; an empty list allows any host. Entries are
//!
//! - a host name (`jobs-1.internal`), matched exactly (case does not matter);
//! - an IP literal (`10.0.0.5`, `::1` or `[::1]`), matched as an address;
//! - `*.` and a domain (`*.jobs.example.com`): any host *below* that domain
//!   (`a.jobs.example.com`, `a.b.jobs.example.com`), not the domain itself.
//!
//! Entries are stored normalised: host names in lower case, IP addresses in their canonical
//! text without brackets, duplicates dropped.

use std::net::IpAddr;

use crate::validate::FieldError;

/// The most entries one tenant's list may hold.
pub const MAX_EXECUTOR_HOSTS: usize = 100;

/// Checks and normalises a list of entries. An error names the entry (`executor_hosts[2]`).
pub fn normalize_hosts(field: &str, entries: &[String]) -> Result<Vec<String>, FieldError> {
    if entries.len() > MAX_EXECUTOR_HOSTS {
        return Err(FieldError::new(
            field,
            format!("at most {MAX_EXECUTOR_HOSTS} hosts (has {})", entries.len()),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let host = normalize_entry(&format!("{field}[{i}]"), entry)?;
        if !out.contains(&host) {
            out.push(host);
        }
    }
    Ok(out)
}

/// Checks and normalises one entry.
pub fn normalize_entry(field: &str, entry: &str) -> Result<String, FieldError> {
    let bad = |why: &str| {
        FieldError::new(
            field,
            format!("{entry:?} is not a host name, an IP address or a *.domain wildcard: {why}"),
        )
    };
    let unbracketed = entry
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .unwrap_or(entry);
    if let Ok(ip) = unbracketed.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    let (wildcard, domain) = match entry.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, entry),
    };
    check_domain(domain).map_err(|why| bad(&why))?;
    let domain = domain.to_ascii_lowercase();
    Ok(if wildcard {
        format!("*.{domain}")
    } else {
        domain
    })
}

/// Checks that `domain` is a DNS host name; the error says why not.
fn check_domain(domain: &str) -> Result<(), String> {
    if domain.is_empty() {
        return Err("it is empty".to_owned());
    }
    if domain.len() > 253 {
        return Err("longer than 253 characters".to_owned());
    }
    if !domain.is_ascii() {
        return Err("use the ASCII (xn--) form of an international name".to_owned());
    }
    if domain.contains('*') {
        return Err("a wildcard is only allowed as a leading \"*.\"".to_owned());
    }
    if domain.contains(['/', ':', '@', '?', '#']) {
        return Err("give the host alone, without scheme, port or path".to_owned());
    }
    let labels: Vec<&str> = domain.split('.').collect();
    for label in &labels {
        if label.is_empty() || label.len() > 63 {
            return Err("each dot-separated part must have 1 to 63 characters".to_owned());
        }
        if !label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err("use letters, digits, '-' and '_' between the dots".to_owned());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a part must not start or end with '-'".to_owned());
        }
    }
    // URL parsers read a host whose last part is numeric as an IPv4 address ("010.1" is
    // 8.0.0.1), so such an entry would never match the host it seems to name.
    if labels
        .last()
        .is_some_and(|l| l.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(
            "not a valid IP address, and a host name's last part cannot be all digits".to_owned(),
        );
    }
    Ok(())
}

/// The host of a base URL, normalised as list entries are (`None`: no host).
pub fn url_host(base_url: &str) -> Option<String> {
    let url = reqwest::Url::parse(base_url).ok()?;
    let host = url.host_str().filter(|h| !h.is_empty())?;
    let unbracketed = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some(match unbracketed.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host.trim_end_matches('.').to_ascii_lowercase(),
    })
}

/// Whether `list` (normalised entries) allows `host` (normalised as by [`url_host`]). An empty
/// list allows any host.
pub fn allows(list: &[String], host: &str) -> bool {
    list.is_empty()
        || list.iter().any(|entry| match entry.strip_prefix("*.") {
            Some(domain) => host
                .strip_suffix(domain)
                .is_some_and(|below| below.len() > 1 && below.ends_with('.')),
            None => entry == host,
        })
}

/// The host of `base_url` when `list` does not allow it (`None`: allowed).
pub fn refused_host(list: &[String], base_url: &str) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    match url_host(base_url) {
        Some(host) if allows(list, &host) => None,
        Some(host) => Some(host),
        None => Some(base_url.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Vec<String> {
        normalize_hosts(
            "executor_hosts",
            &entries.iter().map(|e| (*e).to_owned()).collect::<Vec<_>>(),
        )
        .expect("valid list")
    }

    #[test]
    fn entries_are_normalised_and_deduplicated() {
        assert_eq!(
            list(&[
                "Jobs-1.Internal",
                "jobs-1.internal",
                "[::1]",
                "0:0:0:0:0:0:0:1",
                "10.0.0.5",
                "*.Jobs.Example.com"
            ]),
            ["jobs-1.internal", "::1", "10.0.0.5", "*.jobs.example.com"]
        );
    }

    #[test]
    fn bad_entries_name_their_position() {
        for bad in [
            "",
            "http://jobs",
            "jobs:8080",
            "jobs/path",
            "jo bs",
            "*",
            "*.",
            "a.*.example.com",
            "*example.com",
            "-jobs.example.com",
            "jobs..example.com",
            "10.0.0.256",
            "010.1",
            "jöbs.example.com",
        ] {
            let err = normalize_hosts(
                "executor_hosts",
                &["ok.example.com".to_owned(), bad.to_owned()],
            )
            .expect_err(bad);
            assert_eq!(err.field, "executor_hosts[1]", "{bad:?}");
            assert!(
                err.reason.contains(&format!("{bad:?}")),
                "{bad:?}: {}",
                err.reason
            );
        }
        let many: Vec<String> = (0..=MAX_EXECUTOR_HOSTS)
            .map(|i| format!("h{i}.example.com"))
            .collect();
        assert_eq!(
            normalize_hosts("executor_hosts", &many)
                .expect_err("too many")
                .field,
            "executor_hosts"
        );
    }

    #[test]
    fn an_empty_list_allows_any_host() {
        assert!(allows(&[], "anything.example.com"));
        assert_eq!(refused_host(&[], "http://10.9.9.9:1"), None);
    }

    #[test]
    fn exact_entries_match_the_url_host_only() {
        let l = list(&["jobs-1.internal", "10.0.0.5", "::1"]);
        assert_eq!(refused_host(&l, "http://JOBS-1.internal:9010/prefix"), None);
        assert_eq!(refused_host(&l, "http://10.0.0.5:9010"), None);
        assert_eq!(refused_host(&l, "http://[::1]:9010"), None);
        assert_eq!(
            refused_host(&l, "http://10.0.0.6:9010").as_deref(),
            Some("10.0.0.6")
        );
        assert_eq!(
            refused_host(&l, "http://a.jobs-1.internal").as_deref(),
            Some("a.jobs-1.internal")
        );
        assert_eq!(
            refused_host(&l, "http://jobs-1.internal.evil.com").as_deref(),
            Some("jobs-1.internal.evil.com")
        );
    }

    #[test]
    fn wildcards_match_hosts_below_the_domain_only() {
        let l = list(&["*.jobs.example.com"]);
        assert_eq!(refused_host(&l, "https://a.jobs.example.com"), None);
        assert_eq!(refused_host(&l, "https://a.b.jobs.example.com"), None);
        for bad in [
            "https://jobs.example.com",
            "https://eviljobs.example.com",
            "https://jobs.example.com.evil.net",
        ] {
            assert!(refused_host(&l, bad).is_some(), "{bad}");
        }
    }
}
