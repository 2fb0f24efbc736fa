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

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

/// glibc's allocator settings for tensor work: keep freed memory in the process (no trimming,
/// heap grown in 1 GiB steps) and serve blocks up to 32 MiB from the heap, instead of mapping
/// fresh zeroed pages from the kernel for every large tensor. Measured on a training step of a
/// 29M-parameter model: kernel time 7.8 s → 2.6 s over three steps, the step 3.9 s → 3.0 s.
const MALLOC_TUNABLES: &str = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=17179869184:glibc.malloc.top_pad=1073741824";

/// How many times candle's element-wise workers spin after an op before they sleep (candle's
/// default is 25000, about half a millisecond). Their spinning takes the cores from the matrix
/// products' threads that run next: on 2 cores, prefill of one 128-token prompt went from 316 to
/// 390–418 tokens/s with 2000, and decode did not change.
const BARRIER_POOL_SPIN_LIMIT: &str = "2000";

/// Commands that run models start over once with their environment set: candle asks for its
/// thread count before every matrix product and, unless `RAYON_NUM_THREADS` is set, parses
/// `/proc/cpuinfo` to answer (≈20% of a small decode step); glibc reads its allocator
/// tunables only at start ([`MALLOC_TUNABLES`]); and candle reads its workers' spin limit
/// ([`BARRIER_POOL_SPIN_LIMIT`]) once. Setting any in this process would need `unsafe`. Nothing
/// happens when all are set already or the exec fails; a value the user set is kept.
fn pin_tensor_threads() {
    use std::os::unix::process::CommandExt;
    let threads_set = std::env::var_os("RAYON_NUM_THREADS").is_some();
    let malloc_set = std::env::var_os("GLIBC_TUNABLES").is_some();
    let spin_set = std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_some();
    if threads_set && malloc_set && spin_set {
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
    if !spin_set {
        cmd.env("CANDLE_BARRIER_POOL_SPIN_LIMIT", BARRIER_POOL_SPIN_LIMIT);
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
    exit_quietly_when_stdout_fails();
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if let Some(hint) = dotted_flag_hint(&e, &raw) {
                eprintln!("{hint}");
                return ExitCode::from(2);
            }
            e.exit()
        }
    };
    if matches!(
        cli.command,
        args::Command::Inference(_) | args::Command::Sft(_) | args::Command::Trainer(_)
    ) {
        pin_tensor_threads();
    }
    temper_launch::process::watch_parent();
    // A server says what it serves, one line per request, as vLLM's does.
    let default_filter = match &cli.command {
        args::Command::Inference(args::InferenceCommand::Serve(_)) => {
            format!("warn,{}=info", temper_inference::ACCESS_LOG)
        }
        _ => "warn".to_owned(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env(env_vars::LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colour only for a person at a terminal: role logs (teed into logs/*.log) and CI stay
    // plain text. NO_COLOR (no-color.org) turns it off everywhere.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that closed the pipe (`| head`) has what it wanted. Only a bare write error
        // (`writeln!(stdout)?`) counts: a broken connection inside a request comes wrapped.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes joined by ": ", leaving out a cause whose text the message already
/// holds (errors that print their source would otherwise say it twice).
fn error_chain(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// Output to a closed pipe (`temper envs | head -1`) or a full disk (`> /dev/full`) makes
/// `print!` panic; instead, a closed pipe ends the command quietly with status 0 (as `ls`,
/// `rg` and `cargo metadata` do when their reader has what it wanted), and any other write
/// failure is an error with status 1.
fn exit_quietly_when_stdout_fails() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if let Some(why) = message.strip_prefix("failed printing to stdout: ") {
            if why.starts_with("Broken pipe") {
                std::process::exit(0);
            }
            eprintln!("error: cannot write to standard output: {why}");
            std::process::exit(1);
        }
        default(info);
    }));
}

/// The hint for a config key given as a flag (`--trainer.steps 20`, as prime-rl spells it):
/// temper sets config keys with `--set trainer.steps=20`.
fn dotted_flag_hint(e: &clap::Error, raw: &[String]) -> Option<String> {
    const WITH_SET: &[&str] = &["rl", "sft", "trainer", "orchestrator", "doctor"];
    if e.kind() != clap::error::ErrorKind::UnknownArgument
        || !raw.get(1).is_some_and(|c| WITH_SET.contains(&c.as_str()))
    {
        return None;
    }
    let at = raw.iter().position(|a| {
        a.strip_prefix("--").is_some_and(|k| {
            let key = k.split('=').next().unwrap_or(k);
            key.contains('.') && key.split('.').all(|p| !p.is_empty())
        })
    })?;
    let flag = &raw[at];
    let (key, value) = match flag[2..].split_once('=') {
        Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
        None => (flag[2..].to_owned(), raw.get(at + 1).filter(|v| !v.starts_with("--")).cloned()),
    };
    let value = value.unwrap_or_else(|| "VALUE".into());
    Some(format!(
        "error: unexpected argument '{flag}'\n\n  \
         tip: temper {} sets config keys with --set: --set {key}={value}\n\n\
         For more information, try '--help'.",
        raw[1]
    ))
}
