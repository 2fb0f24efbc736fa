"""The Hugging Face transformers side of `temper inference bench`: the same weights (an HF
folder written by temper), the same prompts (token ids), the same greedy work, timed the same way.

Reads a JSON spec on stdin: {"model_dir", "batches": [B...], "prompt_len", "new_tokens",
"repeats", "prompts": [[ids]...], "groups": [n...], "group_tokens", "device" ("cpu", "cuda:N";
default cpu), "dtype" ("float32", "bfloat16", "float16"; default float32)} and prints JSON results
on stdout. Needs torch and transformers.

The group workload is what RL sends: n samples of the first prompt, `group_tokens` new tokens
each, plain sampling at temperature 1 (no top-k or top-p), through `generate` with
`num_return_sequences=n`; timed from the call to its return.
"""
import json
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM

spec = json.load(sys.stdin)
torch.manual_seed(0)
device = torch.device(spec.get("device", "cpu"))
dtype = getattr(torch, spec.get("dtype", "float32"))
model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], torch_dtype=dtype).to(device)
model.eval()
results = {"torch": torch.__version__, "threads": torch.get_num_threads(), "batches": {}}


def sync():
    """Waits for the GPU's queued work, so that a clock reading covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


with torch.inference_mode():
    # Logits of the first prompt, to check both implementations compute the same function.
    first = torch.tensor([spec["prompts"][0]], device=device)
    results["check_logits"] = model(first).logits[0, -1, :].float().tolist()
    for b in spec["batches"]:
        ids = torch.tensor(spec["prompts"][:b], device=device)
        prefill, decode = [], []
        for _ in range(spec["repeats"]):
            sync()
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            sync()
            t1 = time.perf_counter()
            past = out.past_key_values
            nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
            for _ in range(spec["new_tokens"] - 1):
                out = model(nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
            sync()
            t2 = time.perf_counter()
            prefill.append(b * ids.shape[1] / (t1 - t0))
            decode.append(b * (spec["new_tokens"] - 1) / (t2 - t1))
        results["batches"][str(b)] = {
            "prefill_tokens_per_s": statistics.median(prefill),
            "decode_tokens_per_s": statistics.median(decode),
        }
        print(f"transformers batch {b}: done", file=sys.stderr, flush=True)
    results["groups"] = {}
    t = spec.get("group_tokens", 256)
    for n in spec.get("groups", []):
        rates = []
        for _ in range(spec["repeats"]):
            sync()
            t0 = time.perf_counter()
            out = model.generate(first, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 num_return_sequences=n, max_new_tokens=t, min_new_tokens=t,
                                 pad_token_id=0)
            sync()
            made = out.shape[0] * (out.shape[1] - first.shape[1])
            if made != n * t:
                sys.exit(f"generate made {made} tokens, expected {n * t}")
            rates.append(made / (time.perf_counter() - t0))
        results["groups"][str(n)] = {"tokens_per_s": statistics.median(rates)}
        print(f"transformers group of {n}: done", file=sys.stderr, flush=True)
print(json.dumps(results))
