"""The report of scripts/gpu-check: reads what its steps left in WORK and writes gpu-check.json
and gpu-check.md to OUT. Exits 1 when a step failed, a test failed, or the bf16 mismatch KL of the
RL run is above 1e-3.

    python3 scripts/gpu-report.py WORK OUT BUILT_FROM SECONDS
"""
import json
import math
import os
import re
import sys

work, out, built_from, seconds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
KL_TARGET = 1e-3


def read_json(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(name):
    try:
        with open(os.path.join(work, name), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


steps = [json.loads(l) for l in read_text("steps.jsonl").splitlines() if l.strip()]
failures = [f"step {s['step']} exited {s['rc']}" + (" (its time limit)" if s["rc"] in (124, 137) else "")
            for s in steps if s["rc"] != 0]

tests = {}
for suite in ("model", "inference", "trainer"):
    log = read_text(f"logs/tests-{suite}.log")
    m = re.search(r"test result: \w+\. (\d+) passed; (\d+) failed", log)
    failed = re.findall(r"^test (\S+) \.\.\. FAILED$", log, re.M)
    tests[suite] = {"passed": int(m.group(1)) if m else None, "failed": int(m.group(2)) if m else None,
                    "failed_tests": failed}
    if not m:
        failures.append(f"the {suite} suite reported no result (see logs/tests-{suite}.log)")
    elif failed:
        failures.append(f"{len(failed)} {suite} test(s) failed on cuda:0: " + ", ".join(failed[:10]))


def compare(p, q):
    """max |p - q| and KL(p || q) of two log-probability vectors."""
    if not p or not q or len(p) != len(q):
        return None
    return {"max_abs_diff": max(abs(a - b) for a, b in zip(p, q)),
            "kl": max(0.0, sum(math.exp(a) * (a - b) for a, b in zip(p, q)))}


cpu = read_json("bench-cpu.json")
cpu_lp = cpu and cpu.get("check", {}).get("temper_logprobs")
logprobs, inference = {}, {}
for dt in ("bf16", "f32"):
    b = read_json(f"bench-inference-{dt}.json")
    if not b:
        continue
    check = b.get("check", {})
    logprobs[dt] = {
        "cuda_vs_cpu_f32": compare(cpu_lp, check.get("temper_logprobs")),
        "cuda_vs_transformers_same_dtype": compare(check.get("transformers_logprobs"), check.get("temper_logprobs")),
    }
    rows = []
    for batch, ours in sorted(b.get("temper", {}).items(), key=lambda kv: int(kv[0])):
        theirs = ((b.get("transformers") or {}).get("batches") or {}).get(batch, {})
        row = {"batch": int(batch)}
        for k in ("prefill_tokens_per_s", "decode_tokens_per_s"):
            row[f"temper_{k}"] = ours.get(k)
            row[f"transformers_{k}"] = theirs.get(k)
            row[f"ratio_{k}"] = ours[k] / theirs[k] if theirs.get(k) else None
        # Drawing on the GPU copies back an id and a logprob (8 bytes) per token, nothing else.
        row["readback_bytes_per_token"] = rb = ours.get("readback_bytes_per_token")
        if rb is not None and rb > 8:
            failures.append(f"inference {dt} batch {batch}: {rb:.0f} bytes copied to the host per token (8 expected)")
        rows.append(row)
    inference[dt] = {"rows": rows, "torch": (b.get("transformers") or {}).get("torch")}

kls = []
for line in read_text("rl/metrics.jsonl").splitlines():
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("role") == "trainer" and "mismatch_kl/mean" in m:
        kls.append({"step": m.get("step"), "mismatch_kl": m["mismatch_kl/mean"]})
rl = {"steps": kls, "max_mismatch_kl": max((k["mismatch_kl"] for k in kls), default=None)}
if not kls:
    failures.append("the RL run reported no step (see logs/rl.log)")
elif rl["max_mismatch_kl"] > KL_TARGET:
    failures.append(f"bf16 mismatch KL {rl['max_mismatch_kl']:.2e} is above {KL_TARGET:.0e}")

train = read_json("bench-train.json")
training = [{"model": r["model"], "temper_tokens_per_s": r["temper"]["tokens_per_s"],
             "pytorch_tokens_per_s": (r.get("pytorch") or {}).get("tokens_per_s"),
             "round_ratios": r.get("round_ratios")} for r in (train or {}).get("models", [])]

report = {"gpu": read_text("gpu.txt").strip(), "built_from": built_from, "seconds": seconds,
          "steps": steps, "tests": tests, "logprobs": logprobs, "inference": inference, "rl": rl,
          "training": training, "failures": failures}
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "gpu-check.json"), "w") as f:
    json.dump(report, f, indent=1)


def num(x, fmt):
    return "–" if x is None else format(x, fmt)


md = [f"# gpu-check: {report['gpu'] or 'no GPU listed'}", "",
      f"Built from {built_from}; {seconds} s.", "", "## Steps", "", "| step | exit | seconds |", "|---|---:|---:|"]
md += [f"| {s['step']} | {s['rc']} | {s['seconds']} |" for s in steps]
md += ["", "## Test suites on cuda:0", "", "| suite | passed | failed |", "|---|---:|---:|"]
md += [f"| {k} | {num(v['passed'], 'd')} | {num(v['failed'], 'd')} |" for k, v in tests.items()]
md += ["", "## Log-probabilities at one position (vocabulary-wide)", "",
       "| dtype | vs CPU f32: max diff | KL | vs transformers: max diff | KL |", "|---|---:|---:|---:|---:|"]
for dt, c in logprobs.items():
    a, t = c["cuda_vs_cpu_f32"] or {}, c["cuda_vs_transformers_same_dtype"] or {}
    md.append(f"| {dt} | {num(a.get('max_abs_diff'), '.2e')} | {num(a.get('kl'), '.2e')} | "
              f"{num(t.get('max_abs_diff'), '.2e')} | {num(t.get('kl'), '.2e')} |")
for dt, inf in inference.items():
    md += ["", f"## Inference, {dt} (transformers {inf['torch'] or '–'})", "",
           "| batch | prefill tok/s | transformers | ratio | decode tok/s | transformers | ratio | bytes to host / token |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in inf["rows"]:
        md.append(f"| {r['batch']} | {num(r['temper_prefill_tokens_per_s'], '.0f')} | "
                  f"{num(r['transformers_prefill_tokens_per_s'], '.0f')} | {num(r['ratio_prefill_tokens_per_s'], '.2f')} | "
                  f"{num(r['temper_decode_tokens_per_s'], '.0f')} | {num(r['transformers_decode_tokens_per_s'], '.0f')} | "
                  f"{num(r['ratio_decode_tokens_per_s'], '.2f')} | {num(r['readback_bytes_per_token'], '.0f')} |")
md += ["", "## RL on cuda:0 (inference bf16, trainer f32)", "",
       "mismatch KL per step: " + (", ".join(f"{k['step']}: {k['mismatch_kl']:.2e}" for k in kls) or "none")]
md += ["", "## Training", "", "| model | temper tok/s | PyTorch tok/s | rounds (ratio) |", "|---|---:|---:|---|"]
md += [f"| {t['model']} | {num(t['temper_tokens_per_s'], '.0f')} | {num(t['pytorch_tokens_per_s'], '.0f')} | "
       f"{', '.join(format(x, '.2f') for x in (t['round_ratios'] or []))} |" for t in training]
md += ["", "## Failures", ""] + ([f"- {f}" for f in failures] or ["none"])
with open(os.path.join(out, "gpu-check.md"), "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
sys.exit(1 if failures else 0)
