#![allow(clippy::disallowed_methods)]
//! The docs are checked: `README.md` and every Markdown file under
//! `docs/`.
//!
//! - Their command examples are the binary's real output. A block marked
//!
//!   ````text
//!   <!-- readme-example: tollgate trace --policies rules/ --src 10.99.1.2 ... -->
//!   ```
//!   $ tollgate trace --policies rules/ --src 10.99.1.2 ...
//!   verdict: Allow
//!   ```
//!   ````
//!
//!   holds `$ ` and the command, then what it prints (stdout, then
//!   stderr), run from the repository root with this build's `tollgate`,
//!   offline and without root. The test fails on any difference;
//!   `UPDATE_README=1 cargo test --test readme` writes the current output
//!   into the file that holds the block.
//! - Blocks marked `<!-- readme-live: NAME -->` are a running agent's
//!   output: the end-to-end test `tests/netns/ops.rs` compares and
//!   rewrites them; this file only checks that each is marked once, where
//!   that test looks for it.
//! - The configuration reference (the YAML block after
//!   `<!-- config-defaults -->` in `docs/guide/configuration.md`) is the
//!   code's: it reads as the agent reads a file, gives the configuration
//!   the agent starts with when nothing is set, and writes out every key
//!   of every section.
//! - `docs/README.md`, the book's index, lists every file under `docs/`,
//!   and every relative Markdown link (and its `#anchor`) resolves.
//!
//! It owns only the marked blocks; it must never run a command that needs
//! root, the network or a running agent (the marker's command is checked
//! to be one of the offline subcommands, reading directories).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use tollgate::config::{AgentConfig, MachineDefaults};

const MARKER: &str = "<!-- readme-example: ";
const LIVE_MARKER: &str = "<!-- readme-live: ";
const CONFIG_MARKER: &str = "<!-- config-defaults -->";

/// Subcommands that read only their arguments (a policy directory) and
/// write nothing.
const OFFLINE: &[&str] = &["validate", "trace", "get", "diff"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir`, recursively, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(next) = todo.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `README.md` and every Markdown file under `docs/`.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    files.extend(
        files_under(&root().join("docs"))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    files
}

/// A path as the messages name it: relative to the repository.
fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

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

fn examples(name: &str, lines: &[&str]) -> Vec<Example> {
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix(MARKER) else {
            continue;
        };
        let command = rest
            .strip_suffix("-->")
            .unwrap_or_else(|| panic!("{name}:{}: marker not closed on its line", i + 1))
            .trim()
            .to_string();
        let open = i + 1;
        assert!(
            lines
                .get(open)
                .is_some_and(|l| l.trim_start().starts_with("```")),
            "{name}:{}: a fenced block must follow the marker",
            i + 1
        );
        let fence = lines[open];
        let indent = fence[..fence.len() - fence.trim_start().len()].to_string();
        let close = (open + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .unwrap_or_else(|| panic!("{name}:{}: the block is not closed", open + 1));
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
    // `diff` reads two directories here: never `live`, nor a git
    // revision (the history of the checkout is not the docs').
    let diff_of_directories = words[1] == "diff"
        && !words
            .iter()
            .any(|w| *w == "live" || w.starts_with("git:") || *w == "--inventory");
    assert!(
        words.contains(&"--policies") || words[1] == "validate" || diff_of_directories,
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

/// The file with every marked block holding the binary's output, the
/// number of blocks, and a report of each that differed.
fn refreshed(name: &str, text: &str) -> (String, usize, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let found = examples(name, &lines);
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
        let fresh = run(&root(), &example.command);
        if current != fresh {
            stale.push(format!(
                "{name}:{}: `{}`\n--- docs\n{current}+++ binary\n{fresh}",
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
    (updated.join("\n") + "\n", found.len(), stale)
}

#[test]
fn readme_examples_are_the_binarys_output() {
    let update = std::env::var_os("UPDATE_README").is_some();
    let mut count = 0;
    let mut stale = Vec::new();
    for path in doc_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let (updated, found, differ) = refreshed(&shown(&path), &text);
        count += found;
        if update && !differ.is_empty() {
            std::fs::write(&path, updated).unwrap();
        }
        stale.extend(differ);
    }
    if update {
        return;
    }
    assert!(count >= 4, "only {count} marked examples");
    assert!(
        stale.is_empty(),
        "examples in the docs differ from the binary's output (UPDATE_README=1 cargo test --test readme rewrites them):\n{}",
        stale.join("\n")
    );
}

#[test]
fn markers_are_found_and_a_stale_block_is_reported() {
    let text = "intro\n<!-- readme-example: tollgate validate rules/ -->\n```\n$ tollgate validate rules/\nold\n```\nend";
    let lines: Vec<&str> = text.lines().collect();
    let found = examples("test.md", &lines);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].command, "tollgate validate rules/");
    assert_eq!(found[0].indent, "");
    assert_eq!((found[0].open, found[0].close), (2, 5));
    let fresh = run(&root(), &found[0].command);
    assert!(
        fresh.starts_with("$ tollgate validate rules/\nvalid: "),
        "{fresh}"
    );
    assert_ne!(lines[3..5].join("\n") + "\n", fresh);
    let (updated, count, stale) = refreshed("test.md", text);
    assert_eq!(count, 1);
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(updated.contains(&fresh), "{updated}");
}

/// The live blocks `tests/netns/ops.rs` fills: each marked once in all
/// the docs, fenced, opening with the command it shows.
#[test]
fn live_blocks_are_marked_once_and_fenced() {
    let mut names = Vec::new();
    for path in doc_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let name = shown(&path);
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.trim().strip_prefix(LIVE_MARKER) else {
                continue;
            };
            let live = rest
                .strip_suffix(" -->")
                .expect("marker closed on its line");
            assert!(
                lines
                    .get(i + 1)
                    .is_some_and(|l| l.trim_start().starts_with("```")),
                "{name}:{}: a fenced block must follow the marker",
                i + 1
            );
            assert!(
                lines
                    .get(i + 2)
                    .is_some_and(|l| l.starts_with("$ tollgate ")),
                "{name}:{}: the block opens with the command",
                i + 2
            );
            names.push(live.to_string());
        }
    }
    names.sort_unstable();
    assert_eq!(names, ["get-endpoints", "status", "trace-verbose"]);
}

/// The YAML block after `<!-- config-defaults -->`, and its file.
fn config_reference() -> (PathBuf, String) {
    let path = root().join("docs/guide/configuration.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == CONFIG_MARKER)
        .unwrap_or_else(|| panic!("{}: no {CONFIG_MARKER}", shown(&path)));
    assert_eq!(
        lines.get(at + 1).map(|l| l.trim()),
        Some("```yaml"),
        "{}:{}: a ```yaml block must follow the marker",
        shown(&path),
        at + 1
    );
    let close = (at + 2..lines.len())
        .find(|&j| lines[j].trim_start().starts_with("```"))
        .expect("the block is closed");
    (path, lines[at + 2..close].join("\n") + "\n")
}

/// The `(section, key)` pairs a reference block writes out: a key at the
/// sections' indentation, or commented out there (`  # name: ...`, a key
/// whose default depends on the machine).
fn documented_keys(block: &str) -> BTreeSet<(String, String)> {
    let mut keys = BTreeSet::new();
    let mut section = String::new();
    for line in block.lines() {
        if let Some(name) = line.strip_suffix(':').filter(|n| is_key(n)) {
            section = name.to_string();
            continue;
        }
        let Some(rest) = line.strip_prefix("  ") else {
            continue;
        };
        let rest = rest.strip_prefix("# ").unwrap_or(rest);
        if let Some((key, _)) = rest.split_once(':').filter(|(k, _)| is_key(k)) {
            keys.insert((section.clone(), key.to_string()));
        }
    }
    keys
}

fn is_key(word: &str) -> bool {
    word.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && word.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The keys `AgentConfig` reads, section by section, as serde names them
/// when it refuses an unknown one (`expected one of `a`, `b``).
fn code_keys() -> BTreeSet<(String, String)> {
    let expected = |tree: serde_json::Value| -> Vec<String> {
        let error = serde_json::from_value::<AgentConfig>(tree)
            .expect_err("an unknown key is refused")
            .to_string();
        let list = error
            .split_once("expected")
            .unwrap_or_else(|| panic!("{error}"))
            .1;
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut keys = BTreeSet::new();
    for section in expected(serde_json::json!({"-": 0})) {
        for key in expected(serde_json::json!({ section.clone(): {"-": 0} })) {
            keys.insert((section.clone(), key));
        }
    }
    keys
}

/// With the machine's defaults given (the node name, and the core count
/// the block writes as `queues.count`), the block read as the agent reads
/// a configuration file is what the agent starts with when nothing is
/// set: the documented defaults cannot drift from the code's. The node
/// name depends on the machine and is written commented out.
#[test]
fn configuration_reference_is_the_default() {
    let (path, block) = config_reference();
    let tree: serde_json::Value = serde_saphyr::from_str(&block).unwrap();
    let cores = tree["queues"]["count"]
        .as_u64()
        .expect("queues.count written out") as u32;
    let machine = MachineDefaults {
        node_name: "node-1".into(),
        queues: cores,
    };
    let documented = AgentConfig::load(&machine, Some((&path, &block)), &[])
        .unwrap_or_else(|e| panic!("{}: the reference does not load: {e}", shown(&path)))
        .config;
    let default = AgentConfig::load(&machine, None, &[]).unwrap().config;
    assert_eq!(
        documented,
        default,
        "{}: the reference differs from the code's defaults",
        shown(&path)
    );
    let code = code_keys();
    assert!(code.len() > 40, "{code:?}");
    let written = documented_keys(&block);
    let missing: Vec<_> = code.difference(&written).collect();
    let unknown: Vec<_> = written.difference(&code).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{}: keys the code reads but the reference omits: {missing:?}; keys it writes that the code does not read: {unknown:?}",
        shown(&path)
    );
}

#[test]
fn documented_keys_are_read_at_the_sections_indentation() {
    let block = "node:\n  # name: x   # the host name\n  labels: {}\nfqdn:\n  minTtl: 5   # seconds\n                # trustedServers: not a key\n  resolvers: []\n";
    let keys: Vec<(String, String)> = documented_keys(block).into_iter().collect();
    let pair = |s: &str, k: &str| (s.to_string(), k.to_string());
    assert_eq!(
        keys,
        [
            pair("fqdn", "minTtl"),
            pair("fqdn", "resolvers"),
            pair("node", "labels"),
            pair("node", "name"),
        ]
    );
    assert!(code_keys().contains(&pair("verdictCache", "timeoutSeconds")));
}

/// The targets of the Markdown links of `text` (inline links and images,
/// outside code), with the line each is on.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code spans hold no links.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push((i + 1, target.to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation
/// but `-` and `_` dropped (code spans keep their text).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated one gets `-1`,
/// `-2`, … as GitHub numbers them).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}

/// Every relative link of `file` (its text given) whose file or anchor
/// does not exist.
fn broken_links(file: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for (line, target) in links(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap().join(path)
        };
        let name = format!("{}:{line}: ({target})", shown(file));
        if !resolved.exists() {
            broken.push(format!("{name}: no such file"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if resolved.extension().is_some_and(|e| e == "md") {
            let target_text = if path.is_empty() {
                text.to_string()
            } else {
                std::fs::read_to_string(&resolved).unwrap()
            };
            if !anchors(&target_text).contains(anchor) {
                broken.push(format!("{name}: no heading with that anchor"));
            }
        }
    }
    broken
}

#[test]
fn relative_links_in_the_docs_resolve() {
    let mut broken = Vec::new();
    for path in doc_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        broken.extend(broken_links(&path, &text));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_broken_link_or_anchor_is_reported() {
    let file = root().join("docs/README.md");
    let text = "# Top\n\n## Two words: `code` here\n\n[a](guide/running.md) [b](guide/nope.md) ![c](#two-words-code-here) [d](#nope)\n\n```\n[e](nowhere.md)\n```\n`[f](nowhere.md)` [g](https://example.com/x.md) [h](guide/running.md#commands) [i](guide/running.md#nope)\n";
    assert_eq!(
        slug("Lifecycle: restarts, upgrades and uninstall"),
        "lifecycle-restarts-upgrades-and-uninstall"
    );
    assert_eq!(slug("`tollgate run` — contract"), "tollgate-run--contract");
    let broken = broken_links(&file, text);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].contains("(guide/nope.md): no such file"));
    assert!(broken[1].contains("(#nope): no heading"));
    assert!(broken[2].contains("(guide/running.md#nope): no heading"));
}

/// `docs/history/` holds dated records of past work: no page that
/// describes current behaviour (the README, the guide, the design, the
/// development pages) sends a reader there.
#[test]
fn current_pages_do_not_link_into_history() {
    let history = root().join("docs/history");
    let mut found = Vec::new();
    for path in doc_files() {
        if path.starts_with(&history) || path == root().join("docs/README.md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, target) in links(&text) {
            let resolved = path
                .parent()
                .unwrap()
                .join(target.split('#').next().unwrap());
            if resolved.components().any(|c| c.as_os_str() == "history") {
                found.push(format!("{}:{line}: ({target})", shown(&path)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "links into docs/history/:\n{}",
        found.join("\n")
    );
}

/// Every file under `docs/` but the index itself is a link of the index.
#[test]
fn every_file_under_docs_is_in_the_index() {
    let docs = root().join("docs");
    let index = std::fs::read_to_string(docs.join("README.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&index)
        .into_iter()
        .map(|(_, target)| docs.join(target.split('#').next().unwrap()))
        .collect();
    let missing: Vec<String> = files_under(&docs)
        .into_iter()
        .filter(|f| *f != docs.join("README.md") && !listed.contains(f))
        .map(|f| shown(&f))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/README.md does not list: {missing:?}"
    );
}
