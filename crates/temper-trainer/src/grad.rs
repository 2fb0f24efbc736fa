//! Forward and backward over a packed micro-batch, with optional gradient checkpointing per
//! transformer block.

use candle_core::{Tensor, Var};
use temper_model::Transformer;

/// Runs `model` on the independent sequences `inputs` (packed), applies `loss_fn` to the logits
/// (`[Σ len, vocab]`), and returns the gradient of its loss for every weight (zeros for a weight
/// the loss does not reach), in [`Transformer::params`] order, with `loss_fn`'s other output.
///
/// With `checkpoint`, only each block's input is kept during the forward pass; the backward pass
/// recomputes one block at a time from its input and back-propagates through it with the
/// gradient arriving from above. Gradients are the same up to float rounding; memory holds one
/// block's activations instead of all of them.
pub fn loss_and_grads<T>(
    model: &Transformer,
    inputs: &[&[u32]],
    checkpoint: bool,
    loss_fn: impl FnOnce(&Tensor) -> candle_core::Result<(Tensor, T)>,
) -> candle_core::Result<(Vec<Tensor>, T)> {
    loss_and_grads_for(model, model.params(), inputs, checkpoint, loss_fn)
}

/// [`loss_and_grads`] collecting the gradients of `params` (such as LoRA adapters that `model`'s
/// weights are computed from) instead of the model's own weights.
pub fn loss_and_grads_for<T>(
    model: &Transformer,
    params: &[(String, Var)],
    inputs: &[&[u32]],
    checkpoint: bool,
    loss_fn: impl FnOnce(&Tensor) -> candle_core::Result<(Tensor, T)>,
) -> candle_core::Result<(Vec<Tensor>, T)> {
    let to_candle = |e: temper_model::ModelError| candle_core::Error::Msg(e.to_string());
    // The model's own weights, f32 on the CPU: the backward pass written out (same gradients,
    // a fraction of autograd's time and allocations).
    if uses_written_backward(model, params) {
        let tape = model.train_forward(inputs, checkpoint).map_err(to_candle)?;
        let logits = Var::from_tensor(tape.logits())?;
        let (loss, out) = loss_fn(logits.as_tensor())?;
        let store = loss.backward()?;
        let dlogits = grad_of(&store, logits.as_tensor())?;
        drop((store, loss, logits));
        return Ok((tape.backward(&dlogits).map_err(to_candle)?, out));
    }
    let mut grads: Vec<Option<Tensor>> = vec![None; params.len()];
    let out = if checkpoint {
        let packed = model.pack(inputs).map_err(to_candle)?;
        let mut hidden = vec![model.embed(&packed).map_err(to_candle)?.detach()];
        for l in 0..model.num_layers() {
            let x = model.block(l, &hidden[l], &packed).map_err(to_candle)?.detach();
            hidden.push(x);
        }
        let top = Var::from_tensor(&hidden[model.num_layers()])?;
        let logits = model.head(top.as_tensor()).map_err(to_candle)?;
        let (loss, out) = loss_fn(&logits)?;
        let store = loss.backward()?;
        accumulate(&mut grads, params, &store)?;
        let mut upstream = grad_of(&store, top.as_tensor())?;
        drop(store);
        for l in (0..model.num_layers()).rev() {
            let input = Var::from_tensor(&hidden[l])?;
            let y = model.block(l, input.as_tensor(), &packed).map_err(to_candle)?;
            let store = (y * &upstream)?.sum_all()?.backward()?;
            accumulate(&mut grads, params, &store)?;
            upstream = grad_of(&store, input.as_tensor())?;
        }
        let x = model.embed(&packed).map_err(to_candle)?;
        let store = (x * &upstream)?.sum_all()?.backward()?;
        accumulate(&mut grads, params, &store)?;
        out
    } else {
        let logits = model.forward_packed(inputs).map_err(to_candle)?;
        let (loss, out) = loss_fn(&logits)?;
        let store = loss.backward()?;
        accumulate(&mut grads, params, &store)?;
        out
    };
    let grads = grads
        .into_iter()
        .zip(params)
        .map(|(g, (_, p))| match g {
            Some(g) => Ok(g),
            None => p.as_tensor().zeros_like(),
        })
        .collect::<candle_core::Result<Vec<_>>>()?;
    Ok((grads, out))
}

/// The positions of a packed micro-batch as the loss sees them: each one's next-token target,
/// the temperature it was sampled at, and whether it is trained on.
#[derive(Debug, Clone, Copy)]
pub struct Targets<'a> {
    /// Next-token ids, one per position.
    pub ids: &'a [u32],
    /// Sampling temperatures (the logits are divided by them).
    pub temperatures: &'a [f32],
    /// Whether each position is a loss token (entropy is summed over these).
    pub mask: &'a [bool],
}

/// Runs `model` on the sequences `inputs` (packed), takes the log-probabilities of `targets`
/// under the temperature-scaled logits and applies `loss_fn` to them (`[Σ len]`). Returns the
/// gradient of every weight of `params`, the entropy summed over the loss positions (detached: a
/// diagnostic), and `loss_fn`'s other output.
///
/// On the written-out backward pass the logits are read in place by row kernels
/// ([`temper_model::train::logprob_rows`]) and their gradient is written over them in one pass;
/// otherwise
/// they go through [`crate::loss::logprobs_and_entropy`] under autograd.
pub fn logprob_loss_and_grads<T>(
    model: &Transformer,
    params: &[(String, Var)],
    inputs: &[&[u32]],
    checkpoint: bool,
    targets: Targets<'_>,
    loss_fn: impl FnOnce(&Tensor) -> candle_core::Result<(Tensor, T)>,
) -> candle_core::Result<(Vec<Tensor>, f64, T)> {
    let Targets { ids, temperatures, mask } = targets;
    if mask.len() != ids.len() {
        candle_core::bail!("{} targets and {} mask entries", ids.len(), mask.len());
    }
    let to_candle = |e: temper_model::ModelError| candle_core::Error::Msg(e.to_string());
    if uses_written_backward(model, params) {
        let tape = model.train_forward(inputs, checkpoint).map_err(to_candle)?;
        let rows = temper_model::train::logprob_rows(tape.logits(), ids, temperatures)
            .map_err(to_candle)?;
        let entropy: f64 =
            rows.entropy.iter().zip(mask).filter(|(_, m)| **m).map(|(h, _)| f64::from(*h)).sum();
        let lp = Var::from_tensor(&Tensor::new(rows.logprobs.as_slice(), model.device())?)?;
        let (loss, out) = loss_fn(lp.as_tensor())?;
        let store = loss.backward()?;
        let dlp = grad_of(&store, lp.as_tensor())?.to_dtype(candle_core::DType::F32)?.to_vec1()?;
        drop((store, loss));
        let grads =
            tape.backward_from_logprobs(ids, temperatures, &rows, &dlp).map_err(to_candle)?;
        return Ok((grads, entropy, out));
    }
    let (grads, (entropy, out)) =
        loss_and_grads_for(model, params, inputs, checkpoint, |logits| {
            let (lp, entropy) = crate::loss::logprobs_and_entropy(logits, ids, temperatures, mask)?;
            let (loss, out) = loss_fn(&lp)?;
            Ok((loss, (entropy, out)))
        })?;
    Ok((grads, entropy, out))
}

/// Whether gradients of `params` come from the written-out backward pass: when they are the
/// model's own weights and it can run them ([`Transformer::has_written_backward`]), unless
/// `TEMPER_AUTOGRAD=1` asks for candle's autograd everywhere (to compare the two).
fn uses_written_backward(model: &Transformer, params: &[(String, Var)]) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TEMPER_AUTOGRAD").map_or(true, |v| v != "1"))
        && model.has_written_backward()
        && std::ptr::eq(params, model.params())
}

fn grad_of(store: &candle_core::backprop::GradStore, t: &Tensor) -> candle_core::Result<Tensor> {
    match store.get(t) {
        Some(g) => Ok(g.clone()),
        None => t.zeros_like(),
    }
}

fn accumulate(
    grads: &mut [Option<Tensor>],
    params: &[(String, Var)],
    store: &candle_core::backprop::GradStore,
) -> candle_core::Result<()> {
    for (slot, (_, p)) in grads.iter_mut().zip(params) {
        if let Some(g) = store.get(p.as_tensor()) {
            *slot = Some(match slot.take() {
                Some(acc) => (acc + g)?,
                None => g.clone(),
            });
        }
    }
    Ok(())
}

/// Adds `more` into `acc` element-wise (gradient accumulation over micro-batches).
pub fn add_into(acc: &mut Option<Vec<Tensor>>, more: Vec<Tensor>) -> candle_core::Result<()> {
    match acc {
        None => *acc = Some(more),
        Some(acc) => {
            for (a, m) in acc.iter_mut().zip(more) {
                *a = (&*a + m)?;
            }
        }
    }
    Ok(())
}
