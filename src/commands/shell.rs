//! `tollgate completion` and `tollgate man`: the shell completion scripts
//! and the man pages, generated from the one clap definition of the
//! command line (`cli::Cli`), so they cannot drift from it.

use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;

use super::CommandError;
use crate::cli::{Cli, ManArgs};

/// `tollgate completion SHELL`: the script on stdout.
pub fn completion(shell: clap_complete::Shell) -> Result<ExitCode, CommandError> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "tollgate", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// `tollgate man`: `tollgate.1` on stdout, or with `--dir` a page for the
/// command and every subcommand, nested ones included
/// (`tollgate-get-policies.1`); prints the files written.
pub fn man(args: &ManArgs) -> Result<ExitCode, CommandError> {
    let command = Cli::command();
    let failed = |e: std::io::Error| CommandError::Usage(format!("man: {e}"));
    match &args.dir {
        None => clap_mangen::Man::new(command)
            .render(&mut std::io::stdout())
            .map_err(failed)?,
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(failed)?;
            for written in write_pages(&command, dir).map_err(failed)? {
                println!("{}", written.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the page of `command` and of each of its subcommands, named
/// after the whole path (`tollgate-get-policies.1`).
fn write_pages(command: &clap::Command, dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut written = Vec::new();
    let mut todo = vec![(command.clone(), command.get_name().to_string())];
    while let Some((command, name)) = todo.pop() {
        for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
            todo.push((sub.clone(), format!("{name}-{}", sub.get_name())));
        }
        let path = dir.join(format!("{name}.1"));
        let mut page = Vec::new();
        clap_mangen::Man::new(command.clone().name(name.clone())).render(&mut page)?;
        std::fs::write(&path, page)?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}
