//! "Did you mean …?": the known name nearest to a misspelt one (a kind, a
//! label key, a Pod's name), by edit distance, or none when nothing is
//! near enough to be a typo. Never decides anything and never changes a
//! name: it only words hints.

/// The candidate nearest to `given`, when it is near enough to be a typo
/// of it: at most a third of the longer name edited (at least one edit),
/// and not `given` itself. Ties go to the first candidate.
pub fn nearest<'a, I>(given: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        if candidate == given {
            continue;
        }
        let distance = strsim::damerau_levenshtein(given, candidate);
        let longest = given.chars().count().max(candidate.chars().count());
        let allowed = (longest / 3).max(1);
        // Case alone is one edit, however many letters differ.
        let distance = if candidate.eq_ignore_ascii_case(given) {
            1
        } else {
            distance
        };
        if distance <= allowed && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// ` (did you mean `x`?)` when a candidate is near `given`, else nothing.
pub fn did_you_mean<'a, I>(given: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    nearest(given, candidates).map_or_else(String::new, |n| format!(" (did you mean `{n}`?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_name_and_strangers_find_none() {
        let kinds = [
            "ClusterNetworkPolicy",
            "NetworkPolicy",
            "ClusterGroup",
            "Group",
            "Tier",
        ];
        assert_eq!(
            nearest("ClusterNetworkPolcy", kinds),
            Some("ClusterNetworkPolicy")
        );
        assert_eq!(
            nearest("clusternetworkpolicy", kinds),
            Some("ClusterNetworkPolicy")
        );
        assert_eq!(nearest("Teir", kinds), Some("Tier"));
        assert_eq!(nearest("Deployment", kinds), None);
        assert_eq!(nearest("Tier", kinds), None, "the name itself is no hint");
        let keys = ["app", "role", "kubernetes.io/metadata.name"];
        assert_eq!(nearest("apps", keys), Some("app"));
        assert_eq!(nearest("rol", keys), Some("role"));
        assert_eq!(nearest("tier", keys), None);
        assert_eq!(nearest("x", Vec::<&str>::new()), None);
        assert_eq!(did_you_mean("apps", keys), " (did you mean `app`?)");
        assert_eq!(did_you_mean("zone", keys), "");
    }
}
