//! The layering the compiler does not hold by itself, checked without root:
//! - the core crate (`core/`) has no client, runtime, TLS or Prometheus
//!   crate in its dependency tree (read from `Cargo.lock`), so nothing in it
//!   can do I/O through them;
//! - the edge crate's top-level modules (`src/<module>`) import each other
//!   without a cycle: every `crate::<module>` path of a production file is
//!   an arrow, and a strongly connected component of more than one module
//!   fails the test, named with the files that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Crates the core must never depend on, directly or not.
const EDGE_ONLY: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "k8s-openapi",
    "tokio",
    "bollard",
    "rustls",
    "hyper",
    "prometheus-client",
    "notify",
    "netlink-sys",
    "socket2",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every package `name` depends on in `Cargo.lock`, transitively.
fn locked_tree(lock: &str, name: &str) -> BTreeSet<String> {
    // name -> its dependencies' names (a lockfile names a dependency "name"
    // or "name version" when several versions are locked).
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for package in lock.split("[[package]]").skip(1) {
        let Some(own) = package
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"').to_string())
        else {
            continue;
        };
        let list = package
            .split_once("dependencies = [")
            .map(|(_, rest)| rest.split(']').next().unwrap_or(""))
            .unwrap_or("");
        let names = list
            .lines()
            .filter_map(|l| l.trim().strip_prefix('"'))
            .map(|l| l.split([' ', '"']).next().unwrap_or("").to_string())
            .collect();
        deps.entry(own).or_default().extend::<Vec<String>>(names);
    }
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_string()];
    while let Some(next) = todo.pop() {
        for dep in deps.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

#[test]
fn the_core_depends_on_no_client_runtime_or_tls_crate() {
    let lock = fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let core = locked_tree(&lock, "tollgate-core");
    assert!(core.contains("serde"), "the lockfile was read: {core:?}");
    let edge = locked_tree(&lock, "tollgate");
    assert!(edge.contains("kube"), "the edge's tree has them: {edge:?}");
    let found: Vec<&&str> = EDGE_ONLY.iter().filter(|c| core.contains(**c)).collect();
    assert!(found.is_empty(), "tollgate-core depends on {found:?}");
}

/// The production `.rs` files under `dir` (test files and test folders
/// left out: a test may import what it likes).
fn production_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                production_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The part of a file before its inline `#[cfg(test)] mod tests`.
fn without_test_module(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// The edge's top-level modules: `src/<name>.rs` and `src/<name>/`.
fn edge_modules(src: &Path) -> BTreeSet<String> {
    fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_string_lossy().into_owned();
            (p.is_dir() || p.extension().is_some_and(|e| e == "rs")).then_some(name)
        })
        .filter(|n| n != "lib" && n != "main")
        .collect()
}

/// Arrows between top-level modules: (from, to) -> the files that draw it.
fn arrows(src: &Path) -> BTreeMap<(String, String), BTreeSet<String>> {
    let modules = edge_modules(src);
    let mut files = Vec::new();
    production_files(src, &mut files);
    let mut arrows: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        let from = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if !modules.contains(&from) {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        let code = without_test_module(&text);
        for (at, _) in code.match_indices("crate::") {
            let to: String = code[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if to != from && modules.contains(&to) {
                arrows
                    .entry((from.clone(), to))
                    .or_default()
                    .insert(relative.display().to_string());
            }
        }
    }
    arrows
}

/// The strongly connected components of more than one node (Tarjan).
fn cycles(nodes: &BTreeSet<String>, edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeSet<(String, String)>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        let next: Vec<&'a str> = s
            .edges
            .iter()
            .filter(|(a, _)| a == v)
            .map(|(_, b)| b.as_str())
            .collect();
        for w in next {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in nodes {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

#[test]
fn the_edge_modules_import_each_other_without_a_cycle() {
    let src = root().join("src");
    let arrows = arrows(&src);
    assert!(
        arrows.contains_key(&("agent".to_string(), "datapath".to_string())),
        "the imports were read: {arrows:?}"
    );
    let nodes = edge_modules(&src);
    let edges: BTreeSet<(String, String)> = arrows.keys().cloned().collect();
    let found = cycles(&nodes, &edges);
    let mut shown = String::new();
    for component in &found {
        shown += &format!("cycle among {}:\n", component.join(", "));
        for ((from, to), files) in &arrows {
            if component.contains(from) && component.contains(to) {
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                shown += &format!("  {from} -> {to}: {}\n", files.join(", "));
            }
        }
    }
    assert!(found.is_empty(), "{shown}");
}

#[test]
fn a_cycle_is_found_and_named() {
    let nodes: BTreeSet<String> = ["a", "b", "c", "d"].map(String::from).into();
    let edges: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .into();
    assert_eq!(cycles(&nodes, &edges), [["a", "b", "c"]]);
    let acyclic: BTreeSet<(String, String)> = [("a", "b"), ("b", "c")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .into();
    assert!(cycles(&nodes, &acyclic).is_empty());
}
