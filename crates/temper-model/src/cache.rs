//! The key/value cache of one sequence.
//!
//! For f32 models on the CPU (where [`crate::kernels::cached_attention`] reads the cache in
//! place) the positions are held in fixed-size blocks of [`BLOCK`] positions: a growing sequence
//! adds blocks and never copies what it holds, and [`KvCache::fork`] shares every block with the
//! copy (the `n` samples of one prompt hold its keys and values once); a block is copied only when
//! a cache that shares it writes into it (the last, partly filled one, or any block after a
//! [`KvCache::truncate`]). Elsewhere (other dtypes, GPUs: the attention is composed from tensor
//! ops, which want one tensor per sequence) the cache is one block per layer that grows by
//! doubling, and a fork copies it.

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor};

use crate::ModelConfig;

/// Positions per block of a blocked cache.
pub const BLOCK: usize = 64;

/// One block of one layer: keys and values, `[kv_heads, capacity, head_dim]` each.
#[derive(Debug)]
struct Block {
    k: Tensor,
    v: Tensor,
}

impl Block {
    /// A copy of its own (for a cache about to write into a block it shares, or a fork of a cache
    /// that does not share).
    fn copy(&self) -> Result<Self> {
        Ok(Self { k: self.k.copy()?, v: self.v.copy()? })
    }
}

/// Keys and values of every position of one sequence so far, layer by layer (see the module
/// documentation for the two layouts).
#[derive(Debug)]
pub struct KvCache {
    /// Per layer, its blocks in position order, each shared with the forks that hold it.
    layers: Vec<Vec<Arc<Block>>>,
    len: usize,
    /// Positions per block: [`BLOCK`], or the capacity of the one block when not blocked.
    block: usize,
    blocked: bool,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
    device: Device,
}

/// A sequence's keys and values in one layer as [`crate::kernels::cached_attention`] reads them:
/// the blocks in position order (each `[kv_heads, block, head_dim]`, the last possibly holding
/// fewer than `block` positions in use) and the positions in use.
#[derive(Debug, Clone)]
pub struct KvView {
    pub(crate) blocks: Vec<(Tensor, Tensor)>,
    pub(crate) block: usize,
    pub(crate) len: usize,
}

impl KvView {
    /// One sequence's keys and values as single tensors (`[kv_heads, len, head_dim]`).
    pub fn whole(k: Tensor, v: Tensor) -> Result<Self> {
        let len = k.dim(1)?;
        Ok(Self { blocks: vec![(k, v)], block: len.max(1), len })
    }

    /// Positions in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The keys and values as `[kv_heads, len, head_dim]` tensors: views of a single block, a
    /// copy joining several.
    pub fn contiguous(&self) -> Result<(Tensor, Tensor)> {
        let mut ks = Vec::with_capacity(self.blocks.len());
        let mut vs = Vec::with_capacity(self.blocks.len());
        for (b, (k, v)) in self.blocks.iter().enumerate() {
            let used = self.len.saturating_sub(b * self.block).min(self.block);
            if used == 0 {
                break;
            }
            ks.push(k.narrow(1, 0, used)?);
            vs.push(v.narrow(1, 0, used)?);
        }
        if ks.len() == 1 {
            return Ok((ks.remove(0), vs.remove(0)));
        }
        Ok((Tensor::cat(&ks, 1)?, Tensor::cat(&vs, 1)?))
    }
}

impl KvCache {
    /// An empty cache for a model of `cfg` (nothing is allocated before the first append).
    pub fn new(cfg: &ModelConfig, dtype: DType, device: &Device) -> Self {
        let blocked = device.is_cpu() && dtype == DType::F32;
        Self {
            layers: vec![Vec::new(); cfg.num_hidden_layers],
            len: 0,
            block: if blocked { BLOCK } else { 0 },
            blocked,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            dtype,
            device: device.clone(),
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the positions are held in blocks of [`BLOCK`] (f32 on the CPU).
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// Positions the cache can hold before it allocates again.
    pub fn capacity(&self) -> usize {
        self.layers.first().map_or(0, Vec::len) * self.block
    }

    /// Blocks of the first layer this cache holds together with another (a fork, or the cache it
    /// was forked from).
    pub fn shared_blocks(&self) -> usize {
        self.layers.first().map_or(0, |l| l.iter().filter(|b| Arc::strong_count(b) > 1).count())
    }

    fn empty_block(&self, capacity: usize) -> Result<Block> {
        let shape = (self.kv_heads, capacity, self.head_dim);
        Ok(Block {
            k: Tensor::zeros(shape, self.dtype, &self.device)?,
            v: Tensor::zeros(shape, self.dtype, &self.device)?,
        })
    }

    /// Makes room for `extra` more positions.
    pub(crate) fn reserve(&mut self, extra: usize) -> Result<()> {
        let needed = self.len + extra;
        if needed <= self.capacity() {
            return Ok(());
        }
        if self.blocked {
            let blocks = needed.div_ceil(BLOCK);
            for l in 0..self.layers.len() {
                while self.layers[l].len() < blocks {
                    let block = Arc::new(self.empty_block(BLOCK)?);
                    self.layers[l].push(block);
                }
            }
            return Ok(());
        }
        // One block per layer, grown by doubling (so appending a token copies nothing already
        // there, amortised).
        let capacity = needed.max(self.block * 2).max(16);
        for l in 0..self.layers.len() {
            let grown = self.empty_block(capacity)?;
            if let Some(old) = self.layers[l].first().filter(|_| self.len > 0) {
                grown.k.slice_set(&old.k.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
                grown.v.slice_set(&old.v.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
            }
            self.layers[l] = vec![Arc::new(grown)];
        }
        self.block = capacity;
        Ok(())
    }

    /// Writes the keys and values (`[kv_heads, n, head_dim]`) of `n` new positions of `layer`
    /// after those held, and returns all of them (the blocks, shared, not copied; valid until the
    /// next append). A block held with another cache is copied before it is written. The new
    /// positions count once [`KvCache::advance`] is called, after every layer.
    pub(crate) fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<KvView> {
        let n = k.dim(1)?;
        if self.len + n > self.capacity() {
            candle_core::bail!(
                "kv cache: {} positions reserved, {} needed",
                self.capacity(),
                self.len + n
            );
        }
        let k = k.detach().to_dtype(self.dtype)?;
        let v = v.detach().to_dtype(self.dtype)?;
        let mut at = self.len;
        while at < self.len + n {
            let (b, offset) = (at / self.block, at % self.block);
            let take = (self.block - offset).min(self.len + n - at);
            let slot = &mut self.layers[layer][b];
            if Arc::strong_count(slot) > 1 {
                *slot = Arc::new(slot.copy()?);
            }
            let from = at - self.len;
            slot.k.slice_set(&k.narrow(1, from, take)?.contiguous()?, 1, offset)?;
            slot.v.slice_set(&v.narrow(1, from, take)?.contiguous()?, 1, offset)?;
            at += take;
        }
        let used = if self.block == 0 { 0 } else { (self.len + n).div_ceil(self.block) };
        Ok(KvView {
            blocks: self.layers[layer][..used].iter().map(|b| (b.k.clone(), b.v.clone())).collect(),
            block: self.block,
            len: self.len + n,
        })
    }

    /// Counts `n` positions written to every layer.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// A cache that continues independently from the same positions (for several samples of one
    /// prompt): blocked, it shares every block (each side copies a block only when it writes into
    /// it); otherwise a copy.
    pub fn fork(&self) -> Result<Self> {
        let layers = if self.blocked {
            self.layers.clone()
        } else {
            self.layers
                .iter()
                .map(|blocks| blocks.iter().map(|b| Ok(Arc::new(b.copy()?))).collect())
                .collect::<Result<_>>()?
        };
        Ok(Self { layers, len: self.len, ..self.fork_shape() })
    }

    /// A cache holding this one's first `len` positions (at most those held): blocked, it shares
    /// the blocks that hold them and no other; otherwise a copy.
    pub fn prefix(&self, len: usize) -> Result<Self> {
        let len = len.min(self.len);
        if !self.blocked {
            let mut copy = self.fork()?;
            copy.truncate(len);
            return Ok(copy);
        }
        let blocks = len.div_ceil(BLOCK);
        Ok(Self {
            layers: self.layers.iter().map(|l| l[..blocks].to_vec()).collect(),
            len,
            ..self.fork_shape()
        })
    }

    /// An empty cache of this one's shape and layout.
    fn fork_shape(&self) -> Self {
        Self {
            layers: vec![Vec::new(); self.layers.len()],
            len: 0,
            block: self.block,
            blocked: self.blocked,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            dtype: self.dtype,
            device: self.device.clone(),
        }
    }

    /// Forgets every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}
