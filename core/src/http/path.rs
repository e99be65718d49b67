//! Request-target normalization: the form of the path that rules are
//! matched against, chosen so a server cannot read a request as a different
//! path than tollgate did. Unreserved characters are percent-decoded, other
//! escapes get upper-case hex, `.`/`..` segments are resolved (RFC 3986
//! §5.2.4), runs of `/` collapse. Encoded `/` or `\`, a literal `\`, NUL,
//! fragments and dot segments with path parameters (`..;x`, `.;`) are
//! refused: servers disagree on them.

use super::error::Malformed;

/// Normalizes an origin-form target (`/path?query`); the query is kept
/// verbatim after the normalized path.
pub(super) fn normalize_target(target: &str) -> Result<String, Malformed> {
    if target.contains('#') {
        return Err(Malformed::AmbiguousPath);
    }
    let (path, query) = match target.find('?') {
        Some(i) => target.split_at(i),
        None => (target, ""),
    };
    let decoded = decode_unreserved(path)?;
    if decoded.split('/').any(is_dot_segment_with_parameters) {
        return Err(Malformed::AmbiguousPath);
    }
    let mut out = remove_dot_segments(&decoded);
    out.push_str(query);
    Ok(out)
}

fn decode_unreserved(path: &str) -> Result<String, Malformed> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = bytes.get(i + 1).and_then(|b| hex(*b));
                let lo = bytes.get(i + 2).and_then(|b| hex(*b));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(Malformed::InvalidPercentEncoding);
                };
                let value = hi << 4 | lo;
                if matches!(value, b'/' | b'\\' | 0) {
                    return Err(Malformed::AmbiguousPath);
                }
                if value.is_ascii_alphanumeric() || matches!(value, b'-' | b'.' | b'_' | b'~') {
                    out.push(char::from(value));
                } else {
                    out.push('%');
                    out.push(char::from(HEX_UPPER[usize::from(hi)]));
                    out.push(char::from(HEX_UPPER[usize::from(lo)]));
                }
                i += 3;
            }
            b'\\' => return Err(Malformed::AmbiguousPath),
            _ => {
                // Copy the whole run up to the next byte of interest, so
                // multi-byte UTF-8 characters stay intact.
                let end = bytes[i..]
                    .iter()
                    .position(|b| matches!(b, b'%' | b'\\'))
                    .map_or(bytes.len(), |n| i + n);
                out.push_str(&path[i..end]);
                i = end;
            }
        }
    }
    Ok(out)
}

/// A segment that is `.` or `..` once its path parameters are cut off
/// (`..;jsessionid=1`, `.;`). Servlet containers (Tomcat, Jetty) strip the
/// parameters and then resolve the dot segment; nginx and most others keep
/// `..;` as a name. Either reading would let a rule be matched against a
/// path the server does not serve, e.g. `/api/v2/..;/admin`.
fn is_dot_segment_with_parameters(segment: &str) -> bool {
    segment
        .split_once(';')
        .is_some_and(|(name, _)| matches!(name, "." | ".."))
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

pub(super) fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Resolves `.` and `..`, drops empty segments; `..` above the root stays
/// at the root. A trailing `/`, `/.` or `/..` leaves a trailing slash.
fn remove_dot_segments(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    for segment in path.split('/') {
        trailing_slash = matches!(segment, "" | "." | "..");
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    let mut out = String::with_capacity(path.len().max(1));
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() || trailing_slash {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_as_documented() {
        for (raw, want) in [
            ("/", "/"),
            ("/api/v2/users", "/api/v2/users"),
            ("/api//v2///users/", "/api/v2/users/"),
            ("/api/./v2/../v1/x", "/api/v1/x"),
            ("/../../etc/passwd", "/etc/passwd"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/%61pi/%7Euser/%2e%2e/x", "/api/x"),
            ("/a%2ab%c3%a9", "/a%2Ab%C3%A9"),
            ("/search?q=a/../b&x=%2F", "/search?q=a/../b&x=%2F"),
            ("/caf\u{e9}/men\u{fc}", "/caf\u{e9}/men\u{fc}"),
            // Parameters on other segments, and `;` after the query, are
            // data to every server.
            ("/a;v=1/b;w/../c", "/a;v=1/c"),
            ("/a/...;x", "/a/...;x"),
            ("/a/..%3B/b", "/a/..%3B/b"),
            ("/a?x=/..;/", "/a?x=/..;/"),
        ] {
            assert_eq!(normalize_target(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn refuses_ambiguous_targets() {
        for raw in [
            "/a%2F..%2Fadmin",
            "/a%5c",
            "/a\\b",
            "/a%00",
            "/a#frag",
            // Dot segments with path parameters: `..` to a servlet
            // container, a name to nginx.
            "/api/v2/..;/admin",
            "/api/v2/x/..;/../../admin",
            "/api/v2/%2e%2e;x=1/admin",
            "/api/v2/.;/x",
            "/..;",
        ] {
            assert_eq!(
                normalize_target(raw),
                Err(Malformed::AmbiguousPath),
                "{raw}"
            );
        }
        for raw in ["/a%", "/a%4", "/a%zz"] {
            assert_eq!(
                normalize_target(raw),
                Err(Malformed::InvalidPercentEncoding),
                "{raw}"
            );
        }
    }
}
