"""guess-number: an external temper environment (JSON lines on stdin/stdout).

Protocol (see temper_envs::external): temper sends {"id", "method", "params"} lines and reads
{"id", "result"} or {"id", "error"} lines. Methods: reset, step, score, close.
Reward: 1 - 0.1 * (guesses - 1) for finding the number (at least 0.3), else 0.
"""

import json
import re
import sys

rollouts = {}


def last_int(text):
    found = re.findall(r"-?\d+", text or "")
    return int(found[-1]) if found else None


def guesses(completion):
    return [last_int(m.get("content")) for m in completion if m.get("role") == "assistant"]


def reset(params):
    rollouts[params["rollout_id"]] = int(params["example"]["answer"])
    return {"prompt": None}


def step(params):
    secret = rollouts[params["rollout_id"]]
    guess = guesses(params["completion"])[-1]
    if guess is None:
        return {"messages": [{"role": "user", "content": "Please answer with a whole number."}], "done": False}
    if guess == secret:
        return {"messages": [], "done": True}
    hint = "higher" if guess < secret else "lower"
    return {"messages": [{"role": "user", "content": f"{guess} is wrong: go {hint}."}], "done": False}


def score(params):
    secret = int(params["answer"])
    tries = guesses(params["completion"])
    if secret in tries:
        return {"reward": max(0.3, 1.0 - 0.1 * tries.index(secret))}
    return {"reward": 0.0}


def close(params):
    rollouts.pop(params["rollout_id"], None)
    return {}


METHODS = {"reset": reset, "step": step, "score": score, "close": close}

for line in sys.stdin:
    request = json.loads(line)
    try:
        result = METHODS[request["method"]](request.get("params") or {})
        reply = {"id": request["id"], "result": result}
    except Exception as error:  # an error fails one rollout, not the environment
        reply = {"id": request["id"], "error": f"{type(error).__name__}: {error}"}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
