//! `tollgate observe`: the running agent's decisions, the latest first
//! and then (`-f`) each as it is made, asked over the status socket and
//! printed a line each (text or JSON). The filters travel with the
//! request: the agent sends only what was asked for.

use std::io::Write as _;
use std::process::ExitCode;

use super::render::render_event;
use super::CommandError;
use crate::cli::{ObserveArgs, OutputFormat, VerdictFilter};
use crate::observe::ObserveFilter;
use crate::status::{Request, Response, StatusError};

/// `tollgate observe`: prints until the agent's answer ends (without
/// `-f`), the client is interrupted or stdout closes.
pub fn observe(args: &ObserveArgs) -> Result<ExitCode, CommandError> {
    let namespace = match (&args.namespace, &args.pod) {
        (Some(ns), _) => Some(ns.clone()),
        (None, Some(_)) => Some("default".to_string()),
        (None, None) => None,
    };
    let filter = ObserveFilter {
        verdicts: args
            .verdict
            .iter()
            .map(|v| {
                match v {
                    VerdictFilter::Drop => "drop",
                    VerdictFilter::Reject => "reject",
                    VerdictFilter::Allow => "allow",
                }
                .to_string()
            })
            .collect(),
        pod: args
            .pod
            .as_ref()
            .map(|pod| format!("{}/{pod}", namespace.as_deref().unwrap_or("default"))),
        namespace,
    };
    let request = Request::Observe {
        filter,
        follow: args.follow,
        last: args.last,
    };
    let mut out = std::io::stdout().lock();
    let printed = crate::status::stream(&args.socket.socket, &request, args.follow, |response| {
        let line = match response {
            Response::Event(event) => match args.output {
                OutputFormat::Text => render_event(&event),
                OutputFormat::Json => {
                    serde_json::to_string(&event).map_err(std::io::Error::other)?
                }
            },
            Response::Lost(n) => match args.output {
                OutputFormat::Text => {
                    format!("... {n} decisions lost: this client read too slowly")
                }
                OutputFormat::Json => format!("{{\"lost\":{n}}}"),
            },
            _ => return Ok(()),
        };
        writeln!(out, "{line}").and_then(|()| out.flush())
    });
    printed.map_err(|e| match e {
        StatusError::Agent(message) => CommandError::Usage(message),
        e => CommandError::Usage(format!("{e} (is `tollgate run` running?)")),
    })?;
    Ok(ExitCode::SUCCESS)
}
