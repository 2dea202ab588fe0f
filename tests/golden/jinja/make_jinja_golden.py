#!/usr/bin/env python3
"""Renders chat templates and small random templates through Python's jinja2, configured as
Hugging Face transformers' apply_chat_template configures it, and writes the expected output of
every case to jinja_golden.json.

tests/unit/common/jinja_golden_test.cpp renders the same cases with dq's interpreter
(common/jinja/) and requires byte-identical output (or an error where jinja2 raised).

Needs jinja2 (Debian: apt-get install python3-jinja2). Run from anywhere:
    /usr/bin/python3 tests/golden/jinja/make_jinja_golden.py
"""

import copy
import datetime
import json
import os
import random
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE_DIR = os.path.join(HERE, "templates")
# strftime_now is fixed so the corpus is deterministic; the C++ test injects the same instant.
FIXED_NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)


def make_env():
    """transformers.utils.chat_template_utils._compile_jinja_template's environment."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' override: no HTML escaping, json.dumps options exposed.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    class AssistantTracker(jinja2.ext.Extension):
        # transformers' {% generation %} tag; rendering just emits the body.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

        def _gen(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def msg(role, content, **kw):
    m = {"role": role, "content": content}
    m.update(kw)
    return m


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web. Returns «snippets» — 日本語 OK.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer",
                                                              "default": 3}},
            "required": ["query"],
        },
    },
}


def tool_call(name, args, call_id="call_0", string_args=False):
    return {"id": call_id, "type": "function",
            "function": {"name": name,
                         "arguments": json.dumps(args) if string_args else args}}


SPECIAL = "Tricky: <|im_end|> <|eot_id|> [INST] {{ x }} {% if %} '\"\\ \t tab\n新行 🎉 Grüße"

CONVERSATIONS = {
    "single_user": [msg("user", "Hello!")],
    "system_user": [msg("system", "You are terse."), msg("user", "What is 2+2?")],
    "multi_turn": [msg("user", "Hi"), msg("assistant", "Hello! How can I help?"),
                   msg("user", "Tell me a joke.")],
    "assistant_last": [msg("system", "Be kind."), msg("user", "Hi"), msg("assistant", "Hey.")],
    "long_multi": [msg("system", "S"), msg("user", "u1"), msg("assistant", "a1"),
                   msg("user", "u2"), msg("assistant", "a2"), msg("user", "u3")],
    "special_chars": [msg("system", "  padded system  \n"), msg("user", SPECIAL),
                      msg("assistant", "\n  answer with spaces  \n"), msg("user", "  ")],
    "empty_content": [msg("system", ""), msg("user", ""), msg("assistant", ""),
                      msg("user", "x")],
    "think_history": [msg("user", "1+1?"),
                      msg("assistant", "<think>\nSimple addition.\n</think>\n\n2"),
                      msg("user", "And 2+2?")],
    "tool_round_trip": [
        msg("system", "You can call tools."), msg("user", "Weather in Paris?"),
        msg("assistant", "", tool_calls=[tool_call("get_weather", {"city": "Paris"})]),
        msg("tool", "{\"temp\": 21, \"sky\": \"clear\"}", tool_call_id="call_0",
            name="get_weather"),
        msg("user", "Thanks. And Tokyo?")],
    "tool_call_last": [
        msg("user", "Search for jinja docs"),
        msg("assistant", None, tool_calls=[tool_call("search", {"query": "jinja", "top_k": 2}),
                                           tool_call("get_weather", {"city": "Oslo"},
                                                     "call_1")])],
    "tool_string_args": [
        msg("user", "Weather?"),
        msg("assistant", "Let me check.",
            tool_calls=[tool_call("get_weather", {"city": "Rome", "unit": "celsius"},
                                  string_args=True)]),
        msg("tool", "sunny", tool_call_id="call_0"),
        msg("assistant", "It is sunny in Rome.")],
    "multimodal_text_parts": [msg("user", [{"type": "text", "text": "Describe "},
                                           {"type": "text", "text": "this."}])],
    "reasoning_content": [msg("user", "q"),
                          msg("assistant", "answer", reasoning_content="thinking it over"),
                          msg("user", "q2")],
}

TOOLS_SETS = {"none": None, "weather": [WEATHER_TOOL], "two": [WEATHER_TOOL, SEARCH_TOOL]}


def chat_cases():
    cases = []
    for fname in sorted(os.listdir(TEMPLATE_DIR)):
        if not fname.endswith(".jinja"):
            continue
        for conv_name, messages in CONVERSATIONS.items():
            for tools_name in ("none", "weather", "two"):
                if tools_name != "none" and not conv_name.startswith(("tool", "single",
                                                                      "system_user")):
                    continue
                for agp in (True, False):
                    ctx = {"messages": messages, "tools": TOOLS_SETS[tools_name],
                           "documents": None, "add_generation_prompt": agp,
                           "bos_token": "<BOS>", "eos_token": "<EOS>"}
                    if "firefunction" in fname:  # this template reads `datetime` and `functions`
                        ctx["datetime"] = "2025-03-14"
                        ctx["functions"] = json.dumps([t["function"] for t in
                                                       TOOLS_SETS[tools_name] or []])
                    variants = [("", ctx)]
                    if "Qwen3" in fname or "Seed" in fname or "Nemotron" in fname:
                        variants.append(("/no_think", dict(ctx, enable_thinking=False)))
                        variants.append(("/think", dict(ctx, enable_thinking=True)))
                    for suffix, c in variants:
                        name = f"{fname[:-6]}/{conv_name}/tools={tools_name}/agp={agp}{suffix}"
                        cases.append({"name": name, "template_file": fname, "context": c})
    return cases


# ---- random small templates over operators, filters and tests -------------------------------

VALUES = ["0", "1", "-3", "7", "2.5", "-0.5", "1e3", "'abc'", "'  Hi There  '", "'héllo wörld'",
          "'a,b,,c'", "''", "[1, 2, 3]", "[3, 1, 2]", "['b', 'A', 'c']", "[]", "{'k': 1, 'a': 2}",
          "{}", "none", "true", "false", "undefined_var", "'日本語テキスト'", "[1, 'x', none]",
          "[[1, 2], [3]]", "'Line1\\nLine2\\n\\nLine4'", "{'b': [1, {'c': 'd'}], 'a': none}",
          "'<tag> & \"q\"'", "10", "3", "'3.7'", "'42'", "0.1", "1.0", "[0.5, 1.5]"]
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in",
          "not in", "and", "or"]
FILTERS = ["trim", "upper", "lower", "title", "capitalize", "length", "count", "first", "last",
           "join", "join(', ')", "default('dflt')", "default('x', true)", "tojson",
           "tojson(indent=2)", "tojson(separators=(',', ':'))", "tojson(sort_keys=true)",
           "string", "int", "float", "list", "items|list", "dictsort", "unique|list",
           "reverse|list", "sort", "sort(reverse=true)", "round", "round(1)",
           "round(1, 'floor')", "abs", "min", "max", "sum", "batch(2)|list", "wordcount",
           "replace('a', 'Z')", "replace('l', '', 1)", "indent(2)", "indent(2, true)",
           "select('odd')|list", "reject('none')|list", "map('string')|list",
           "map('upper')|list", "safe", "e", "string|length", "trim('H ')",
           "selectattr('k')|list", "map(attribute='k')|list"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
         "iterable", "sequence", "boolean", "true", "false", "odd", "even", "divisibleby 3",
         "eq 1", "in [1, 2]", "callable", "lower", "upper"]
METHODS = [".strip()", ".lstrip()", ".rstrip()", ".strip('H')", ".split()", ".split(',')",
           ".split(',', 1)", ".rsplit(',', 1)", ".startswith('a')", ".endswith('c')",
           ".replace('a', 'b')", ".upper()", ".lower()", ".title()", ".find('b')",
           ".count('a')", ".capitalize()", ".splitlines()", ".items()|list", ".keys()|list",
           ".values()|list", ".get('k')", ".get('zz', 'dflt')", "[0]", "[-1]", "[1:]",
           "[:-1]", "[::-1]", "[::2]", "['k']", ".k", "|length"]

STATEMENT_TEMPLATES = [
    "{% for x in V %}{{ loop.index }}:{{ x }}{{ ',' if not loop.last }}{% endfor %}",
    "{% for x in V %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}"
    "{{ loop.length }}{% else %}empty{% endfor %}",
    "{% for x in V %}{% if loop.previtem is defined %}{{ loop.previtem }}>{% endif %}{{ x }}"
    "{% if loop.nextitem is defined %}<{{ loop.nextitem }}{% endif %};{% endfor %}",
    "{% for x in V %}{{ loop.cycle('a', 'b') }}{% if loop.index > 1 %}{% break %}{% endif %}"
    "{% endfor %}",
    "{% for x in V if x %}[{{ x }}]{% endfor %}",
    "{% set ns = namespace(n=0, s='') %}{% for x in V %}{% set ns.n = ns.n + 1 %}"
    "{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }}|{{ ns.s }}",
    "{% macro m(a, b='B') %}<{{ a }}-{{ b }}>{% endmacro %}{{ m(V) }}{{ m(V, b=1) }}",
    "{% set y %}  block {{ V }}  {% endset %}[{{ y }}][{{ y|trim }}]",
    "{% if V %}T{% elif V is none %}N{% else %}F{% endif %}",
    "  {% if true %}\n    x={{ V }}\n  {% endif %}\n  {%- if true %} y {% endif -%}  \n z",
    "{% for k, v in {'a': 1, 'b': V}.items() %}{{ k }}={{ v }};{% endfor %}",
    "{%- set x = V -%}\n{{- x -}}\n{# comment #}\n  {{ x is defined }}",
    "{% filter upper %}abc {{ V }}{% endfilter %}",
    "{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in {{ V }}{% endcall %}",
    "{% for x in V %}{% for y in V %}{{ loop.index }}{{ x }}{% endfor %}|{% endfor %}",
    "{{ V if V else 'no' }}/{{ 'yes' if V }}/",
    "{% set a, b = [V, 2] %}{{ a }}{{ b }}",
    "{% for i in range(3) %}{% continue %}{{ i }}{% endfor %}{{ range(V)|list if V is integer }}",
    "{{ dict(a=V, b=2) }}{{ namespace(a=1).a }}",
    "{% raw %}{{ V }}{% endraw %}{{ V }}",
]


def random_cases(seed=7, n_expr=400):
    rnd = random.Random(seed)
    sources = []
    for _ in range(n_expr):
        kind = rnd.random()
        a, b = rnd.choice(VALUES), rnd.choice(VALUES)
        if kind < 0.3:
            src = "{{ %s %s %s }}" % (a, rnd.choice(BINOPS), b)
        elif kind < 0.6:
            src = "{{ %s|%s }}" % (a, rnd.choice(FILTERS))
        elif kind < 0.75:
            src = "{{ %s is %s%s }}" % (a, rnd.choice(["", "not "]), rnd.choice(TESTS))
        elif kind < 0.9:
            src = "{{ %s%s }}" % (a, rnd.choice(METHODS))
        else:
            src = "{{ (%s %s %s)|%s }}" % (a, rnd.choice(BINOPS), b, rnd.choice(FILTERS))
        sources.append(src)
    for t in STATEMENT_TEMPLATES:
        for v in VALUES:
            sources.append(t.replace("V", v))
    seen, cases = set(), []
    for i, src in enumerate(sources):
        if src in seen:
            continue
        seen.add(src)
        cases.append({"name": f"random/{i}", "source": src, "context": {}})
    return cases


# Values with edge cases of printing, escaping and unicode; composed into deeper expressions.
VALUES2 = VALUES + ["1e-7", "1e22", "123456789012", "-0.0", "'it\\'s'", "'say \"hi\"'",
                    "'back\\\\slash'", "'\\x01ctl\\t'", "'\u3000wide\u3000'",
                    "{'ключ': 'значение', 'k2': [1.5, 'é']}", "[['b', 2], ['a', 1]]",
                    "'ǅungla ΣΊΣΥΦΟΣ straße'", "(1, 'two')", "'a\\r\\nb'", "msgs",
                    "msgs[0]", "msgs[-1].content", "msgs|map(attribute='role')|list", "tools"]
SLICES = ["[1:-1]", "[-2:]", "[::-2]", "[5:1:-1]", "[:0]", "[-100:100]", "[0]", "[-2]"]
CTX2 = {"msgs": [{"role": "system", "content": "  Be brief. "},
                 {"role": "user", "content": "Hi <|im_end|> \u00e9"},
                 {"role": "assistant", "content": None,
                  "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
                 {"role": "tool", "content": "{\"r\": 2}"}],
        "tools": [WEATHER_TOOL]}


def random_cases2(seed=11, n=2500):
    rnd = random.Random(seed)

    def atom(depth):
        r = rnd.random()
        v = rnd.choice(VALUES2)
        if depth <= 0 or r < 0.35:
            return v
        if r < 0.5:
            return "(%s %s %s)" % (atom(depth - 1), rnd.choice(BINOPS), atom(depth - 1))
        if r < 0.65:
            return "(%s|%s)" % (atom(depth - 1), rnd.choice(FILTERS))
        if r < 0.75:
            return "(%s)%s" % (atom(depth - 1), rnd.choice(SLICES + METHODS))
        if r < 0.85:
            return "(%s if %s is %s else %s)" % (atom(depth - 1), atom(depth - 1),
                                                 rnd.choice(TESTS), atom(depth - 1))
        return "(not %s or %s is %s)" % (atom(depth - 1), atom(depth - 1), rnd.choice(TESTS))

    cases, seen = [], set()
    for i in range(n):
        if rnd.random() < 0.8:
            src = "{{ %s }}" % atom(rnd.randint(1, 3))
        else:
            t = rnd.choice(STATEMENT_TEMPLATES)
            src = t.replace("V", atom(1))
        if src in seen:
            continue
        seen.add(src)
        cases.append({"name": f"random2/{i}", "source": src, "context": CTX2})
    return cases


def render(env, case, compiled):
    if "template_file" in case:
        with open(os.path.join(TEMPLATE_DIR, case["template_file"]), encoding="utf-8") as f:
            source = f.read()
    else:
        source = case["source"]
    try:
        if source not in compiled:
            compiled[source] = env.from_string(source)
        # A deep copy per render: some jinja2 filters mutate their argument in place (indent
        # does `s += "\n"`, which extends a list), and contexts are shared between cases.
        out = compiled[source].render(**copy.deepcopy(case["context"]))
        if "object at 0x" in out:  # an address: not reproducible, leave the case out
            return None
        return dict(case, expected=out, error=False)
    except Exception as e:  # jinja2 raised: the C++ renderer must fail too
        return dict(case, expected=None, error=True, python_error=type(e).__name__)


def main():
    env = make_env()
    out, compiled, contexts = [], {}, {}
    for case in chat_cases() + random_cases() + random_cases2():
        r = render(env, case, compiled)
        if r is None:
            continue
        # Contexts repeat across templates: store each once, cases refer to it by id.
        key = json.dumps(r["context"], ensure_ascii=False, sort_keys=True)
        if key not in contexts:
            contexts[key] = (f"c{len(contexts)}", r["context"])
        r["context"] = contexts[key][0]
        out.append(r)
    golden = {
        "generator": "tests/golden/jinja/make_jinja_golden.py",
        "jinja2_version": jinja2.__version__,
        "fixed_now": FIXED_NOW.isoformat(),
        "contexts": {cid: ctx for cid, ctx in contexts.values()},
        "cases": out,
    }
    path = os.path.join(HERE, "jinja_golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in out if c["error"])
    print(f"wrote {len(out)} cases ({n_err} expected errors) to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
