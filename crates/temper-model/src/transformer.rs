//! Decoder-only transformers: Llama and Qwen3 dense.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor, Var};

use crate::cache::KvView;
use crate::ops::{self, Rope, causal_attention, linear, rms_norm};
use crate::prepacked::{self, PackedWeight, matmul_packed};
use crate::{Gating, KvCache, ModelConfig, ModelError, init, kernels};

/// Independent sequences prepared for a packed forward ([`Transformer::pack`]).
#[derive(Debug)]
pub struct Packed {
    pub(crate) ids: Tensor,
    pub(crate) spans: Vec<(usize, usize)>,
    pub(crate) rope: ops::RopeAt,
}

impl Packed {
    /// Offset and length of each sequence in the packed positions.
    pub fn spans(&self) -> &[(usize, usize)] {
        &self.spans
    }

    /// Total positions.
    pub fn len(&self) -> usize {
        self.spans.iter().map(|s| s.1).sum()
    }

    /// Whether there are no positions (never, for a batch [`Transformer::pack`] accepted).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which logits [`Transformer::step`] returns for each chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// The last position's (`[vocab]`): what sampling needs.
    Last,
    /// Every position's (`[n, vocab]`): what scoring and training need.
    All,
}

#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub(crate) input_norm: Tensor,
    pub(crate) q: Tensor,
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) o: Tensor,
    pub(crate) q_bias: Option<Tensor>,
    pub(crate) k_bias: Option<Tensor>,
    pub(crate) v_bias: Option<Tensor>,
    pub(crate) q_norm: Option<Tensor>,
    pub(crate) k_norm: Option<Tensor>,
    pub(crate) post_norm: Tensor,
    pub(crate) mlp: Mlp,
    /// The matrices packed for inference ([`prepacked`]): frozen f32 models on the CPU.
    pub(crate) packed: Option<Box<LayerPacked>>,
}

/// A layer's matrices packed for [`matmul_packed`]: query, key and value as one (they read the
/// same input), the output projection, and a dense MLP's gate and up as one and its down.
#[derive(Debug, Clone)]
pub(crate) struct LayerPacked {
    qkv: PackedWeight,
    o: PackedWeight,
    mlp: Option<(PackedWeight, PackedWeight)>,
}

impl LayerPacked {
    fn of(layer: &Layer) -> candle_core::Result<Option<Self>> {
        let (Some(qkv), Some(o)) = (
            PackedWeight::pack(&[&layer.q, &layer.k, &layer.v])?,
            PackedWeight::pack(&[&layer.o])?,
        ) else {
            return Ok(None);
        };
        let mlp = match &layer.mlp {
            Mlp::Dense(f) => {
                match (PackedWeight::pack(&[&f.gate, &f.up])?, PackedWeight::pack(&[&f.down])?) {
                    (Some(gu), Some(d)) => Some((gu, d)),
                    _ => None,
                }
            }
            Mlp::Moe(_) => None,
        };
        Ok(Some(Self { qkv, o, mlp }))
    }
}

/// Whether `rows` input rows go to the packed kernel: more than the small-row kernel takes and
/// few enough that the input stays in cache (candle's gemm pays back its packing past that).
fn packed_rows(rows: usize) -> bool {
    rows <= prepacked::MAX_ROWS
}

/// A gated MLP: `down(silu(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
pub(crate) struct Ffn {
    pub(crate) gate: Tensor,
    pub(crate) up: Tensor,
    pub(crate) down: Tensor,
}

impl Ffn {
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = (ops::silu(&linear(x, &self.gate, None)?)? * linear(x, &self.up, None)?)?;
        linear(&h, &self.down, None)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Mlp {
    Dense(Ffn),
    Moe(Box<Moe>),
}

/// A mixture-of-experts MLP.
#[derive(Debug, Clone)]
pub(crate) struct Moe {
    router: Tensor,
    correction_bias: Option<Tensor>,
    experts: Vec<Ffn>,
    shared: Option<Ffn>,
    top_k: usize,
    norm_topk_prob: bool,
    gating: Gating,
    scale: f64,
}

impl Moe {
    /// Routes each row of `x` (`[n, hidden]`) to its top-k experts and sums their outputs by
    /// routing weight. Scores, the top-k choice and the weights are computed as tensors (on the
    /// model's device); only the chosen expert ids come to the host, to group rows by expert.
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (n, hidden) = x.dims2()?;
        let logits = linear(x, &self.router, None)?;
        let probs = match self.gating {
            Gating::Softmax => ops::softmax_last_dim(&logits)?,
            Gating::Sigmoid => ops::sigmoid(&logits)?,
        };
        // The correction bias only decides which experts are chosen.
        let choice = match &self.correction_bias {
            Some(b) => probs.detach().broadcast_add(&b.detach())?,
            None => probs.detach(),
        };
        let idx = choice.arg_sort_last_dim(false)?.narrow(1, 0, self.top_k)?.contiguous()?;
        let mut weights = probs.gather(&idx, 1)?;
        if self.norm_topk_prob {
            let denom = (weights.sum_keepdim(1)? + 1e-20)?;
            weights = weights.broadcast_div(&denom)?;
        }
        if self.scale != 1.0 {
            weights = (weights * self.scale)?;
        }
        let weights = weights.flatten_all()?;
        let chosen = idx.to_vec2::<u32>()?;
        let mut per_expert: Vec<(Vec<u32>, Vec<u32>)> =
            vec![(Vec::new(), Vec::new()); self.experts.len()];
        for (t, row) in chosen.iter().enumerate() {
            for (slot, &e) in row.iter().enumerate() {
                per_expert[e as usize].0.push(t as u32);
                per_expert[e as usize].1.push((t * self.top_k + slot) as u32);
            }
        }
        let mut out = Tensor::zeros((n, hidden), x.dtype(), x.device())?;
        for (expert, (rows, flat)) in self.experts.iter().zip(per_expert) {
            if rows.is_empty() {
                continue;
            }
            let m = rows.len();
            let rows = Tensor::from_vec(rows, m, x.device())?;
            let flat = Tensor::from_vec(flat, m, x.device())?;
            let y = expert.forward(&x.index_select(&rows, 0)?)?;
            let w = weights.index_select(&flat, 0)?.unsqueeze(1)?;
            out = out.index_add(&rows, &y.broadcast_mul(&w)?, 0)?;
        }
        match &self.shared {
            Some(shared) => out + shared.forward(x)?,
            None => Ok(out),
        }
    }
}

/// A decoder-only transformer whose weights are candle [`Var`]s, so a loss on its output can be
/// differentiated with respect to every weight.
#[derive(Debug)]
pub struct Transformer {
    pub(crate) cfg: ModelConfig,
    pub(crate) device: Device,
    /// Every weight by its Hugging Face name, in [`param_shapes`] order.
    pub(crate) params: Vec<(String, Var)>,
    pub(crate) embed: Tensor,
    pub(crate) layers: Vec<Layer>,
    pub(crate) norm: Tensor,
    pub(crate) lm_head: Tensor,
    /// The output projection packed for inference (see [`Layer::packed`]).
    pub(crate) packed_head: Option<PackedWeight>,
    pub(crate) rope: Rope,
    pub(crate) trainable: bool,
}

/// The weights a configuration needs: Hugging Face name and shape, in a fixed order.
pub fn param_shapes(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (h, hd) = (cfg.hidden_size, cfg.head_dim);
    let (q_out, kv_out) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
    let mut out = vec![("model.embed_tokens.weight".to_owned(), vec![cfg.vocab_size, h])];
    for i in 0..cfg.num_hidden_layers {
        let p = |name: &str| format!("model.layers.{i}.{name}");
        out.push((p("input_layernorm.weight"), vec![h]));
        out.push((p("self_attn.q_proj.weight"), vec![q_out, h]));
        out.push((p("self_attn.k_proj.weight"), vec![kv_out, h]));
        out.push((p("self_attn.v_proj.weight"), vec![kv_out, h]));
        if cfg.attention_bias {
            out.push((p("self_attn.q_proj.bias"), vec![q_out]));
            out.push((p("self_attn.k_proj.bias"), vec![kv_out]));
            out.push((p("self_attn.v_proj.bias"), vec![kv_out]));
        }
        out.push((p("self_attn.o_proj.weight"), vec![h, q_out]));
        if cfg.qk_norm() {
            out.push((p("self_attn.q_norm.weight"), vec![hd]));
            out.push((p("self_attn.k_norm.weight"), vec![hd]));
        }
        out.push((p("post_attention_layernorm.weight"), vec![h]));
        let mut mlp = |prefix: String, width: usize| {
            out.push((format!("{prefix}.gate_proj.weight"), vec![width, h]));
            out.push((format!("{prefix}.up_proj.weight"), vec![width, h]));
            out.push((format!("{prefix}.down_proj.weight"), vec![h, width]));
        };
        match &cfg.moe {
            Some(m) if cfg.is_moe_layer(i) => {
                for e in 0..m.num_experts {
                    mlp(p(&format!("mlp.experts.{e}")), m.moe_intermediate_size);
                }
                if m.n_shared_experts > 0 {
                    mlp(p("mlp.shared_experts"), m.moe_intermediate_size * m.n_shared_experts);
                }
                out.push((p("mlp.gate.weight"), vec![m.num_experts, h]));
                if m.gating == Gating::Sigmoid {
                    out.push((p("mlp.gate.e_score_correction_bias"), vec![m.num_experts]));
                }
            }
            _ => mlp(p("mlp"), cfg.intermediate_size),
        }
    }
    out.push(("model.norm.weight".to_owned(), vec![h]));
    if !cfg.tie_word_embeddings {
        out.push(("lm_head.weight".to_owned(), vec![cfg.vocab_size, h]));
    }
    out
}

impl Transformer {
    /// A model of `cfg` from named weights (any float dtype; kept as `dtype`). Weights the
    /// configuration does not use are ignored (rotary tables some checkpoints carry, an
    /// `lm_head` duplicated under tied embeddings).
    pub fn from_tensors(
        cfg: ModelConfig,
        mut tensors: BTreeMap<String, Tensor>,
        dtype: DType,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let mut params = Vec::new();
        for (name, shape) in param_shapes(&cfg) {
            let t = tensors
                .remove(&name)
                .ok_or_else(|| ModelError::MissingTensor { name: name.clone() })?;
            if t.dims() != shape.as_slice() {
                return Err(ModelError::Shape { name, expected: shape, got: t.dims().to_vec() });
            }
            let t = t.to_dtype(dtype)?.to_device(device)?;
            params.push((name, Var::from_tensor(&t)?));
        }
        for name in tensors.keys() {
            tracing::debug!("ignoring weight `{name}`, which {:?} does not use", cfg.architecture);
        }
        Self::assemble(cfg, params, device)
    }

    /// A freshly initialised model: normal(0, 0.02) matrices, unit norms, zero biases, the same
    /// for the same `seed`.
    pub fn init_random(cfg: ModelConfig, seed: u64, device: &Device) -> Result<Self, ModelError> {
        let mut tensors = BTreeMap::new();
        for (i, (name, shape)) in param_shapes(&cfg).into_iter().enumerate() {
            let t = if name.ends_with("norm.weight") {
                Tensor::ones(shape.as_slice(), DType::F32, device)?
            } else if name.ends_with(".bias") || name.ends_with("e_score_correction_bias") {
                Tensor::zeros(shape.as_slice(), DType::F32, device)?
            } else {
                init::normal(
                    &shape,
                    0.02,
                    seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
                    device,
                )?
            };
            tensors.insert(name, t);
        }
        Self::from_tensors(cfg, tensors, DType::F32, device)
    }

    fn assemble(
        cfg: ModelConfig,
        params: Vec<(String, Var)>,
        device: &Device,
    ) -> Result<Self, ModelError> {
        Self::assemble_as(cfg, params, device, true)
    }

    /// The same weights (shared storage, nothing copied) with gradient tracking off: a forward
    /// pass records no graph, so each intermediate is freed as soon as it is used. For inference;
    /// a loss on a frozen model's output has no gradient.
    pub fn frozen(self) -> Result<Self, ModelError> {
        Self::assemble_as(self.cfg, self.params, &self.device, false)
    }

    /// Whether a forward pass records the graph for gradients (see [`Transformer::frozen`]).
    pub fn is_trainable(&self) -> bool {
        self.trainable
    }

    /// Whether matrix products of up to [`prepacked::MAX_ROWS`] rows read weights packed for
    /// inference ([`prepacked`]): frozen f32 models on the CPU.
    pub fn uses_packed_weights(&self) -> bool {
        self.packed_head.is_some()
    }

    /// The same weights with gradient tracking off, except that the weights named in
    /// `overrides` are replaced by the given tensors (same shapes), which may carry a gradient
    /// graph: how adapters such as LoRA (`W + s·B·A`) train while the base stays frozen.
    pub fn with_overrides(&self, overrides: &BTreeMap<String, Tensor>) -> Result<Self, ModelError> {
        for (name, t) in overrides {
            let (_, v) = self
                .params
                .iter()
                .find(|(n, _)| n == name)
                .ok_or_else(|| ModelError::MissingTensor { name: name.clone() })?;
            if t.dims() != v.dims() {
                return Err(ModelError::Shape {
                    name: name.clone(),
                    expected: v.dims().to_vec(),
                    got: t.dims().to_vec(),
                });
            }
        }
        Self::assemble_with(self.cfg.clone(), self.params.clone(), &self.device, false, overrides)
    }

    fn assemble_as(
        cfg: ModelConfig,
        params: Vec<(String, Var)>,
        device: &Device,
        trainable: bool,
    ) -> Result<Self, ModelError> {
        Self::assemble_with(cfg, params, device, trainable, &BTreeMap::new())
    }

    fn assemble_with(
        cfg: ModelConfig,
        params: Vec<(String, Var)>,
        device: &Device,
        trainable: bool,
        overrides: &BTreeMap<String, Tensor>,
    ) -> Result<Self, ModelError> {
        let map: BTreeMap<&str, &Var> = params.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let take = |name: &str, v: &Var| match overrides.get(name) {
            Some(t) => t.clone(),
            None if trainable => v.as_tensor().clone(),
            None => v.as_tensor().detach(),
        };
        let get = |name: &str| -> Result<Tensor, ModelError> {
            map.get(name)
                .map(|v| take(name, v))
                .ok_or_else(|| ModelError::MissingTensor { name: name.to_owned() })
        };
        let opt = |name: &str| map.get(name).map(|v| take(name, v));
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = |name: &str| format!("model.layers.{i}.{name}");
            layers.push(Layer {
                input_norm: get(&p("input_layernorm.weight"))?,
                q: get(&p("self_attn.q_proj.weight"))?,
                k: get(&p("self_attn.k_proj.weight"))?,
                v: get(&p("self_attn.v_proj.weight"))?,
                o: get(&p("self_attn.o_proj.weight"))?,
                q_bias: opt(&p("self_attn.q_proj.bias")),
                k_bias: opt(&p("self_attn.k_proj.bias")),
                v_bias: opt(&p("self_attn.v_proj.bias")),
                q_norm: opt(&p("self_attn.q_norm.weight")),
                k_norm: opt(&p("self_attn.k_norm.weight")),
                post_norm: get(&p("post_attention_layernorm.weight"))?,
                mlp: {
                    let ffn = |prefix: &str| -> Result<Ffn, ModelError> {
                        Ok(Ffn {
                            gate: get(&p(&format!("{prefix}.gate_proj.weight")))?,
                            up: get(&p(&format!("{prefix}.up_proj.weight")))?,
                            down: get(&p(&format!("{prefix}.down_proj.weight")))?,
                        })
                    };
                    match &cfg.moe {
                        Some(m) if cfg.is_moe_layer(i) => Mlp::Moe(Box::new(Moe {
                            router: get(&p("mlp.gate.weight"))?,
                            correction_bias: opt(&p("mlp.gate.e_score_correction_bias")),
                            experts: (0..m.num_experts)
                                .map(|e| ffn(&format!("mlp.experts.{e}")))
                                .collect::<Result<_, _>>()?,
                            shared: if m.n_shared_experts > 0 {
                                Some(ffn("mlp.shared_experts")?)
                            } else {
                                None
                            },
                            top_k: m.num_experts_per_tok,
                            norm_topk_prob: m.norm_topk_prob,
                            gating: m.gating,
                            scale: m.routed_scaling_factor,
                        })),
                        _ => Mlp::Dense(ffn("mlp")?),
                    }
                },
                packed: None,
            });
        }
        // Inference on f32 CPU weights packs them once (not with adapters, whose weights are
        // recomputed for each forward).
        let pack = !trainable && overrides.is_empty();
        if pack {
            for layer in &mut layers {
                layer.packed = LayerPacked::of(layer)?.map(Box::new);
            }
        }
        let embed = get("model.embed_tokens.weight")?;
        let lm_head = if cfg.tie_word_embeddings { embed.clone() } else { get("lm_head.weight")? };
        let packed_head = if pack { PackedWeight::pack(&[&lm_head])? } else { None };
        let rope = Rope::new(
            cfg.rotary_dim(),
            cfg.rope_theta,
            cfg.rope_scaling,
            cfg.max_position_embeddings,
            device,
        )?;
        Ok(Self {
            trainable,
            norm: get("model.norm.weight")?,
            embed,
            lm_head,
            packed_head,
            layers,
            rope,
            params,
            device: device.clone(),
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Serves contexts of up to `len` positions instead of the configuration's
    /// `max_position_embeddings` (the rotary tables are rebuilt; the weights do not change).
    pub fn set_max_positions(&mut self, len: usize) -> Result<(), ModelError> {
        self.rope = Rope::new(
            self.cfg.rotary_dim(),
            self.cfg.rope_theta,
            self.cfg.rope_scaling,
            len,
            &self.device,
        )?;
        self.cfg.max_position_embeddings = len;
        Ok(())
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The dtype of the weights.
    pub fn dtype(&self) -> DType {
        self.embed.dtype()
    }

    /// Every weight by its Hugging Face name (tied weights once).
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// Total number of weights (scalars).
    pub fn num_parameters(&self) -> usize {
        self.params.iter().map(|(_, v)| v.elem_count()).sum()
    }

    /// An empty cache for one sequence of this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(&self.cfg, self.dtype(), &self.device)
    }

    /// Logits of every position of `tokens`, one sequence from position 0, without a cache
    /// (`[len, vocab]`): scoring and training.
    pub fn forward(&self, tokens: &[u32]) -> Result<Tensor, ModelError> {
        let mut out = self.run(&[tokens], None, Logits::All)?;
        Ok(out.remove(0))
    }

    /// Continues several sequences at once: `chunks[i]` are the next tokens of the sequence held
    /// in `caches[i]` (a whole prompt, or one sampled token), which is extended with them.
    /// Returns, per chunk, the logits `which` asks for.
    pub fn step(
        &self,
        chunks: &[&[u32]],
        caches: &mut [&mut KvCache],
        which: Logits,
    ) -> Result<Vec<Tensor>, ModelError> {
        if chunks.len() != caches.len() {
            return Err(candle_core::Error::Msg(format!(
                "{} chunks for {} caches",
                chunks.len(),
                caches.len()
            ))
            .into());
        }
        self.run(chunks, Some(caches), which)
    }

    fn run(
        &self,
        chunks: &[&[u32]],
        mut caches: Option<&mut [&mut KvCache]>,
        which: Logits,
    ) -> Result<Vec<Tensor>, ModelError> {
        let cfg = &self.cfg;
        if chunks.is_empty() {
            return Ok(Vec::new());
        }
        let mut flat = Vec::new();
        let mut positions = Vec::new();
        let mut spans = Vec::with_capacity(chunks.len());
        for (i, chunk) in chunks.iter().enumerate() {
            if chunk.is_empty() {
                return Err(candle_core::Error::Msg(format!("chunk {i} is empty")).into());
            }
            let start = caches.as_ref().map_or(0, |c| c[i].len());
            if start + chunk.len() > self.rope.max_positions() {
                return Err(candle_core::Error::Msg(format!(
                    "sequence of {} positions is over the model's {}",
                    start + chunk.len(),
                    self.rope.max_positions()
                ))
                .into());
            }
            if let Some(&bad) = chunk.iter().find(|&&t| t as usize >= cfg.vocab_size) {
                return Err(candle_core::Error::Msg(format!(
                    "token id {bad} is outside the vocabulary of {}",
                    cfg.vocab_size
                ))
                .into());
            }
            spans.push((flat.len(), chunk.len()));
            flat.extend_from_slice(chunk);
            positions.extend((start..start + chunk.len()).map(|p| p as u32));
        }
        if let Some(caches) = caches.as_deref_mut() {
            for (cache, chunk) in caches.iter_mut().zip(chunks) {
                cache.reserve(chunk.len())?;
            }
        }
        let n = flat.len();
        let ids = Tensor::from_vec(flat, n, &self.device)?;
        let positions = Tensor::from_vec(positions, n, &self.device)?;
        let mut x = self.embed.embedding(&ids)?;
        // The positions are the same in every layer: gather the rotary tables once.
        let rope = self.rope.at(&positions, x.dtype())?;
        for l in 0..self.layers.len() {
            x = self.layer_forward(l, &x, &rope, &spans, caches.as_deref_mut())?;
        }
        if let Some(caches) = caches {
            for (cache, chunk) in caches.iter_mut().zip(chunks) {
                cache.advance(chunk.len());
            }
        }
        let x = rms_norm(&x, &self.norm, cfg.rms_norm_eps)?;
        match which {
            Logits::Last => {
                let last: Vec<u32> = spans.iter().map(|&(o, len)| (o + len - 1) as u32).collect();
                let rows = Tensor::from_vec(last, spans.len(), &self.device)?;
                let logits = self.project_out(&x.index_select(&rows, 0)?)?;
                (0..spans.len()).map(|i| Ok(logits.get(i)?)).collect()
            }
            Logits::All => {
                let logits = self.project_out(&x)?;
                spans.iter().map(|&(o, len)| Ok(logits.narrow(0, o, len)?)).collect()
            }
        }
    }

    /// The output projection (logits) of normed hidden states.
    fn project_out(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match &self.packed_head {
            Some(p) if packed_rows(x.dim(0)?) => matmul_packed(x, p),
            _ => linear(x, &self.lm_head, None),
        }
    }

    /// Block `l` applied to the residual stream `x` (`[n, hidden]`, the chunks of `spans` one
    /// after another), each chunk attending only to itself (and to its cache, when given).
    fn layer_forward(
        &self,
        l: usize,
        x: &Tensor,
        rope: &ops::RopeAt,
        spans: &[(usize, usize)],
        caches: Option<&mut [&mut KvCache]>,
    ) -> candle_core::Result<Tensor> {
        let cfg = &self.cfg;
        let layer = &self.layers[l];
        let n = x.dim(0)?;
        let (heads, kv_heads, hd) =
            (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        let packed = layer.packed.as_deref().filter(|_| packed_rows(n));
        let h = rms_norm(x, &layer.input_norm, cfg.rms_norm_eps)?;
        let (q, k, v) = match packed {
            Some(p) => {
                let qkv = matmul_packed(&h, &p.qkv)?;
                let part = |at: usize, width: usize, bias: Option<&Tensor>| match bias {
                    Some(b) => qkv.narrow(1, at, width)?.broadcast_add(b),
                    None => qkv.narrow(1, at, width),
                };
                let (qw, kvw) = (heads * hd, kv_heads * hd);
                (
                    part(0, qw, layer.q_bias.as_ref())?,
                    part(qw, kvw, layer.k_bias.as_ref())?,
                    part(qw + kvw, kvw, layer.v_bias.as_ref())?,
                )
            }
            None => (
                linear(&h, &layer.q, layer.q_bias.as_ref())?,
                linear(&h, &layer.k, layer.k_bias.as_ref())?,
                linear(&h, &layer.v, layer.v_bias.as_ref())?,
            ),
        };
        let mut q = q.reshape((n, heads, hd))?;
        let mut k = k.reshape((n, kv_heads, hd))?;
        let v = v.reshape((n, kv_heads, hd))?;
        if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
            q = rms_norm(&q, qn, cfg.rms_norm_eps)?;
            k = rms_norm(&k, kn, cfg.rms_norm_eps)?;
        }
        let q = rope.rotate(&q)?;
        let k = rope.rotate(&k)?;
        let attn = if caches.is_none() && spans.len() > 1 {
            // Independent sequences without a cache (training, scoring): batched.
            ops::packed_causal_attention(&q, &k, &v, spans)?
        } else {
            self.attention_per_sequence(l, &q, &k, &v, spans, caches)?
        };
        let o = match packed {
            Some(p) => matmul_packed(&attn, &p.o)?,
            None => linear(&attn, &layer.o, None)?,
        };
        let x = (x + o)?;
        let h = rms_norm(&x, &layer.post_norm, cfg.rms_norm_eps)?;
        let mlp = match (&layer.mlp, packed.and_then(|p| p.mlp.as_ref())) {
            (Mlp::Dense(ffn), Some((gate_up, down))) => {
                let gu = matmul_packed(&h, gate_up)?;
                let width = ffn.gate.dim(0)?;
                let a = match kernels::silu_mul_halves(&gu)? {
                    Some(a) => a,
                    None => (ops::silu(&gu.narrow(1, 0, width)?)? * gu.narrow(1, width, width)?)?,
                };
                matmul_packed(&a, down)?
            }
            (Mlp::Dense(ffn), None) => ffn.forward(&h)?,
            (Mlp::Moe(moe), _) => moe.forward(&h)?,
        };
        x + mlp
    }

    /// Attention one sequence at a time, each continuing its cache when there are caches.
    pub(crate) fn attention_per_sequence(
        &self,
        l: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        spans: &[(usize, usize)],
        mut caches: Option<&mut [&mut KvCache]>,
    ) -> candle_core::Result<Tensor> {
        // [n, kv_heads, d] -> [kv_heads, n, d] once for the batch; each sequence takes a view.
        let k = k.transpose(0, 1)?.contiguous()?;
        let v = v.transpose(0, 1)?.contiguous()?;
        let cached = caches.is_some();
        let mut kvs = Vec::with_capacity(spans.len());
        for (i, &(offset, len)) in spans.iter().enumerate() {
            let ki = k.narrow(1, offset, len)?;
            let vi = v.narrow(1, offset, len)?;
            kvs.push(match caches.as_deref_mut() {
                Some(caches) => caches[i].append(l, &ki, &vi)?,
                None => KvView::whole(ki, vi)?,
            });
        }
        // Every sequence, position and head in one kernel pass where it applies (f32 on the CPU).
        // Only with caches: the kernel has no backward, and cached inference never
        // differentiates.
        if cached {
            let lens: Vec<usize> = spans.iter().map(|&(_, len)| len).collect();
            if let Some(out) = kernels::cached_attention(q, &kvs, &lens)? {
                return Ok(out);
            }
        }
        let mut outs = Vec::with_capacity(spans.len());
        for (&(offset, len), view) in spans.iter().zip(&kvs) {
            let (ka, va) = view.contiguous()?;
            outs.push(causal_attention(&q.narrow(0, offset, len)?, &ka, &va)?);
        }
        if outs.len() == 1 { Ok(outs.remove(0)) } else { Tensor::cat(&outs, 0) }
    }

    /// Prepares independent sequences (`chunks`, each from position 0) for a packed forward:
    /// training rows hold several samples back to back, each with its own positions and no
    /// attention across them.
    pub fn pack(&self, chunks: &[&[u32]]) -> Result<Packed, ModelError> {
        if chunks.is_empty() {
            return Err(candle_core::Error::Msg("no sequences to pack".into()).into());
        }
        let mut flat = Vec::new();
        let mut positions = Vec::new();
        let mut spans = Vec::with_capacity(chunks.len());
        for (i, chunk) in chunks.iter().enumerate() {
            if chunk.is_empty() {
                return Err(candle_core::Error::Msg(format!("sequence {i} is empty")).into());
            }
            if chunk.len() > self.rope.max_positions() {
                return Err(candle_core::Error::Msg(format!(
                    "sequence {i} of {} tokens is over the model's {} positions",
                    chunk.len(),
                    self.rope.max_positions()
                ))
                .into());
            }
            if let Some(&bad) = chunk.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
                return Err(candle_core::Error::Msg(format!(
                    "token id {bad} is outside the vocabulary of {}",
                    self.cfg.vocab_size
                ))
                .into());
            }
            spans.push((flat.len(), chunk.len()));
            flat.extend_from_slice(chunk);
            positions.extend(0..chunk.len() as u32);
        }
        let n = flat.len();
        let ids = Tensor::from_vec(flat, n, &self.device)?;
        let positions = Tensor::from_vec(positions, n, &self.device)?;
        let rope = self.rope.at(&positions, self.dtype())?;
        Ok(Packed { ids, spans, rope })
    }

    /// The token embeddings of a packed batch (`[n, hidden]`): the input of block 0.
    pub fn embed(&self, packed: &Packed) -> Result<Tensor, ModelError> {
        Ok(self.embed.embedding(&packed.ids)?)
    }

    /// Transformer block `l` on the residual stream `x` of a packed batch.
    pub fn block(&self, l: usize, x: &Tensor, packed: &Packed) -> Result<Tensor, ModelError> {
        if l >= self.layers.len() {
            return Err(candle_core::Error::Msg(format!("no layer {l}")).into());
        }
        Ok(self.layer_forward(l, x, &packed.rope, &packed.spans, None)?)
    }

    /// The final norm and output projection: logits (`[n, vocab]`) from the last block's output.
    pub fn head(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let x = rms_norm(x, &self.norm, self.cfg.rms_norm_eps)?;
        Ok(linear(&x, &self.lm_head, None)?)
    }

    /// Number of transformer blocks.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Logits of every position of several independent sequences packed together (`[Σ len,
    /// vocab]`, the sequences one after another): what training computes.
    pub fn forward_packed(&self, chunks: &[&[u32]]) -> Result<Tensor, ModelError> {
        let packed = self.pack(chunks)?;
        let mut x = self.embed(&packed)?;
        for l in 0..self.layers.len() {
            x = self.block(l, &x, &packed)?;
        }
        self.head(&x)
    }

    /// The MLP of layer `layer` (dense or mixture of experts) applied to `x` (`[n, hidden]`): for
    /// checks against reference implementations.
    pub fn layer_mlp(&self, layer: usize, x: &Tensor) -> Result<Tensor, ModelError> {
        let l = self
            .layers
            .get(layer)
            .ok_or_else(|| candle_core::Error::Msg(format!("no layer {layer}")))?;
        Ok(match &l.mlp {
            Mlp::Dense(ffn) => ffn.forward(x)?,
            Mlp::Moe(moe) => moe.forward(x)?,
        })
    }

    /// The weights as plain tensors by Hugging Face name (for saving), tied ones once.
    pub fn tensors(&self) -> BTreeMap<String, Tensor> {
        self.params.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect()
    }
}
