#!/usr/bin/env python3
"""Renders test conversations with the real chat templates through jinja2, the way Hugging Face
transformers' apply_chat_template does, and writes the expected strings to chat_golden.json.

tests/unit/common/chat_template_test.cpp checks that dq's ChatTemplate renders the same bytes.
Run from anywhere (needs `pip install jinja2`):  python3 tests/golden/chat/make_chat_golden.py
"""

import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = {
    "smollm2": "smollm2_template.jinja",
    "chatml": "chatml_template.jinja",
    "qwen3": "qwen3_template.jinja",
}


def make_env():
    # transformers.utils.chat_template_utils._compile_jinja_template: same environment options,
    # filters and globals (tools are out of scope, so tojson's extra options do not matter).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def conv(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


CONVERSATIONS = {
    "single_user": conv(("user", "Hello!")),
    "system_user": conv(("system", "You are terse."), ("user", "What is 2+2?")),
    "multi_turn": conv(("user", "Hi"), ("assistant", "Hello! How can I help?"),
                       ("user", "Tell me a joke.")),
    "system_multi_turn": conv(("system", "Be kind."), ("user", "Hi"), ("assistant", "Hey."),
                              ("user", "Bye"), ("assistant", "See you.")),
    "unicode_and_newlines": conv(("user", "Grüße, 世界! 🎉\n\nline two\n"),
                                 ("assistant", "\nDanke — 你好.\n"), ("user", "  spaces  ")),
    "empty_content": conv(("system", ""), ("user", ""), ("assistant", ""), ("user", "x")),
    "template_like_text": conv(("user", "{{ not jinja }} {% if %} <|im_end|> '\"\\")),
    "think_history": conv(
        ("user", "What is 1+1?"),
        ("assistant", "<think>\nSimple addition.\n</think>\n\n2"),
        ("user", "And 2+2?"),
        ("assistant", "<think>\n\nDouble it.\n\n</think>\n\n\n4"),
        ("user", "Thanks")),
    "think_after_last_user": conv(
        ("user", "Q1"), ("assistant", "<think>r1</think>A1"), ("user", "Q2"),
        ("assistant", "<think>\nr2\n</think>\n\nA2")),
    "no_think_after_last_user": conv(("user", "Q1"), ("assistant", "plain answer")),
    "two_assistants_after_user": conv(
        ("user", "Q"), ("assistant", "part one"), ("assistant", "<think>why</think>part two"),
        ("assistant", "no reasoning here"), ("assistant", "last")),
    "odd_think_tags": conv(
        ("user", "a"), ("assistant", "x<think>y</think>z</think>w"), ("user", "b"),
        ("assistant", "only </think> close"), ("assistant", "<think>a<think>b</think>\nc")),
    "user_looks_like_tool_response": conv(
        ("user", "real question"), ("assistant", "<think>t</think>ans"),
        ("user", "<tool_response>\n42\n</tool_response>"),
        ("assistant", "<think>t2</think>ans2")),
    "only_system": conv(("system", "Just a system prompt.")),
    "system_and_assistant": conv(("system", "S"), ("assistant", "<think>r</think>hello")),
}

# (conversation, add_generation_prompt, enable_thinking)
CASES = [(name, True, True) for name in CONVERSATIONS]
CASES += [(name, False, True) for name in CONVERSATIONS]
CASES += [(name, True, False) for name in
          ("single_user", "system_user", "think_history", "think_after_last_user")]


def main():
    env = make_env()
    out = []
    for tname, fname in TEMPLATES.items():
        with open(os.path.join(HERE, fname), encoding="utf-8") as f:
            template = env.from_string(f.read())
        for cname, add_gen, thinking in CASES:
            messages = CONVERSATIONS[cname]
            expected = template.render(messages=messages, tools=None, documents=None,
                                       add_generation_prompt=add_gen, enable_thinking=thinking)
            out.append({"template": tname, "conversation": cname, "messages": messages,
                        "add_generation_prompt": add_gen, "enable_thinking": thinking,
                        "expected": expected})
    path = os.path.join(HERE, "chat_golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "cases": out}, f, ensure_ascii=False,
                  indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
