//! The kernel as the datapath sees it: a [`Kernel`] reads the owned state
//! and runs one write of a [`Changes`]; [`reconcile`] and [`teardown`] are
//! the only write sequences (an agent that stops leaves its state in force;
//! only `tollgate cleanup` and `run --cleanup-on-exit` tear down). [`Iptables`] and [`learned_sets`] are the only
//! code that runs commands (`*-save`, `*-restore`, `ipset save`) and hands
//! the set writes to [`super::ipset_netlink`]; they never decide what to
//! write.
#![allow(clippy::disallowed_methods)] // the one place that runs iptables-restore and ipset.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use super::diff::Changes;
use super::ipset_netlink::{IpsetSocket, Revisions, SetCommand};
use super::state::TableKind::BridgeNat;
use super::state::{parse_ipset_save, Family, LearnedSet, State, Table, TableKind};
use super::transition::{steps, Step};
use super::{ApplyError, DatapathError};

/// Reads and writes tollgate's part of the netfilter state of one network
/// namespace.
pub trait Kernel {
    /// What tollgate owns right now.
    fn installed(&self) -> Result<State, DatapathError>;
    /// Runs the `step` part of `changes` as one write; a failed write is
    /// as atomic as the kernel makes it (see [`super::transition`]).
    fn write(&mut self, step: Step, changes: &Changes) -> Result<(), DatapathError>;
}

/// Brings the installed state to `desired`; returns whether anything had
/// to change. Running it twice in a row changes nothing the second time.
/// It always starts from what is installed now, so after a failure it is
/// simply called again.
pub fn reconcile(kernel: &mut impl Kernel, desired: &State) -> Result<bool, ApplyError> {
    let installed = kernel.installed().map_err(ApplyError::Read)?;
    let changes = Changes::between(desired, &installed);
    write_all(kernel, &changes)?;
    Ok(!changes.is_empty())
}

/// What a [`reconcile_from`] did.
#[derive(Debug)]
pub struct Reconciled {
    /// Whether anything was written.
    pub changed: bool,
    /// The owned state the kernel holds now ([`super::diff::written`]).
    pub state: State,
}

/// [`reconcile`] from `installed`, the state this agent's last write left
/// (read from the kernel when `None`), and returns the state this one
/// leaves, for the next. Reading the kernel (every table and set, each by
/// a `*-save` process) was most of the cost of a small change. Reconcile
/// never touches the members of learned sets, so what the workers add
/// meanwhile does not make `installed` stale; a change made by anyone
/// else is drift, which only a read sees (the agent's drift check, and
/// the retry of a failed write, which starts from `None`).
pub fn reconcile_from(
    kernel: &mut impl Kernel,
    installed: Option<State>,
    desired: State,
) -> Result<Reconciled, ApplyError> {
    let installed = known_or_read(kernel, installed)?;
    let changes = Changes::between(&desired, &installed);
    write_all(kernel, &changes)?;
    Ok(Reconciled {
        changed: !changes.is_empty(),
        state: super::diff::written(desired, &installed),
    })
}

/// `known`, the state this agent's last write left, or the kernel's
/// state read now when that is unknown.
pub fn known_or_read(kernel: &impl Kernel, known: Option<State>) -> Result<State, ApplyError> {
    match known {
        Some(state) => Ok(state),
        None => kernel.installed().map_err(ApplyError::Read),
    }
}

/// Removes every chain, jump and set tollgate owns, the learned (FQDN)
/// sets included, and nothing else (`tollgate cleanup`, `run
/// --cleanup-on-exit`). Returns what it removed (empty: nothing was
/// installed).
pub fn teardown(kernel: &mut impl Kernel) -> Result<Changes, ApplyError> {
    let installed = kernel.installed().map_err(ApplyError::Read)?;
    let changes = Changes::between(&State::default(), &installed);
    write_all(kernel, &changes)?;
    Ok(changes)
}

/// Runs the writes of `changes` in [`steps`] order, stopping at the first
/// that fails.
fn write_all(kernel: &mut impl Kernel, changes: &Changes) -> Result<(), ApplyError> {
    for step in steps(changes) {
        kernel
            .write(step, changes)
            .map_err(|source| ApplyError::Write { step, source })?;
    }
    Ok(())
}

/// The iptables flavour of this system; tollgate uses the matching
/// `*-save` / `*-restore` binaries so its rules land where `iptables` looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Nft,
    Legacy,
}

impl Backend {
    /// Reads `iptables -V` output (`iptables v1.8.9 (nf_tables)`).
    pub fn from_version(output: &str) -> Option<Backend> {
        if output.contains("(nf_tables)") {
            Some(Backend::Nft)
        } else if output.contains("(legacy)") {
            Some(Backend::Legacy)
        } else {
            None
        }
    }

    fn program(self, family: Family, action: &str) -> String {
        format!("{}-{action}", self.binary(family))
    }

    /// `iptables-nft`, `ip6tables-legacy`, …
    fn binary(self, family: Family) -> String {
        let flavour = match self {
            Backend::Nft => "nft",
            Backend::Legacy => "legacy",
        };
        format!("{}-{flavour}", family.command())
    }
}

/// The ebtables flavour tollgate writes bridge-port guards with: the nf_tables
/// one, which Debian's `iptables` package ships beside `iptables-nft`
/// whichever backend `iptables` uses. Its tables are the kernel's bridge
/// family, separate from every iptables table of either backend, so it
/// works the same on a legacy-iptables host; `ebtables-legacy` is a
/// package of its own that most hosts lack.
const EBTABLES: &str = "ebtables-nft";

/// The netfilter state of the current namespace, through the iptables,
/// ebtables and ipset commands.
#[derive(Clone, Copy, Debug)]
pub struct Iptables {
    backend: Backend,
    /// Whether [`EBTABLES`] is installed: without it no bridge port is
    /// guarded (and nothing of tollgate's can be in its tables).
    ebtables: bool,
    /// The set type revisions the `ipset` command knows (`ipset help`).
    ipset: Revisions,
}

impl Iptables {
    pub fn detect() -> Result<Iptables, DatapathError> {
        let version = run("iptables", &["-V"], None)?;
        let backend =
            Backend::from_version(&version).ok_or_else(|| DatapathError::UnknownBackend {
                version: version.trim().to_string(),
            })?;
        let ebtables = run(EBTABLES, &["-V"], None).is_ok();
        let ipset = Revisions::from_help(&run("ipset", &["help"], None)?).map_err(|kind| {
            DatapathError::UnknownSetType {
                kind: kind.to_string(),
            }
        })?;
        Ok(Iptables {
            backend,
            ebtables,
            ipset,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Whether bridge ports can be guarded (`ebtables-nft` is installed).
    pub fn bridge_guards(&self) -> bool {
        self.ebtables
    }

    /// `iptables-save -c -t raw` of both families and `ebtables-save -c`:
    /// the anti-spoofing rules with their packet counters
    /// ([`super::antispoof::drop_counters`]).
    pub fn antispoof_counters(&self) -> Result<super::antispoof::Reading, DatapathError> {
        let mut reading = super::antispoof::Reading::new();
        for family in Family::ALL {
            let save = read_save(&self.backend.program(family, "save"), &["-c", "-t", "raw"])?;
            reading.extend(super::antispoof::drop_counters(
                &save,
                super::antispoof::Place::Raw(family),
            ));
        }
        if self.ebtables {
            let save = read_save(&format!("{EBTABLES}-save"), &["-c", "-t", "nat"])?;
            reading.extend(super::antispoof::drop_counters(
                &save,
                super::antispoof::Place::Bridge,
            ));
        }
        Ok(reading)
    }

    /// The packet counters of the verdict cache's lookup rules, both
    /// families and both tables that decide (filter, mangle), by rule ([`super::cache::hit_counters`]).
    /// Read before every change of cache generation, so one `save` a
    /// family reads every table at once: two processes, not four.
    pub fn cache_hits(&self) -> Result<super::cache::HitReading, DatapathError> {
        let mut reading = super::cache::HitReading::new();
        for family in Family::ALL {
            let save = read_save(&self.backend.program(family, "save"), &["-c"])?;
            reading.extend(super::cache::hit_counters(&save, family));
        }
        Ok(reading)
    }
}

impl Iptables {
    /// Runs set writes over a netlink socket of their own, in order,
    /// stopping at the first the kernel refuses.
    fn write_sets(&self, commands: &[SetCommand]) -> Result<(), DatapathError> {
        let mut socket = IpsetSocket::open().map_err(DatapathError::SetSocket)?;
        socket
            .run(commands, self.ipset)
            .map_err(DatapathError::Sets)
    }
}

impl Kernel for Iptables {
    /// One `*-save` of every table a family (each table parsed from its
    /// section), `ipset save`, and the bridge's table: four processes
    /// where a save a table made eight. The drift check runs this every
    /// `datapath.driftCheckSeconds`.
    fn installed(&self) -> Result<State, DatapathError> {
        let save = |family| read_save(&self.backend.program(family, "save"), &[]);
        let (v4, v6) = (save(Family::V4)?, save(Family::V6)?);
        let mut state = State::parse(&v4, &v6, &run("ipset", &["save"], None)?);
        for (family, dump) in [(Family::V4, &v4), (Family::V6, &v6)] {
            *state.raw_mut(family) = Table::parse_in(dump, TableKind::Raw);
            *state.mangle_mut(family) = Table::parse_in(dump, TableKind::Mangle);
        }
        if self.ebtables {
            let save = read_save(&format!("{EBTABLES}-save"), &["-t", "nat"])?;
            state.bridge = Table::parse_in(&save, TableKind::BridgeNat);
        }
        Ok(state)
    }

    fn write(&mut self, step: Step, changes: &Changes) -> Result<(), DatapathError> {
        let (program, args, input) = match step {
            Step::PrepareSets => return self.write_sets(&changes.ipset_prepare()),
            Step::DestroySets => return self.write_sets(&changes.ipset_cleanup()),
            Step::Table(family) => (
                self.backend.program(family, "restore"),
                &["--noflush", "-w"][..],
                changes.iptables_restore_text(family),
            ),
            Step::Bridge => (
                format!("{EBTABLES}-restore"),
                &["--noflush"][..],
                changes.bridge.restore_text_in(BridgeNat),
            ),
        };
        run(&program, args, Some(&input.unwrap_or_default())).map(drop)
    }
}

/// The netfilter state of the namespace as `tollgate bundle` shows it:
/// each dump as the tool prints it, or the error in its place.
#[derive(Clone, Debug, Default)]
pub struct KernelDump {
    /// `iptables-save -c` and `ip6tables-save -c` of the backend in use.
    pub iptables_save: String,
    pub ip6tables_save: String,
    /// `ebtables-nft-save -c` (the bridge-port guards).
    pub ebtables_save: String,
    /// `ipset list` of every set whose name starts with `tollgate-`.
    pub ipsets: String,
    /// `iptables -V`, `ipset version`, one line each.
    pub versions: Vec<String>,
}

impl Iptables {
    /// Reads the dumps; a tool that fails leaves its error in its place.
    pub fn dump(&self) -> KernelDump {
        let text = |result: Result<String, DatapathError>| {
            result.unwrap_or_else(|error| format!("# {error}\n"))
        };
        let save = |family: Family| text(read_save(&self.backend.program(family, "save"), &["-c"]));
        let ebtables_save = match self.ebtables {
            true => text(read_save(&format!("{EBTABLES}-save"), &["-c"])),
            false => format!("# {EBTABLES} is not installed\n"),
        };
        let ipsets = match run("ipset", &["list", "-n"], None) {
            Ok(names) => names
                .lines()
                .filter(|name| name.starts_with("tollgate-"))
                .map(|name| text(run("ipset", &["list", name], None)))
                .collect::<Vec<_>>()
                .join("\n"),
            Err(error) => format!("# {error}\n"),
        };
        let version = |program: &str, args: &[&str]| {
            run(program, args, None).map_or_else(
                |error| format!("{program}: {error}"),
                |out| out.trim().to_string(),
            )
        };
        KernelDump {
            iptables_save: save(Family::V4),
            ip6tables_save: save(Family::V6),
            ebtables_save,
            ipsets,
            versions: vec![
                version(&self.backend.binary(Family::V4), &["-V"]),
                version("ipset", &["version"]),
            ],
        }
    }
}

/// The learned (FQDN) sets of the current namespace with their entries and
/// remaining timeouts, from `ipset save` (no iptables needed).
pub fn learned_sets() -> Result<BTreeMap<String, LearnedSet>, DatapathError> {
    Ok(parse_ipset_save(&run("ipset", &["save"], None)?).1)
}

/// How many times a `*-save` is read before its error stands.
const SAVE_READS: usize = 3;

/// Runs a `*-save` (no input); returns its dump. A dump whose rules named
/// a set that was destroyed before the tool asked the kernel for its name
/// is read again, up to [`SAVE_READS`] times: the tool reads the rules
/// first and each `--match-set`'s name afterwards, by the set's index, so
/// a generation switch that replaces a rule and destroys its set in
/// between (this agent's own, seen from the status server's bundle, or
/// another instance's) fails the whole dump, and a new one sees the rules
/// without that set. Any other failure is returned at once.
fn read_save(program: &str, args: &[&str]) -> Result<String, DatapathError> {
    let mut reads = 1;
    loop {
        match run(program, args, None) {
            Err(DatapathError::Failed { ref stderr, .. })
                if reads < SAVE_READS && raced_a_set(stderr) =>
            {
                reads += 1;
            }
            result => return result,
        }
    }
}

/// Whether a `*-save` failed because a set one of its rules names was
/// destroyed while it ran (libxt_set: `Set with index 15 in kernel
/// doesn't exist.`).
fn raced_a_set(stderr: &str) -> bool {
    stderr.contains("Set with index") && stderr.contains("in kernel doesn't exist")
}

/// Runs a command to completion, feeding `stdin`; returns its stdout.
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, DatapathError> {
    let command = format!("{program} {}", args.join(" "));
    let spawn_error = |source| DatapathError::Spawn {
        command: command.clone(),
        source,
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).map_err(spawn_error)?;
    }
    let output = child.wait_with_output().map_err(spawn_error)?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(DatapathError::Failed {
            command,
            status: output.status.to_string(),
            failing_input: stdin.and_then(|input| failing_line(&stderr, input)),
            stderr,
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The input line a restore command's error names: `iptables-restore`
/// says `Error occurred at line: 10`, `ipset` says `Error in line 3:`.
fn failing_line(stderr: &str, input: &str) -> Option<String> {
    let (_, after) = stderr.split_once("line")?;
    let digits: String = after
        .trim_start_matches([':', ' '])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let number: usize = digits.parse().ok()?;
    input
        .lines()
        .nth(number.checked_sub(1)?)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_save_raced_a_set_only_when_the_set_it_names_vanished() {
        assert!(raced_a_set(
            "ip6tables-save v1.8.9 (nf_tables): Set with index 15 in kernel doesn't exist.\n\nTry `ip6tables-save -h' or 'ip6tables-save --help' for more information."
        ));
        assert!(!raced_a_set(
            "iptables-save v1.8.9 (nf_tables): table `nat' does not exist"
        ));
        assert!(!raced_a_set(
            "ipset v7.19: The set with the given name does not exist"
        ));
    }

    /// A stand-in for a `*-save` that counts its runs in a file and fails
    /// the first `fails` of them with `message`.
    fn flaky_save(
        dir: &std::path::Path,
        fails: usize,
        message: &str,
    ) -> (String, std::path::PathBuf) {
        let count = dir.join("runs");
        let script = format!(
            "n=$(cat {c} 2>/dev/null || echo 0); echo $((n+1)) > {c}; \
             if [ $n -lt {fails} ]; then echo \"{message}\" >&2; exit 2; fi; echo dump",
            c = count.display()
        );
        (script, count)
    }

    fn runs(count: &std::path::Path) -> String {
        std::fs::read_to_string(count).unwrap().trim().to_string()
    }

    #[test]
    fn read_save_reads_again_after_a_race_and_gives_up_after_its_bound() {
        let raced = "Set with index 3 in kernel doesn't exist.";
        let dir = tempfile::tempdir().unwrap();
        let (script, count) = flaky_save(dir.path(), 1, raced);
        assert_eq!(read_save("sh", &["-c", &script]).unwrap(), "dump\n");
        assert_eq!(runs(&count), "2");

        let dir = tempfile::tempdir().unwrap();
        let (script, count) = flaky_save(dir.path(), 99, raced);
        assert!(read_save("sh", &["-c", &script]).is_err());
        assert_eq!(runs(&count), SAVE_READS.to_string());

        let dir = tempfile::tempdir().unwrap();
        let (script, count) = flaky_save(dir.path(), 1, "Table does not exist");
        assert!(read_save("sh", &["-c", &script]).is_err());
        assert_eq!(runs(&count), "1");
    }

    #[test]
    fn failing_line_from_restore_errors() {
        let input = "*filter\n:TOLLGATE-INPUT - [0:0]\n-A TOLLGATE-INPUT -j NOPE\nCOMMIT\n";
        assert_eq!(
            failing_line(
                "iptables-restore v1.8.9 (nf_tables): Couldn't load target `NOPE'\n\nError occurred at line: 3",
                input
            ),
            Some("-A TOLLGATE-INPUT -j NOPE".into())
        );
        assert_eq!(
            failing_line("ipset v7.19: Error in line 1: Syntax error", "bogus\n"),
            Some("bogus".into())
        );
        assert_eq!(failing_line("no such thing", input), None);
        assert_eq!(failing_line("Error occurred at line: 0", input), None);
        assert_eq!(failing_line("Error occurred at line: 99", input), None);
    }

    #[test]
    fn backend_from_version_output() {
        assert_eq!(
            Backend::from_version("iptables v1.8.9 (nf_tables)\n"),
            Some(Backend::Nft)
        );
        assert_eq!(
            Backend::from_version("iptables v1.8.7 (legacy)\n"),
            Some(Backend::Legacy)
        );
        assert_eq!(Backend::from_version("iptables v1.4.21\n"), None);
        assert_eq!(
            Backend::Nft.program(Family::V6, "restore"),
            "ip6tables-nft-restore"
        );
        assert_eq!(
            Backend::Legacy.program(Family::V4, "save"),
            "iptables-legacy-save"
        );
    }
}
