//! One module per command.

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

use crate::args::Command;

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
        Command::Plot(args) => plot::run(args),
        Command::Hub(command) => hub::run(command).await,
        Command::Env(command) => env::run(command).await,
        Command::Login(args) => env::login(args).await,
    }
}
