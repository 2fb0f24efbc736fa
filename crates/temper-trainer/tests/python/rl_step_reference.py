"""An RL trainer written apart from temper, in PyTorch, for the parity test of temper's RL step.

It implements, from their definitions and not from temper's code: a Llama/Qwen3-shaped decoder
(RMS norms, rotary embeddings, grouped-query attention, optional per-head q/k norms, a SiLU-gated
MLP, tied or separate output embeddings), the default RL loss (importance-weighted policy
gradient with probability-difference masking and a kl_coef * (log ratio)^2 term, summed over loss
tokens and divided by the step's count of loss tokens), global gradient-norm clipping and
torch.optim.AdamW (weight decay on matrices only, not on norms or biases).

Reads a JSON spec on stdin:
  {"model_dir": folder with config.json and model.safetensors (f32),
   "out": path of the safetensors file to write the trained weights to,
   "optim": {"beta1", "beta2", "eps", "weight_decay", "max_grad_norm"},
   "loss": {"mask_high", "mask_low", "kl_coef"},
   "steps": [{"lr", "total_loss_tokens",
              "micro_batches": [[{"ids", "mask", "sampling_logprobs", "advantage",
                                  "temperature"}]]}],
   "break": null, or one deliberate error to show the comparison catches it:
            "sign" (the advantage's sign), "mask" (train on every token) or
            "normaliser" (divide by each micro-batch's tokens, not the step's)}
and prints {"losses": [...], "grad_norms": [...], "torch": version} as JSON. Needs only torch.
"""
import array
import json
import math
import struct
import sys

import torch

torch.set_default_dtype(torch.float32)
spec = json.load(sys.stdin)
cfg = json.load(open(f"{spec['model_dir']}/config.json"))
if cfg.get("rope_scaling") or cfg.get("partial_rotary_factor", 1.0) != 1.0:
    sys.exit("this reference implements plain rotary embeddings only")


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{name}: expected F32, got {info['dtype']}")
        a, b = info["data_offsets"]
        data = bytearray(raw[8 + n + a : 8 + n + b])
        out[name] = torch.frombuffer(data, dtype=torch.float32).reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        data = array.array("f", t.detach().flatten().tolist()).tobytes()  # little-endian hosts
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


weights = {k: torch.nn.Parameter(v) for k, v in read_safetensors(f"{spec['model_dir']}/model.safetensors").items()}
tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in weights
H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
eps = cfg["rms_norm_eps"]
inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x):  # x: [n, heads, D]; the first and second halves of each head rotate together
    n = x.shape[0]
    angles = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().float()[:, None, :], angles.sin().float()[:, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def linear(x, name):
    y = x @ weights[f"{name}.weight"].t()
    if f"{name}.bias" in weights:
        y = y + weights[f"{name}.bias"]
    return y


def logits_of(ids):
    x = weights["model.embed_tokens.weight"][torch.tensor(ids)]
    n = len(ids)
    causal = torch.full((n, n), float("-inf")).triu(1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}"
        h = rms(x, weights[f"{p}.input_layernorm.weight"])
        q = linear(h, f"{p}.self_attn.q_proj").view(n, H, D)
        k = linear(h, f"{p}.self_attn.k_proj").view(n, KV, D)
        v = linear(h, f"{p}.self_attn.v_proj").view(n, KV, D)
        if f"{p}.self_attn.q_norm.weight" in weights:
            q = rms(q, weights[f"{p}.self_attn.q_norm.weight"])
            k = rms(k, weights[f"{p}.self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(D) + causal
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, H * D)
        x = x + linear(attn, f"{p}.self_attn.o_proj")
        h = rms(x, weights[f"{p}.post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(linear(h, f"{p}.mlp.gate_proj"))
        x = x + linear(gate * linear(h, f"{p}.mlp.up_proj"), f"{p}.mlp.down_proj")
    x = rms(x, weights["model.norm.weight"])
    head = weights["model.embed_tokens.weight"] if tied else weights["lm_head.weight"]
    return x @ head.t()


lc, broken = spec["loss"], spec.get("break")


def sequence_loss(s, total_tokens, mb_tokens):
    ids = s["ids"]
    logp = torch.log_softmax(logits_of(ids[:-1]) / s["temperature"], -1)
    lp = logp.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    keep = torch.tensor([bool(m) for m in s["mask"][1:]])
    if broken == "mask":
        keep = torch.ones_like(keep)
    mu = torch.tensor(s["sampling_logprobs"][1:], dtype=torch.float32)
    a = -s["advantage"] if broken == "sign" else s["advantage"]
    log_ratio = (lp - mu).clamp(-20.0, 20.0)
    dp = (lp.detach().exp() - mu.exp())
    masked = (dp > lc["mask_high"]) if a > 0 else (dp < -lc["mask_low"])
    terms = -(~masked).float() * a * log_ratio.exp() + lc["kl_coef"] * log_ratio.pow(2)
    normaliser = mb_tokens if broken == "normaliser" else total_tokens
    return (terms * keep.float()).sum() / max(normaliser, 1.0)


oc = spec["optim"]
decay = [p for name, p in weights.items() if p.dim() >= 2 and "norm" not in name]
rest = [p for name, p in weights.items() if not (p.dim() >= 2 and "norm" not in name)]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": oc["weight_decay"]}, {"params": rest, "weight_decay": 0.0}],
    lr=spec["steps"][0]["lr"],
    betas=(oc["beta1"], oc["beta2"]),
    eps=oc["eps"],
)
losses, norms = [], []
for step in spec["steps"]:
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for mb in step["micro_batches"]:
        mb_tokens = float(sum(sum(s["mask"][1:]) for s in mb))
        loss = sum(sequence_loss(s, step["total_loss_tokens"], mb_tokens) for s in mb)
        loss.backward()
        total += loss.item()
    params = list(weights.values())
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None)).item()
    scale = oc["max_grad_norm"] / (norm + 1e-6) if 0 < oc["max_grad_norm"] < norm else 1.0
    for p in params:
        if p.grad is not None:
            p.grad.mul_(scale)
    for g in opt.param_groups:
        g["lr"] = step["lr"]
    opt.step()
    losses.append(total)
    norms.append(norm)
write_safetensors(spec["out"], weights)
json.dump({"losses": losses, "grad_norms": norms, "torch": torch.__version__}, sys.stdout)
