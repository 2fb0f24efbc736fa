//! `temper sandbox run|serve|bench`.

use anyhow::{Context, bail};
use temper_protocol::{Language, Limits, RunRequest, RunStatus};
use temper_sandbox::{Sandbox, SandboxConfig};

use crate::args::{SandboxCommand, SandboxRunArgs};

pub async fn run(command: SandboxCommand) -> anyhow::Result<()> {
    match command {
        SandboxCommand::Run(args) => run_one(args).await,
        SandboxCommand::Serve(args) => {
            let defaults = SandboxConfig::default();
            // A ceiling below a default lowers the default with it.
            let cfg = SandboxConfig {
                pool_size: args.pool_size,
                max_time_limit_ms: args.max_time_limit_ms,
                max_memory_mb: args.max_memory_mb,
                max_output_bytes: args.max_output_bytes,
                time_limit_ms: defaults.time_limit_ms.min(args.max_time_limit_ms),
                memory_mb: defaults.memory_mb.min(args.max_memory_mb),
                output_bytes: defaults.output_bytes.min(args.max_output_bytes),
                ..defaults
            };
            let sandbox = Sandbox::new(cfg).await.context("cannot start the sandbox")?;
            let options = temper_sandbox::server::ServerOptions {
                max_concurrent: args.max_concurrent,
                max_sessions: args.max_sessions,
                idle_timeout: std::time::Duration::from_secs(args.idle_timeout_s),
                ..Default::default()
            };
            let listener = tokio::net::TcpListener::bind(&args.addr)
                .await
                .with_context(|| format!("cannot listen on {}", args.addr))?;
            eprintln!("temper sandbox serving on http://{}", listener.local_addr()?);
            temper_sandbox::server::serve(listener, sandbox, options)
                .await
                .context("the server failed")
        }
        SandboxCommand::Bench(args) => temper_bench::sandbox::run(args).await,
    }
}

fn language_of(args: &SandboxRunArgs) -> anyhow::Result<Language> {
    if let Some(name) = &args.lang {
        return Language::from_name(name)
            .with_context(|| format!("--lang {name}: expected python, bash, c or cpp"));
    }
    let ext = args.file.extension().and_then(|e| e.to_str()).unwrap_or_default();
    Ok(match ext {
        "py" => Language::Python,
        "sh" | "bash" => Language::Bash,
        "c" => Language::C,
        "cc" | "cpp" | "cxx" => Language::Cpp,
        _ => bail!(
            "{}: cannot tell the language from the extension; pass --lang",
            args.file.display()
        ),
    })
}

async fn run_one(args: SandboxRunArgs) -> anyhow::Result<()> {
    let language = language_of(&args)?;
    let code = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let stdin = match &args.stdin {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => String::new(),
    };
    let limits = Limits {
        time_limit_ms: Some(args.time_limit_ms),
        memory_mb: Some(args.memory_mb),
        output_bytes: Some(args.output_bytes),
    };
    let sandbox = Sandbox::new(SandboxConfig { pool_size: 0, ..SandboxConfig::default() }).await;
    let (result, sandbox) = match sandbox {
        Ok(sandbox) => {
            (sandbox.run(&RunRequest { language, code, stdin, limits }).await, Some(sandbox))
        }
        Err(e) => (temper_protocol::RunResult::internal_error(e.to_string()), None),
    };
    println!("{}", serde_json::to_string(&result)?);
    // The answer is out; the slot's teardown is left to the reaper when there is one (it kills
    // and removes this process's slots once it has ended), so the caller has its prompt back
    // sooner.
    if let Some(sandbox) = sandbox
        && !sandbox.reaper_cleans_up()
    {
        sandbox.shutdown().await;
    }
    if result.status == RunStatus::InternalError {
        bail!("the sandbox failed: {}", result.stderr);
    }
    Ok(())
}
