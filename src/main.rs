//! The `tollgate` binary: parses the command line and maps results to exit
//! codes — 0 success (a trace that ends in Drop included), 1 invalid
//! policies, 2 usage, configuration or runtime errors. The work is done in
//! the library.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tollgate::agent::{AgentError, RunArgs};
use tollgate::commands::{
    self, CommandError, NodeIdentity, OutputFormat, TraceProtocol, TraceRequest,
};
use tollgate::status::{self, Request, Response};

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "Antrea-native network policies on a Linux node, enforced with netfilter"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Enforce the policies of a directory on this node until SIGTERM/SIGINT;
    /// policy changes (inotify or SIGHUP) are applied without a restart.
    Run(RunArgs),
    /// Check policy, group, tier and inventory files as Antrea's admission
    /// webhook would: exit 0 with a summary, or 1 with one line per problem.
    Validate {
        /// Files or directories (their *.yaml, *.yml, *.json).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Show which rule decides a flow, and why.
    Trace(TraceArgs),
    /// List objects.
    Get {
        #[command(subcommand)]
        what: GetCommand,
    },
    /// Health of the running agent: uptime, ruleset generation, policies,
    /// last reload, queues and their counters, fail mode.
    Status {
        #[command(flatten)]
        socket: SocketArgs,
        #[arg(long, value_enum, default_value = "text")]
        output: OutputFormat,
    },
}

/// Where the running agent's status API listens.
#[derive(Args, Clone, Debug)]
struct SocketArgs {
    /// Unix socket of the running agent.
    #[arg(long, value_name = "PATH", default_value = tollgate::status::DEFAULT_SOCKET)]
    socket: PathBuf,
}

impl SocketArgs {
    fn ask(&self, request: &Request) -> Result<Response, CommandError> {
        status::request(&self.socket, request)
            .map_err(|e| CommandError::Usage(format!("{e} (is `tollgate run` running?)")))
    }
}

#[derive(Subcommand)]
enum GetCommand {
    /// Policies in evaluation order, like `antctl get netpol`: of the
    /// running agent, or of the given files with `--policies`.
    Policies {
        /// Policy files or directories (offline); default: ask the agent.
        #[arg(long)]
        policies: Vec<PathBuf>,
        #[command(flatten)]
        socket: SocketArgs,
        /// Only `effectivePriority` is supported (and is the default).
        #[arg(long, default_value = "effectivePriority", value_parser = ["effectivePriority"])]
        sort_by: String,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Addresses a running agent has learned for FQDN selectors, with their
    /// remaining TTL, read from the kernel sets of this network namespace.
    Fqdn {
        /// The agent's policies, to name each set by its selector.
        #[arg(long)]
        policies: Vec<PathBuf>,
        #[command(flatten)]
        node: NodeArgs,
    },
}

/// Who the local Node is (policies with `nodeSelector` apply to it).
#[derive(Args, Clone, Debug, Default)]
struct NodeArgs {
    /// Name of the local Node; default: the only `v1 Node` in the policies.
    #[arg(long)]
    node_name: Option<String>,
    /// Labels of the local Node, `k=v,k2=v2` (added to the Node object's).
    #[arg(long, value_parser = tollgate::config::parse_labels)]
    node_labels: Option<BTreeMap<String, String>>,
    /// Addresses of the local Node (repeatable), added to the Node object's.
    #[arg(long = "node-address")]
    node_addresses: Vec<IpAddr>,
}

impl NodeArgs {
    fn identity(&self) -> NodeIdentity {
        NodeIdentity {
            name: self.node_name.clone(),
            labels: self.node_labels.clone().unwrap_or_default(),
            addresses: self.node_addresses.clone(),
        }
    }
}

#[derive(Args)]
struct TraceArgs {
    /// Policy files or directories.
    #[arg(long, required = true)]
    policies: Vec<PathBuf>,
    #[arg(long)]
    src: IpAddr,
    #[arg(long)]
    dst: IpAddr,
    #[arg(long, value_enum)]
    protocol: TraceProtocol,
    #[arg(long, default_value_t = 40000)]
    src_port: u16,
    #[arg(long)]
    dst_port: Option<u16>,
    #[arg(long, default_value_t = 8)]
    icmp_type: u8,
    #[arg(long, default_value_t = 0)]
    icmp_code: u8,
    /// Take the destination as an address this name resolved to.
    #[arg(long)]
    fqdn: Option<String>,
    /// Evaluate L7 rules for an HTTP request with this method.
    #[arg(long)]
    http_method: Option<String>,
    #[arg(long)]
    http_host: Option<String>,
    /// Path and query, e.g. `/api/v2/items?x=1`.
    #[arg(long)]
    http_path: Option<String>,
    #[arg(long, value_enum, default_value = "text")]
    output: OutputFormat,
    #[command(flatten)]
    node: NodeArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(CommandError::Invalid(problems)) => {
            for problem in &problems {
                println!("{problem}");
            }
            eprintln!("{} problem(s) found", problems.len());
            ExitCode::from(1)
        }
        Err(CommandError::Usage(message)) => {
            eprintln!("tollgate: {message}");
            ExitCode::from(2)
        }
    }
}

/// `tollgate run`: runs until SIGTERM/SIGINT. Problems are printed by the
/// agent's error message, one per line.
fn run_agent(args: RunArgs) -> ExitCode {
    match tollgate::agent::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tollgate: {error:#}");
            let invalid_policies = matches!(
                error.downcast_ref::<AgentError>(),
                Some(AgentError::InvalidPolicies(_))
            );
            ExitCode::from(if invalid_policies { 1 } else { 2 })
        }
    }
}

fn run(command: Command) -> Result<ExitCode, CommandError> {
    match command {
        Command::Run(args) => return Ok(run_agent(args)),
        Command::Validate { paths } => {
            let snapshot =
                tollgate::source::load_and_validate(&paths).map_err(CommandError::Invalid)?;
            println!("{}", commands::validate_summary(&snapshot));
        }
        Command::Trace(args) => {
            let (_, ruleset) = commands::load_ruleset(&args.policies, &args.node.identity())?;
            let request = TraceRequest {
                src: args.src,
                dst: args.dst,
                protocol: args.protocol,
                src_port: args.src_port,
                dst_port: args.dst_port,
                icmp_type: args.icmp_type,
                icmp_code: args.icmp_code,
                fqdn: args.fqdn,
                http_method: args.http_method,
                http_host: args.http_host,
                http_path: args.http_path,
            };
            let trace = commands::trace(&ruleset, &request)?;
            print!("{}", commands::render_trace(&trace, args.output));
        }
        Command::Get {
            what:
                GetCommand::Policies {
                    policies,
                    node,
                    socket,
                    ..
                },
        } => {
            if policies.is_empty() {
                match socket.ask(&Request::Policies)? {
                    Response::Policies(list) => print!("{}", commands::render_policies(&list)),
                    other => return Err(unexpected(&other)),
                }
            } else {
                let (_, ruleset) = commands::load_ruleset(&policies, &node.identity())?;
                print!("{}", commands::render_policies(ruleset.policies()));
            }
        }
        Command::Get {
            what: GetCommand::Fqdn { policies, node },
        } => {
            let patterns = if policies.is_empty() {
                Vec::new()
            } else {
                let (_, ruleset) = commands::load_ruleset(&policies, &node.identity())?;
                ruleset.fqdn_patterns().to_vec()
            };
            let sets = tollgate::datapath::learned_sets()
                .map_err(|e| CommandError::Usage(format!("reading the FQDN sets: {e}")))?;
            print!("{}", commands::render_fqdn(&sets, &patterns));
        }
        Command::Status { socket, output } => match socket.ask(&Request::Status)? {
            Response::Status(report) => match output {
                OutputFormat::Text => print!("{}", status::render_status(&report)),
                OutputFormat::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                ),
            },
            other => return Err(unexpected(&other)),
        },
    }
    Ok(ExitCode::SUCCESS)
}

fn unexpected(response: &Response) -> CommandError {
    CommandError::Usage(format!("the agent answered unexpectedly: {response:?}"))
}
