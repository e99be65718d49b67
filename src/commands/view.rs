//! Where `get` and `trace` read the ruleset: the running agent, asked over
//! its status socket, or the policies given on the command line, compiled
//! here as the local Node's. The one place that picks between the two;
//! it never renders or prints.

use std::path::{Path, PathBuf};

use super::get::fqdn_selectors;
use super::{ask, load_ruleset, unexpected, CommandError, NodeIdentity};
use crate::cli::{GetFilter, NodeArgs};
use crate::config::PolicyFilesConfig;
use crate::explain::{self, EndpointReport, TraceReport, TraceRequest};
use crate::fqdn::{FqdnPattern, NoFqdn};
use crate::ruleset::{PolicySummary, Ruleset};
use crate::status::{Request, Response};

/// The ruleset a reading subcommand answers from.
pub enum View {
    /// The agent listening on this status socket.
    Live(PathBuf),
    /// The policies given, loaded, validated and compiled here.
    Offline(Box<Ruleset>),
}

impl View {
    /// The agent at `socket` when no `policies` are given, else the
    /// policies (read within `limits`) compiled for the Node `node`
    /// describes.
    pub fn new(
        policies: &[PathBuf],
        limits: &PolicyFilesConfig,
        node: &NodeArgs,
        socket: &Path,
    ) -> Result<View, CommandError> {
        if policies.is_empty() {
            return Ok(View::Live(socket.to_path_buf()));
        }
        let (_, ruleset) = load_ruleset(policies, limits, &NodeIdentity::from(node))?;
        Ok(View::Offline(Box::new(ruleset)))
    }

    /// The policies in evaluation order.
    pub fn policies(&self) -> Result<Vec<PolicySummary>, CommandError> {
        match self {
            View::Live(socket) => match ask(socket, &Request::Policies)? {
                Response::Policies(list) => Ok(list),
                other => Err(unexpected(&other)),
            },
            View::Offline(ruleset) => Ok(ruleset.policy_summaries()),
        }
    }

    /// The enforced endpoints and their policies.
    pub fn endpoints(&self) -> Result<Vec<EndpointReport>, CommandError> {
        match self {
            View::Live(socket) => match ask(socket, &Request::Endpoints)? {
                Response::Endpoints(list) => Ok(list),
                other => Err(unexpected(&other)),
            },
            View::Offline(ruleset) => Ok(explain::endpoints(ruleset)),
        }
    }

    /// The FQDN selectors `filter` asks for: those of the policies given,
    /// or those the agent's endpoints name (none when the agent cannot
    /// say: the learned sets still show).
    pub fn fqdn_selectors(&self, filter: &GetFilter) -> Vec<FqdnPattern> {
        match self {
            View::Live(_) => fqdn_selectors(&[], &self.endpoints().unwrap_or_default(), filter),
            View::Offline(ruleset) => fqdn_selectors(
                ruleset.fqdn_patterns(),
                &explain::endpoints(ruleset),
                filter,
            ),
        }
    }

    /// `request` traced: by the agent, with the FQDN addresses it has
    /// learned, or here, with none.
    pub fn trace(&self, request: TraceRequest) -> Result<TraceReport, CommandError> {
        match self {
            View::Live(socket) => match ask(socket, &Request::Trace(Box::new(request)))? {
                Response::Trace(report) => Ok(*report),
                other => Err(unexpected(&other)),
            },
            View::Offline(ruleset) => explain::trace(ruleset, &NoFqdn, &request)
                .map_err(|e| CommandError::Usage(e.to_string())),
        }
    }
}
