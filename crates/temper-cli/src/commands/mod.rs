//! One module per command.

mod doctor;
mod env;
mod envs;
mod eval;
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

/// A flag set when the user presses Ctrl-C, for loops that stop cleanly between steps.
fn stop_on_ctrl_c() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, Ordering::SeqCst);
        }
    });
    stop
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
        Command::Plot(args) => plot::run(args),
        Command::Hub(command) => hub::run(command).await,
        Command::Env(command) => env::run(command).await,
        Command::Login(args) => env::login(args).await,
    }
}
