//! The `kdirect` command-line tool. See `kdirect --help`.
use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            // The message may carry a broker's or store's text: escaped, it cannot drive the
            // terminal.
            eprintln!("kdirect: {}", cli::printable(&e.to_string()));
            ExitCode::from(1)
        }
    }
}
