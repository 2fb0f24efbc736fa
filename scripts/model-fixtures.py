"""Writes crates/temper-model/tests/data/fixtures.json: chat-template renderings and token ids
computed by Hugging Face transformers (templates rendered by Python jinja2), which temper's own
renderings and tokenizers must equal.

Run after scripts/fetch-assets, in a virtual environment with `pip install transformers jinja2
gguf sentencepiece` (no torch needed):  python scripts/model-fixtures.py
"""
import json
import pathlib

from transformers import AutoTokenizer

root = pathlib.Path(__file__).resolve().parent.parent
assets = root / ".assets"
out = root / "crates/temper-model/tests/data/fixtures.json"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

CONVERSATIONS = {
    "single": {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
    "system": {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hi.\nTwice, on two lines."},
        ]
    },
    "multi_turn": {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n4"},
            {"role": "user", "content": "and 3+3? Ünïcödé ✓"},
        ]
    },
    "tools": {
        "messages": [
            {"role": "system", "content": "Use tools when useful."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
                ],
            },
            {"role": "tool", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
            {"role": "tool", "content": "second result"},
        ],
        "tools": [WEATHER],
    },
    "no_thinking": {
        "messages": [{"role": "user", "content": "Quick answer: 7*6?"}],
        "enable_thinking": False,
    },
    "assistant_last": {
        "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
        ],
        "add_generation_prompt": False,
    },
}

TEXTS = [
    "Hello, world!",
    "The capital of France is Paris. 1234567 + 89 = 1234656",
    "  indented\n\tcode();\n\n\nend  ",
    "unicode: héllo wörld — 日本語のテキスト 🙂🚀 ÅÄÖ",
    "<|im_start|>user\nhi<|im_end|>\n<think>x</think>",
    "don't won't I'll we've they're it's",
]


def render(tok, conv):
    kwargs = {}
    if "enable_thinking" in conv:
        kwargs["enable_thinking"] = conv["enable_thinking"]
    return tok.apply_chat_template(
        conv["messages"],
        tools=conv.get("tools"),
        tokenize=False,
        add_generation_prompt=conv.get("add_generation_prompt", True),
        **kwargs,
    )


qwen = AutoTokenizer.from_pretrained(str(assets / "qwen3-tokenizer"))
smol = AutoTokenizer.from_pretrained(str(assets / "smollm2"), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")

fixtures = {"conversations": CONVERSATIONS, "render": {}, "tokens": {}}
for name, tok in [("qwen3", qwen), ("smollm2", smol)]:
    fixtures["render"][name] = {k: render(tok, c) for k, c in CONVERSATIONS.items() if name == "qwen3" or "tools" not in c}
    fixtures["tokens"][name] = [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in TEXTS]
out.write_text(json.dumps(fixtures, indent=1, ensure_ascii=False) + "\n")
print(f"wrote {out}")
