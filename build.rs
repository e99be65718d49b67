//! Build script: stamps the binary with the commit it was built from
//! (`TOLLGATE_COMMIT`, for `tollgate_build_info` and `tollgate status`):
//! the `TOLLGATE_COMMIT` environment variable when set (packagers, builds
//! outside git), else `git rev-parse --short=12 HEAD`, else `unknown`.
//! It never touches the network.
#![allow(clippy::disallowed_methods)] // runs git once at build time.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=TOLLGATE_COMMIT");
    let commit = std::env::var("TOLLGATE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    // Rebuild when HEAD moves: HEAD itself, the branch it names, packed
    // refs; only files that exist (a missing one would rebuild every time).
    for path in [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])),
        git(&["rev-parse", "--git-path", "packed-refs"]),
    ]
    .into_iter()
    .flatten()
    .filter(|path| std::path::Path::new(path).exists())
    {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rustc-env=TOLLGATE_COMMIT={commit}");
}
