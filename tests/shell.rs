//! What the operator's shell meets, through the real binary and the real
//! shells (no root, no agent): `tollgate completion` scripts that bash (and
//! zsh and fish where installed) accept and that complete subcommands,
//! `tollgate man` pages for every subcommand, `-o jsonpath=` refused with
//! the parser's word when malformed, and the `kubectl-tollgate` plugin
//! against a stand-in `kubectl` that records what it is asked.
#![allow(clippy::disallowed_methods)] // the tests run the tollgate binary and shells.

use std::path::Path;
use std::process::{Command, Output};

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("run tollgate")
}

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// bash sources the script and completes `tollgate ob` to `observe` and
/// `tollgate get ` to its kinds.
#[test]
fn bash_completion_completes_subcommands_and_other_shells_parse_theirs() {
    let out = tollgate(&["completion", "bash"]);
    assert!(out.status.success(), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tollgate.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let complete =
        |line: &str| {
            let words: Vec<&str> = line.split(' ').collect();
            let probe =
                format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; \
             _tollgate tollgate '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" "),
            words.len() - 1,
            line.len(),
            words[words.len() - 1],
            words[words.len() - 2],
        );
            let out = Command::new("bash").args(["-c", &probe]).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
    assert_eq!(complete("tollgate ob").trim(), "observe");
    let kinds = complete("tollgate get ");
    for kind in ["policies", "endpoints", "fqdn", "skipped"] {
        assert!(kinds.lines().any(|l| l == kind), "{kind} not in {kinds}");
    }
    for (shell, check) in [("zsh", vec!["-n"]), ("fish", vec!["--no-execute"])] {
        if !installed(shell) {
            eprintln!("{shell} is not installed: its script is not parsed");
            continue;
        }
        let out = tollgate(&["completion", shell]);
        assert!(out.status.success());
        let file = dir.path().join(format!("tollgate.{shell}"));
        std::fs::write(&file, &out.stdout).unwrap();
        let parsed = Command::new(shell)
            .args(&check)
            .arg(&file)
            .output()
            .unwrap();
        assert!(parsed.status.success(), "{shell}: {parsed:?}");
    }
}

/// A page per command and nested subcommand, each a roff page naming its
/// command; `man -l` renders one where `man` is installed.
#[test]
fn man_writes_a_page_per_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = tollgate(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8_lossy(&out.stdout);
    for page in [
        "tollgate.1",
        "tollgate-run.1",
        "tollgate-status.1",
        "tollgate-observe.1",
        "tollgate-bundle.1",
        "tollgate-log-level.1",
        "tollgate-get-endpoints.1",
        "tollgate-completion.1",
    ] {
        let path = dir.path().join(page);
        assert!(
            listed.contains(&path.display().to_string()),
            "{page}: {listed}"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(".ie \\n(.g .ds Aq"), "{page} is not roff");
        let name = page.trim_end_matches(".1");
        assert!(text.contains(&format!(".TH {name} 1")), "{page}:\n{text}");
    }
    assert!(!listed.contains("-help.1"), "{listed}");
    if installed("man") {
        let rendered = Command::new("man")
            .args(["-l", "-P", "cat"])
            .arg(dir.path().join("tollgate-observe.1"))
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&rendered.stdout);
        assert!(text.contains("--verdict"), "{text}");
    }
    let page = tollgate(&["man"]);
    assert!(String::from_utf8_lossy(&page.stdout).contains(".TH tollgate 1"));
}

#[test]
fn a_malformed_jsonpath_is_refused_before_anything_is_asked() {
    let out = tollgate(&["get", "endpoints", "-o", "jsonpath={[*.endpoint}"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("jsonpath \"$[*.endpoint\""), "{stderr}");
    let out = tollgate(&["get", "endpoints", "-o", "tabel"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("expected table, wide, json, yaml or jsonpath=PATH"),
        "{out:?}"
    );
}

/// The plugin asks for the tollgate Pod on the node given (label and
/// field selector, the namespace) and execs `tollgate ARGS` in its
/// container; no Pod on the node is an error naming the node.
/// Mutation: `--field-selector` dropped from the script — the recorded
/// `get` lacks it and the test fails.
#[test]
fn kubectl_plugin_runs_the_command_in_the_pod_of_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    let fake = dir.path().join("kubectl");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$*\" >> {log}\n\
             case \"$*\" in *spec.nodeName=node-1*) [ \"$1\" = get ] && printf tollgate-abcde ;; esac\n\
             [ \"$1\" = exec ] && echo executed\nexit 0\n",
            log = log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kubectl-tollgate");
    let run = |args: &[&str]| {
        Command::new(&plugin)
            .args(args)
            .env("KUBECTL", &fake)
            .output()
            .unwrap()
    };
    let out = run(&["node-1", "status", "-o", "wide"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "executed\n");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "get pods -n kube-system -l app.kubernetes.io/name=tollgate \
             --field-selector spec.nodeName=node-1 -o jsonpath={.items[0].metadata.name}",
            "exec -i -n kube-system tollgate-abcde -c tollgate -- tollgate status -o wide",
        ]
    );
    let out = run(&["node-2", "status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("no tollgate Pod on node node-2 in namespace kube-system"),
        "{out:?}"
    );
    assert_eq!(run(&["node-1"]).status.code(), Some(2));
}
