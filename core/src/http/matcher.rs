//! Antrea `http` rule matching. An absent or empty field matches anything;
//! `method` is compared exactly, ignoring case; `host` ignoring case, with
//! the port compared only when the pattern names one; `path` is matched
//! against the normalized path plus query. In `host` and `path`, `*`
//! matches any run of characters: a leading `*` means "ends with", a
//! trailing one "starts with", both "contains", none "exact" (Antrea's
//! meanings); a `*` elsewhere is a wildcard too (a documented superset).

use super::request::RequestHead;
use crate::fqdn::glob_match;
use crate::model::HttpProtocol;

/// One `http` rule, with its patterns prepared for matching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRule {
    method: Option<String>,
    host: Option<HostPattern>,
    path: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct HostPattern {
    /// Lower-case, without brackets, trailing dot or port.
    name: String,
    port: Option<u16>,
}

impl HttpRule {
    pub fn new(rule: &HttpProtocol) -> HttpRule {
        let present = |field: &Option<String>| {
            field
                .as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        HttpRule {
            method: present(&rule.method),
            host: present(&rule.host).map(|h| HostPattern::new(&h)),
            path: present(&rule.path),
        }
    }

    /// Whether `request` is allowed by this rule.
    pub fn matches(&self, request: &RequestHead) -> bool {
        self.mismatch(request).is_none()
    }

    /// The first field (method, host, path) `request` fails, with what
    /// the rule takes there; `None` when the rule allows it.
    pub fn mismatch(&self, request: &RequestHead) -> Option<HttpMismatch> {
        let method = self
            .method
            .as_ref()
            .filter(|m| !m.eq_ignore_ascii_case(&request.method));
        if let Some(method) = method {
            return Some(HttpMismatch {
                field: "method",
                wanted: method.clone(),
            });
        }
        let host = self.host.as_ref().filter(|pattern| {
            !request.host.as_deref().is_some_and(|host| {
                glob_match(pattern.name.as_bytes(), host.as_bytes())
                    && pattern.port.is_none_or(|port| request.port == Some(port))
            })
        });
        if let Some(pattern) = host {
            let wanted = match pattern.port {
                Some(port) => format!("{}:{port}", pattern.name),
                None => pattern.name.clone(),
            };
            return Some(HttpMismatch {
                field: "host",
                wanted,
            });
        }
        let path = self
            .path
            .as_ref()
            .filter(|p| !glob_match(p.as_bytes(), request.path.as_bytes()));
        path.map(|path| HttpMismatch {
            field: "path",
            wanted: path.clone(),
        })
    }
}

/// The field of an `http` entry a request fails, and the entry's value
/// there (the pattern as it is matched: a host lower-case, without its
/// trailing dot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpMismatch {
    /// `method`, `host` or `path`.
    pub field: &'static str,
    pub wanted: String,
}

impl HostPattern {
    fn new(raw: &str) -> HostPattern {
        let raw = raw.to_ascii_lowercase();
        let (name, port) = split_port(&raw);
        let name = name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .unwrap_or(name);
        HostPattern {
            name: name.strip_suffix('.').unwrap_or(name).to_owned(),
            port,
        }
    }
}

/// Splits `name:port` when the suffix is a port number. A bare IPv6
/// literal (several colons, no brackets) has no port.
fn split_port(raw: &str) -> (&str, Option<u16>) {
    let Some((name, port)) = raw.rsplit_once(':') else {
        return (raw, None);
    };
    let bracketed = name.starts_with('[') && name.ends_with(']');
    if !bracketed && name.contains(':') {
        return (raw, None);
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return (raw, None);
    }
    match port.parse::<u16>() {
        Ok(port) => (name, Some(port)),
        Err(_) => (raw, None),
    }
}

/// Whether `rule` allows `request`.
pub fn matches(rule: &HttpProtocol, request: &RequestHead) -> bool {
    HttpRule::new(rule).matches(request)
}

/// Whether any of the alternatives allows `request`. No alternatives
/// allow nothing (an L7 rule always lists at least one; `http: {}` is the
/// alternative that allows every request).
pub fn decide(rules: &[HttpProtocol], request: &RequestHead) -> bool {
    rules.iter().any(|rule| matches(rule, request))
}
