//! How `tollgate diff` and `tollgate get matrix` print: text (like
//! kubectl), CSV, Markdown (a pull-request comment), Graphviz dot, and
//! JSON/YAML (the contract of `review::Report`, documented in
//! docs/guide/review.md). Formatting only: the rows and cells come
//! computed from `review`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::render::{json, table, yaml};
use super::CommandError;
use crate::cli::{DiffOutput, MatrixOutput};
use crate::review::{Change, ChangeKind, Effect, Mark, Matrix, Report, Uncertain};

/// The report in `output` (not `matrix`: see [`render_matrix_diff`]).
pub fn render_diff(report: &Report, output: DiffOutput) -> Result<String, CommandError> {
    Ok(match output {
        DiffOutput::Json => json(report)? + "\n",
        DiffOutput::Yaml => yaml(report)?,
        DiffOutput::Csv => diff_csv(report),
        DiffOutput::Md => diff_md(report),
        DiffOutput::Dot => diff_dot(report),
        DiffOutput::Text | DiffOutput::Matrix => diff_text(report),
    })
}

fn summary_line(report: &Report) -> String {
    let s = &report.summary;
    format!(
        "{} opened, {} closed, {} changed",
        s.opened, s.closed, s.changed
    )
}

/// `TCP 80,8000-8080 from source ports 1000-2000 (IPv6)`.
fn transport(change: &Change) -> String {
    let mut text = change.protocol.clone();
    if !change.ports.is_empty() {
        let _ = write!(text, " {}", change.ports.join(","));
    }
    if !change.source_ports.is_empty() {
        let _ = write!(text, " from source ports {}", change.source_ports.join(","));
    }
    if let Some(family) = &change.family {
        let _ = write!(text, " ({family})");
    }
    text
}

fn rule(effect: &Effect) -> String {
    let mut text = effect.rule.clone().unwrap_or_else(|| "no policy".into());
    if !effect.l7.is_empty() {
        let _ = write!(text, "; L7: {}", effect.l7.join(" and "));
    }
    text
}

fn uncertain(change: &Change) -> &'static str {
    match change.uncertain {
        Some(Uncertain::Dns) => "depends on DNS answers",
        Some(Uncertain::L7) => "depends on the request",
        None => "",
    }
}

/// Changes by Namespace (cluster-wide last), in the report's order.
fn by_namespace(report: &Report) -> Vec<(String, Vec<&Change>)> {
    let mut groups: Vec<(String, Vec<&Change>)> = Vec::new();
    for change in &report.changes {
        let ns = change
            .namespace
            .clone()
            .unwrap_or_else(|| "(cluster)".into());
        match groups.last_mut() {
            Some((last, list)) if *last == ns => list.push(change),
            _ => groups.push((ns, vec![change])),
        }
    }
    groups
}

fn diff_text(report: &Report) -> String {
    if report.changes.is_empty() {
        return "no change\n".into();
    }
    let mut out = String::new();
    for (ns, changes) in by_namespace(report) {
        let _ = writeln!(out, "Namespace {ns}:");
        for c in changes {
            let _ = writeln!(
                out,
                "  {:<7} {} -> {}  {}",
                c.kind().as_str(),
                c.from.join(", "),
                c.to.join(", "),
                transport(c)
            );
            let _ = writeln!(
                out,
                "          before: {:<6} {}",
                c.before.verdict,
                rule(&c.before)
            );
            let _ = writeln!(
                out,
                "          after:  {:<6} {}",
                c.after.verdict,
                rule(&c.after)
            );
            if c.uncertain.is_some() {
                let _ = writeln!(out, "          {}", uncertain(c));
            }
        }
    }
    let _ = writeln!(out, "{}", summary_line(report));
    out
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn diff_csv(report: &Report) -> String {
    let mut out = String::from(
        "namespace,change,from,to,protocol,ports,source_ports,family,before,before_rule,after,after_rule,uncertain\n",
    );
    for c in &report.changes {
        let fields = [
            c.namespace.clone().unwrap_or_default(),
            c.kind().as_str().into(),
            c.from.join(" "),
            c.to.join(" "),
            c.protocol.clone(),
            c.ports.join(" "),
            c.source_ports.join(" "),
            c.family.clone().unwrap_or_default(),
            c.before.verdict.clone(),
            rule(&c.before),
            c.after.verdict.clone(),
            rule(&c.after),
            c.uncertain
                .map(|u| match u {
                    Uncertain::Dns => "dns",
                    Uncertain::L7 => "l7",
                })
                .unwrap_or_default()
                .into(),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        let _ = writeln!(out, "{}", line.join(","));
    }
    out
}

/// Text for a Markdown table cell.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn diff_md(report: &Report) -> String {
    let mut out = format!("### tollgate diff: {}\n\n", summary_line(report));
    if report.changes.is_empty() {
        out.push_str("No connection changes.\n");
        return out;
    }
    for (ns, changes) in by_namespace(report) {
        let _ = writeln!(out, "#### Namespace `{ns}`\n");
        out.push_str("| Change | From | To | Traffic | Before | After |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for c in changes {
            let mark = match c.kind() {
                ChangeKind::Opened => "**opened**",
                ChangeKind::Closed => "**closed**",
                ChangeKind::Changed => "changed",
            };
            let mut traffic = transport(c);
            if c.uncertain.is_some() {
                let _ = write!(traffic, " ({})", uncertain(c));
            }
            let _ = writeln!(
                out,
                "| {mark} | {} | {} | {} | {}<br>{} | {}<br>{} |",
                md_cell(&c.from.join(", ")),
                md_cell(&c.to.join(", ")),
                md_cell(&traffic),
                c.before.verdict,
                md_cell(&rule(&c.before)),
                c.after.verdict,
                md_cell(&rule(&c.after)),
            );
        }
        out.push('\n');
    }
    out
}

/// A dot identifier, quoted.
fn dot_id(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The Namespace a name is drawn in (`namespace/name`), if any.
fn namespace_of(name: &str) -> Option<&str> {
    match name.split_once('/') {
        Some((ns, _)) if !name.starts_with("fqdn:") && !ns.contains([':', '.']) => Some(ns),
        _ => None,
    }
}

fn diff_dot(report: &Report) -> String {
    let mut nodes: BTreeMap<Option<&str>, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for c in &report.changes {
        for name in c.from.iter().chain(&c.to) {
            nodes.entry(namespace_of(name)).or_default().insert(name);
        }
    }
    let mut out = String::from("digraph tollgate_diff {\n  rankdir=LR;\n  node [shape=box];\n");
    for (ns, names) in &nodes {
        let indent = if ns.is_some() { "    " } else { "  " };
        if let Some(ns) = ns {
            let _ = writeln!(
                out,
                "  subgraph {} {{\n    label={};",
                dot_id(&format!("cluster_{ns}")),
                dot_id(ns)
            );
        }
        for name in names {
            let _ = writeln!(out, "{indent}{};", dot_id(name));
        }
        if ns.is_some() {
            out.push_str("  }\n");
        }
    }
    for c in &report.changes {
        let color = match c.kind() {
            ChangeKind::Opened => "green",
            ChangeKind::Closed => "red",
            ChangeKind::Changed => "orange",
        };
        let style = if c.uncertain.is_some() {
            ", style=dashed"
        } else {
            ""
        };
        let label = format!("{} {}->{}", transport(c), c.before.verdict, c.after.verdict);
        for from in &c.from {
            for to in &c.to {
                let _ = writeln!(
                    out,
                    "  {} -> {} [color={color}, label={}{style}];",
                    dot_id(from),
                    dot_id(to),
                    dot_id(&label)
                );
            }
        }
    }
    out.push_str("}\n");
    out
}

/// `tollgate get matrix` in `output`.
pub fn render_matrix(matrix: &Matrix, output: MatrixOutput) -> Result<String, CommandError> {
    let letter = |r: usize, c: usize, p: usize| matrix.cells[r][c][p].letter().to_string();
    Ok(match output {
        MatrixOutput::Json => json(matrix)? + "\n",
        MatrixOutput::Csv => {
            let mut out = String::from("from,to,port,verdict\n");
            for (r, from) in matrix.rows.iter().enumerate() {
                for (c, to) in matrix.columns.iter().enumerate() {
                    for (p, port) in matrix.ports.iter().enumerate() {
                        let fields = [from.clone(), to.clone(), port.clone(), letter(r, c, p)];
                        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
                        let _ = writeln!(out, "{}", line.join(","));
                    }
                }
            }
            out
        }
        MatrixOutput::Table | MatrixOutput::Md => grids(matrix, output == MatrixOutput::Md, letter),
        MatrixOutput::Dot => {
            let mut out =
                String::from("digraph tollgate_matrix {\n  rankdir=LR;\n  node [shape=box];\n");
            for (r, from) in matrix.rows.iter().enumerate() {
                for (c, to) in matrix.columns.iter().enumerate() {
                    let allowed: Vec<&str> = matrix
                        .ports
                        .iter()
                        .zip(&matrix.cells[r][c])
                        .filter(|(_, m)| matches!(m, Mark::Allow | Mark::AllowL7))
                        .map(|(p, _)| p.as_str())
                        .collect();
                    if r != c && !allowed.is_empty() {
                        let _ = writeln!(
                            out,
                            "  {} -> {} [label={}];",
                            dot_id(from),
                            dot_id(to),
                            dot_id(&allowed.join(","))
                        );
                    }
                }
            }
            out.push_str("}\n");
            out
        }
    })
}

/// What a matrix's letters mean.
const LEGEND: &str =
    "A allow, D drop, R reject, L allowed subject to L7 rules, ~ not all alike, - no such port";

/// One table per port (`md`: Markdown tables): a row per source, a column
/// per destination, `cell(row, column, port)` in each.
fn grids(matrix: &Matrix, md: bool, cell: impl Fn(usize, usize, usize) -> String) -> String {
    let mut out = format!("{LEGEND}\n");
    for (p, port) in matrix.ports.iter().enumerate() {
        let mut rows: Vec<Vec<String>> = vec![std::iter::once("FROM \\ TO".to_string())
            .chain(matrix.columns.iter().cloned())
            .collect()];
        for (r, from) in matrix.rows.iter().enumerate() {
            rows.push(
                std::iter::once(from.clone())
                    .chain((0..matrix.columns.len()).map(|c| cell(r, c, p)))
                    .collect(),
            );
        }
        if md {
            let _ = writeln!(out, "\n**{port}**\n");
            for (i, row) in rows.iter().enumerate() {
                let cells: Vec<String> = row.iter().map(|c| md_cell(c)).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
                if i == 0 {
                    let _ = writeln!(out, "|{}", "---|".repeat(row.len()));
                }
            }
        } else {
            let _ = write!(out, "\n{port}:\n{}", table(&rows));
        }
    }
    out
}

/// `tollgate diff -o matrix`: the matrix of the new side, a changed cell
/// written `before>after`.
pub fn render_matrix_diff(old: &Matrix, new: &Matrix) -> String {
    grids(new, false, |r, c, p| {
        let (before, after) = (old.cells[r][c][p].letter(), new.cells[r][c][p].letter());
        if before == after {
            after.to_string()
        } else {
            format!("{before}>{after}")
        }
    })
}
