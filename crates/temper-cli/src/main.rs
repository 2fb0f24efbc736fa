//! The `temper` binary: argument parsing and one file per command, each calling a library.
//!
//! This is the only crate that prints to stdout or decides the exit code: 0 on success, 1 when
//! the command failed (the error and its causes are printed to stderr), 2 for invalid arguments.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the CLI is where temper talks to people"
)]

mod args;
mod commands;
mod env_vars;

use std::process::ExitCode;

use clap::Parser;

/// candle asks for its thread count before every matrix product and, unless `RAYON_NUM_THREADS`
/// is set, parses `/proc/cpuinfo` to answer (≈20% of a small decode step). Commands that run
/// models therefore start over once with it set (setting it in this process would need
/// `unsafe`). Nothing happens when it is set already or the exec fails.
fn pin_tensor_threads() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let (Ok(exe), Ok(n)) = (std::env::current_exe(), std::thread::available_parallelism()) else {
        return;
    };
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("RAYON_NUM_THREADS", n.to_string())
        .exec();
    tracing::debug!("could not start over with RAYON_NUM_THREADS set: {err}");
}

fn main() -> ExitCode {
    // The sandbox starts this same binary as its slot helper; that process must stay small and
    // single-threaded, so it branches off before anything else.
    let raw: Vec<String> = std::env::args().collect();
    if raw.get(1).map(String::as_str) == Some(temper_sandbox::isolation::HELPER_ARG) {
        temper_sandbox::isolation::helper_main(&raw[2..]);
    }
    let cli = args::Cli::parse();
    if matches!(
        cli.command,
        args::Command::Inference(_) | args::Command::Sft(_) | args::Command::Trainer(_)
    ) {
        pin_tensor_threads();
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env(env_vars::LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
