"""The PyTorch side of `temper trainer bench`: the same model (an HF folder written by temper),
the same token batch, the same loss (mean next-token NLL over every position), AdamW with the same
settings and gradient-norm clipping, timed per step.

Reads a JSON spec on stdin: {"model_dir", "tokens": [[ids]...], "steps", "warmup", "lr",
"weight_decay", "max_grad_norm", "gradient_checkpointing", "device" ("cpu" or "cuda:N"; default
cpu)} and prints JSON on stdout: {"step_seconds": [...], "losses": [...], "peak_rss_mb",
"peak_gpu_mb" (on a GPU), "torch", "threads"}. Needs torch and transformers.
"""
import json
import resource
import sys
import time

import torch
from transformers import AutoModelForCausalLM

spec = json.load(sys.stdin)
torch.manual_seed(0)
device = torch.device(spec.get("device", "cpu"))
model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], torch_dtype=torch.float32).to(device)
model.train()
if spec.get("gradient_checkpointing"):
    model.gradient_checkpointing_enable()
decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
rest = [p for _, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": spec["weight_decay"]}, {"params": rest, "weight_decay": 0.0}],
    lr=spec["lr"],
    betas=(0.9, 0.999),
    eps=1e-8,
)
ids = torch.tensor(spec["tokens"], device=device)
times, losses = [], []
for step in range(spec["warmup"] + spec["steps"]):
    t0 = time.perf_counter()
    logits = model(input_ids=ids[:, :-1]).logits
    logp = torch.log_softmax(logits.float(), -1)
    loss = -logp.gather(-1, ids[:, 1:, None]).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), spec["max_grad_norm"])
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dt = time.perf_counter() - t0
    losses.append(loss.item())
    if step >= spec["warmup"]:
        times.append(dt)
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
json.dump(
    {
        "step_seconds": times,
        "losses": losses,
        "peak_rss_mb": peak_kb / 1024.0,
        "peak_gpu_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    },
    sys.stdout,
)
