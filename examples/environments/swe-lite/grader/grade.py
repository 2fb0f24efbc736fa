"""swe-lite grader: runs in the rollout's session after its last turn, from the repository root.

Prints the fraction of hidden tests that pass as its last line (0 to 1).

- The repository's own tests must be exactly as given: every file of `.grader/pristine` (a copy
  of the original `tests/` folder) must be unchanged, and `tests/` must hold no new file. Any
  change scores 0: a fix that edits or deletes the tests is worth nothing.
- Each hidden test method runs in its own `python3 -I` process (no site customisation, no
  environment variables), with a time limit. It passes only if that process reports success
  with a token it was given on stdin, so code under test that exits early (`os._exit(0)`) or
  prints a fake result does not pass.
"""

import ast
import os
import secrets
import subprocess
import sys

GRADER = ".grader"
PRISTINE = os.path.join(GRADER, "pristine")
HIDDEN = os.path.join(GRADER, "hidden")
PER_TEST_S = 20
TOTAL_S = 100

RUNNER = r"""
import sys, unittest
token = sys.stdin.readline().strip()
sys.stdin = open("/dev/null")
sys.path[:0] = [".", ".grader/hidden"]
suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
result = unittest.TestResult()
suite.run(result)
ok = result.testsRun == 1 and result.wasSuccessful()
sys.stdout.flush()
sys.stdout.write("\n" + (token if ok else "fail") + "\n")
sys.stdout.flush()
"""


def files_under(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".pyc"):
                continue
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = full
    return out


def tests_unchanged():
    pristine = files_under(PRISTINE)
    if not os.path.isdir("tests") or os.path.islink("tests"):
        return False
    current = files_under("tests")
    if set(current) != set(pristine):
        return False
    for rel, full in pristine.items():
        path = current[rel]
        if os.path.islink(path):
            return False
        with open(full, "rb") as a, open(path, "rb") as b:
            if a.read() != b.read():
                return False
    return True


def hidden_tests():
    ids = []
    for name in sorted(os.listdir(HIDDEN)):
        if not (name.startswith("test") and name.endswith(".py")):
            continue
        module = name[:-3]
        with open(os.path.join(HIDDEN, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                        ids.append(f"{module}.{node.name}.{item.name}")
    return ids


def passes(test_id, deadline):
    token = secrets.token_hex(16)
    left = deadline - time_now()
    if left <= 0:
        return False
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", RUNNER, test_id],
            input=token + "\n",
            capture_output=True,
            text=True,
            timeout=min(PER_TEST_S, left),
        )
    except subprocess.TimeoutExpired:
        return False
    lines = [l for l in done.stdout.splitlines() if l.strip()]
    return done.returncode == 0 and bool(lines) and lines[-1] == token


def time_now():
    return os.times().elapsed


def main():
    if not tests_unchanged():
        print("the repository's tests were changed", file=sys.stderr)
        print(0)
        return
    ids = hidden_tests()
    if not ids:
        print("no hidden tests found", file=sys.stderr)
        sys.exit(2)
    deadline = time_now() + TOTAL_S
    passed = sum(passes(test_id, deadline) for test_id in ids)
    print(f"{passed}/{len(ids)} hidden tests pass", file=sys.stderr)
    print(passed / len(ids))


main()
