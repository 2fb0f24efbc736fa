"""Runs the hand-labelled math table through Hugging Face's math-verify, for the side-by-side
benchmark in benches/math.rs. Usage: python math_verify_ref.py TABLE.jsonl REPS > result.json

Gold answers are wrapped in $...$ (unless already boxed), as math-verify's documentation does;
completions are given as they are. Each case runs in this one process, with math-verify's own
default timeouts.
"""

import json
import sys
import time

from math_verify import parse, verify


def gold_text(gold):
    return gold if "\\boxed" in gold else f"${gold}$"


def run(case):
    g = parse(gold_text(case["gold"]))
    a = parse(case["completion"])
    return bool(verify(g, a)), g, a


def main():
    cases = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    reps = int(sys.argv[2])
    results, parsed, per_case = [], [], []
    for case in cases:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            ok, g, a = run(case)
            times.append(time.perf_counter() - start)
        times.sort()
        per_case.append(times[len(times) // 2])
        results.append(ok)
        parsed.append([str(g), str(a)])
    start = time.perf_counter()
    for _ in range(reps):
        for case in cases:
            run(case)
    total = time.perf_counter() - start
    json.dump({"results": results, "parsed": parsed, "per_case_s": per_case, "total_s": total,
               "runs": reps * len(cases)}, sys.stdout)


main()
