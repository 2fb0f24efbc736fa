//! `temper envs`: the built-in environments.

use temper_envs::LoadOptions;

pub fn run() -> anyhow::Result<()> {
    for name in temper_envs::builtin_names() {
        let env = temper_envs::load(name, &LoadOptions::default())?;
        println!("{:<15} {:<7} {}", env.info.name, env.info.version, env.info.description);
    }
    Ok(())
}
