"""OpenAI tool calls through a live router on the tiny Qwen3, whose chat template implies the
hermes format. A random model does not write calls, so the test gives the tokenizer (a copy of
the fixture) three added tokens in the model's spare embedding rows: <tool_call> and
</tool_call> as special tokens, as real Qwen vocabularies have them, and one ordinary token
whose text is a whole call. logit_bias +100 on one of them makes greedy decoding write it, so
the router's parsing, special-token keeping and response shapes are checked on known output:
message.tool_calls with content null and finish_reason tool_calls (or length when max_tokens
cut the answer), delta.tool_calls chunks when streamed, parallel_tool_calls false, tool_choice
none, and the 400s for tools on a router started with --tool-call-parser none (and for
`dqserve up` with [router] tool_call_parser = "none"). Without bias: a well-formed answer.
Forced calls (tool_choice a named function or "required"), sampled at temperature 1 over several
seeds, plain and streamed: exactly one call, naming the function (or one of the tools), whose
arguments parse and validate against that tool's parameters by Python's jsonschema (not our
code); the random model writes no such thing unless decoding is constrained."""
import json
import os
import random
import shutil
import tempfile

import jsonschema

from serve_lib import (TINY, Deployment, Up, check, finish, free_port, post_json, request,
                       served_name, stream, wait_port, wait_until)

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def tool_model(work):
    """The tiny Qwen3 with the added tokens; returns (dir, ids)."""
    out = os.path.join(work, "tiny-qwen3-tools")
    os.makedirs(out)
    for f in os.listdir(TINY):
        if f != "tokenizer.json":
            os.symlink(os.path.join(TINY, f), os.path.join(out, f))
    with open(os.path.join(TINY, "tokenizer.json")) as f:
        tok = json.load(f)
    with open(os.path.join(TINY, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    ids = {}
    next_id = max(t["id"] for t in tok["added_tokens"]) + 1
    for name, text, special in (("open", "<tool_call>", True), ("close", "</tool_call>", True),
                                ("call", CALL, False)):
        assert next_id < vocab, "no spare embedding row for an added token"
        tok["added_tokens"].append({"id": next_id, "content": text, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False,
                                    "special": special})
        ids[name] = next_id
        next_id += 1
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    return out, ids


def chat(port, name, **kw):
    body = {"model": name, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "temperature": 0, "tools": TOOLS, **kw}
    return post_json(port, "/v1/chat/completions", body)


def well_formed_call(call, index=None):
    good = (call.get("type") == "function" and isinstance(call.get("id"), str)
            and call["id"].startswith("call_") and len(call["id"]) == 29
            and call.get("function", {}).get("name") == "get_weather"
            and isinstance(call["function"].get("arguments"), str)
            and json.loads(call["function"]["arguments"]) == {"city": "Paris"})
    return good and (index is None or call.get("index") == index)


def check_whole(port, name, ids):
    bias = {str(ids["call"]): 100}
    # The stop string cuts "</tool_call>"; the unclosed call still counts, and it stopped.
    s, r = chat(port, name, logit_bias=bias, max_tokens=4, stop=["</tool_call>"])
    msg = r.get("choices", [{}])[0].get("message", {}) if s == 200 else {}
    calls = msg.get("tool_calls") or []
    check(s == 200 and msg.get("content") is None and len(calls) == 1
          and well_formed_call(calls[0]) and r["choices"][0]["finish_reason"] == "tool_calls",
          f"a call: content null, one well-formed call, finish_reason tool_calls: {s} {r}")
    # Round trip: the answer goes back as the assistant turn, with the tool's result after it.
    if s == 200 and calls:
        history = [{"role": "user", "content": "Weather in Paris?"}, msg,
                   {"role": "tool", "tool_call_id": calls[0]["id"], "content": '{"temp_c": 21}'}]
        s2, r2 = chat(port, name, messages=history, max_tokens=2)
        grew = r2.get("usage", {}).get("prompt_tokens", 0) > r["usage"]["prompt_tokens"] + 20
        check(s2 == 200 and grew, f"the call and its result go back into the prompt: {s2} {r2}")
    # max_tokens 2: two calls back to back, cut by max_tokens, so "length".
    s, r = chat(port, name, logit_bias=bias, max_tokens=2)
    calls = r["choices"][0]["message"].get("tool_calls") or [] if s == 200 else []
    check(s == 200 and len(calls) == 2 and all(well_formed_call(c) for c in calls)
          and calls[0]["id"] != calls[1]["id"] and r["choices"][0]["finish_reason"] == "length",
          f"two calls cut by max_tokens: finish_reason length, distinct ids: {s} {r}")
    s, r = chat(port, name, logit_bias=bias, max_tokens=2, parallel_tool_calls=False)
    calls = r["choices"][0]["message"].get("tool_calls") or [] if s == 200 else []
    check(s == 200 and len(calls) == 1, f"parallel_tool_calls false: one call: {s} {r}")
    s, r = chat(port, name, logit_bias=bias, max_tokens=1, tool_choice="none")
    msg = r["choices"][0]["message"] if s == 200 else {}
    check(s == 200 and msg.get("content") == CALL and "tool_calls" not in msg,
          f"tool_choice none: the call's text is the answer: {s} {r}")


def check_markers(port, name, ids):
    """<tool_call> is a special token here: kept in the text only when the request has tools."""
    bias = {str(ids["open"]): 100}
    s, r = chat(port, name, logit_bias=bias, max_tokens=3)
    msg = r["choices"][0]["message"] if s == 200 else {}
    check(s == 200 and msg.get("content") == "<tool_call>" * 3 and not msg.get("tool_calls")
          and r["choices"][0]["finish_reason"] == "length",
          f"with tools the special marker is kept (an unclosed, unparsable call stays content): "
          f"{s} {r}")
    s, r = chat(port, name, logit_bias=bias, max_tokens=3, tools=None)
    check(s == 200 and r["choices"][0]["message"].get("content") == "",
          f"without tools special tokens are skipped as always: {s} {r}")


def check_stream(port, name, ids):
    body = {"model": name, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "temperature": 0, "tools": TOOLS, "stream": True, "max_tokens": 4,
            "stop": ["</tool_call>"], "logit_bias": {str(ids["call"]): 100}}
    s, events, _ = stream(port, "/v1/chat/completions", body)
    payloads = [json.loads(e[len("data: "):]) for e in events if e != "data: [DONE]"]
    calls, content, reasons = [], "", []
    for p in payloads:
        c = p["choices"][0]
        content += c["delta"].get("content") or ""
        calls += c["delta"].get("tool_calls") or []
        reasons.append(c["finish_reason"])
    check(s == 200 and events[-1] == "data: [DONE]" and len(calls) == 1
          and well_formed_call(calls[0], index=0) and content == ""
          and reasons[-1] == "tool_calls" and all(x is None for x in reasons[:-1]),
          f"streamed: one delta.tool_calls chunk (index 0), finish_reason tool_calls: {events}")
    body["max_tokens"] = 3
    del body["stop"]
    s, events, _ = stream(port, "/v1/chat/completions", body)
    payloads = [json.loads(e[len("data: "):]) for e in events if e != "data: [DONE]"]
    calls = [t for p in payloads for t in p["choices"][0]["delta"].get("tool_calls") or []]
    check(s == 200 and [t.get("index") for t in calls] == [0, 1, 2]
          and all(well_formed_call(t) for t in calls)
          and payloads[-1]["choices"][0]["finish_reason"] == "length",
          f"streamed: three calls indexed 0, 1, 2, finish_reason length: {calls}")


# Bounded strings, so that a sampled call ends well within max_tokens.
FORCED_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a zone",
        "parameters": {"type": "object", "properties": {
            "zone": {"type": "string", "maxLength": 8}, "offset": {"type": "integer"}},
            "required": ["zone"], "additionalProperties": False}}},
]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in FORCED_TOOLS}
NAMED = {"type": "function", "function": {"name": "get_time"}}
FORCED_RUNS = 6


def forced_call_ok(calls, names):
    """(ok, why): one call naming one of `names`, arguments valid for that tool."""
    if len(calls) != 1:
        return False, f"{len(calls)} calls"
    fn = calls[0].get("function", {})
    if fn.get("name") not in names:
        return False, f"name {fn.get('name')!r}"
    try:
        jsonschema.validate(json.loads(fn.get("arguments")), PARAMETERS[fn["name"]],
                            cls=jsonschema.Draft202012Validator)
    except (ValueError, TypeError, jsonschema.ValidationError) as e:
        return False, f"arguments {fn.get('arguments')!r}: {e}"
    shaped = calls[0].get("type") == "function" and len(calls[0].get("id", "")) == 29
    return shaped, "" if shaped else f"id/type {calls[0]}"


def check_forced(port, name, seed):
    for choice, names in ((NAMED, ["get_time"]), ("required", list(PARAMETERS))):
        good, seen, why = 0, set(), []
        for i in range(FORCED_RUNS):
            s, r = chat(port, name, tools=FORCED_TOOLS, tool_choice=choice, temperature=1,
                        seed=seed + i, max_tokens=300)
            c = r["choices"][0] if s == 200 else {}
            calls = c.get("message", {}).get("tool_calls") or []
            ok, w = forced_call_ok(calls, names)
            ok = (ok and c.get("finish_reason") == "tool_calls"
                  and c["message"].get("content") is None)
            good += ok
            if ok:
                seen.add(calls[0]["function"]["name"])
            else:
                why.append(f"{s} {w} {c.get('finish_reason')} {str(r)[:300]}")
        check(good == FORCED_RUNS, f"tool_choice {choice!r}: {good}/{FORCED_RUNS} answers are one "
              f"valid call (temperature 1, seeds {seed}..) naming {sorted(seen)}: {why}")
    body = {"model": name, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": FORCED_TOOLS, "temperature": 1, "max_tokens": 300, "stream": True}
    for choice, names in ((NAMED, ["get_time"]), ("required", list(PARAMETERS))):
        s, events, _ = stream(port, "/v1/chat/completions",
                              {**body, "tool_choice": choice, "seed": seed})
        payloads = [json.loads(e[len("data: "):]) for e in events if e != "data: [DONE]"]
        calls = [t for p in payloads for t in p["choices"][0]["delta"].get("tool_calls") or []]
        content = "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads)
        ok, why = forced_call_ok(calls, names)
        check(s == 200 and ok and calls[0].get("index") == 0 and content == ""
              and payloads[-1]["choices"][0]["finish_reason"] == "tool_calls",
              f"streamed tool_choice {choice!r}: one valid call chunk, finish_reason tool_calls: "
              f"{why} {events[-3:]}")


def check_refusals(d, port, name, model):
    s, r = chat(port, name, tool_choice="required", max_tokens=2,
                response_format={"type": "json_object"})
    check(s == 400 and r.get("error", {}).get("param") == "response_format",
          f"tool_choice required with a JSON response_format: 400: {s} {r}")
    plain_port = free_port()
    args = ["--model", model, "--port", str(plain_port), "--tool-call-parser", "none"]
    for n, p in d.ports.items():
        args += ["--prefill" if n.startswith("prefill") else "--decode", f"127.0.0.1:{p}"]
    d._spawn("router_none", "dq-router", args)
    wait_port(plain_port, d.procs["router_none"])
    wait_until(lambda: request("GET", plain_port, "/health")[0] == 200, 30)
    s, r = chat(plain_port, name, max_tokens=2)
    err = r.get("error", {})
    check(s == 400 and err.get("param") == "tools" and "--tool-call-parser" in err.get("message", ""),
          f"--tool-call-parser none: tools get 400 naming the flag: {s} {r}")
    s, r = chat(plain_port, name, max_tokens=2, tool_choice="required")
    check(s == 400 and r.get("error", {}).get("param") == "tools",
          f"--tool-call-parser none: tool_choice required gets 400 too: {s} {r}")
    s, r = chat(plain_port, name, max_tokens=2, tool_choice="none")
    check(s == 200, f"... tool_choice none still answers: {s}")


def check_unbiased(port, name):
    """The tiny model's own answer with tools: whatever it writes, a well-formed message."""
    for max_tokens in (8, 40):
        s, r = chat(port, name, max_tokens=max_tokens)
        c = r["choices"][0] if s == 200 else {}
        msg = c.get("message", {})
        calls = msg.get("tool_calls")
        shape = (calls is None and isinstance(msg.get("content"), str)
                 and c.get("finish_reason") in ("stop", "length")) or (
                     isinstance(calls, list) and all(t.get("type") == "function" for t in calls)
                     and c.get("finish_reason") in ("tool_calls", "length"))
        check(s == 200 and msg.get("role") == "assistant" and shape,
              f"unbiased, max_tokens {max_tokens}: {s} {c.get('finish_reason')} "
              f"{str(msg.get('content'))[:60]!r}")
    s_tools, with_tools = chat(port, name, max_tokens=1)
    s_none, without = chat(port, name, max_tokens=1, tool_choice="none")
    n_tools = with_tools.get("usage", {}).get("prompt_tokens", 0)
    n_none = without.get("usage", {}).get("prompt_tokens", 0)
    check(s_tools == 200 and s_none == 200 and n_tools > n_none + 20,
          f"the tools reach the prompt ({n_tools} tokens; {n_none} with tool_choice none)")


def check_up_config(work, model):
    """`dqserve up` passes [router] tool_call_parser on to the router."""
    up = Up(work, "up", model, "", router_toml='tool_call_parser = "none"\n')
    try:
        port = up.port
        s, r = chat(port, served_name(port), max_tokens=2)
        check(s == 400 and "--tool-call-parser" in r.get("error", {}).get("message", ""),
              f"dqserve up with [router] tool_call_parser = \"none\": tools get 400: {s}")
    finally:
        check(up.stop() == 0, "dqserve up stopped cleanly")


def main():
    work = tempfile.mkdtemp(prefix="dq-tools-")
    try:
        model, ids = tool_model(work)
        with Deployment(model) as d:
            name = served_name(d.port)
            check("tool calls read as hermes (2 marker token(s) kept)" in d.log("router"),
                  "the router detected hermes from the chat template and kept 2 marker ids")
            check_whole(d.port, name, ids)
            check_markers(d.port, name, ids)
            check_stream(d.port, name, ids)
            check_unbiased(d.port, name)
            seed = random.SystemRandom().randrange(1 << 30)
            print(f"seed {seed}", flush=True)
            check_forced(d.port, name, seed)
            check_refusals(d, d.port, name, model)
        check_up_config(work, model)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
