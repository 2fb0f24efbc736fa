//! Command-line arguments (clap). Each command's behaviour lives in `commands/<name>.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::env_vars;

/// temper: reinforcement learning on verifiable tasks for language models.
#[derive(Debug, Parser)]
#[command(name = "temper", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Evaluate a model on an environment through an OpenAI-compatible endpoint.
    ///
    /// Runs ROLLOUTS rollouts for each of N examples, scores them with the environment's rubric,
    /// and writes results.jsonl (one line per rollout, appended as each group finishes) and
    /// metadata.json (configuration and summary: mean reward, per-function means, pass@k, error
    /// rate, timings) to the output folder. A killed run continues with --resume.
    ///
    /// With --suite (`intellect3`, or a suite file), runs each benchmark of the suite with its
    /// own protocol (samples per problem, sampling settings, scoring) over the files in --data,
    /// one results folder per benchmark, and writes a report. `temper eval report RUN...` puts
    /// runs side by side: avg@k, pass@k, 95% intervals and differences, as Markdown, JSON and PNG.
    Eval(Box<EvalArgs>),
    /// List the built-in environments.
    Envs,
    /// Check answers without a model.
    #[command(subcommand)]
    Verify(VerifyCommand),
    /// Run untrusted code in the sandbox.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Serve a model for sampling (OpenAI-compatible API with RL admin routes).
    #[command(subcommand)]
    Inference(InferenceCommand),
    /// Supervised fine-tuning from a TOML config.
    ///
    /// Trains on chat `messages` or `prompt`/`completion` records (a JSONL file, or an
    /// environment's generated examples with `data.env`), with the loss on assistant tokens only,
    /// packed rows, AdamW and a learning-rate schedule. Writes to the run directory
    /// (`output.dir`): the resolved config.toml, metrics.jsonl (one line per step and per
    /// evaluation), checkpoints/step_N (model, optimizer, data position) and, at the end, final/
    /// (the model in Hugging Face layout, servable with `temper inference serve`). With
    /// `data.env`, evaluations generate greedy answers to held-out examples and report the
    /// environment's mean reward.
    Sft(SftArgs),
    /// The RL trainer role: one optimizer step per batch the orchestrator writes.
    ///
    /// Waits for OUTPUT/rollouts/step_N/rank_R.json (a `STABLE` file marks the folder complete),
    /// takes a step with the configured loss ([loss] type = default | ppo_clip | gspo | cispo),
    /// appends to OUTPUT/metrics.jsonl (loss, entropy, mismatch_kl, masked fractions, grad norm,
    /// lr, tokens/s), and writes OUTPUT/weights/step_N/ then its `STABLE` marker. `temper rl`
    /// starts it for you; run it alone for multi-node jobs.
    Trainer(TrainerArgs),
    /// The RL orchestrator role: rollouts, advantages and batches for the trainer.
    ///
    /// Draws tasks from the [[env]] environments, runs group_size rollouts of each against the
    /// [inference] servers (token ids and logprobs kept), scores them, computes group advantages,
    /// drops groups older than max_off_policy_steps and groups without signal, and writes
    /// OUTPUT/rollouts/step_N/rank_R.json then STABLE for the trainer. It loads each new
    /// OUTPUT/weights/step_N on every server (POST /update_weights) and evaluates every
    /// eval.every versions. `temper rl` starts it for you; run it alone for multi-node jobs.
    Orchestrator(OrchestratorArgs),
    /// Asynchronous RL from one TOML config: inference, orchestrator and trainer together.
    ///
    /// Starts the inference servers on the model (unless [inference] base_urls names running
    /// ones), the orchestrator and the trainer's ranks as processes sharing the run directory
    /// (output.dir: config.toml, logs/, metrics.jsonl, rollouts/, weights/, checkpoints/), placed
    /// as [launch] says (this machine, or job steps of a Slurm allocation), shows a line per
    /// step and a progress bar, and stops them all if one fails (exit code 1) or on Ctrl-C. With
    /// [warmup] sft = "FILE", runs that SFT config first when model.path does not exist yet.
    /// --resume continues from the trainer's newest complete checkpoint; --slurm submits the run
    /// as a Slurm job instead.
    Rl(RlArgs),
    /// Preflight checks before a run, each saying pass, fail or skip and what to do.
    ///
    /// The run directory (writable, atomic rename, room for the checkpoints and weights, shared
    /// between nodes in a multi-node allocation), ports (bind, and reach through the node's
    /// name), MPI (two ranks all-reduce), GPUs through nvidia-smi (memory in use, uncorrected
    /// ECC errors, clocks) and NCCL, and cgroups for the sandbox. Exit code 1 if any check
    /// fails. Inside an allocation, `srun --ntasks-per-node=1 temper doctor CONFIG` checks
    /// every node.
    Doctor(DoctorArgs),
    /// Draw a run's metrics as PNG charts.
    ///
    /// Reads RUN_DIR/metrics.jsonl (from `temper rl`, `temper orchestrator` + `temper trainer`)
    /// and writes reward.png (training reward, overall and per environment), eval.png (held-out
    /// mean reward and pass@k per policy version), mismatch_kl.png (engine vs trainer, log
    /// scale) and throughput.png (tokens/s of trainer and rollouts) to RUN_DIR/plots/.
    Plot(PlotArgs),
    /// The environments hub server and its accounts.
    #[command(subcommand)]
    Hub(HubCommand),
    /// Environment packages: scaffold, publish, install from a hub, find.
    ///
    /// The hub is TEMPER_HUB_URL (else the URL saved by `temper login`, else
    /// http://127.0.0.1:8470) and the token TEMPER_HUB_TOKEN (else the saved one). Installed
    /// versions live in TEMPER_HOME/envs (default ~/.temper/envs), one folder per version and
    /// content hash; `temper.lock` in the current folder pins them.
    #[command(subcommand)]
    Env(EnvCommand),
    /// Check a hub token and save it (and the hub's URL) for `temper env`.
    ///
    /// Reads the token from stdin (so it stays out of shell history), asks the hub whose it is,
    /// and writes TEMPER_HOME/credentials.toml (mode 0600). TEMPER_HUB_TOKEN, when set, wins
    /// over the saved token.
    Login(LoginArgs),
}

/// Which hub to talk to.
#[derive(Debug, Clone, Args)]
pub struct HubArgs {
    /// The hub's base URL (default: the one `temper login` saved, else http://127.0.0.1:8470).
    #[arg(long = "hub", env = env_vars::HUB_URL, value_name = "URL")]
    pub url: Option<String>,
}

/// `temper login`.
#[derive(Debug, Args)]
pub struct LoginArgs {
    /// Which hub.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// `temper hub ...`.
#[derive(Debug, Subcommand)]
pub enum HubCommand {
    /// Serve the hub: the REST API under /api/v1, web pages, /health and /metrics.
    ///
    /// Metadata goes to DATA/hub.db (SQLite) unless --database names a Postgres server;
    /// archives to DATA/archives unless --storage names an S3 bucket. Stops cleanly on Ctrl-C or
    /// SIGTERM; a publish interrupted by a crash leaves no trace of its version.
    Serve(HubServeArgs),
    /// Hub accounts.
    #[command(subcommand)]
    User(HubUserCommand),
    /// Publishes/s, installs/s and latency percentiles with many concurrent clients.
    ///
    /// Starts a hub on a fresh data folder in this process (or uses --database for Postgres),
    /// creates one user per client, then has every client publish versions of its own
    /// environment and install (resolve, download, verify, unpack) other clients' versions.
    /// Prints a table and writes JSON.
    Bench(temper_bench::HubBenchArgs),
}

/// Where the hub keeps its data.
#[derive(Debug, Clone, Args)]
pub struct HubDataArgs {
    /// Data folder: hub.db and archives/ unless --database or --storage say otherwise
    /// [default: hub-data].
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Metadata database: sqlite://FILE or postgres://USER:PASS@HOST/DB (Postgres needs the
    /// `postgres` feature of temper-hub).
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
}

impl HubDataArgs {
    /// The data folder (`--data`, else `hub-data`).
    pub fn dir(&self) -> PathBuf {
        self.data.clone().unwrap_or_else(|| PathBuf::from("hub-data"))
    }
}

/// `temper hub serve`.
#[derive(Debug, Args)]
pub struct HubServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8470")]
    pub addr: String,
    /// Data and database.
    #[command(flatten)]
    pub data: HubDataArgs,
    /// Archive storage: a folder, or s3://BUCKET/PREFIX (credentials and endpoint from the
    /// AWS_* variables; needs the `s3` feature of temper-hub).
    #[arg(long, value_name = "URL")]
    pub storage: Option<String>,
    /// The URL clients reach this server at, for download links (default: from each request's
    /// Host header).
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// Largest archive accepted, in MiB (the request body limit).
    #[arg(long, default_value_t = 64)]
    pub max_archive_mb: u64,
    /// Requests per second allowed from one client address (a token bucket).
    #[arg(long, default_value_t = 100)]
    pub rate: u32,
    /// Burst size of that bucket.
    #[arg(long, default_value_t = 200)]
    pub burst: u32,
}

/// `temper hub user ...`.
#[derive(Debug, Subcommand)]
pub enum HubUserCommand {
    /// Create a user (if new) and print a new API token for it.
    Add(HubUserAddArgs),
}

/// `temper hub user add`.
#[derive(Debug, Args)]
pub struct HubUserAddArgs {
    /// The user name (2-64 of a-z, 0-9 and -): also its namespace.
    pub name: String,
    /// Data and database.
    #[command(flatten)]
    pub data: HubDataArgs,
    /// The token's scopes, comma-separated: read (see own private environments), publish
    /// (publish and yank under NAME/; implies read), tokens (list, mint and revoke NAME's
    /// tokens over the API).
    #[arg(long, default_value = "publish,tokens", value_delimiter = ',')]
    pub scopes: Vec<String>,
    /// A label to recognise the token by in listings.
    #[arg(long, default_value = "")]
    pub label: String,
}

/// `temper env ...`.
#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// Create a new environment package folder that `temper eval` runs as it is.
    ///
    /// Writes NAME/environment.toml (single-turn, `<answer>` parser, exact-match reward),
    /// NAME/data/{train,eval}.jsonl with example questions, and NAME/README.md. Edit them, check
    /// with `temper eval ./NAME`, publish with `temper env push NAME`.
    Init(EnvInitArgs),
    /// Validate a package folder, pack it deterministically and publish it.
    ///
    /// Publishes under the token's user: OWNER/NAME@VERSION with NAME and VERSION from
    /// environment.toml. The same version with the same content again changes nothing; with
    /// other content the hub refuses it (versions are immutable: bump the version).
    Push(EnvPushArgs),
    /// Install hub environments into the local store and pin them in temper.lock.
    ///
    /// OWNER/NAME takes the newest version that is not yanked, OWNER/NAME@1.2.0 exactly that
    /// version (even yanked), OWNER/NAME@^1.2 the newest match. An entry in temper.lock that
    /// satisfies the reference is installed exactly (same version, content hash checked);
    /// without arguments, everything temper.lock lists is installed.
    Install(EnvInstallArgs),
    /// Download an environment's sources into a folder, to read or change them.
    Pull(EnvPullArgs),
    /// List installed environments (and whether temper.lock pins them).
    List(EnvListArgs),
    /// Search the hub by owner, name or description.
    Search(EnvSearchArgs),
    /// Show an environment on the hub: versions, content hashes, files.
    Info(EnvInfoArgs),
    /// Yank a version (hidden from resolution; an exact pin still installs it), or --undo.
    Yank(EnvYankArgs),
}

/// `temper env init`.
#[derive(Debug, Args)]
pub struct EnvInitArgs {
    /// The environment's name (2-64 of a-z, 0-9 and -).
    pub name: String,
    /// Folder to create (default: ./NAME).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `temper env push`.
#[derive(Debug, Args)]
pub struct EnvPushArgs {
    /// The package folder.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// Make a new environment visible only to its owner (applies to its first version).
    #[arg(long)]
    pub private: bool,
    /// Which hub.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// `temper env install`.
#[derive(Debug, Args)]
pub struct EnvInstallArgs {
    /// OWNER/NAME[@REQ] references (none: everything in the lockfile).
    pub envs: Vec<String>,
    /// The lockfile.
    #[arg(long, default_value = "temper.lock", value_name = "FILE")]
    pub lock: PathBuf,
    /// Which hub.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// `temper env pull`.
#[derive(Debug, Args)]
pub struct EnvPullArgs {
    /// OWNER/NAME[@REQ].
    pub env: String,
    /// Folder to create (default: ./NAME).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Which hub.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// `temper env list`.
#[derive(Debug, Args)]
pub struct EnvListArgs {
    /// The lockfile to compare with.
    #[arg(long, default_value = "temper.lock", value_name = "FILE")]
    pub lock: PathBuf,
}

/// `temper env search`.
#[derive(Debug, Args)]
pub struct EnvSearchArgs {
    /// Text to look for (empty: everything).
    #[arg(default_value = "")]
    pub query: String,
    /// Most results.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Which hub.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// `temper env info`.
#[derive(Debug, Args)]
pub struct EnvInfoArgs {
    /// OWNER/NAME.
    pub env: String,
    /// Print the files of each version too.
    #[arg(long)]
    pub files: bool,
    /// Show at most this many versions, newest first (the hub answers at most 200).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Which hub.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// `temper env yank`.
#[derive(Debug, Args)]
pub struct EnvYankArgs {
    /// OWNER/NAME@VERSION.
    pub env: String,
    /// Restore the version instead.
    #[arg(long)]
    pub undo: bool,
    /// Which hub.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// `temper plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// Run directories (output.dir of an RL or SFT run); several are drawn on the same charts.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub run_dirs: Vec<PathBuf>,

    /// Where to write the charts (default RUN_DIR/plots; needed for several runs).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Weight of the moving average drawn over noisy series, as TensorBoard's smoothing slider
    /// (0 draws the raw values only).
    #[arg(long, default_value_t = 0.6, value_name = "W")]
    pub smooth: f64,

    /// Also write report.html: the charts, each run's config and last evaluation on one page
    /// that a browser opens offline.
    #[arg(long)]
    pub html: bool,
}

/// `temper orchestrator`.
#[derive(Debug, Args)]
pub struct OrchestratorArgs {
    /// The TOML config (sections [orchestrator], [inference], [[env]], [output]).
    pub config: PathBuf,

    /// Override a config value, e.g. `--set orchestrator.group_size=16` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Continue after the newest orchestrator checkpoint of output.dir.
    #[arg(long)]
    pub resume: bool,

    /// Continue after the checkpoint of exactly this step (what `temper rl --resume` uses, so
    /// the orchestrator rewinds to where the trainer's checkpoint stands).
    #[arg(long, value_name = "STEP", conflicts_with = "resume")]
    pub resume_step: Option<u64>,
}

/// What `temper rl` and `temper sft` take besides their config: overrides and what to do with
/// an earlier run in output.dir.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Override a config value, e.g. `--set optim.lr=1e-3` or `--set trainer.steps=20`
    /// (repeatable; values are TOML, bare words are strings).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Continue the run in output.dir from its newest complete checkpoint (for `temper rl`, the
    /// trainer's; the other roles rewind to it).
    #[arg(long, conflicts_with = "clean")]
    pub resume: bool,

    /// Delete output.dir first if it holds an earlier run.
    #[arg(long)]
    pub clean: bool,
}

/// `temper rl`.
#[derive(Debug, Args)]
pub struct RlArgs {
    /// The TOML config: [model], [inference], [orchestrator], [[env]], [trainer], [optim],
    /// [schedule], [loss], [lora], [output], [warmup], [launch].
    pub config: PathBuf,

    #[command(flatten)]
    pub run: RunArgs,

    /// Check the config (both roles' sections, the model or its warmup config, every
    /// environment) and exit without starting anything.
    #[arg(long)]
    pub check: bool,

    /// Submit the run as a Slurm job instead of running it here: writes OUTPUT_DIR.sbatch
    /// (nodes from [launch], output to OUTPUT_DIR.slurm-JOBID.out), submits it with sbatch
    /// and prints the job id. Inside the job, `temper rl` places each role as a job step.
    #[arg(long, conflicts_with = "check")]
    pub slurm: bool,
}

/// `temper doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// An RL config: its output.dir is checked, with room for its checkpoints and weights.
    pub config: Option<PathBuf>,
    /// The run directory to check (default: the config's output.dir, else outputs/rl).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Override a config value (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// One rank of the MPI check (what the MPI check starts; not for direct use).
    #[arg(long, hide = true)]
    pub mpi_probe: bool,
}

/// `temper trainer`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TrainerArgs {
    /// Benchmarks instead of training.
    #[command(subcommand)]
    pub command: Option<TrainerCommand>,

    /// The TOML config (sections [model], [optim], [schedule], [loss], [trainer], [output]).
    #[arg(required = true)]
    pub config: Option<PathBuf>,

    /// Override a config value, e.g. `--set loss.type=ppo_clip` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Continue from the newest complete trainer checkpoint of output.dir.
    #[arg(long)]
    pub resume: bool,

    /// Device to train on: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// `temper trainer bench`.
#[derive(Debug, Subcommand)]
pub enum TrainerCommand {
    /// Training tokens/s and peak memory next to PyTorch on the same models, batch and optimizer.
    ///
    /// Models: a small Qwen3-shaped model (random weights) and, with --smollm2, SmolLM2-135M.
    /// Each side runs in its own process (peak memory is per process); temper also runs with
    /// gradient checkpointing to show the memory it saves. Prints a table and writes JSON.
    Bench(temper_bench::TrainerBenchArgs),
    /// Seconds to publish weights through the filesystem (write, rename, STABLE) and to read
    /// them back, against their size. Prints a table and writes JSON.
    BenchPublish(temper_bench::PublishBenchArgs),
}

/// `temper sft`.
#[derive(Debug, Args)]
pub struct SftArgs {
    /// The TOML config (sections [model], [data], [train], [optim], [schedule], [eval],
    /// [checkpoint], [output]).
    pub config: PathBuf,

    #[command(flatten)]
    pub run: RunArgs,

    /// Device to train on: cpu, cuda or cuda:N (CUDA needs a `--features cuda` build).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// `temper inference ...`.
#[derive(Debug, Subcommand)]
pub enum InferenceCommand {
    /// Serve a model over HTTP.
    ///
    /// Routes: POST /v1/chat/completions and /v1/completions (OpenAI; streaming with
    /// "stream": true, logprobs, tool calls in the Hermes/Qwen3 format), POST /v1/generate (token
    /// ids in, token ids and logprobs out), GET /v1/models; admin: POST /update_weights
    /// {"path": DIR, "version": N} swaps in the safetensors of DIR between two decode steps,
    /// POST /pause and /resume, GET /health and GET /metrics (Prometheus).
    Serve(InferenceServeArgs),
    /// Measure prefill and decode throughput, side by side with Hugging Face transformers.
    ///
    /// Greedy decoding of batches of equal-length prompts (token ids), timed the same way on both
    /// sides: prefill tokens/s (one forward over every prompt) and decode tokens/s (the tokens
    /// after the first). The model is exported as Hugging Face safetensors (f32) for transformers,
    /// which runs in the Python given by --python (a virtual environment with torch and
    /// transformers; scripts/bench-inference makes one). Prints a table and writes JSON.
    Bench(temper_bench::InferenceBenchArgs),
}

/// `temper inference serve`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("model_given").required(true).args(["model_path", "model"])))]
pub struct InferenceServeArgs {
    /// The model: a folder in the Hugging Face layout (config.json, safetensors, tokenizer.json,
    /// tokenizer_config.json) or a .gguf file (as `vllm serve MODEL`).
    #[arg(value_name = "MODEL", conflicts_with = "model")]
    pub model_path: Option<PathBuf>,
    /// The model, as a flag (the same as MODEL).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// Address to listen on (port 0: a free one).
    #[arg(long, default_value = "127.0.0.1:8000", conflicts_with_all = ["host", "port"])]
    pub addr: String,
    /// Host to listen on (as vLLM's; 0.0.0.0 for every interface) [default: 127.0.0.1].
    #[arg(long)]
    pub host: Option<String>,
    /// Port to listen on (as vLLM's --port; 0: a free one) [default: 8000].
    #[arg(long)]
    pub port: Option<u16>,
    /// Once listening, write the address clients reach the server at (`host:port`; the node's
    /// name for an address on all interfaces) to this file.
    #[arg(long, value_name = "FILE")]
    pub address_file: Option<PathBuf>,
    /// Name reported as `model` in responses (default: the file or folder name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Precision of the weights and activations.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    pub dtype: Precision,
    /// Where to compute: `cpu`, or `cuda` / `cuda:N` (needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Sequences decoding at once; further requests wait.
    #[arg(long, default_value_t = 64)]
    pub max_running: usize,
    /// Tokens fed to the model per step: one per decoding sequence, the rest for prompts (a
    /// longer prompt is prefilled in chunks over several steps, beside the decodes).
    #[arg(long, default_value_t = 4096)]
    pub max_step_tokens: usize,
    /// Requests allowed to wait; beyond it requests get 429.
    #[arg(long, default_value_t = 4096)]
    pub max_waiting: usize,
    /// Key/value cache positions one request may reserve (n × (prompt + max_tokens)) and all
    /// running requests together; a larger request is refused, others wait (0: max-running ×
    /// the context length).
    #[arg(long, default_value_t = 0)]
    pub max_kv_tokens: usize,
    /// Prompt positions kept after their prefill for later prompts that begin with the same
    /// tokens (in whole blocks of 64: a shared system prompt, a conversation's earlier turns), so
    /// their keys and values are not computed again; least recently used first out, all out on a
    /// weight update (0: keep none).
    #[arg(long, default_value_t = 4096)]
    pub prefix_cache_tokens: usize,
    /// Longest context served (default: the model's).
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// A Jinja chat template file to use instead of the model's.
    #[arg(long)]
    pub chat_template: Option<PathBuf>,
    /// Seed of the sampler for requests without a seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Floating-point precision of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Precision {
    /// 32-bit floats (the reference: logprobs match the trainer's).
    F32,
    /// bfloat16.
    Bf16,
    /// float16.
    F16,
}

/// `temper sandbox ...`.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Run one program in a fresh sandbox and print the result as JSON.
    ///
    /// Prints {"status", "exit_code", "signal", "stdout", "stderr", "wall_ms", "cpu_ms",
    /// "max_rss_kb"}; status is ok, runtime_error, timeout, memory_limit, output_limit,
    /// compile_error or internal_error. Exits 0 whenever the sandbox worked, whatever the program
    /// did, and 1 on internal_error. Needs root (user namespaces are mapped and cgroups managed).
    Run(SandboxRunArgs),
    /// Serve the sandbox over HTTP (one-shot runs, test runs, sessions).
    Serve(SandboxServeArgs),
    /// Measure start-up latency and throughput, side by side with bubblewrap.
    Bench(temper_bench::SandboxBenchArgs),
}

/// `temper sandbox run`.
#[derive(Debug, Args)]
pub struct SandboxRunArgs {
    /// The program's source file.
    pub file: PathBuf,
    /// Language: python, bash, c or cpp (default: from the file's extension).
    #[arg(long)]
    pub lang: Option<String>,
    /// Wall-clock limit in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub time_limit_ms: u64,
    /// Memory limit in MiB.
    #[arg(long, default_value_t = 256)]
    pub memory_mb: u64,
    /// Most bytes kept of each output stream.
    #[arg(long, default_value_t = 1 << 20)]
    pub output_bytes: u64,
    /// A file given to the program on standard input.
    #[arg(long, value_name = "FILE")]
    pub stdin: Option<PathBuf>,
}

/// `temper sandbox serve`.
#[derive(Debug, Args)]
pub struct SandboxServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub addr: String,
    /// Warm sandboxes kept ready.
    #[arg(long, default_value_t = 8)]
    pub pool_size: usize,
    /// Runs at once; more wait in line, and past the queue limit get 429.
    #[arg(long, default_value_t = 16)]
    pub max_concurrent: usize,
    /// Most open sessions.
    #[arg(long, default_value_t = 1024)]
    pub max_sessions: usize,
    /// Seconds an idle session lives.
    #[arg(long, default_value_t = 300)]
    pub idle_timeout_s: u64,
    /// The longest wall-clock limit a request may get, in ms (more is clamped to it).
    #[arg(long, default_value_t = temper_sandbox::config::DEFAULT_MAX_TIME_LIMIT_MS)]
    pub max_time_limit_ms: u64,
    /// The most memory a request may get, in MiB (more is clamped to it).
    #[arg(long, default_value_t = temper_sandbox::config::DEFAULT_MAX_MEMORY_MB)]
    pub max_memory_mb: u64,
    /// The most output kept per stream of a request, in bytes (more is clamped to it).
    #[arg(long, default_value_t = temper_sandbox::config::DEFAULT_MAX_OUTPUT_BYTES)]
    pub max_output_bytes: u64,
}

/// `temper verify ...`.
#[derive(Debug, Subcommand)]
pub enum VerifyCommand {
    /// Is an answer mathematically equivalent to the reference?
    ///
    /// With --gold and --answer, prints `true` or `false`. The answer may be a whole completion:
    /// its final answer is the last \boxed{}, else a final "answer is ..." line, else the text
    /// itself when short. With --jsonl, reads lines {"gold": ..., "answer": ...} and writes each
    /// line back to stdout with "equivalent" added, in the same order, checking lines in parallel.
    Math(VerifyMathArgs),
}

/// `temper verify math`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["gold", "jsonl"])))]
pub struct VerifyMathArgs {
    /// The reference answer.
    #[arg(long, requires = "answer", conflicts_with = "jsonl")]
    pub gold: Option<String>,

    /// The answer or completion to check.
    #[arg(long, requires = "gold")]
    pub answer: Option<String>,

    /// A JSON-lines file of {"gold", "answer"} objects (`-` for standard input).
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,

    /// Also write the rule that decided and the answers as parsed (JSONL mode).
    #[arg(long)]
    pub explain: bool,
}

/// Which part of the dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SplitArg {
    /// Held-out examples.
    Eval,
    /// Training examples.
    Train,
}

/// `temper eval`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct EvalArgs {
    /// Reports over finished runs.
    #[command(subcommand)]
    pub command: Option<EvalCommand>,

    /// A built-in environment name (see `temper envs`), a folder holding environment.toml, or
    /// a hub environment OWNER/NAME[@REQ] (installed on first use and pinned in temper.lock).
    #[arg(required_unless_present = "suite", conflicts_with = "suite")]
    pub env: Option<String>,

    /// Run a benchmark suite instead of one environment: a built-in suite (`intellect3`) or a
    /// suite file. Each benchmark runs with the suite's protocol; -n, -r and the sampling flags,
    /// when given, override every benchmark's.
    #[arg(long, value_name = "NAME|FILE")]
    pub suite: Option<String>,

    /// The folder holding the suite's data files (each benchmark's `data` names its file).
    #[arg(long, value_name = "DIR", requires = "suite")]
    pub data: Option<PathBuf>,

    /// Run only these benchmarks of the suite (comma-separated names).
    #[arg(long, value_name = "NAMES", value_delimiter = ',', requires = "suite")]
    pub only: Vec<String>,

    /// Print the suite file (to copy and edit) and exit.
    #[arg(long, requires = "suite")]
    pub print_suite: bool,

    /// Base URL of an OpenAI-compatible server (requests go to URL/chat/completions).
    #[arg(long, short = 'm', default_value = "http://localhost:8000/v1", value_name = "URL")]
    pub model: String,

    /// Model name sent in each request [default: the one model the server lists at
    /// URL/models; `default` when it lists none].
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,

    /// Name of the environment variable holding the API key (unset means no key).
    #[arg(long, default_value = env_vars::DEFAULT_API_KEY_VAR, value_name = "VAR")]
    pub api_key_var: String,

    /// Examples to evaluate, from the start of the split (0 means all) [default: 5; with
    /// --suite, each benchmark's `num_examples`].
    #[arg(short = 'n', long = "num-examples")]
    pub num_examples: Option<usize>,

    /// Rollouts per example (pass@k is reported for k = 1, 2, 4, ... up to this) [default: 3;
    /// with --suite, each benchmark's `samples`].
    #[arg(short = 'r', long = "rollouts-per-example", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub rollouts: Option<u32>,

    /// Most requests in flight to the model server at any moment.
    #[arg(short = 'c', long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub concurrency: u64,

    /// Sampling temperature (-T, as in vf-eval).
    #[arg(long, short = 'T', allow_negative_numbers = true)]
    pub temperature: Option<f64>,

    /// Nucleus sampling mass.
    #[arg(long)]
    pub top_p: Option<f64>,

    /// Keep only the top-k tokens (server extension).
    #[arg(long)]
    pub top_k: Option<u32>,

    /// Min-p sampling (server extension).
    #[arg(long)]
    pub min_p: Option<f64>,

    /// Most tokens per model turn (-t, as in vf-eval).
    #[arg(long, short = 't')]
    pub max_tokens: Option<u32>,

    /// Sampling seed; rollout i of a group uses seed + i.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Which split to evaluate.
    #[arg(long, value_enum, default_value_t = SplitArg::Eval)]
    pub split: SplitArg,

    /// Seed of generated datasets and held-out splits.
    #[arg(long, default_value_t = 0)]
    pub data_seed: u64,

    /// Output folder (default: outputs/evals/ENV--MODEL/TIMESTAMP, or suite-NAME--MODEL for a
    /// suite; with --resume, the latest).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,

    /// Continue a killed run in the output folder; refuses if the configuration changed.
    #[arg(long)]
    pub resume: bool,

    /// Retries of a request after HTTP 408/429/5xx, a timeout or a refused connection.
    #[arg(long, default_value_t = 5)]
    pub max_retries: u32,

    /// Seconds before one request attempt times out.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,

    /// Reward at or above which a rollout counts as passing for pass@k [default: 0.5; with
    /// --suite, each benchmark's `pass_threshold`].
    #[arg(long)]
    pub pass_threshold: Option<f64>,

    /// Base URL of the judge model for `llm_judge` rewards (default: the evaluated model).
    #[arg(long, value_name = "URL")]
    pub judge_model: Option<String>,

    /// Model name of the judge.
    #[arg(long, value_name = "NAME")]
    pub judge_model_name: Option<String>,

    /// Name of the environment variable holding the judge's API key (the evaluated model's key
    /// is never sent to another server).
    #[arg(long, value_name = "VAR")]
    pub judge_api_key_var: Option<String>,

    /// A sandbox server (`temper sandbox serve`) to run model-written code in, instead of a local
    /// sandbox.
    #[arg(long, value_name = "URL")]
    pub sandbox: Option<String>,

    /// When the local sandbox cannot start (it needs root), run model-written code (code
    /// environments, `script` rewards, the python tool) as plain processes of this user, with no
    /// isolation. Only for code you trust.
    #[arg(long)]
    pub allow_unsandboxed_code: bool,

    /// Let this environment, if it is an external one, start the program its package names
    /// (`env.command`): it runs as this user, unsandboxed. Consent for this package's own program
    /// only; model-written code still needs a sandbox or --allow-unsandboxed-code.
    #[arg(long)]
    pub allow_external_command: bool,
}

/// `temper eval ...` subcommands.
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// A table of every benchmark of one or more runs, with differences from the first run.
    ///
    /// Each RUN is the output folder of `temper eval` or of `temper eval --suite`. For each
    /// benchmark and run: avg@k (the mean over problems of each problem's mean reward) and pass@k
    /// with 95% intervals over problems, and each later run's difference from the first over the
    /// problems both finished, with its interval. Prints the table as Markdown and writes
    /// report.md, report.json and avg_at_k.png.
    Report(EvalReportArgs),
}

/// `temper eval report`.
#[derive(Debug, Args)]
pub struct EvalReportArgs {
    /// Run folders; the first is the baseline of the differences.
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,

    /// What to call each run, in order (repeatable; default: the model name the run recorded,
    /// with the folder's name when two runs share one).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,

    /// Where to write the files (default: RUN/report for one run, else outputs/reports/TIMESTAMP).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<PathBuf>,
}
