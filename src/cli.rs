//! The command line: every clap type of the `tollgate` binary. It turns
//! words into values and never acts on them; the flags that set
//! configuration keys are generated from the sections ([`config::flags`]),
//! never written here.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Command as ClapCommand, FromArgMatches, Parser, Subcommand};

use crate::config::{self, Setting};
pub use crate::explain::TraceProtocol;
use crate::explain::TraceRequest;
use crate::logging::LogError;
use crate::source::kube::Connection;
use crate::status;

mod ops;

pub use ops::{
    BundleArgs, LogLevelArgs, ManArgs, ObserveArgs, StatusArgs, StatusOutput, StatusPart,
    VerdictFilter, WatchArgs,
};

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "Antrea-native network policies on a Linux node, enforced with netfilter"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Enforce the policies of a directory on this node until SIGTERM/SIGINT;
    /// policy changes (inotify or SIGHUP) are applied without a restart.
    Run(RunArgs),
    /// Check policy, group, tier and inventory files as Antrea's admission
    /// webhook would: exit 0 with a summary, or 1 with one line per problem.
    Validate {
        /// Files or directories (their *.yaml, *.yml, *.json).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Show which rule decides a flow, and why.
    Trace(TraceArgs),
    /// Every connection a policy change opens, closes or otherwise
    /// changes: all (source, destination, protocol, port) the two sides
    /// tell apart, each row with the deciding rule before and after.
    Diff(DiffArgs),
    /// List objects.
    Get {
        #[command(subcommand)]
        what: GetCommand,
    },
    /// Remove everything tollgate owns in this network namespace (its
    /// chains, the jumps into them, the endpoint and learned ipsets) and
    /// nothing else. An agent that stops leaves its rules enforcing; this
    /// is the uninstall step. Refused while an agent runs here, unless
    /// `--wait`.
    Cleanup {
        /// Wait for the running agent to stop (however it stops), then
        /// remove its state at once: start this first when uninstalling.
        #[arg(long)]
        wait: bool,
    },
    /// Health of the running agent: uptime, ruleset generation, policies,
    /// last reload, datapath, fail mode, one line per queue (`-o wide`:
    /// the metrics and every queue's counters too).
    Status(StatusArgs),
    /// The running agent's decisions: the latest, then (`-f`) each as it
    /// is made, like `hubble observe`.
    Observe(ObserveArgs),
    /// Collect what a bug report needs from the running agent (status,
    /// policies in force, endpoints, configuration, log tail, iptables
    /// and ipset state, versions) into a .tar.gz or a directory.
    Bundle(BundleArgs),
    /// Show or change the running agent's log filter, without a restart.
    LogLevel(LogLevelArgs),
    /// Print the completion script of a shell (`source <(tollgate
    /// completion bash)`).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages, generated from this command line.
    Man(ManArgs),
    /// Publish the members of every Pod selection the cluster's policies
    /// use as AddressGroups, for agents in controller mode (run as a
    /// Deployment: one replica leads, elected on the Lease
    /// kube-system/tollgate-controller). Until SIGTERM/SIGINT.
    Controller(ControllerArgs),
}

/// Options of `tollgate controller`.
#[derive(Clone, Debug, Args)]
pub struct ControllerArgs {
    /// kubeconfig file to reach the API server with (in-cluster
    /// configuration without it).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// This replica's name in the Lease (default: the host name, which
    /// is the Pod's name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Where `/livez`, `/readyz` and `/metrics` are served.
    #[arg(long, value_name = "ADDRESS", default_value = "0.0.0.0:9091")]
    pub listen: std::net::SocketAddr,
    /// Log filter (`info`, `debug`, `tollgate=debug`, …).
    #[arg(long)]
    pub log_level: Option<String>,
    /// Log as JSON lines.
    #[arg(long)]
    pub log_json: bool,
}

/// Options of `tollgate run`. Configuration keys are set, from lowest to
/// highest precedence, by the `--config` file, by the flags the sections
/// declare (`--fail-mode`, `--queues`, …) and by `--set`.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Directory of policy YAML files, watched for changes.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "kubernetes",
        conflicts_with_all = ["kubernetes", "kubeconfig"]
    )]
    pub policies: Option<PathBuf>,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// YAML configuration file, in sections (node, queues, datapath, fqdn,
    /// l7, audit, status, metrics, policyFiles, health).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Sets one configuration key: `section.key=value`, the value in YAML
    /// (`--set fqdn.minTtl=10`, `--set node.labels.zone=a`); repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<Setting>,
    #[command(flatten)]
    pub settings: SettingFlags,
    #[command(flatten)]
    pub log: LogArgs,
}

impl RunArgs {
    /// The keys the command line sets, in the order they apply.
    pub fn settings(&self) -> Vec<Setting> {
        self.settings.0.iter().chain(&self.set).cloned().collect()
    }
}

/// The flags of the configuration sections that were given, as settings.
#[derive(Clone, Debug, Default)]
pub struct SettingFlags(Vec<Setting>);

impl FromArgMatches for SettingFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let given = config::flags().into_iter().filter_map(|flag| {
            let id = flag.key.as_str();
            match matches.value_source(id) {
                Some(ValueSource::CommandLine | ValueSource::EnvVariable) => {
                    let values = matches.get_raw(id)?;
                    let values = values.map(|v| v.to_string_lossy().into_owned());
                    Some(flag.setting(values.collect()))
                }
                _ => None,
            }
        });
        Ok(SettingFlags(given.collect()))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = SettingFlags::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for SettingFlags {
    fn augment_args(command: ClapCommand) -> ClapCommand {
        let flags = config::flags().into_iter().enumerate();
        flags.fold(command, |command, (order, flag)| {
            let help = flag.arg.get_help().map(ToString::to_string);
            let help = format!("{} [key: {}]", help.unwrap_or_default(), flag.key);
            command.arg(
                flag.arg
                    .help(help)
                    .help_heading("Configuration keys (also in --config, or --set)")
                    .display_order(order),
            )
        })
    }

    fn augment_args_for_update(command: ClapCommand) -> ClapCommand {
        SettingFlags::augment_args(command)
    }
}

/// Options of `tollgate run` for the Kubernetes source.
#[derive(Clone, Debug, Default, Args)]
pub struct KubeArgs {
    /// Read policies and inventory from the Kubernetes API server instead
    /// of a directory (in-cluster configuration unless --kubeconfig).
    #[arg(long)]
    pub kubernetes: bool,
    /// kubeconfig file to reach the API server with (--kubernetes only).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

impl KubeArgs {
    pub fn connection(&self) -> Connection {
        match &self.kubeconfig {
            Some(path) => Connection::Kubeconfig(path.clone()),
            None => Connection::InCluster,
        }
    }
}

/// Format of the operational log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Log flags of `tollgate run`.
#[derive(Clone, Debug, Default, Args)]
pub struct LogArgs {
    /// Level or filter directives (`debug`, `info,tollgate=debug`);
    /// overrides RUST_LOG. Default: RUST_LOG, else `info`.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// `text` (default) or `json` (one object per line).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

impl LogArgs {
    pub fn install(&self) -> Result<(), LogError> {
        crate::logging::install(
            self.log_level.as_deref(),
            self.log_format == LogFormat::Json,
        )
    }
}

/// The agent's bounds on policy files (`policyFiles`), so that files the
/// agent accepts (a large cluster export) are read offline as it reads
/// them.
#[derive(Args, Clone, Debug, Default)]
pub struct LimitArgs {
    /// The agent's configuration file: its `policyFiles` bounds apply (the
    /// whole file is checked as `run` checks it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Sets one configuration key as `run --set` does, e.g.
    /// `--set policyFiles.maxFileBytes=8388608`; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<Setting>,
}

/// Where the running agent's status API listens.
#[derive(Args, Clone, Debug)]
pub struct SocketArgs {
    /// Unix socket of the running agent.
    #[arg(long, value_name = "PATH", default_value = status::DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

#[derive(Subcommand)]
pub enum GetCommand {
    /// Policies in evaluation order, like `antctl get netpol`: of the
    /// running agent, or of the given files with `--policies`.
    Policies {
        /// Policy files or directories (offline); default: ask the agent.
        #[arg(long)]
        policies: Vec<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        socket: SocketArgs,
        /// Only `effectivePriority` is supported (and is the default).
        #[arg(long, default_value = "effectivePriority", value_parser = ["effectivePriority"])]
        sort_by: String,
        #[command(flatten)]
        node: NodeArgs,
        #[command(flatten)]
        filter: GetFilter,
        #[command(flatten)]
        output: GetOutputArgs,
    },
    /// Addresses the running agent has learned for FQDN selectors, with
    /// their remaining TTL and how it learned each (snooped or resolved),
    /// asked over its status socket: the agent reads its own kernel sets,
    /// so this works from any network namespace. Sets are named by the
    /// selectors of the policies given, else of the agent's.
    Fqdn {
        /// The agent's policies, to name each set by its selector.
        #[arg(long)]
        policies: Vec<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        node: NodeArgs,
        #[command(flatten)]
        socket: SocketArgs,
        /// Only the selectors the egress rules of these endpoints name.
        #[command(flatten)]
        filter: GetFilter,
        #[command(flatten)]
        output: GetOutputArgs,
    },
    /// Endpoints this node enforces policy for (the Node, local Pods and
    /// containers) with their addresses and effective policies in
    /// evaluation order, like `antctl get podmembers` / `get netpol -p`:
    /// of the running agent, or of the given files with `--policies`.
    Endpoints {
        /// Policy files or directories (offline); default: ask the agent.
        #[arg(long)]
        policies: Vec<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        socket: SocketArgs,
        #[command(flatten)]
        node: NodeArgs,
        #[command(flatten)]
        filter: GetFilter,
        #[command(flatten)]
        output: GetOutputArgs,
        #[command(flatten)]
        watch: WatchArgs,
    },
    /// Who can reach whom: endpoint × endpoint, one column per port, each
    /// cell A (Allow), D (Drop), R (Reject), L (allowed subject to L7
    /// rules), ~ (not all alike), - (no such named port): of the running
    /// agent, or of the given files with `--policies`.
    Matrix(MatrixArgs),
    /// Objects the running agent skips or enforces only in part in
    /// Kubernetes mode, with the reasons its Kubernetes Events give.
    Skipped {
        #[command(flatten)]
        socket: SocketArgs,
        #[command(flatten)]
        filter: SkippedFilter,
        /// `table` (default), `wide` (the same), `json` or `yaml` (every
        /// field: uid, generation, resourceVersion).
        #[command(flatten)]
        output: GetOutputArgs,
    },
}

/// `-n`/`-p` of `get`, as kubectl and antctl take them.
#[derive(Args, Clone, Debug, Default)]
pub struct GetFilter {
    /// Only this Namespace: its endpoints, and the policies in it or
    /// applied to an endpoint in it.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Only this Pod (in `-n`, default `default`): the policies applied to
    /// it.
    #[arg(short = 'p', long, value_name = "POD")]
    pub pod: Option<String>,
}

/// `-n`/`-p` of `get skipped`: a skipped object is a policy, group or
/// Tier, often cluster-scoped, not an endpoint, so `-p` names the object.
#[derive(Args, Clone, Debug, Default)]
pub struct SkippedFilter {
    /// Only objects in this Namespace (cluster-scoped ones are left out).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Only objects of this name: in `-n` when given, else in any
    /// Namespace or cluster-scoped.
    #[arg(short = 'p', long = "name", value_name = "NAME")]
    pub name: Option<String>,
}

/// `-o` of `get`.
#[derive(Args, Clone, Debug)]
pub struct GetOutputArgs {
    /// `table` (default; long lists summarised), `wide` (every column,
    /// lists whole), `json` or `yaml` (everything), or `jsonpath=PATH`:
    /// the values an RFC 9535 JSONPath selects in the `-o json` document
    /// (`$[*].endpoint`; kubectl's `{[*].endpoint}` is read too).
    #[arg(short = 'o', long, default_value = "table", value_parser = parse_get_format, value_name = "FORMAT")]
    pub output: GetFormat,
}

/// What `-o` of `get` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetFormat {
    Plain(GetOutput),
    /// An RFC 9535 JSONPath (`$…`), checked when parsed.
    JsonPath(String),
}

impl GetFormat {
    /// The rendering the answer starts from: JSON for a JSONPath.
    pub fn plain(&self) -> GetOutput {
        match self {
            GetFormat::Plain(output) => *output,
            GetFormat::JsonPath(_) => GetOutput::Json,
        }
    }
}

/// `table`, `wide`, `json`, `yaml`, or `jsonpath=…` (`jsonpath={.x}`,
/// kubectl's form, is read as `$.x`).
fn parse_get_format(s: &str) -> Result<GetFormat, String> {
    use clap::ValueEnum;
    if let Some(path) = s.strip_prefix("jsonpath=") {
        let path = path.trim();
        let inner = path
            .strip_prefix('{')
            .and_then(|p| p.strip_suffix('}'))
            .unwrap_or(path)
            .trim();
        let path = match inner.starts_with('$') {
            true => inner.to_string(),
            false => format!("${inner}"),
        };
        serde_json_path::JsonPath::parse(&path).map_err(|e| format!("jsonpath {path:?}: {e}"))?;
        return Ok(GetFormat::JsonPath(path));
    }
    GetOutput::from_str(s, true)
        .map(GetFormat::Plain)
        .map_err(|_| format!("{s:?}: expected table, wide, json, yaml or jsonpath=PATH"))
}

/// Output format of `get`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GetOutput {
    Table,
    Wide,
    Json,
    Yaml,
}

/// Who the local Node is (policies with `nodeSelector` apply to it).
#[derive(Args, Clone, Debug, Default)]
pub struct NodeArgs {
    /// Name of the local Node; default: the only `v1 Node` in the policies.
    #[arg(long)]
    pub node_name: Option<String>,
    /// Labels of the local Node, `k=v,k2=v2` (added to the Node object's).
    #[arg(long, value_parser = config::parse_labels)]
    pub node_labels: Option<BTreeMap<String, String>>,
    /// Addresses of the local Node (repeatable), added to the Node object's.
    #[arg(long = "node-address")]
    pub node_addresses: Vec<IpAddr>,
}

#[derive(Args)]
pub struct TraceArgs {
    /// Policy files or directories: trace offline against them. Default:
    /// ask the running agent (its ruleset in force, node identity and
    /// learned FQDN addresses).
    #[arg(long)]
    pub policies: Vec<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub socket: SocketArgs,
    /// Source: an address, `namespace/name` of a Pod, ExternalEntity or
    /// container, or `node:NAME`.
    #[arg(long)]
    pub src: String,
    /// Destination, as `--src`.
    #[arg(long)]
    pub dst: String,
    #[arg(long, ignore_case = true, value_parser = trace_protocol())]
    pub protocol: TraceProtocol,
    #[arg(long, default_value_t = 40000)]
    pub src_port: u16,
    /// A number, or the name of a container port of the destination Pod.
    #[arg(long)]
    pub dst_port: Option<String>,
    #[arg(long, default_value_t = 8)]
    pub icmp_type: u8,
    #[arg(long, default_value_t = 0)]
    pub icmp_code: u8,
    /// IGMP message type (0x11 membership query, 0x16 v2 report, 0x22 v3
    /// report).
    #[arg(long, default_value = "0x11", value_parser = parse_u8)]
    pub igmp_type: u8,
    /// The multicast group an IGMP message names (default 0.0.0.0).
    #[arg(long)]
    pub igmp_group: Option<std::net::Ipv4Addr>,
    /// Take the destination as an address this name resolved to.
    #[arg(long)]
    pub fqdn: Option<String>,
    /// Evaluate L7 rules for an HTTP request with this method.
    #[arg(long)]
    pub http_method: Option<String>,
    #[arg(long)]
    pub http_host: Option<String>,
    /// Path and query, e.g. `/api/v2/items?x=1`.
    #[arg(long)]
    pub http_path: Option<String>,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: OutputFormat,
    /// For each direction, list every rule consulted in evaluation order
    /// up to the deciding one (matched or not), and the Kubernetes
    /// NetworkPolicies that isolate the endpoint (a deny-all has no rule
    /// to consult). `-o json` always carries both.
    #[arg(short, long)]
    pub verbose: bool,
    /// Exit 0 when the flow is allowed, 1 when it is denied, 2 on error.
    #[arg(long)]
    pub exit_code: bool,
    #[command(flatten)]
    pub node: NodeArgs,
}

impl TraceArgs {
    /// The request the flags describe.
    pub fn request(&self) -> TraceRequest {
        TraceRequest {
            src: self.src.clone(),
            dst: self.dst.clone(),
            protocol: self.protocol,
            src_port: self.src_port,
            dst_port: self.dst_port.clone(),
            icmp_type: self.icmp_type,
            icmp_code: self.icmp_code,
            igmp_type: self.igmp_type,
            igmp_group: self.igmp_group,
            fqdn: self.fqdn.clone(),
            http_method: self.http_method.clone(),
            http_host: self.http_host.clone(),
            http_path: self.http_path.clone(),
        }
    }
}

/// A byte in decimal or `0x` hexadecimal.
fn parse_u8(s: &str) -> Result<u8, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("{s:?}: {e}"))
}

/// Options of `tollgate diff`.
#[derive(Args, Clone, Debug)]
pub struct DiffArgs {
    /// The policies before: a directory, `git:REV:PATH` (a directory of
    /// the repository at a revision, read with `git`), or `live` (the
    /// running agent's).
    #[arg(value_name = "OLD")]
    pub old: String,
    /// The policies after, as OLD.
    #[arg(value_name = "NEW")]
    pub new: String,
    /// Take the inventory (Nodes, Namespaces, Pods, Services, service
    /// accounts, ExternalEntities) of both sides from here, a directory,
    /// `git:REV:PATH` or `live`, so that only the policies change.
    #[arg(long, value_name = "DIR|git:REV:PATH|live")]
    pub inventory: Option<String>,
    /// `text` (default), `json` (the documented contract), `yaml`, `csv`,
    /// `md` (a pull-request comment), `dot` (a graph), `matrix` (the
    /// `get matrix` table with the changed cells marked `before>after`).
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: DiffOutput,
    /// One row per pair of endpoints instead of per class.
    #[arg(long)]
    pub expand: bool,
    /// Exit 1 when there are changes (of the `--fail-on` kind), 0 when
    /// none, 2 on any error.
    #[arg(long)]
    pub exit_code: bool,
    /// What `--exit-code` counts: `opened`, `closed` or `any` (default).
    #[arg(long, value_enum, default_value = "any", requires = "exit_code")]
    pub fail_on: FailOn,
    #[command(flatten)]
    pub socket: SocketArgs,
    /// The default Node of a directory or revision (Pods without
    /// `nodeName` run there).
    #[command(flatten)]
    pub node: NodeArgs,
}

/// `-o` of `tollgate diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffOutput {
    Text,
    Json,
    Yaml,
    Csv,
    Md,
    Dot,
    Matrix,
}

/// `--fail-on` of `tollgate diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    Opened,
    Closed,
    Any,
}

/// Options of `tollgate get matrix`.
#[derive(Args, Clone, Debug)]
pub struct MatrixArgs {
    /// Policy files or directories (offline); default: ask the agent.
    #[arg(long)]
    pub policies: Vec<PathBuf>,
    #[command(flatten)]
    pub socket: SocketArgs,
    #[command(flatten)]
    pub node: NodeArgs,
    /// Only the endpoints of this Namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The columns, comma-separated: `80` (TCP), `53/udp`, `http` (a named
    /// container port), `icmp` (echo). Default: every port the rules name.
    #[arg(long, value_name = "PORTS", value_delimiter = ',')]
    pub ports: Vec<String>,
    /// Group the endpoints of a Namespace by the value of this label.
    #[arg(long, value_name = "LABEL")]
    pub group_by: Option<String>,
    /// `table` (default), `md`, `csv`, `json`, `dot`.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: MatrixOutput,
}

/// `-o` of `tollgate get matrix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MatrixOutput {
    Table,
    Md,
    Csv,
    Json,
    Dot,
}

/// Output format of `trace` and `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// `--protocol`: one of [`TraceProtocol::ALL`] by name, listed in the help.
fn trace_protocol() -> impl clap::builder::TypedValueParser<Value = TraceProtocol> {
    use clap::builder::TypedValueParser;
    let names = TraceProtocol::ALL.map(TraceProtocol::as_str);
    clap::builder::PossibleValuesParser::new(names).map(|name| {
        TraceProtocol::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(&name))
            .expect("a possible value")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AgentConfig, MachineDefaults};
    use crate::l7::DenyResponse;
    use crate::marks::FailMode;

    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        run: RunArgs,
    }

    fn load(args: &RunArgs) -> AgentConfig {
        let machine = MachineDefaults {
            node_name: "host".into(),
            queues: 2,
        };
        AgentConfig::load(&machine, None, &args.settings())
            .unwrap()
            .config
    }

    #[test]
    fn flags_parse_into_settings() {
        let cli = Run::try_parse_from([
            "tollgate",
            "--policies",
            "/p",
            "--node-labels",
            "role=cp,zone=a",
            "--node-address",
            "10.0.0.1",
            "--node-address",
            "fd00::1",
            "--interfaces",
            "veth*,eth0",
            "--queues",
            "2",
            "--mark-mask",
            "0x70000",
            "--fail-mode",
            "open",
            "--privileged",
            "10.0.0.0/24,tcp/22",
            "--privileged",
            "fd00::/64",
            "--l7-deny-response",
            "reset",
        ])
        .unwrap();
        let config = load(&cli.run);
        assert_eq!(config.node.labels["zone"], "a");
        assert_eq!(config.node.addresses.len(), 2);
        let interfaces: Vec<&str> = config
            .datapath
            .interfaces
            .iter()
            .map(|i| i.as_iptables())
            .collect();
        assert_eq!(interfaces, ["veth+", "eth0"]);
        assert_eq!(config.datapath.fail_mode, FailMode::Open);
        assert_eq!(config.datapath.privileged.len(), 2);
        assert_eq!(config.l7.deny_response, DenyResponse::Reset);
        assert_eq!(config.datapath.mark_mask.mask, 0x70000);
        assert_eq!(config.node.name, "host");
        assert_eq!(config.queues.base, 100);
        for bad in [["--fail-mode", "x"], ["--mark-mask", "0x30000"]] {
            let args = ["tollgate", "--policies", "/p"].into_iter().chain(bad);
            assert!(Run::try_parse_from(args).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn set_wins_over_the_flags() {
        let cli = Run::try_parse_from([
            "tollgate",
            "--policies",
            "/p",
            "--set",
            "fqdn.minTtl=1",
            "--fqdn-min-ttl",
            "7",
            "--set",
            "l7.maxFlows=9",
        ])
        .unwrap();
        let config = load(&cli.run);
        assert_eq!((config.fqdn.min_ttl, config.l7.max_flows), (1, 9));
        assert!(Run::try_parse_from(["tollgate", "--policies", "/p", "--set", "x"]).is_err());
    }

    #[test]
    fn kubernetes_mode_replaces_the_policy_directory() {
        let cli = Run::try_parse_from(["tollgate", "--kubernetes", "--kubeconfig", "/k"]).unwrap();
        assert!(cli.run.kube.kubernetes && cli.run.policies.is_none());
        assert!(Run::try_parse_from(["tollgate"]).is_err());
        assert!(Run::try_parse_from(["tollgate", "--kubernetes", "--policies", "/p"]).is_err());
        assert!(
            Run::try_parse_from(["tollgate", "--policies", "/p", "--kubeconfig", "/k"]).is_err()
        );
    }

    #[test]
    fn get_skipped_takes_a_namespace_and_an_object_name() {
        let cli = Cli::try_parse_from([
            "tollgate",
            "get",
            "skipped",
            "-n",
            "shop",
            "-p",
            "web-policy",
            "-o",
            "json",
        ])
        .unwrap();
        let Command::Get {
            what: GetCommand::Skipped { filter, output, .. },
        } = cli.command
        else {
            panic!("not get skipped");
        };
        assert_eq!(filter.namespace.as_deref(), Some("shop"));
        assert_eq!(filter.name.as_deref(), Some("web-policy"));
        assert_eq!(output.output, GetFormat::Plain(GetOutput::Json));
        let cli = Cli::try_parse_from(["tollgate", "get", "skipped", "--name", "bad"]).unwrap();
        let Command::Get {
            what: GetCommand::Skipped { filter, .. },
        } = cli.command
        else {
            panic!("not get skipped");
        };
        assert_eq!(
            (filter.namespace, filter.name.as_deref()),
            (None, Some("bad"))
        );
    }

    #[test]
    fn the_binary_s_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
