//! `tollgate bundle`: what a bug report needs, asked of the running agent
//! over its status socket — so it is the agent's namespace and process
//! whatever namespace it is run from — and written as files into a
//! directory, or a `.tar.gz` (by `tar`) on disk or stdout: the status
//! (text and JSON), the policies in force, the endpoints, the skipped
//! objects (Kubernetes mode), the latest decisions, the configuration and
//! command line, the log tail, `iptables-save`, `ip6tables-save`,
//! `ebtables-save`, `ipset list` of tollgate's sets and the versions. The
//! files hold the node's firewall rules: the directory is private (0700)
//! and the archive 0600.
#![allow(clippy::disallowed_methods)] // the bundle is named by the time; tar is run.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use super::render::{render_event, render_policies, render_status};
use super::{ask, unexpected, CommandError};
use crate::cli::{BundleArgs, GetFilter, GetOutput};
use crate::observe::ObserveFilter;
use crate::status::{Request, Response};

/// Decisions the bundle keeps from the agent's history.
const DECISIONS: usize = 1000;

/// Where the bundle goes.
enum Target {
    Directory(PathBuf),
    Archive(PathBuf),
    Stdout,
}

/// `tollgate bundle [PATH]`.
pub fn bundle(args: &BundleArgs) -> Result<ExitCode, CommandError> {
    let socket = args.socket.socket.as_path();
    let report = match ask(socket, &Request::Status)? {
        Response::Status(report) => report,
        other => return Err(unexpected(&other)),
    };
    let name = format!(
        "tollgate-bundle-{}-{}",
        report.node_name,
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
    let target = match args.path.as_deref() {
        None => Target::Archive(PathBuf::from(format!("{name}.tar.gz"))),
        Some(p) if p == Path::new("-") => Target::Stdout,
        Some(p) if is_archive(p) => Target::Archive(p.to_path_buf()),
        Some(p) => Target::Directory(p.to_path_buf()),
    };
    let files = collect(socket, &report)?;
    let failed =
        |what: &str, e: std::io::Error| CommandError::Usage(format!("bundle: {what}: {e}"));
    match &target {
        Target::Directory(dir) => {
            write_files(dir, &files).map_err(|e| failed(&dir.display().to_string(), e))?;
            eprintln!("wrote {} files into {}", files.len(), dir.display());
        }
        Target::Archive(_) | Target::Stdout => {
            let staging = Staging::new().map_err(|e| failed("staging directory", e))?;
            let dir = staging.0.join(&name);
            write_files(&dir, &files).map_err(|e| failed(&dir.display().to_string(), e))?;
            archive(&staging.0, &name, &target).map_err(|e| failed("tar", e))?;
            if let Target::Archive(path) = &target {
                eprintln!("wrote {} ({} files)", path.display(), files.len());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn is_archive(path: &Path) -> bool {
    let name = path.to_string_lossy();
    name.ends_with(".tar.gz") || name.ends_with(".tgz")
}

/// The bundle's files, by name, asked of the agent.
fn collect(
    socket: &Path,
    report: &crate::status::StatusReport,
) -> Result<Vec<(&'static str, String)>, CommandError> {
    let support = match ask(socket, &Request::Support)? {
        Response::Support(support) => support,
        other => return Err(unexpected(&other)),
    };
    let policies = match ask(socket, &Request::Policies)? {
        Response::Policies(list) => list,
        other => return Err(unexpected(&other)),
    };
    let endpoints = match ask(socket, &Request::Endpoints)? {
        Response::Endpoints(list) => list,
        other => return Err(unexpected(&other)),
    };
    // A policy directory skips nothing: the agent says so.
    let skipped = match ask(socket, &Request::Skipped) {
        Ok(Response::Skipped(list)) => json(&list),
        Ok(other) => return Err(unexpected(&other)),
        Err(CommandError::Usage(message)) => format!("{message}\n"),
        Err(other) => return Err(other),
    };
    let mut decisions = String::new();
    let request = Request::Observe {
        filter: ObserveFilter::default(),
        follow: false,
        last: DECISIONS,
    };
    crate::status::stream(socket, &request, false, |response| {
        if let Response::Event(event) = response {
            decisions.push_str(&render_event(&event));
            decisions.push('\n');
        }
        Ok(())
    })
    .map_err(|e| CommandError::Usage(format!("bundle: the decisions: {e}")))?;
    let mut versions = support.versions.join("\n");
    versions.push_str(&format!(
        "\ntollgate bundle (the client) {} (commit {})\n",
        env!("CARGO_PKG_VERSION"),
        crate::telemetry::metrics::COMMIT
    ));
    let policies_table = render_policies(&policies, &GetFilter::default(), GetOutput::Wide)?;
    Ok(vec![
        ("status.txt", render_status(report, true)),
        ("status.json", json(report)),
        ("policies.txt", policies_table),
        ("policies.json", json(&policies)),
        ("endpoints.json", json(&endpoints)),
        ("skipped.json", skipped),
        ("decisions.txt", decisions),
        ("config.txt", support.config.clone() + "\n"),
        ("command-line.txt", support.command_line.join(" ") + "\n"),
        ("log.txt", support.log.join("\n") + "\n"),
        ("iptables-save.txt", support.iptables_save.clone()),
        ("ip6tables-save.txt", support.ip6tables_save.clone()),
        ("ebtables-save.txt", support.ebtables_save.clone()),
        ("ipset-list.txt", support.ipsets.clone()),
        ("versions.txt", versions),
    ])
}

/// Pretty JSON, one file's worth.
fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// Creates `dir` (mode 0700; an existing one must be empty) and writes
/// the files into it.
fn write_files(dir: &Path, files: &[(&str, String)]) -> std::io::Result<()> {
    match std::fs::read_dir(dir).map(|mut entries| entries.next().is_none()) {
        Ok(false) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not empty",
            ))
        }
        Ok(true) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?,
        Err(_) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?,
    }
    for (name, contents) in files {
        std::fs::write(dir.join(name), contents)?;
    }
    Ok(())
}

/// `tar -czf` of `staging/name` into the archive, or onto stdout.
fn archive(staging: &Path, name: &str, target: &Target) -> std::io::Result<()> {
    let file = match target {
        Target::Archive(path) => path.as_os_str().to_owned(),
        _ => "-".into(),
    };
    let mut tar = Command::new("tar");
    tar.arg("-czf")
        .arg(&file)
        .arg("-C")
        .arg(staging)
        .arg(name)
        .stdin(Stdio::null());
    let status = tar.status()?;
    if !status.success() {
        return Err(std::io::Error::other(format!("tar exited with {status}")));
    }
    if let Target::Archive(path) = target {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    std::io::stdout().flush()
}

/// A private directory under the temporary directory, removed when
/// dropped.
struct Staging(PathBuf);

impl Staging {
    fn new() -> std::io::Result<Staging> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("tollgate-bundle.{}.{nanos}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Staging(path))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
