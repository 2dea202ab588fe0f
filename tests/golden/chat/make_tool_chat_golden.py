#!/usr/bin/env python3
"""Renders tool-calling conversations with real chat templates through Hugging Face transformers'
own renderer (transformers.utils.chat_template_utils.render_jinja_template, what
apply_chat_template calls) and writes the expected prompts to tool_chat_golden.json.

Messages are written as OpenAI clients send them (a tool call's arguments are a JSON string);
the renderer gets them as vLLM hands them to transformers (arguments parsed into a dict), which
is the mapping dq's ChatTemplate does. tests/unit/common/chat_template_test.cpp checks that
ChatTemplate renders the same bytes from the OpenAI form.

Needs transformers (pip install transformers jinja2); run from anywhere:
  python3 tests/golden/chat/make_tool_chat_golden.py
"""

import copy
import json
import os
import sys

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "jinja", "templates")

# template file -> (bos_token, eos_token)
TEMPLATES = {
    "Qwen-Qwen3-0.6B.jinja": ("", "<|im_end|>"),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("", "<|im_end|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("<|begin_of_text|>", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("<s>", "</s>"),
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a time zone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}},
                   "required": ["tz"]}}}


def call(cid, name, args):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


CONVERSATIONS = {
    "tools_offered": [{"role": "user", "content": "Weather in Paris?"}],
    "system_and_tools": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Weather in Paris?"}],
    "call_and_result": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("abcDEF123", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"temp\": 21}"}],
    "call_result_answer": [
        {"role": "user", "content": "Weather in Zürich, in fahrenheit?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("zzz999AAA", "get_weather", {"city": "Zürich", "unit": "fahrenheit"})]},
        {"role": "tool", "tool_call_id": "zzz999AAA", "content": "70"},
        {"role": "assistant", "content": "It is 70°F."},
        {"role": "user", "content": "Thanks"}],
}
TWO_CALLS = [
    {"role": "user", "content": "Weather in Paris and the time in Tokyo?"},
    {"role": "assistant", "content": "",
     "tool_calls": [call("id0000001", "get_weather", {"city": "Paris"}),
                    call("id0000002", "get_time", {"tz": "Asia/Tokyo"})]},
    {"role": "tool", "tool_call_id": "id0000001", "content": "sunny"},
    {"role": "tool", "tool_call_id": "id0000002", "content": "09:00"}]


def for_transformers(messages):
    """What vLLM passes to transformers: tool-call arguments parsed into a dict, content None as
    "" (Qwen3's template fails on None)."""
    out = copy.deepcopy(messages)
    for m in out:
        if m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return out


def main():
    cases = []
    for fname, (bos, eos) in TEMPLATES.items():
        with open(os.path.join(CORPUS, fname), encoding="utf-8") as f:
            source = f.read()
        convs = dict(CONVERSATIONS)
        if "Llama-3" not in fname or "Hermes" in fname:  # Llama 3.x allows one call per turn
            convs["two_calls"] = TWO_CALLS
        for cname, messages in convs.items():
            for add_gen in (True, False):
                # A template that fails on a conversation (content None where it expects a
                # string) must fail in dq too: expected is null then.
                try:
                    text, _ = render_jinja_template(
                        conversations=[for_transformers(messages)], tools=[WEATHER, TIME],
                        chat_template=source, add_generation_prompt=add_gen, bos_token=bos,
                        eos_token=eos, date_string="01 Dec 2026")
                    expected = text[0]
                except Exception as e:  # noqa: BLE001 - any failure is the expected outcome
                    print(f"{fname} / {cname}: {type(e).__name__}: {e}", file=sys.stderr)
                    expected = None
                cases.append({"template": fname, "conversation": cname, "messages": messages,
                              "tools": [WEATHER, TIME], "bos_token": bos, "eos_token": eos,
                              "add_generation_prompt": add_gen,
                              "kwargs": {"date_string": "01 Dec 2026"}, "expected": expected})
    path = os.path.join(HERE, "tool_chat_golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"transformers_version": transformers.__version__, "cases": cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
