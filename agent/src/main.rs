//! bootd-agent: see the library (src/lib.rs) for what it does.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Result<Vec<String>, _> = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect();
    let result = args
        .map_err(|a| agent::Error::Usage(format!("{a:?}: not UTF-8")))
        .and_then(agent::cli::parse)
        .and_then(agent::run);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bootd-agent: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
