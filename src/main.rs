//! The `tollgate` binary: parses the command line and maps results to exit
//! codes — 0 success (a trace that ends in Drop included, unless
//! `--exit-code`: then 1 for a denied flow and 2 for any error), 1 invalid
//! policies (or, for `status --check`, not live / not ready), 2 usage,
//! configuration or runtime errors (for `status --check`: the agent cannot
//! be reached), 3 for `run` when a worker stalled (the process exits to be
//! restarted). The work is done in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tollgate::agent::AgentError;
use tollgate::cli::{Cli, Command, GetCommand, OutputFormat, RunArgs, TraceArgs};
use tollgate::commands::{self, CommandError, NodeIdentity};
use tollgate::explain;
use tollgate::fqdn::NoFqdn;
use tollgate::status::{Request, Response};

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
            for warning in tollgate::validate::check(&snapshot).warnings {
                eprintln!("warning: {warning}");
            }
            let directories: Vec<PathBuf> = paths.iter().filter(|p| p.is_dir()).cloned().collect();
            for warning in commands::inventory_warnings(&directories, &snapshot) {
                eprintln!("warning: {warning}");
            }
            println!("{}", commands::validate_summary(&snapshot));
        }
        Command::Trace(args) => return trace(&args),
        Command::Get {
            what:
                GetCommand::Policies {
                    policies,
                    node,
                    socket,
                    filter,
                    output,
                    ..
                },
        } => {
            let list = if policies.is_empty() {
                match commands::ask(&socket.socket, &Request::Policies)? {
                    Response::Policies(list) => list,
                    other => return Err(unexpected(&other)),
                }
            } else {
                let (_, ruleset) = commands::load_ruleset(&policies, &NodeIdentity::from(&node))?;
                ruleset.policies().to_vec()
            };
            print!(
                "{}",
                commands::render_policies(&list, &filter, output.output)?
            );
        }
        Command::Get {
            what:
                GetCommand::Endpoints {
                    policies,
                    node,
                    socket,
                    filter,
                    output,
                },
        } => {
            let list = if policies.is_empty() {
                match commands::ask(&socket.socket, &Request::Endpoints)? {
                    Response::Endpoints(list) => list,
                    other => return Err(unexpected(&other)),
                }
            } else {
                let (_, ruleset) = commands::load_ruleset(&policies, &NodeIdentity::from(&node))?;
                explain::endpoints(&ruleset)
            };
            print!(
                "{}",
                commands::render_endpoints(&list, &filter, output.output)?
            );
        }
        Command::Get {
            what:
                GetCommand::Fqdn {
                    policies,
                    node,
                    socket,
                    filter,
                    output,
                },
        } => {
            let (all, endpoints) = if policies.is_empty() {
                // The agent's endpoints name its selectors.
                let endpoints = match commands::ask(&socket.socket, &Request::Endpoints) {
                    Ok(Response::Endpoints(list)) => list,
                    _ => Vec::new(),
                };
                (Vec::new(), endpoints)
            } else {
                let (_, ruleset) = commands::load_ruleset(&policies, &NodeIdentity::from(&node))?;
                (
                    ruleset.fqdn_patterns().to_vec(),
                    explain::endpoints(&ruleset),
                )
            };
            let patterns = commands::fqdn_selectors(&all, &endpoints, &filter);
            let sets = tollgate::datapath::learned_sets()
                .map_err(|e| CommandError::Usage(format!("reading the FQDN sets: {e}")))?;
            // Sources are the agent's to tell; without it the sets still show.
            let sources = match commands::ask(&socket.socket, &Request::Fqdn) {
                Ok(Response::Fqdn(sources)) => sources,
                _ => Vec::new(),
            };
            let rows = commands::fqdn_rows(&sets, &patterns, &sources);
            let rows = commands::filter_fqdn_rows(rows, &filter);
            print!("{}", commands::render_fqdn(&rows, output.output)?);
        }
        Command::Get {
            what:
                GetCommand::Skipped {
                    socket,
                    filter,
                    output,
                },
        } => match commands::ask(&socket.socket, &Request::Skipped)? {
            Response::Skipped(refused) => {
                print!(
                    "{}",
                    commands::render_skipped(&refused, &filter, output.output)?
                )
            }
            Response::Error(error) => return Err(CommandError::Usage(error)),
            other => return Err(unexpected(&other)),
        },
        Command::Cleanup => {
            let removed = tollgate::agent::cleanup()
                .map_err(|e| CommandError::Usage(format!("cleanup: {e}")))?;
            if removed.is_empty() {
                println!("nothing of tollgate's is installed in this network namespace");
            } else {
                println!("removed: {}", removed.summary());
            }
        }
        Command::Status {
            socket,
            check: Some(check),
            ..
        } => match commands::ask(&socket.socket, &Request::Check { probe: check })? {
            Response::Check(report) if report.ok => println!("{}", commands::check_name(check)),
            Response::Check(report) => {
                eprintln!(
                    "not {}: {}",
                    commands::check_name(check),
                    report.reason.as_deref().unwrap_or("no reason given")
                );
                return Ok(ExitCode::from(1));
            }
            other => return Err(unexpected(&other)),
        },
        Command::Status {
            socket,
            output,
            check: None,
        } => match commands::ask(&socket.socket, &Request::Status)? {
            Response::Status(report) => match output {
                OutputFormat::Text => print!("{}", commands::render_status(&report)),
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

/// `tollgate trace`: offline against `--policies`, else asked of the
/// agent. With `--exit-code`: 0 allowed, 1 denied, 2 any error (invalid
/// policies included).
fn trace(args: &TraceArgs) -> Result<ExitCode, CommandError> {
    let request = args.request();
    let node = &args.node;
    let identity = node.node_name.is_some() || node.node_labels.is_some();
    if args.policies.is_empty() && (identity || !node.node_addresses.is_empty()) {
        return Err(CommandError::Usage(
            "--node-name, --node-labels and --node-address describe the Node for --policies; the agent traces as its own Node".into(),
        ));
    }
    let report = if args.policies.is_empty() {
        match commands::ask(&args.socket.socket, &Request::Trace(Box::new(request))) {
            Ok(Response::Trace(report)) => *report,
            Ok(other) => return Err(unexpected(&other)),
            Err(error) => return Err(error),
        }
    } else {
        let ruleset = match commands::load_ruleset(&args.policies, &NodeIdentity::from(&args.node))
        {
            Ok((_, ruleset)) => ruleset,
            Err(CommandError::Invalid(problems)) if args.exit_code => {
                for problem in &problems {
                    eprintln!("{problem}");
                }
                eprintln!("{} problem(s) found", problems.len());
                return Ok(ExitCode::from(2));
            }
            Err(error) => return Err(error),
        };
        explain::trace(&ruleset, &NoFqdn, &request)
            .map_err(|e| CommandError::Usage(e.to_string()))?
    };
    print!(
        "{}",
        commands::render_trace(&report, args.output, args.verbose)?
    );
    Ok(if args.exit_code && !report.allowed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn unexpected(response: &Response) -> CommandError {
    CommandError::Usage(format!("the agent answered unexpectedly: {response:?}"))
}
