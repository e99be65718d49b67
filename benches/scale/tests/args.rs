//! The simulation's command line: what it refuses, before it starts
//! anything (no root, no namespace, no server). Also what makes
//! `cargo test --workspace` build the `tollgate-scale` executable that
//! `scripts/test.sh` hands to `benches/scale.sh --bin-dir`.
#![allow(clippy::disallowed_methods)] // a test: it runs the program under test.

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-scale"))
        .args(args)
        .output()
        .expect("tollgate-scale runs");
    assert!(out.stdout.is_empty(), "nothing on stdout before a run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const FULL: [&str; 12] = [
    "--nodes",
    "20",
    "--pods",
    "600",
    "--tollgate",
    "/nonexistent/tollgate",
    "--work",
    "/nonexistent/work",
    "--netns-wide",
    "tgs-none-wide",
    "--netns-local",
    "tgs-none-local",
];

#[test]
fn missing_arguments_print_the_usage_and_exit_2() {
    let (code, err) = run(&[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with("tollgate-scale: usage: tollgate-scale --nodes N"),
        "{err}"
    );
    // Every argument but one still names the usage.
    let (code, err) = run(&FULL[..10]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("usage:"), "{err}");
}

#[test]
fn bad_values_are_named_and_exit_2() {
    for (args, expect) in [
        (vec!["--nodes"], "--nodes needs a value"),
        (vec!["--nodes", "many"], "--nodes: invalid float literal"),
        (vec!["--frobnicate", "1"], "unknown argument --frobnicate"),
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
    }
    let mut small = FULL;
    small[1] = "2";
    let (code, err) = run(&small);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("at least 3 Nodes and 200 Pods"), "{err}");
}
