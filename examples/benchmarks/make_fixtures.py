"""Writes the benchmark fixtures in fixtures/: a few rows of our own in each benchmark's published
column layout (AIME, GPQA-Diamond, MMLU-Pro, LiveCodeBench v6, Humanity's Last Exam), so the
layouts, suites and reports can be tested without the real data. Deterministic; run it from this
folder with `python3 make_fixtures.py`.

LiveCodeBench publishes private tests as base64 of zlib of a pickled JSON string; the fixture
does the same with Python's own pickle, zlib and base64, so the reader is checked against them.
"""

import base64
import json
import pickle
import zlib
from pathlib import Path

OUT = Path(__file__).parent / "fixtures"


def write(name, rows):
    OUT.mkdir(exist_ok=True)
    with open(OUT / name, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def packed(tests):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


write("aime_2025.jsonl", [
    {"id": 1, "problem": "Find the number of positive divisors of $720$.", "answer": 30, "url": "", "year": 2025},
    {"id": 2, "problem": "Find the remainder when $3^{100}$ is divided by $1000$.", "answer": "1", "url": "", "year": 2025},
    {"id": 3, "problem": "How many ordered pairs $(a, b)$ of positive integers satisfy $a + b = 50$?", "answer": "049", "url": "", "year": 2025},
    {"id": 4, "problem": "Find the sum of all positive integers $n < 50$ such that $n^2 + 1$ is divisible by $5$.", "answer": "500", "url": "", "year": 2025},
    {"id": 5, "problem": "A regular polygon has interior angles of $156^\\circ$. How many sides does it have?", "answer": "15", "url": "", "year": 2025},
    {"id": 6, "problem": "Find the largest prime factor of $1001$.", "answer": "13", "url": "", "year": 2025},
])

# HuggingFace's AIME 2024 layout: capitalised `Problem` and `Answer`, an integer answer.
write("aime_2024.jsonl", [
    {"ID": "2024-I-1", "Problem": "What is the sum of the first $20$ positive odd integers?", "Answer": 400, "Solution": ""},
    {"ID": "2024-I-2", "Problem": "How many positive integers less than $100$ are divisible by $3$ or $5$?", "Answer": 46, "Solution": ""},
    {"ID": "2024-I-3", "Problem": "Find $\\binom{10}{3}$.", "Answer": 120, "Solution": ""},
    {"ID": "2024-II-1", "Problem": "Find the remainder when $2^{20}$ is divided by $7$.", "Answer": 4, "Solution": ""},
])

gpqa = [
    ("Which particle mediates the electromagnetic interaction?", "photon", ["gluon", "W boson", "graviton"], "Physics"),
    ("What is the oxidation state of manganese in KMnO4?", "+7", ["+2", "+4", "+6"], "Chemistry"),
    ("Which organelle carries out oxidative phosphorylation in eukaryotic cells?", "mitochondrion", ["ribosome", "Golgi apparatus", "lysosome"], "Biology"),
    ("What is the ground-state term symbol of atomic oxygen?", "3P2", ["1S0", "3P0", "1D2"], "Chemistry"),
    ("In a hydrogen atom, how many states (counting spin) have principal quantum number n = 3?", "18", ["9", "6", "14"], "Physics"),
    ("Which enzyme unwinds the DNA double helix at the replication fork?", "helicase", ["ligase", "primase", "topoisomerase I"], "Biology"),
]
write("gpqa_diamond.jsonl", [
    {"Record ID": f"rec{i}", "Question": q, "Correct Answer": c, "Incorrect Answer 1": w[0],
     "Incorrect Answer 2": w[1], "Incorrect Answer 3": w[2], "High-level domain": d}
    for i, (q, c, w, d) in enumerate(gpqa)
])

write("mmlu_pro.jsonl", [
    {"question_id": 70, "question": "What is the derivative of $x^3$?", "options": ["3x^2", "x^2", "3x", "x^3/3", "2x^3", "3x^3", "x^4/4", "6x", "9x^2", "0"], "answer": "A", "answer_index": 0, "cot_content": "", "category": "math", "src": "fixture"},
    {"question_id": 71, "question": "Which of these is a noble gas?", "options": ["Nitrogen", "Oxygen", "Argon", "Chlorine"], "answer": "C", "answer_index": 2, "cot_content": "", "category": "chemistry", "src": "fixture"},
    {"question_id": 72, "question": "A firm's marginal cost is below its average cost. As output rises, average cost", "options": ["rises", "falls", "stays the same", "becomes negative", "equals price"], "answer": "B", "answer_index": 1, "cot_content": "", "category": "economics", "src": "fixture"},
    {"question_id": 73, "question": "How many bits are in a byte?", "options": ["4", "8", "16", "32", "2", "10", "12"], "answer": "B", "answer_index": 1, "cot_content": "", "category": "computer science", "src": "fixture"},
    {"question_id": 74, "question": "Which law relates the pressure and volume of a gas at constant temperature?", "options": ["Charles's law", "Boyle's law", "Hooke's law", "Ohm's law", "Snell's law", "Dalton's law"], "answer": "B", "answer_index": 1, "cot_content": "", "category": "physics", "src": "fixture"},
    {"question_id": 75, "question": "What is 15% of 200?", "options": ["15", "20", "25", "30", "35", "40", "45", "50", "60"], "answer": "D", "answer_index": 3, "cot_content": "", "category": "math", "src": "fixture"},
])

def stdin_tests(pairs):
    return [{"input": i, "output": o, "testtype": "stdin"} for i, o in pairs]

def call_tests(pairs):
    return [{"input": i, "output": o, "testtype": "functional"} for i, o in pairs]

write("livecodebench.jsonl", [
    {"question_title": "Sum of Two", "question_content": "You are given two integers A and B on one line. Print A + B.",
     "platform": "atcoder", "question_id": "fx001", "contest_id": "fx1", "contest_date": "2024-09-14T00:00:00",
     "starter_code": "", "difficulty": "easy",
     "public_test_cases": json.dumps(stdin_tests([("1 2\n", "3\n")])),
     "private_test_cases": packed(stdin_tests([("10 -4\n", "6\n"), ("0 0\n", "0\n")])),
     "metadata": "{}"},
    {"question_title": "Average", "question_content": "Given N and then N integers, print their average.",
     "platform": "codeforces", "question_id": "fx002", "contest_id": "fx2", "contest_date": "2024-12-01T00:00:00",
     "starter_code": "", "difficulty": "medium",
     "public_test_cases": json.dumps(stdin_tests([("3\n1 2 4\n", "2.3333333333\n")])),
     "private_test_cases": json.dumps(stdin_tests([("2\n1 2\n", "1.5\n")])),
     "metadata": "{}"},
    {"question_title": "Two Sum", "question_content": "Return the indices of the two numbers in nums that add up to target, smaller index first.",
     "platform": "leetcode", "question_id": "fx003", "contest_id": "weekly-fx3", "contest_date": "2025-02-08T00:00:00",
     "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
     "difficulty": "easy",
     "public_test_cases": json.dumps(call_tests([("[2,7,11,15]\n9", "[0, 1]")])),
     "private_test_cases": packed(call_tests([("[3,2,4]\n6", "[1, 2]"), ("[3,3]\n6", "[0, 1]")])),
     "metadata": json.dumps({"func_name": "twoSum"})},
    {"question_title": "Mean of Array", "question_content": "Return the mean of nums as a float.",
     "platform": "leetcode", "question_id": "fx004", "contest_id": "weekly-fx4", "contest_date": "2025-04-19T00:00:00",
     "starter_code": "class Solution:\n    def mean(self, nums: List[int]) -> float:\n        ",
     "difficulty": "easy",
     "public_test_cases": json.dumps(call_tests([("[1,2]", "1.5")])),
     "private_test_cases": packed(call_tests([("[1,2,2]", "1.6666666666666667")])),
     "metadata": json.dumps({"func_name": "mean"})},
    {"question_title": "Old Problem", "question_content": "Print 42.",
     "platform": "atcoder", "question_id": "fx005", "contest_id": "fx5", "contest_date": "2023-05-01T00:00:00",
     "starter_code": "", "difficulty": "easy",
     "public_test_cases": json.dumps(stdin_tests([("", "42\n")])),
     "private_test_cases": json.dumps([]),
     "metadata": "{}"},
])

write("hle.jsonl", [
    {"id": "h1", "question": "What is the smallest prime number greater than 100?", "image": "", "answer": "101", "answer_type": "exactMatch", "rationale": "", "raw_subject": "Mathematics", "category": "Math", "author_name": "fixture", "canary": ""},
    {"id": "h2", "question": "Which of these is not a primary color of light?\n\nAnswer Choices:\nA. Red\nB. Green\nC. Yellow\nD. Blue", "image": "", "answer": "C", "answer_type": "multipleChoice", "rationale": "", "raw_subject": "Physics", "category": "Physics", "author_name": "fixture", "canary": ""},
    {"id": "h3", "question": "What is the chemical symbol of tungsten?", "image": "", "answer": "W", "answer_type": "exactMatch", "rationale": "", "raw_subject": "Chemistry", "category": "Chemistry", "author_name": "fixture", "canary": ""},
    {"id": "h4", "question": "Name the shape in the picture.", "image": "data:image/png;base64,iVBORw0KGgo=", "answer": "triangle", "answer_type": "exactMatch", "rationale": "", "raw_subject": "Other", "category": "Other", "author_name": "fixture", "canary": ""},
    {"id": "h5", "question": "In which year did the first human land on the Moon?", "image": "", "answer": "1969", "answer_type": "exactMatch", "rationale": "", "raw_subject": "History", "category": "Humanities/Social Science", "author_name": "fixture", "canary": ""},
])
