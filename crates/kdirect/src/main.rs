//! The `kdirect` command-line tool. See `kdirect --help`.
use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kdirect: {e}");
            ExitCode::from(1)
        }
    }
}
