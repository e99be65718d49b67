#![allow(clippy::disallowed_methods)]
//! The README's command examples are the binary's real output. A block
//! marked
//!
//! ````text
//! <!-- readme-example: tollgate trace --policies rules/ --src 10.99.1.2 ... -->
//! ```
//! $ tollgate trace --policies rules/ --src 10.99.1.2 ...
//! verdict: Allow
//! ```
//! ````
//!
//! holds `$ ` and the command, then what it prints (stdout, then stderr),
//! run from the repository root with this build's `tollgate`, offline and
//! without root. The test fails on any difference; `UPDATE_README=1
//! cargo test --test readme` writes the current output into README.md.
//!
//! It owns only the marked blocks; it must never run a command that needs
//! root, the network or a running agent (the marker's command is checked
//! to be one of the offline subcommands). Blocks marked `<!-- readme-live:
//! NAME -->` are a running agent's output: the end-to-end test
//! `tests/netns/ops.rs` compares and rewrites them; this file only checks
//! that each is where that test looks for it.

use std::path::Path;
use std::process::Command;

const MARKER: &str = "<!-- readme-example: ";

/// Subcommands that read only their arguments (a policy directory) and
/// write nothing.
const OFFLINE: &[&str] = &["validate", "trace", "get"];

/// One marked example: where its fenced block is and what it runs.
struct Example {
    command: String,
    /// The fence's indentation (a block inside a list item), which every
    /// line of the block carries.
    indent: String,
    /// Line indices of the opening and closing fences.
    open: usize,
    close: usize,
}

fn examples(lines: &[&str]) -> Vec<Example> {
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix(MARKER) else {
            continue;
        };
        let command = rest
            .strip_suffix("-->")
            .unwrap_or_else(|| panic!("README.md:{}: marker not closed on its line", i + 1))
            .trim()
            .to_string();
        let open = i + 1;
        assert!(
            lines
                .get(open)
                .is_some_and(|l| l.trim_start().starts_with("```")),
            "README.md:{}: a fenced block must follow the marker",
            i + 1
        );
        let fence = lines[open];
        let indent = fence[..fence.len() - fence.trim_start().len()].to_string();
        let close = (open + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .unwrap_or_else(|| panic!("README.md:{}: the block is not closed", open + 1));
        found.push(Example {
            command,
            indent,
            open,
            close,
        });
    }
    found
}

/// What the block of `command` must hold.
fn run(root: &Path, command: &str) -> String {
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[0], "tollgate", "{command}: only tollgate commands");
    assert!(
        OFFLINE.contains(&words[1]),
        "{command}: not an offline subcommand ({OFFLINE:?})"
    );
    assert!(
        words.contains(&"--policies") || words[1] == "validate",
        "{command}: must read a policy directory, not a running agent"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(&words[1..])
        .current_dir(root)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let mut text = format!("$ {command}\n");
    text.push_str(&String::from_utf8(output.stdout).unwrap());
    text.push_str(&String::from_utf8(output.stderr).unwrap());
    assert!(
        output.status.code().is_some_and(|c| c <= 1),
        "{command}: exit status {:?}:\n{text}",
        output.status
    );
    text
}

#[test]
fn readme_examples_are_the_binarys_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    let found = examples(&lines);

    let mut updated: Vec<String> = Vec::new();
    let mut stale = Vec::new();
    let mut next = 0;
    for example in &found {
        updated.extend(lines[next..=example.open].iter().map(|l| l.to_string()));
        let current = lines[example.open + 1..example.close]
            .iter()
            .map(|l| l.strip_prefix(example.indent.as_str()).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n";
        let fresh = run(root, &example.command);
        if current != fresh {
            stale.push(format!(
                "README.md:{}: `{}`\n--- README\n{current}+++ binary\n{fresh}",
                example.open, example.command
            ));
        }
        updated.extend(fresh.lines().map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{}{l}", example.indent)
            }
        }));
        next = example.close;
    }
    updated.extend(lines[next..].iter().map(|l| l.to_string()));

    if std::env::var_os("UPDATE_README").is_some() {
        std::fs::write(&path, updated.join("\n") + "\n").unwrap();
        return;
    }
    assert!(found.len() >= 4, "only {} marked examples", found.len());
    assert!(
        stale.is_empty(),
        "README examples differ from the binary's output (UPDATE_README=1 cargo test --test readme rewrites them):\n{}",
        stale.join("\n")
    );
}

#[test]
fn markers_are_found_and_a_stale_block_is_reported() {
    let text = "intro\n<!-- readme-example: tollgate validate rules/ -->\n```\n$ tollgate validate rules/\nold\n```\nend";
    let lines: Vec<&str> = text.lines().collect();
    let found = examples(&lines);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].command, "tollgate validate rules/");
    assert_eq!(found[0].indent, "");
    assert_eq!((found[0].open, found[0].close), (2, 5));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fresh = run(root, &found[0].command);
    assert!(
        fresh.starts_with("$ tollgate validate rules/\nvalid: "),
        "{fresh}"
    );
    assert_ne!(lines[3..5].join("\n") + "\n", fresh);
}

/// The live blocks `tests/netns/ops.rs` fills: each marked once, fenced,
/// opening with the command it shows.
#[test]
fn live_blocks_are_marked_once_and_fenced() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    let mut names = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix("<!-- readme-live: ") else {
            continue;
        };
        let name = rest
            .strip_suffix(" -->")
            .expect("marker closed on its line");
        assert!(
            lines
                .get(i + 1)
                .is_some_and(|l| l.trim_start().starts_with("```")),
            "README.md:{}: a fenced block must follow the marker",
            i + 1
        );
        assert!(
            lines
                .get(i + 2)
                .is_some_and(|l| l.starts_with("$ tollgate ")),
            "README.md:{}: the block opens with the command",
            i + 2
        );
        names.push(name);
    }
    names.sort_unstable();
    assert_eq!(names, ["get-endpoints", "status", "trace-verbose"]);
}
