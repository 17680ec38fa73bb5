//! `margin`: see `margin --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Before any thread starts: the environment is only changed here.
    let renamed = margin_server::cli::read_old_environment_names();
    let cli = margin_server::cli::Cli::parse();
    let format = cli.log_format;
    margin_server::telemetry::init(format);
    for warning in renamed {
        eprintln!("margin: warning: {warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.workers().get())
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("margin: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(margin_server::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Printed once: as a log line for machines reading JSON logs,
            // else as one line for the person at the terminal.
            match format {
                margin_server::telemetry::LogFormat::Json => {
                    tracing::error!(%error, "margin failed")
                }
                margin_server::telemetry::LogFormat::Text => eprintln!("margin: {error}"),
            }
            ExitCode::FAILURE
        }
    }
}
