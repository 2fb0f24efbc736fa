"""The llama.cpp side of `temper inference bench`, through llama-cpp-python's low-level API (the C
functions of the llama.cpp it built from source): the same weights (a GGUF that temper wrote from
the tensors it runs), the same prompts (token ids), the same greedy work, timed the same way.

Reads a JSON spec on stdin: {"gguf", "batches": [B...], "prompt_len", "new_tokens", "repeats",
"prompts": [[ids]...], "groups": [n...], "group_tokens", "threads", "kv_type" ("f32" or "f16":
the KV cache's precision, the same as the weights')} and prints JSON results on stdout.

A batch of B prompts is one llama_decode of all their tokens (each prompt its own sequence, logits
only at the last positions; llama.cpp splits it into micro-batches of its default size), then one
llama_decode per new token holding one token of each sequence, the next tokens chosen by argmax
over the returned logits. The group workload prefills the first prompt once, copies its cache to
n sequences and draws n tokens per step with llama.cpp's own sampler at temperature 1.
"""
import ctypes
import json
import statistics
import sys
import time

import numpy as np
import llama_cpp as L

spec = json.load(sys.stdin)
P, T = spec["prompt_len"], spec["new_tokens"]
batches = spec["batches"]
groups = spec.get("groups", [])
group_tokens = spec.get("group_tokens", 256)
threads = spec["threads"]


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def quiet(level, text, user):
    """Drops llama.cpp's log lines but errors (level 4 is GGML_LOG_LEVEL_ERROR)."""
    if level == 4:
        sys.stderr.write(text.decode(errors="replace"))


L.llama_log_set(quiet, None)
L.llama_backend_init()
mp = L.llama_model_default_params()
mp.n_gpu_layers = 0
model = L.llama_model_load_from_file(spec["gguf"].encode(), mp)
if not model:
    sys.exit(f"llama.cpp cannot load {spec['gguf']}")
n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
most = max(batches + groups + [1])
cp = L.llama_context_default_params()
cp.n_seq_max = most
cp.n_ctx = most * (P + max(T, group_tokens if groups else 0))
cp.n_batch = max(batches + [1]) * P
cp.n_threads = threads
cp.n_threads_batch = threads
kv = {"f32": 0, "f16": 1}[spec.get("kv_type", "f32")]  # GGML_TYPE_F32, GGML_TYPE_F16
cp.type_k = kv
cp.type_v = kv
ctx = L.llama_init_from_model(model, cp)
if not ctx:
    sys.exit("llama.cpp cannot make a context")
mem = L.llama_get_memory(ctx)
batch = L.llama_batch_init(cp.n_batch, 0, 1)


def fill(tokens, positions, seqs, wants):
    """Puts tokens into the batch: token i at positions[i] of sequence seqs[i], logits if wants[i]."""
    for i, (t, p, s, w) in enumerate(zip(tokens, positions, seqs, wants)):
        batch.token[i] = t
        batch.pos[i] = p
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = s
        batch.logits[i] = w
    batch.n_tokens = len(tokens)


def decode():
    rc = L.llama_decode(ctx, batch)
    if rc != 0:
        sys.exit(f"llama_decode returned {rc}")


def logits(rows):
    """The logits of the last decode's `rows` outputs, as a [rows, vocab] array."""
    ptr = L.llama_get_logits(ctx)
    return np.ctypeslib.as_array(ptr, shape=(rows, n_vocab))


def prompt_batch(prompts):
    toks, pos, seqs, wants = [], [], [], []
    for s, p in enumerate(prompts):
        toks += p
        pos += range(len(p))
        seqs += [s] * len(p)
        wants += [i == len(p) - 1 for i in range(len(p))]
    return toks, pos, seqs, wants


results = {"version": L.__version__, "threads": threads, "batches": {}, "groups": {}}
# Logits of the first prompt, to check both implementations compute the same function.
L.llama_memory_clear(mem, True)
fill(*prompt_batch([spec["prompts"][0]]))
decode()
results["check_logits"] = logits(1)[0].astype(float).tolist()

for b in batches:
    prefill, dec = [], []
    prompts = spec["prompts"][:b]
    filled = prompt_batch(prompts)
    for _ in range(spec["repeats"]):
        L.llama_memory_clear(mem, True)
        fill(*filled)  # outside the clock: filling the C arrays from Python is not llama.cpp's work
        t0 = time.perf_counter()
        decode()
        nxt = logits(b).argmax(1)
        t1 = time.perf_counter()
        for step in range(T - 1):
            fill(nxt.tolist(), [P + step] * b, range(b), [True] * b)
            decode()
            nxt = logits(b).argmax(1)
        t2 = time.perf_counter()
        prefill.append(b * P / (t1 - t0))
        dec.append(b * (T - 1) / (t2 - t1))
    results["batches"][str(b)] = {
        "prefill_tokens_per_s": statistics.median(prefill),
        "decode_tokens_per_s": statistics.median(dec),
    }
    print(f"llama.cpp batch {b}: done", file=sys.stderr, flush=True)

first = spec["prompts"][0]
for n in groups:
    rates = []
    for _ in range(spec["repeats"]):
        sampler = L.llama_sampler_init_dist(0)
        L.llama_memory_clear(mem, True)
        fill(first, range(len(first)), [0] * len(first), [i == len(first) - 1 for i in range(len(first))])
        t0 = time.perf_counter()
        decode()
        for s in range(1, n):
            L.llama_memory_seq_cp(mem, 0, s, -1, -1)
        nxt = [L.llama_sampler_sample(sampler, ctx, -1) for _ in range(n)]
        made = n
        for step in range(group_tokens - 1):
            fill(nxt, [len(first) + step] * n, range(n), [True] * n)
            decode()
            nxt = [L.llama_sampler_sample(sampler, ctx, i) for i in range(n)]
            made += n
        rates.append(made / (time.perf_counter() - t0))
        L.llama_sampler_free(sampler)
    results["groups"][str(n)] = {"tokens_per_s": statistics.median(rates)}
    print(f"llama.cpp group of {n}: done", file=sys.stderr, flush=True)

L.llama_batch_free(batch)
L.llama_free(ctx)
L.llama_model_free(model)
print(json.dumps(results))
