//! One module per command.

mod doctor;
mod env;
mod envs;
mod eval;
mod eval_report;
mod hub;
mod inference;
mod orchestrator;
mod plot;
mod rl;
mod sandbox;
mod sft;
mod trainer;
mod verify;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::args::Command;

/// Waits for Ctrl-C (SIGINT) or SIGTERM (what `kill`, Slurm's `scancel` and a cancelled job
/// step send first).
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// A flag set once [`interrupted`], for loops that stop cleanly between steps and checkpoint.
fn stop_on_interrupt() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        interrupted().await;
        flag.store(true, Ordering::SeqCst);
    });
    stop
}

/// A progress bar over `len` `unit`s (steps, groups) with elapsed time, ETA and a message;
/// hidden (drawing nothing) when stderr is not a terminal.
fn progress_bar(len: u64, unit: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    let template = format!(
        "{{spinner}} {{bar:30}} {{pos}}/{{len}} {unit} {{elapsed_precise}} eta {{eta}} {{msg}}"
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// A line above `bar`, or on stderr by itself when the bar is hidden (not a terminal).
fn say(bar: &indicatif::ProgressBar, line: &str) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// Runs a command.
pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Eval(args) => eval::run(*args).await,
        Command::Envs => envs::run(),
        Command::Verify(command) => verify::run(command),
        Command::Sandbox(command) => sandbox::run(command).await,
        Command::Inference(command) => inference::run(command).await,
        Command::Sft(args) => sft::run(args).await,
        Command::Trainer(args) => trainer::run(args).await,
        Command::Orchestrator(args) => orchestrator::run(args).await,
        Command::Rl(args) => rl::run(args).await,
        Command::Doctor(args) => doctor::run(args),
        Command::Plot(args) => plot::run(&args),
        Command::Hub(command) => hub::run(command).await,
        Command::Env(command) => env::run(command).await,
        Command::Login(args) => env::login(args).await,
    }
}
