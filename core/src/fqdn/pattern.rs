//! FQDN selectors as the spec defines them: an exact name, or a pattern
//! where `*` matches any run of characters, dots included (`*foobar.com`
//! matches `foobar.com` and `a.b.foobar.com`). Matching is case-insensitive
//! and ignores one trailing dot on either side. [`FqdnLookup`] is what the
//! classifier asks of whoever learned addresses for them. Pure: no DNS, no
//! clock.

use std::fmt;
use std::net::IpAddr;

/// A parsed `fqdn:` peer value, stored lower-case without a trailing dot.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FqdnPattern {
    pattern: String,
}

impl FqdnPattern {
    pub fn new(raw: &str) -> FqdnPattern {
        FqdnPattern {
            pattern: normalize(raw),
        }
    }

    /// The normalized pattern text (lower-case, no trailing dot).
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    pub fn is_wildcard(&self) -> bool {
        self.pattern.contains('*')
    }

    /// Whether `name` (any case, optional trailing dot) is selected.
    pub fn matches(&self, name: &str) -> bool {
        self.matches_normalized(&normalize(name))
    }

    /// [`FqdnPattern::matches`] for a name already lower-case without a
    /// trailing dot (as DNS answers are after parsing): no allocation.
    pub fn matches_normalized(&self, name: &str) -> bool {
        if !self.is_wildcard() {
            return self.pattern == name;
        }
        glob_match(self.pattern.as_bytes(), name.as_bytes())
    }
}

impl fmt::Display for FqdnPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

/// What the classifier asks about FQDN peers: did `pattern` resolve to `ip`
/// (in an answer still within its TTL)? Fed by the DNS snooper.
pub trait FqdnLookup {
    fn resolves_to(&self, pattern: &FqdnPattern, ip: IpAddr) -> bool;
}

/// No names learned: FQDN peers match nothing.
pub struct NoFqdn;

impl FqdnLookup for NoFqdn {
    fn resolves_to(&self, _: &FqdnPattern, _: IpAddr) -> bool {
        false
    }
}

/// A fixed list of (name, address) pairs, as `tollgate trace --fqdn` uses.
pub struct StaticFqdn(pub Vec<(String, IpAddr)>);

impl FqdnLookup for StaticFqdn {
    fn resolves_to(&self, pattern: &FqdnPattern, ip: IpAddr) -> bool {
        self.0
            .iter()
            .any(|(name, addr)| *addr == ip && pattern.matches(name))
    }
}

fn normalize(raw: &str) -> String {
    raw.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// `*`-only glob over bytes, iterative with single backtrack point (linear
/// in practice, no recursion, so hostile names cannot blow the stack).
/// Shared with the L7 HTTP matcher, whose patterns use the same `*`.
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_ignore_case_and_trailing_dot() {
        let p = FqdnPattern::new("WWW.Example.com.");
        assert!(p.matches("www.example.com"));
        assert!(p.matches("www.EXAMPLE.com."));
        assert!(!p.matches("example.com"));
        assert!(!p.matches("a.www.example.com"));
    }

    #[test]
    fn wildcard_matches_across_dots_as_the_spec_says() {
        let p = FqdnPattern::new("*foobar.com");
        assert!(p.matches("foobar.com"));
        assert!(p.matches("www.foobar.com"));
        assert!(p.matches("test.uswest.foobar.com"));
        assert!(p.matches("xfoobar.com"));
        assert!(!p.matches("foobar.org"));
        assert!(!p.matches("foobar.com.evil.net"));
    }

    #[test]
    fn dotted_wildcard_needs_a_label_before_the_suffix() {
        let p = FqdnPattern::new("*.example.test");
        assert!(p.matches("www.example.test"));
        assert!(p.matches("a.b.example.test"));
        assert!(!p.matches("example.test"));
    }

    #[test]
    fn wildcard_in_the_middle_and_end() {
        assert!(FqdnPattern::new("api.*.example.com").matches("api.eu.example.com"));
        assert!(FqdnPattern::new("example.*").matches("example.org"));
        assert!(!FqdnPattern::new("api.*.example.com").matches("web.eu.example.com"));
    }

    #[test]
    fn many_stars_do_not_explode() {
        let p = FqdnPattern::new(&"*a".repeat(50));
        let name = "a".repeat(200) + "b";
        assert!(!p.matches(&name));
    }
}
