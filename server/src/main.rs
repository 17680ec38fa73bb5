//! `margin`: see `margin --help`.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = margin_server::cli::Cli::parse();
    margin_server::telemetry::init(cli.log_format);
    match margin_server::cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "margin failed");
            eprintln!("margin: {error}");
            ExitCode::FAILURE
        }
    }
}
