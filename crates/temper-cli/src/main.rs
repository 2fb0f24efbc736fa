//! The `temper` binary: argument parsing and one file per command, each calling a library.
//!
//! With `temper-bench` (whose benchmark programs print their tables) it is the only crate that
//! prints to stdout, and the only one that decides the exit code: 0 on success, 1 when
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

/// glibc's allocator settings for tensor work: keep freed memory in the process (no trimming,
/// heap grown in 1 GiB steps) and serve blocks up to 32 MiB from the heap, instead of mapping
/// fresh zeroed pages from the kernel for every large tensor. Measured on a training step of a
/// 29M-parameter model: kernel time 7.8 s → 2.6 s over three steps, the step 3.9 s → 3.0 s.
const MALLOC_TUNABLES: &str = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=17179869184:glibc.malloc.top_pad=1073741824";

/// Commands that run models start over once with their environment set: candle asks for its
/// thread count before every matrix product and, unless `RAYON_NUM_THREADS` is set, parses
/// `/proc/cpuinfo` to answer (≈20% of a small decode step); and glibc reads its allocator
/// tunables only at start ([`MALLOC_TUNABLES`]). Setting either in this process would need
/// `unsafe`. Nothing happens when both are set already or the exec fails.
fn pin_tensor_threads() {
    use std::os::unix::process::CommandExt;
    let threads_set = std::env::var_os("RAYON_NUM_THREADS").is_some();
    let malloc_set = std::env::var_os("GLIBC_TUNABLES").is_some();
    if threads_set && malloc_set {
        return;
    }
    let (Ok(exe), Ok(n)) = (std::env::current_exe(), std::thread::available_parallelism()) else {
        return;
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1));
    if !threads_set {
        cmd.env("RAYON_NUM_THREADS", n.to_string());
    }
    if !malloc_set {
        cmd.env("GLIBC_TUNABLES", MALLOC_TUNABLES);
    }
    let err = cmd.exec();
    tracing::debug!("could not start over with the tensor environment set: {err}");
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
    temper_launch::process::watch_parent();
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
