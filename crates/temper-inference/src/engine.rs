//! The engine: one thread owns the model and runs steps; requests join between steps
//! (continuous batching) and results stream back per token.
//!
//! A step feeds every running sequence its pending tokens in one ragged batch
//! ([`Transformer::step`]): one token for a decoding sequence, the whole prompt for a newly
//! admitted request, and everything so far for a sequence whose weights were just replaced. A
//! request for `n` samples is prefilled once and its cache forked `n` ways.
//!
//! New weights are swapped in between steps. The cache of a running sequence was computed with
//! the old weights, so it is rebuilt (one prefill of the tokens so far) before its next token:
//! every token is drawn from, and reports the logprob of, exactly one version of the model on
//! exactly the tokens before it, which is what the trainer recomputes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};

use candle_core::{DType, Tensor};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use temper_model::{KvCache, Logits, ModelConfig, StreamDecoder, Tokenizer, Transformer};
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::prefix::PrefixCache;

use crate::sampling::{
    DEVICE_DRAW_BYTES, DevicePick, Draw, SamplingOptions, device_drawable, draw, draw_on_device,
};

/// Limits of the scheduler.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Sequences decoding at once; requests beyond wait.
    pub max_running: usize,
    /// Tokens one step feeds the model: a token per decoding sequence, the rest for prompts. A
    /// longer prompt is prefilled in chunks over several steps, beside the running sequences'
    /// decodes (chunked prefill), so it never stalls them.
    pub max_step_tokens: usize,
    /// Requests allowed to wait; more are refused as overload.
    pub max_waiting: usize,
    /// Seed of the engine's own generator (for requests without a seed).
    pub seed: u64,
    /// Threads the engine computes with (0: one per available core).
    pub threads: usize,
    /// Key/value cache positions one request may reserve, and all running requests together: a
    /// request reserves `n × min(prompt + max_tokens, context)` positions, one request over the
    /// limit is refused, and one that would take the running total over it waits. 0 means
    /// `max_running ×` the model's context length (what `max_running` full-length sequences
    /// hold); a lower value bounds cache memory to what the device can hold.
    pub max_kv_tokens: usize,
    /// Where tokens are drawn from the logits (see [`SampleOn`]).
    pub sample_on: SampleOn,
    /// Prompt positions kept after their prefill for later prompts that begin with the same
    /// tokens (in whole blocks of 64: a shared system prompt, a conversation's earlier turns),
    /// whose keys and values are then not computed again; least recently used first out, all out
    /// when the weights change. 0 keeps none.
    pub prefix_cache_tokens: usize,
}

/// Where the engine draws tokens from the logits of a step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SampleOn {
    /// On the host for a model on the CPU (the logits are already there), on the device
    /// otherwise.
    #[default]
    Auto,
    /// Every row of logits is copied to the host and drawn from there.
    Host,
    /// Where the logits are: greedy and plain temperature draws copy back only their ids and
    /// logprobs; requests with top-k, top-p, min-p or `top_logprobs` still copy their row.
    Device,
}

impl std::str::FromStr for SampleOn {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "host" => Ok(Self::Host),
            "device" => Ok(Self::Device),
            _ => Err(format!("expected auto, host or device, got {s:?}")),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_running: 64,
            max_step_tokens: 4096,
            max_waiting: 4096,
            seed: 0,
            threads: 0,
            max_kv_tokens: 0,
            sample_on: SampleOn::Auto,
            prefix_cache_tokens: 4096,
        }
    }
}

/// A generation request: `n` continuations of `prompt`.
#[derive(Debug, Clone)]
pub struct Request {
    /// Token ids of the prompt.
    pub prompt: Vec<u32>,
    /// How to sample.
    pub options: SamplingOptions,
    /// Continuations wanted (they share one prefill).
    pub n: usize,
}

/// Why a sequence ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// A stop token or stop string was generated.
    Stop,
    /// `max_tokens` or the model's context length was reached.
    Length,
    /// The engine failed on this sequence (the message says why).
    Error(String),
}

/// What the engine reports about one continuation (`index` of `0..n`).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A token was drawn.
    Token {
        /// Which continuation.
        index: usize,
        /// The token.
        id: u32,
        /// Its logprob under the sampling distribution (temperature applied, no filters).
        logprob: f32,
        /// The most likely alternatives, when asked for.
        top: Vec<(u32, f32)>,
        /// Text this token completes (held back while it may begin a stop string).
        text: String,
        /// Weight version that drew it.
        version: u64,
    },
    /// The continuation ended; `text` is what was still held back.
    Finished {
        /// Which continuation.
        index: usize,
        /// Why.
        reason: Finish,
        /// Remaining text.
        text: String,
    },
}

/// Why a request was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    /// The request is malformed (the message names the field).
    #[error("{0}")]
    Invalid(String),
    /// Too many requests are waiting.
    #[error("the engine has {0} requests waiting; try again later")]
    Overloaded(usize),
    /// The engine thread has stopped.
    #[error("the engine has stopped")]
    Stopped,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Prompt tokens prefilled (re-prefills after a weight update included).
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens whose keys and values came from kept prefixes instead of a prefill.
    pub prefix_hit_tokens: AtomicU64,
    /// Prompt positions kept for later prompts (see [`EngineConfig::prefix_cache_tokens`]).
    pub prefix_cache_tokens: AtomicUsize,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Steps run.
    pub steps: AtomicU64,
    /// Requests finished.
    pub requests: AtomicU64,
    /// Requests waiting.
    pub waiting: AtomicUsize,
    /// Sequences decoding.
    pub running: AtomicUsize,
    /// Positions held in key/value caches.
    pub kv_tokens: AtomicUsize,
    /// Weight version being served.
    pub version: AtomicU64,
    /// Whether scheduling is paused.
    pub paused: AtomicBool,
    /// Bytes copied from the model's device to the host to draw tokens: a whole row of logits
    /// per draw made on the host, an id and a logprob per draw made on the device.
    pub readback_bytes: AtomicU64,
}

enum Control {
    Submit(Box<Waiting>),
    Update(Box<Transformer>, u64, oneshot::Sender<u64>),
    Pause(bool),
}

struct Waiting {
    req: Request,
    out: tmpsc::UnboundedSender<Event>,
    seed: u64,
}

/// A handle to the engine thread; cheap to clone. The thread stops when every handle is gone.
#[derive(Debug, Clone)]
pub struct Engine {
    tx: mpsc::Sender<Control>,
    stats: Arc<Stats>,
    config: Arc<ModelConfig>,
    tokenizer: Arc<Tokenizer>,
    max_waiting: usize,
    max_running: usize,
    /// Key/value positions one request may reserve, and all running ones together (see
    /// [`EngineConfig::max_kv_tokens`]; resolved, never 0).
    max_kv_tokens: usize,
    seeds: Arc<std::sync::Mutex<ChaCha8Rng>>,
    /// The threads the engine runs on; they end once every handle is dropped.
    _pool: Arc<rayon::ThreadPool>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Control::Submit(_) => "Submit",
            Control::Update(..) => "Update",
            Control::Pause(_) => "Pause",
        })
    }
}

impl Engine {
    /// Starts the engine thread with `model` at weight version `version`. The engine computes with
    /// the model [frozen](Transformer::frozen) (no gradient graph).
    pub fn start(
        model: Transformer,
        tokenizer: Tokenizer,
        cfg: EngineConfig,
        version: u64,
    ) -> Self {
        let model = freeze(model);
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(Stats::default());
        stats.version.store(version, Ordering::Relaxed);
        let config = Arc::new(model.config().clone());
        let tokenizer = Arc::new(tokenizer);
        let max_waiting = cfg.max_waiting;
        let max_running = cfg.max_running;
        let max_kv_tokens = match cfg.max_kv_tokens {
            0 => max_running.saturating_mul(config.max_position_embeddings),
            t => t,
        };
        let seeds = Arc::new(std::sync::Mutex::new(ChaCha8Rng::seed_from_u64(cfg.seed)));
        let worker = Worker {
            model,
            version,
            tokenizer: tokenizer.clone(),
            prefixes: PrefixCache::new(cfg.prefix_cache_tokens),
            cfg,
            stats: stats.clone(),
            max_kv_tokens,
            running: Vec::new(),
            prefilling: Vec::new(),
        };
        // The loop runs on a worker of the engine's own thread pool, and the tensor kernels it calls
        // split their work over that pool: no thread beyond the pool competes for the cores (one
        // more cost 20–40% of decode throughput on two cores). The pool is the engine's alone, so
        // an idle engine blocking its worker holds up nobody else.
        let threads = if worker.cfg.threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            worker.cfg.threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("temper-engine-{i}"))
            .build()
            .expect("starting the engine's threads");
        pool.spawn(move || worker.run(&rx));
        Self {
            tx,
            stats,
            config,
            tokenizer,
            max_waiting,
            max_running,
            max_kv_tokens,
            seeds,
            _pool: Arc::new(pool),
        }
    }

    /// Key/value cache positions a request may reserve (see [`EngineConfig::max_kv_tokens`]).
    pub fn max_kv_tokens(&self) -> usize {
        self.max_kv_tokens
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Queues `req`; events arrive on the returned channel until each of the `n` continuations
    /// has finished. Dropping the receiver cancels the request.
    pub fn submit(&self, req: Request) -> Result<tmpsc::UnboundedReceiver<Event>, SubmitError> {
        req.options.validate().map_err(SubmitError::Invalid)?;
        if req.n == 0 || req.n > 128 {
            return Err(SubmitError::Invalid(format!("n must be in 1..=128, got {}", req.n)));
        }
        // The scheduler lets a request in alone when it is idle: one wider than the batch would
        // run past `max_running`.
        if req.n > self.max_running {
            return Err(SubmitError::Invalid(format!(
                "n is {}; this engine runs at most {} sequences at once (max_running)",
                req.n, self.max_running
            )));
        }
        if req.prompt.is_empty() {
            return Err(SubmitError::Invalid("the prompt is empty".into()));
        }
        self.check_prompt_len(req.prompt.len())?;
        let max_pos = self.config.max_position_embeddings;
        if let Some(bad) = req.prompt.iter().find(|&&t| t as usize >= self.config.vocab_size) {
            return Err(SubmitError::Invalid(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.config.vocab_size
            )));
        }
        if let Some(bad) =
            req.options.stop_token_ids.iter().find(|&&t| t as usize >= self.config.vocab_size)
        {
            return Err(SubmitError::Invalid(format!(
                "stop_token_ids: id {bad} is outside the vocabulary of {}",
                self.config.vocab_size
            )));
        }
        let per_seq = kv_reservation(req.prompt.len(), req.options.max_tokens, max_pos);
        let need = per_seq.saturating_mul(req.n);
        let budget = self.max_kv_tokens();
        if need > budget {
            return Err(SubmitError::Invalid(format!(
                "n × min(prompt + max_tokens, context) is {} × {per_seq} = {need} key/value cache \
                 positions; this engine allows {budget} per request (max_kv_tokens)",
                req.n
            )));
        }
        let waiting = self.stats.waiting.load(Ordering::Relaxed);
        if waiting >= self.max_waiting {
            return Err(SubmitError::Overloaded(waiting));
        }
        let seed = match req.options.seed {
            Some(s) => s,
            None => self.seeds.lock().map(|mut r| r.next_u64()).unwrap_or(0),
        };
        let (out, rx) = tmpsc::unbounded_channel();
        self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send(Control::Submit(Box::new(Waiting { req, out, seed })))
            .map_err(|_| SubmitError::Stopped)?;
        Ok(rx)
    }

    /// Refuses a prompt of `len` tokens that leaves no room in the model's context (as
    /// [`submit`](Engine::submit) does; callers that tokenize can check before copying it).
    pub fn check_prompt_len(&self, len: usize) -> Result<(), SubmitError> {
        let max_pos = self.config.max_position_embeddings;
        if len >= max_pos {
            return Err(SubmitError::Invalid(format!(
                "the prompt has {len} tokens; the model's context is {max_pos}"
            )));
        }
        Ok(())
    }

    /// Replaces the weights between two steps; resolves to the new version once in use.
    pub async fn update_weights(
        &self,
        model: Transformer,
        version: u64,
    ) -> Result<u64, SubmitError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Control::Update(Box::new(model), version, tx))
            .map_err(|_| SubmitError::Stopped)?;
        rx.await.map_err(|_| SubmitError::Stopped)
    }

    /// Stops (or restarts) scheduling steps; requests keep queueing while paused.
    pub fn set_paused(&self, paused: bool) -> Result<(), SubmitError> {
        self.tx.send(Control::Pause(paused)).map_err(|_| SubmitError::Stopped)
    }
}

struct Seq {
    index: usize,
    /// Prompt and generated tokens.
    tokens: Vec<u32>,
    prompt_len: usize,
    /// Tokens to feed at the next step (not yet in the cache).
    pending: Vec<u32>,
    cache: KvCache,
    rng: ChaCha8Rng,
    options: Arc<SamplingOptions>,
    /// Ids that end the sequence, sorted and without repeats (searched once per token).
    stop_ids: Arc<Vec<u32>>,
    /// Cache positions this sequence may grow to (counted against `max_kv_tokens`).
    reserved: usize,
    out: tmpsc::UnboundedSender<Event>,
    decoder: StreamDecoder,
    /// Completion text decoded so far, and how much of it was sent.
    text: String,
    sent: usize,
    /// Siblings still running (the request counts as finished when the last one ends).
    siblings: Arc<AtomicUsize>,
}

struct Worker {
    model: Transformer,
    version: u64,
    tokenizer: Arc<Tokenizer>,
    cfg: EngineConfig,
    stats: Arc<Stats>,
    /// See [`EngineConfig::max_kv_tokens`] (resolved).
    max_kv_tokens: usize,
    running: Vec<Seq>,
    /// Admitted requests whose prompts are partly in their caches, oldest first.
    prefilling: Vec<Prefill>,
    /// Prompt prefixes kept for later prompts.
    prefixes: PrefixCache,
}

/// An admitted request while its prompt is prefilled, chunk by chunk.
struct Prefill {
    w: Waiting,
    cache: KvCache,
    /// Prompt tokens in the cache.
    done: usize,
}

impl Worker {
    fn run(mut self, rx: &mpsc::Receiver<Control>) {
        let mut waiting: VecDeque<Waiting> = VecDeque::new();
        let mut paused = false;
        loop {
            // Take every control message; block when there is nothing to do.
            let idle = paused
                || (waiting.is_empty() && self.running.is_empty() && self.prefilling.is_empty());
            let first = if idle {
                match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => return,
                }
            } else {
                None
            };
            for msg in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
                match msg {
                    Control::Submit(w) => waiting.push_back(*w),
                    Control::Update(model, version, reply) => {
                        self.swap(*model, version);
                        let _ = reply.send(version);
                    }
                    Control::Pause(p) => {
                        paused = p;
                        self.stats.paused.store(p, Ordering::Relaxed);
                    }
                }
            }
            if paused {
                continue;
            }
            // Cancelled requests: nobody is listening.
            waiting.retain(|w| {
                let keep = !w.out.is_closed();
                if !keep {
                    self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
                }
                keep
            });
            self.running.retain(|s| !s.out.is_closed());
            self.prefilling.retain(|p| !p.w.out.is_closed());
            self.admit(&mut waiting);
            if !self.prefilling.is_empty() || !self.running.is_empty() {
                self.step();
            }
            self.stats.running.store(self.running.len(), Ordering::Relaxed);
            self.stats
                .kv_tokens
                .store(self.running.iter().map(|s| s.cache.len()).sum(), Ordering::Relaxed);
        }
    }

    fn swap(&mut self, model: Transformer, version: u64) {
        self.model = freeze(model);
        self.version = version;
        self.stats.version.store(version, Ordering::Relaxed);
        self.prefixes.clear();
        self.stats.prefix_cache_tokens.store(0, Ordering::Relaxed);
        for seq in &mut self.running {
            seq.cache = self.model.new_cache();
            seq.pending = seq.tokens.clone();
        }
        for p in &mut self.prefilling {
            p.cache = self.model.new_cache();
            p.done = 0;
        }
    }

    /// Tokens of this step left for prompts once every running sequence has its pending ones.
    fn prompt_budget(&self) -> usize {
        let pending: usize = self.running.iter().map(|s| s.pending.len()).sum();
        self.cfg.max_step_tokens.saturating_sub(pending)
    }

    /// Moves requests from the queue to prefilling while the step has prompt tokens to spare
    /// and the sequence and cache limits allow.
    fn admit(&mut self, waiting: &mut VecDeque<Waiting>) {
        let mut seqs =
            self.running.len() + self.prefilling.iter().map(|p| p.w.req.n).sum::<usize>();
        let max_kv = self.max_kv_tokens;
        let ctx = self.model.config().max_position_embeddings;
        let mut kv: usize = self.running.iter().map(|s| s.reserved).sum::<usize>()
            + self
                .prefilling
                .iter()
                .map(|p| {
                    kv_reservation(p.w.req.prompt.len(), p.w.req.options.max_tokens, ctx)
                        .saturating_mul(p.w.req.n)
                })
                .sum::<usize>();
        let mut budget = self
            .prompt_budget()
            .saturating_sub(self.prefilling.iter().map(|p| p.w.req.prompt.len() - p.done).sum());
        while let Some(w) = waiting.front() {
            // On an idle engine the first request goes in whatever its size (`submit` keeps its
            // `n` and cache within the limits); a prompt longer than a step is prefilled in
            // chunks.
            let first = self.running.is_empty() && self.prefilling.is_empty();
            let need = kv_reservation(w.req.prompt.len(), w.req.options.max_tokens, ctx)
                .saturating_mul(w.req.n);
            if !first
                && (seqs + w.req.n > self.cfg.max_running
                    || budget == 0
                    || kv.saturating_add(need) > max_kv)
            {
                break;
            }
            seqs += w.req.n;
            kv = kv.saturating_add(need);
            self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
            let w = waiting.pop_front().expect("the front was there");
            let (done, cache) =
                self.prefixes.lookup(&w.req.prompt).unwrap_or_else(|| (0, self.model.new_cache()));
            self.stats.prefix_hit_tokens.fetch_add(done as u64, Ordering::Relaxed);
            budget = budget.saturating_sub(w.req.prompt.len() - done);
            self.prefilling.push(Prefill { w, cache, done });
        }
    }

    fn step(&mut self) {
        // The prompt chunks of this step: oldest request first, as much of each as the budget
        // leaves (the oldest always gets a token, so it moves even under a full batch).
        let mut budget = self.prompt_budget();
        let mut takes = Vec::with_capacity(self.prefilling.len());
        for (i, p) in self.prefilling.iter().enumerate() {
            let left = p.w.req.prompt.len() - p.done;
            let take = left.min(if i == 0 { budget.max(1) } else { budget });
            budget -= take.min(budget);
            takes.push(take);
        }
        let pending: Vec<Vec<u32>> =
            self.running.iter_mut().map(|s| std::mem::take(&mut s.pending)).collect();
        let result = {
            let mut chunks: Vec<&[u32]> = pending.iter().map(Vec::as_slice).collect();
            let mut caches: Vec<&mut KvCache> =
                self.running.iter_mut().map(|s| &mut s.cache).collect();
            for (p, &take) in self.prefilling.iter_mut().zip(&takes) {
                if take > 0 {
                    chunks.push(&p.w.req.prompt[p.done..p.done + take]);
                    caches.push(&mut p.cache);
                }
            }
            self.model.step(&chunks, &mut caches, Logits::Last).and_then(|rows| {
                if rows.is_empty() {
                    return Ok(None);
                }
                Ok(Some(Tensor::stack(&rows, 0)?))
            })
        };
        self.stats.steps.fetch_add(1, Ordering::Relaxed);
        let fed: usize = pending.iter().map(Vec::len).sum::<usize>() + takes.iter().sum::<usize>();
        let decoded = pending.iter().filter(|p| p.len() == 1).count();
        self.stats.prompt_tokens.fetch_add((fed - decoded) as u64, Ordering::Relaxed);

        // Every sequence with the row of logits it draws from: the running ones, then the `n`
        // sequences of each request whose prompt is now whole (they share its last row).
        // Requests still partway keep prefilling (their rows go unused); a failed step ends
        // every request it fed.
        let mut seqs: Vec<(usize, Seq)> =
            std::mem::take(&mut self.running).into_iter().enumerate().collect();
        let mut row = seqs.len();
        let mut failed = Vec::new();
        let mut still = Vec::with_capacity(self.prefilling.len());
        for (mut p, take) in std::mem::take(&mut self.prefilling).into_iter().zip(takes) {
            if take == 0 {
                still.push(p);
                continue;
            }
            p.done += take;
            if result.is_err() {
                failed.push(p.w);
            } else if p.done == p.w.req.prompt.len() {
                self.prefixes.insert(&p.w.req.prompt, &p.cache);
                self.stats.prefix_cache_tokens.store(self.prefixes.held(), Ordering::Relaxed);
                seqs.extend(self.spawn(p.w, p.cache).into_iter().map(|s| (row, s)));
            } else {
                still.push(p);
            }
            row += 1;
        }
        self.prefilling = still;
        let draws = match result {
            Ok(Some(logits)) => self.draw_all(&logits, &mut seqs),
            Ok(None) => Ok(Vec::new()),
            Err(e) => Err(format!("model step failed: {e}")),
        };
        let draws = match draws {
            Ok(d) => d,
            Err(msg) => {
                tracing::error!("{msg}");
                for (_, seq) in seqs {
                    let _ = seq.out.send(Event::Finished {
                        index: seq.index,
                        reason: Finish::Error(msg.clone()),
                        text: String::new(),
                    });
                }
                for w in failed {
                    for index in 0..w.req.n {
                        let _ = w.out.send(Event::Finished {
                            index,
                            reason: Finish::Error(msg.clone()),
                            text: String::new(),
                        });
                    }
                }
                return;
            }
        };
        let mut keep = Vec::with_capacity(seqs.len());
        for ((_, mut seq), d) in seqs.into_iter().zip(draws) {
            if self.advance(&mut seq, d) {
                keep.push(seq);
            }
        }
        self.running = keep;
    }

    /// The `n` sequences of an admitted request, sharing its prefilled cache (forked `n - 1`
    /// times: an f32 CPU cache's blocks are shared until a sample writes into one); a sequence
    /// whose fork failed is finished with an error instead.
    fn spawn(&self, w: Waiting, cache: KvCache) -> Vec<Seq> {
        let options = Arc::new(w.req.options);
        let stop_ids = Arc::new(stop_ids(&options, self.model.config()));
        let ctx = self.model.config().max_position_embeddings;
        let reserved = kv_reservation(w.req.prompt.len(), options.max_tokens, ctx);
        let siblings = Arc::new(AtomicUsize::new(w.req.n));
        let mut first = Some(cache);
        let mut out = Vec::with_capacity(w.req.n);
        for index in 0..w.req.n {
            let cache = if index + 1 == w.req.n {
                first.take()
            } else {
                first.as_ref().and_then(|c| c.fork().ok())
            };
            let Some(cache) = cache else {
                let _ = w.out.send(Event::Finished {
                    index,
                    reason: Finish::Error("could not copy the prompt's cache".into()),
                    text: String::new(),
                });
                continue;
            };
            out.push(Seq {
                index,
                tokens: w.req.prompt.clone(),
                prompt_len: w.req.prompt.len(),
                pending: Vec::new(),
                cache,
                rng: ChaCha8Rng::seed_from_u64(w.seed.wrapping_add(index as u64)),
                options: options.clone(),
                stop_ids: stop_ids.clone(),
                reserved,
                out: w.out.clone(),
                decoder: StreamDecoder::new(),
                text: String::new(),
                sent: 0,
                siblings: siblings.clone(),
            });
        }
        out
    }

    /// The next token of every sequence, from its row of `logits` (`[rows, vocab]`, where the
    /// model computed them). On the device ([`SampleOn`]) a batch of plain draws returns only
    /// ids and logprobs; rows that need the host (filters, alternatives, or every row when
    /// sampling on the host) are copied over once each. What crosses is counted in
    /// [`Stats::readback_bytes`].
    fn draw_all(&self, logits: &Tensor, seqs: &mut [(usize, Seq)]) -> Result<Vec<Draw>, String> {
        let on_device = match self.cfg.sample_on {
            SampleOn::Host => false,
            SampleOn::Device => true,
            SampleOn::Auto => !logits.device().is_cpu(),
        };
        let vocab = logits.dim(1).map_err(|e| e.to_string())?;
        let host = |s: &Seq| !on_device || !device_drawable(&s.options);
        // The rows the host needs, each copied once.
        let mut host_rows: Vec<usize> =
            seqs.iter().filter(|(_, s)| host(s)).map(|(r, _)| *r).collect();
        host_rows.dedup();
        let host_logits: Vec<Vec<f32>> = if host_rows.is_empty() {
            Vec::new()
        } else {
            let idx: Vec<u32> = host_rows.iter().map(|&r| r as u32).collect();
            let copy = || {
                let idx = Tensor::new(idx.as_slice(), logits.device())?;
                logits.index_select(&idx, 0)?.to_dtype(DType::F32)?.to_vec2::<f32>()
            };
            copy().map_err(|e| format!("copying logits to the host failed: {e}"))?
        };
        let mut draws: Vec<Option<Draw>> = Vec::with_capacity(seqs.len());
        let mut picks = Vec::new();
        let mut picked = Vec::new();
        for (i, (row, seq)) in seqs.iter_mut().enumerate() {
            if host(seq) {
                // `host_rows` is in the order of `seqs`, whose rows never decrease.
                let at = host_rows.binary_search(row).unwrap_or_default();
                draws.push(Some(draw(&host_logits[at], &seq.options, &mut seq.rng)));
            } else {
                let temperature = seq.options.temperature;
                let u = if temperature == 0.0 { 0.0 } else { seq.rng.random::<f64>() };
                picks.push(DevicePick { row: *row, temperature, u });
                picked.push(i);
                draws.push(None);
            }
        }
        let on = draw_on_device(logits, &picks)
            .map_err(|e| format!("drawing tokens on the model's device failed: {e}"))?;
        for (i, d) in picked.into_iter().zip(on) {
            draws[i] = Some(d);
        }
        let bytes =
            host_rows.len() as u64 * vocab as u64 * 4 + picks.len() as u64 * DEVICE_DRAW_BYTES;
        self.stats.readback_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(draws.into_iter().map(|d| d.expect("every sequence was drawn")).collect())
    }

    /// Takes `d` as the next token of `seq`; returns whether it goes on.
    fn advance(&self, seq: &mut Seq, d: Draw) -> bool {
        seq.tokens.push(d.id);
        seq.pending.clear();
        seq.pending.push(d.id);
        self.stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
        let generated = seq.tokens.len() - seq.prompt_len;
        let piece = seq.decoder.step(&self.tokenizer, d.id, true).unwrap_or_default();
        seq.text.push_str(&piece);

        let mut finish = None;
        if seq.stop_ids.binary_search(&d.id).is_ok() {
            finish = Some(Finish::Stop);
        } else if let Some(at) =
            find_stop(&seq.text, seq.text.len() - piece.len(), &seq.options.stop)
        {
            seq.text.truncate(at);
            finish = Some(Finish::Stop);
        } else if generated >= seq.options.max_tokens
            || seq.tokens.len() >= self.model.config().max_position_embeddings
        {
            finish = Some(Finish::Length);
        }
        let safe = if finish.is_some() {
            seq.text.len()
        } else {
            safe_prefix(&seq.text, seq.sent, &seq.options.stop)
        };
        let text = seq.text[seq.sent.min(safe)..safe].to_owned();
        seq.sent = seq.sent.max(safe);
        let sent = seq.out.send(Event::Token {
            index: seq.index,
            id: d.id,
            logprob: d.logprob,
            top: d.top,
            text,
            version: self.version,
        });
        match finish {
            Some(reason) => {
                let rest = if reason == Finish::Length {
                    seq.decoder.finish(&self.tokenizer, true).unwrap_or_default()
                } else {
                    String::new()
                };
                let _ = seq.out.send(Event::Finished { index: seq.index, reason, text: rest });
                if seq.siblings.fetch_sub(1, Ordering::Relaxed) == 1 {
                    self.stats.requests.fetch_add(1, Ordering::Relaxed);
                }
                false
            }
            None => sent.is_ok(),
        }
    }
}

/// The ids that end a sequence: the request's, and the model's end-of-sequence ids unless it
/// ignores them; sorted and without repeats (searched once per token).
fn stop_ids(options: &SamplingOptions, config: &ModelConfig) -> Vec<u32> {
    let mut ids = options.stop_token_ids.clone();
    if !options.ignore_eos {
        ids.extend(&config.eos_token_ids);
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Cache positions a sequence of a `prompt_len`-token prompt may grow to.
fn kv_reservation(prompt_len: usize, max_tokens: usize, context: usize) -> usize {
    prompt_len.saturating_add(max_tokens).min(context)
}

fn freeze(model: Transformer) -> Transformer {
    if !model.is_trainable() {
        return model;
    }
    // Re-assembling weights that were assembled once cannot fail.
    model.frozen().expect("freezing a model that was assembled once")
}

/// Where the first stop string starts in `text`, looking only at matches that end after
/// `new_from` (earlier text was checked already).
fn find_stop(text: &str, new_from: usize, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter_map(|s| {
            let mut from = new_from.saturating_sub(s.len() - 1);
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            text[from..].find(s.as_str()).map(|i| from + i)
        })
        .min()
}

/// How much of `text` can be sent: all but a tail that could be the start of a stop string.
fn safe_prefix(text: &str, sent: usize, stops: &[String]) -> usize {
    let mut safe = text.len();
    for s in stops {
        for k in (1..s.len().min(text.len() + 1)).rev() {
            let at = text.len() - k;
            if text.is_char_boundary(at) && s.starts_with(&text[at..]) {
                safe = safe.min(at);
                break;
            }
        }
    }
    safe.max(sent.min(text.len()))
}

#[cfg(test)]
mod tests {
    use super::{find_stop, safe_prefix};

    #[test]
    fn stop_strings_are_found_across_pieces_and_held_back() {
        let stops = vec!["</answer>".to_owned(), "STOP".to_owned()];
        assert_eq!(find_stop("abc</ans", 5, &stops), None);
        assert_eq!(find_stop("abc</answer>x", 8, &stops), Some(3));
        assert_eq!(find_stop("xxSTOPyySTOP", 9, &stops), Some(8)); // the earlier one was checked
        assert_eq!(safe_prefix("abc</ans", 0, &stops), 3);
        assert_eq!(safe_prefix("abcST", 0, &stops), 3);
        assert_eq!(safe_prefix("abc", 0, &stops), 3);
        assert_eq!(safe_prefix("é<", 0, &stops), 2);
        assert_eq!(safe_prefix("abc</ans", 5, &stops), 5); // never take back what was sent
    }
}
