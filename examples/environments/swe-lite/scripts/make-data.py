"""Writes data/train.jsonl and data/eval.jsonl from tasks/*/issue.md, and checks each task's
layout. Run from anywhere: python3 scripts/make-data.py

Every fourth task (in name order) goes to eval. A task folder holds repo/ (the buggy
repository, with its visible tests in repo/tests/), hidden/ (the hidden tests), solution/ (the
fixed files, at their paths under repo/) and issue.md (the task statement).
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = os.path.join(HERE, "tasks")


def check(task):
    base = os.path.join(TASKS, task)
    for need in ["repo", "repo/tests", "hidden", "solution", "issue.md"]:
        if not os.path.exists(os.path.join(base, need)):
            sys.exit(f"{task}: {need} is missing")
    for root, _, files in os.walk(os.path.join(base, "solution")):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), os.path.join(base, "solution"))
            if not os.path.isfile(os.path.join(base, "repo", rel)):
                sys.exit(f"{task}: solution/{rel} has no counterpart in repo/")


def row(task):
    with open(os.path.join(TASKS, task, "issue.md"), encoding="utf-8") as f:
        issue = f.read().strip()
    question = (
        "Your working folder holds a Python repository. A user filed the issue below. Find the "
        "cause and fix it in the repository's source code; do not change its tests.\n\n" + issue
    )
    return {"question": question, "answer": "", "info": {"task_id": task}}


def main():
    tasks = sorted(t for t in os.listdir(TASKS) if os.path.isdir(os.path.join(TASKS, t)))
    for task in tasks:
        check(task)
    splits = {"train": [], "eval": []}
    for i, task in enumerate(tasks):
        splits["eval" if i % 4 == 3 else "train"].append(row(task))
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    for name, rows in splits.items():
        with open(os.path.join(HERE, "data", f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(tasks)} tasks: {len(splits['train'])} train, {len(splits['eval'])} eval")


main()
