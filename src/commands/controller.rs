//! `tollgate controller`: runs the AddressGroup publisher
//! ([`crate::controller`]) until SIGTERM or SIGINT, then releases its
//! Lease so that a standby takes over at once. Only starts and stops it.

use std::process::ExitCode;

use signal_hook::consts::{SIGINT, SIGTERM};

use super::CommandError;
use crate::cli::ControllerArgs;
use crate::controller::{Controller, Options};

pub fn controller(args: &ControllerArgs) -> Result<ExitCode, CommandError> {
    crate::sys::return_large_allocations();
    let usage = |e: &dyn std::fmt::Display| CommandError::Usage(format!("{e:#}"));
    crate::logging::install(args.log_level.as_deref(), args.log_json).map_err(|e| usage(&e))?;
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|i| !i.is_empty())
        .ok_or_else(|| {
            CommandError::Usage("--identity is required (no POD_NAME or HOSTNAME)".into())
        })?;
    let connection = match &args.kubeconfig {
        Some(path) => crate::source::kube::Connection::Kubeconfig(path.clone()),
        None => crate::source::kube::Connection::InCluster,
    };
    let mut options = Options::new(connection, identity);
    options.listen = Some(args.listen);
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(|e| usage(&e))?;
    let controller = Controller::spawn(options).map_err(|e| usage(&e))?;
    tracing::info!(listen = ?controller.listening(), "tollgate controller started");
    let _ = signals.forever().next();
    tracing::info!("tollgate controller stopping: releasing the lease");
    drop(controller);
    Ok(ExitCode::SUCCESS)
}
