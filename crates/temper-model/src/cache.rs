//! The key/value cache of one sequence.

use candle_core::{DType, Device, Result, Tensor};

use crate::ModelConfig;

/// Keys and values of every position of one sequence so far, layer by layer, in buffers that
/// grow by doubling (so appending a token copies nothing already there).
#[derive(Debug)]
pub struct KvCache {
    /// Per layer, `[kv_heads, capacity, head_dim]` buffers of keys and values.
    layers: Vec<(Tensor, Tensor)>,
    num_layers: usize,
    len: usize,
    capacity: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
    device: Device,
}

impl KvCache {
    /// An empty cache for a model of `cfg` (nothing is allocated before the first append).
    pub fn new(cfg: &ModelConfig, dtype: DType, device: &Device) -> Self {
        Self {
            layers: Vec::new(),
            num_layers: cfg.num_hidden_layers,
            len: 0,
            capacity: 0,
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

    /// Makes room for `extra` more positions.
    pub(crate) fn reserve(&mut self, extra: usize) -> Result<()> {
        let needed = self.len + extra;
        if needed <= self.capacity {
            return Ok(());
        }
        let capacity = needed.max(self.capacity * 2).max(16);
        let shape = (self.kv_heads, capacity, self.head_dim);
        let grow = |old: Option<&Tensor>| -> Result<Tensor> {
            let new = Tensor::zeros(shape, self.dtype, &self.device)?;
            if let Some(old) = old.filter(|_| self.len > 0) {
                new.slice_set(&old.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
            }
            Ok(new)
        };
        let mut layers = Vec::with_capacity(self.num_layers);
        for i in 0..self.num_layers {
            let old = self.layers.get(i);
            layers.push((grow(old.map(|(k, _)| k))?, grow(old.map(|(_, v)| v))?));
        }
        self.layers = layers;
        self.capacity = capacity;
        Ok(())
    }

    /// Writes the keys and values (`[kv_heads, n, head_dim]`) of `n` new positions of `layer`
    /// after those held, and returns all of them (`[kv_heads, len + n, head_dim]`, views into the
    /// cache's buffers, valid until the next append). The new
    /// positions count once [`KvCache::advance`] is called, after every layer.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let n = k.dim(1)?;
        if self.len + n > self.capacity {
            candle_core::bail!(
                "kv cache: {} positions reserved, {} needed",
                self.capacity,
                self.len + n
            );
        }
        let (kb, vb) = &self.layers[layer];
        kb.slice_set(&k.detach().to_dtype(self.dtype)?.contiguous()?, 1, self.len)?;
        vb.slice_set(&v.detach().to_dtype(self.dtype)?.contiguous()?, 1, self.len)?;
        // Views into the buffers, not copies: the attention matmuls read strided batches.
        Ok((kb.narrow(1, 0, self.len + n)?, vb.narrow(1, 0, self.len + n)?))
    }

    /// Counts `n` positions written to every layer.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// An independent copy (for several samples continuing one prompt).
    pub fn fork(&self) -> Result<Self> {
        let mut copy = Self {
            layers: Vec::with_capacity(self.layers.len()),
            num_layers: self.num_layers,
            len: self.len,
            capacity: self.capacity,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            dtype: self.dtype,
            device: self.device.clone(),
        };
        for (k, v) in &self.layers {
            copy.layers.push((k.copy()?, v.copy()?));
        }
        Ok(copy)
    }

    /// Forgets every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}
