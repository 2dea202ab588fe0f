"""The official OpenAI Python SDK (scripts/test-venv.sh installs it) against `dqserve up` on the
tiny Qwen3 with the tool tokens of tools.py, behind an API key: chat and completions, streamed
and not, every parameter the API documents (temperature, top_p, seed, stop, max_tokens,
logprobs / top_logprobs, echo, logit_bias, min_tokens through extra_body), structured output
(json_object, json_schema answers validated by Python's jsonschema, the SDK's own pydantic
parse), n > 1 and lists of prompts (streamed and not, lm-eval's batch of token-id
prompts), a tool call round trip, the SDK's error classes with our bodies, and /v1/models. Every
check is on what the SDK parsed, so a shape it cannot read fails here."""
import json
import os
import random
import shutil
import sys
import tempfile
import time

import openai
import pydantic

import serve_lib
from serve_lib import Up, check, finish, run_main
from structured_output import SCHEMAS, random_object, schema_format, token_id, valid
from tools import CALL, FORCED_TOOLS, PARAMETERS, TOOLS, tool_model

KEY = "sdk-test-key"
MSGS = [{"role": "user", "content": "Tell me about Paris."}]
EOS = 2  # the tiny Qwen3's end of sequence (<|endoftext|>)


def chat(client, name, **kw):
    return client.chat.completions.create(model=name, messages=kw.pop("messages", MSGS), **kw)


def complete(client, name, **kw):
    return client.completions.create(model=name, prompt=kw.pop("prompt", "Paris is"), **kw)


def check_sampling(client, name):
    greedy = [chat(client, name, temperature=0, max_tokens=12) for _ in range(2)]
    texts = [g.choices[0].message.content for g in greedy]
    check(texts[0] == texts[1] and texts[0], f"temperature 0 repeats itself: {texts}")
    seeded = [chat(client, name, temperature=1, top_p=0.9, seed=s, max_tokens=12,
                   extra_body={"min_tokens": 12}).choices[0].message.content
              for s in (11, 11, 12, 13, 14)]
    check(seeded[0] == seeded[1], f"seed 11 twice at temperature 1: one answer: {seeded[:2]}")
    check(len(set(seeded[1:])) > 1, f"seeds 11-14 at temperature 1 differ: {seeded[1:]}")
    r = chat(client, name, temperature=0, max_tokens=5, extra_body={"min_tokens": 5})
    check(r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"
          and r.usage.total_tokens == r.usage.prompt_tokens + 5,
          f"max_tokens 5 (min_tokens 5): 5 tokens, length, usage adds up: {r.usage}")
    whole = chat(client, name, temperature=0, max_tokens=24,
                 extra_body={"min_tokens": 24}).choices[0].message.content
    cut = whole[len(whole) // 2:][:3]
    r = chat(client, name, temperature=0, max_tokens=24, stop=[cut, "\u2603"])
    want = whole[:whole.index(cut)]
    check(r.choices[0].message.content == want and r.choices[0].finish_reason == "stop",
          f"stop {cut!r}: the text before it, finish_reason stop: {r.choices[0].message.content!r}"
          f" vs {want!r}")


def check_bias_min_tokens(client, name):
    hello = token_id("hello")
    for kind in ("chat", "completions"):
        if kind == "chat":
            r = chat(client, name, temperature=1, seed=4, max_tokens=4,
                     logit_bias={str(hello): 100})
            text = r.choices[0].message.content
        else:
            r = complete(client, name, temperature=1, seed=4, max_tokens=4,
                         logit_bias={str(hello): 100})
            text = r.choices[0].text
        check(text == "hello" * 4, f"{kind}: logit_bias +100 forces 'hello': {text!r}")
    r = chat(client, name, temperature=1, seed=9, max_tokens=30, logit_bias={str(EOS): 100},
             extra_body={"min_tokens": 7})
    check(r.usage.completion_tokens in (7, 8) and r.choices[0].finish_reason == "stop",
          f"min_tokens 7 (extra_body) holds a forced EOS back: {r.usage.completion_tokens} "
          f"{r.choices[0].finish_reason}")


def check_logprobs(client, name):
    r = chat(client, name, temperature=0, max_tokens=6, logprobs=True, top_logprobs=3,
             extra_body={"min_tokens": 6})
    content = r.choices[0].logprobs.content
    good = len(content) == 6 and all(
        len(t.top_logprobs) == 3 and t.logprob <= 0 and t.token == t.top_logprobs[0].token
        and abs(t.logprob - t.top_logprobs[0].logprob) < 1e-5
        and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        for t in content)
    check(good and "".join(t.token for t in content) == r.choices[0].message.content,
          f"chat logprobs: 6 tokens, 3 sorted alternatives, greedy picks the top one, tokens "
          f"spell the answer: {content[:2]}")
    prompt = "The capital of France"
    r = complete(client, name, prompt=prompt, temperature=0, max_tokens=3, echo=True,
                 logprobs=2, extra_body={"min_tokens": 3})
    lp = r.choices[0].logprobs
    n_prompt = r.usage.prompt_tokens
    check(r.choices[0].text.startswith(prompt) and len(lp.tokens) == n_prompt + 3
          and lp.token_logprobs[0] is None and all(x <= 0 for x in lp.token_logprobs[1:])
          and "".join(lp.tokens) == r.choices[0].text and len(lp.top_logprobs[-1]) == 2,
          f"completions echo + logprobs 2: prompt and answer, first logprob null: "
          f"{r.choices[0].text!r} {lp.token_logprobs[:3]}")
    r = complete(client, name, prompt=[1, 2, 3, 4], max_tokens=2, temperature=0)
    check(r.usage.prompt_tokens == 4 and r.choices[0].text is not None,
          f"a token-id prompt: 4 prompt tokens: {r.usage}")


def stream_text(events, chat_api=True):
    text, reasons, usage = "", [], None
    for e in events:
        if e.usage is not None:
            usage = e.usage
        for c in e.choices:
            text += (c.delta.content or "") if chat_api else c.text
            reasons.append(c.finish_reason)
    return text, [x for x in reasons if x], usage


def check_streaming(client, name):
    want = chat(client, name, temperature=0, max_tokens=16)
    events = list(chat(client, name, temperature=0, max_tokens=16, stream=True,
                       stream_options={"include_usage": True}))
    text, reasons, usage = stream_text(events)
    check(text == want.choices[0].message.content and reasons == [want.choices[0].finish_reason]
          and usage is not None and usage.completion_tokens == want.usage.completion_tokens,
          f"chat streamed = not streamed (text, finish_reason, usage chunk): {text!r} {reasons}")
    want = complete(client, name, temperature=0, max_tokens=16)
    events = list(complete(client, name, temperature=0, max_tokens=16, stream=True,
                           stream_options={"include_usage": True}))
    text, reasons, usage = stream_text(events, chat_api=False)
    check(text == want.choices[0].text and reasons == [want.choices[0].finish_reason]
          and usage is not None and usage.total_tokens == want.usage.total_tokens,
          f"completions streamed = not streamed: {text!r} {reasons} {usage}")


PROMPTS = ["Paris is", "The river", "Once upon a time", "Q: 2+2=?\nA:"]


def by_index(choices):
    return [c for c in sorted(choices, key=lambda c: c.index)]


def max_diff(got, want):
    return max((abs(a - b) for g, w in zip(got, want) for a, b in zip(g[1:], w[1:])), default=0)


def check_choices(client, name, port):
    """n > 1 and lists of prompts (router/choice_fanout.h): choice j of a prompt is the n = 1
    request seeded seed + j; choice i * n + j is prompt i's choice j; usage counts each prompt
    once and every choice's tokens."""
    many = chat(client, name, temperature=1, seed=5, max_tokens=8, n=3)
    ones = [chat(client, name, temperature=1, seed=5 + j, max_tokens=8) for j in range(3)]
    got = [c.message.content for c in by_index(many.choices)]
    want = [o.choices[0].message.content for o in ones]
    check([c.index for c in many.choices] == [0, 1, 2] and got == want,
          f"chat n=3 seed 5: choice j == the n=1 request with seed 5+j: {got} vs {want}")
    check(many.usage.prompt_tokens == ones[0].usage.prompt_tokens
          and many.usage.completion_tokens == sum(o.usage.completion_tokens for o in ones),
          f"chat n=3 usage: prompt once, completions summed: {many.usage}")
    greedy = chat(client, name, temperature=0, max_tokens=8, n=3)
    texts = {c.message.content for c in greedy.choices}
    check(len(greedy.choices) == 3 and len(texts) == 1, f"n=3 greedy: 3 equal choices: {texts}")
    events = list(chat(client, name, temperature=1, seed=5, max_tokens=8, n=3, stream=True,
                       stream_options={"include_usage": True}))
    streamed, reasons, usage = ["", "", ""], [None] * 3, None
    for e in events:
        usage = e.usage or usage
        for c in e.choices:
            streamed[c.index] += c.delta.content or ""
            reasons[c.index] = c.finish_reason or reasons[c.index]
    check(streamed == want and None not in reasons and usage is not None
          and usage.completion_tokens == many.usage.completion_tokens,
          f"chat n=3 streamed == not streamed: {streamed} {reasons} {usage}")

    # Four prompts (text), n = 1 and n = 2: each choice is its prompt's own request.
    singles = [complete(client, name, prompt=p, temperature=1, seed=3, max_tokens=6)
               for p in PROMPTS]
    batch = complete(client, name, prompt=PROMPTS, temperature=1, seed=3, max_tokens=6)
    check([c.text for c in by_index(batch.choices)] == [s.choices[0].text for s in singles]
          and batch.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
          and batch.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles),
          f"4 prompts: choice i == prompt i alone, usage summed: {batch.usage}")
    seed4 = [complete(client, name, prompt=p, temperature=1, seed=4, max_tokens=6)
             for p in PROMPTS]
    both = complete(client, name, prompt=PROMPTS, temperature=1, seed=3, max_tokens=6, n=2)
    want2 = [x.choices[0].text for pair in zip(singles, seed4) for x in pair]
    check([c.text for c in by_index(both.choices)] == want2
          and both.usage.prompt_tokens == batch.usage.prompt_tokens,
          f"4 prompts x n=2: choice 2i+j == prompt i seeded 3+j; prompts counted once")
    events = list(complete(client, name, prompt=PROMPTS, temperature=1, seed=3, max_tokens=6,
                           n=2, stream=True, stream_options={"include_usage": True}))
    streamed, usage = [""] * 8, None
    for e in events:
        usage = e.usage or usage
        for c in e.choices:
            streamed[c.index] += c.text
    check(streamed == want2 and usage is not None
          and usage.total_tokens == both.usage.total_tokens,
          f"4 prompts x n=2 streamed == not streamed: {usage}")

    # lm-eval's loglikelihood batch: token-id prompts, echo, logprobs 1, max_tokens 1, greedy.
    ids = [serve_lib.post_json(port, "/tokenize", {"model": name, "prompt": p},
                               headers={"Authorization": f"Bearer {KEY}"})[1]["tokens"]
           for p in PROMPTS]
    lm = dict(temperature=0, max_tokens=1, logprobs=1, echo=True, seed=1234)
    batch = complete(client, name, prompt=ids, **lm)
    singles = [complete(client, name, prompt=x, **lm) for x in ids]
    got = [c.logprobs.token_logprobs for c in by_index(batch.choices)]
    want = [s.choices[0].logprobs.token_logprobs for s in singles]
    # Equal up to float32 rounding: the prefill worker may batch the 4 prompts, which sums in
    # another order than one prompt alone (seen: 1e-6 apart).
    close = all(len(g) == len(w) and g[0] is None and w[0] is None
                and all(abs(a - b) <= 1e-4 for a, b in zip(g[1:], w[1:]))
                for g, w in zip(got, want))
    check(len(got) == 4 and close
          and [c.text for c in by_index(batch.choices)] == [x.choices[0].text for x in singles]
          and all(len(g) == len(x) + 1 for g, x in zip(got, ids))
          and batch.usage.prompt_tokens == sum(len(x) for x in ids),
          f"lm-eval batch of 4 token-id prompts: each choice's echoed logprobs == alone "
          f"(within 1e-4): {got if not close else 'max diff %.2g' % max_diff(got, want)}")

class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=8)  # bounded, so the random model's answer ends
    population: int
    capital: bool


def check_structured(client, name, seed):
    rng = random.Random(seed)
    schemas = SCHEMAS + [random_object(rng, rng.randrange(1, 4)) for _ in range(6)]
    good = 0
    for i, schema in enumerate(schemas):
        stream = i % 2 == 1
        kw = dict(temperature=1, seed=seed + i, max_tokens=400,
                  response_format=schema_format(schema))
        if stream:
            text, reasons, _ = stream_text(chat(client, name, stream=True, **kw))
        else:
            c = chat(client, name, **kw).choices[0]
            text, reasons = c.message.content, [c.finish_reason]
        ok, why = valid(schema, text)
        good += ok and reasons == ["stop"]
        check(ok and reasons == ["stop"], f"json_schema {i} (stream {stream}): {why} {reasons} "
                                          f"{text[:120]!r}")
    check(good == len(schemas), f"{good}/{len(schemas)} json_schema answers validate")
    text = chat(client, name, temperature=1, seed=seed, max_tokens=300,
                response_format={"type": "json_object"},
                logit_bias={str(token_id("{}")): -100, str(token_id('"')): 8},
                ).choices[0].message.content
    check(text.startswith("{"), f"json_object: an object starts: {text[:80]!r}")
    r = client.chat.completions.parse(model=name, messages=MSGS, temperature=1, seed=seed,
                                      max_tokens=300, response_format=City)
    parsed = r.choices[0].message.parsed
    check(isinstance(parsed, City), f"the SDK's parse() with a pydantic model gets a City: "
                                    f"{parsed!r} {r.choices[0].message.content[:100]!r}")


def check_tools(client, name, ids):
    bias = {str(ids["call"]): 100}
    r = chat(client, name, temperature=0, tools=TOOLS, logit_bias=bias, max_tokens=4,
             stop=["</tool_call>"])
    msg = r.choices[0].message
    calls = msg.tool_calls or []
    good = (len(calls) == 1 and calls[0].function.name == "get_weather"
            and json.loads(calls[0].function.arguments) == {"city": "Paris"}
            and calls[0].id.startswith("call_") and msg.content is None
            and r.choices[0].finish_reason == "tool_calls")
    check(good, f"a tool call parsed by the SDK: {msg}")
    if not good:
        return
    history = [*MSGS, msg.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": calls[0].id, "content": '{"temp_c": 21}'}]
    r2 = chat(client, name, messages=history, tools=TOOLS, temperature=0, max_tokens=3)
    check(r2.usage.prompt_tokens > r.usage.prompt_tokens + 20 and r2.choices[0].message.role
          == "assistant", f"the call and the tool's result go back as history: "
                          f"{r2.usage.prompt_tokens} vs {r.usage.prompt_tokens} prompt tokens")
    events = list(chat(client, name, temperature=0, tools=TOOLS, logit_bias=bias, max_tokens=4,
                       stop=["</tool_call>"], stream=True))
    deltas = [t for e in events for c in e.choices for t in (c.delta.tool_calls or [])]
    check(len(deltas) == 1 and deltas[0].index == 0 and deltas[0].function.name == "get_weather"
          and json.loads(deltas[0].function.arguments) == {"city": "Paris"},
          f"streamed: one delta.tool_calls the SDK reads: {deltas}")
    r = chat(client, name, temperature=1, seed=3, max_tokens=120, tools=FORCED_TOOLS,
             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = r.choices[0].message.tool_calls or []
    args = json.loads(calls[0].function.arguments) if calls else None
    check(len(calls) == 1 and calls[0].function.name == "get_weather" and isinstance(args, dict)
          and valid(PARAMETERS["get_weather"], calls[0].function.arguments)[0],
          f"tool_choice get_weather: one call, arguments valid: {r.choices[0].message}")
    r = chat(client, name, temperature=0, tools=TOOLS, logit_bias=bias, max_tokens=1,
             tool_choice="none")
    check(r.choices[0].message.content == CALL and not r.choices[0].message.tool_calls,
          f"tool_choice none: text: {r.choices[0].message}")


def expect_error(cls, status, call, what, param=None, code=None):
    try:
        call()
    except cls as e:
        body = e.body if isinstance(e.body, dict) else {}
        good = (e.status_code == status and (param is None or e.param == param)
                and (code is None or e.code == code) and isinstance(body.get("message"), str))
        check(good, f"{what}: {cls.__name__} {e.status_code} param={e.param} code={e.code} "
                    f"{body.get('message', '')[:100]!r}")
        return
    except openai.APIError as e:
        check(False, f"{what}: {type(e).__name__} instead of {cls.__name__}: {e}")
        return
    check(False, f"{what}: no error raised")


def check_errors(client, name, base_url):
    expect_error(openai.BadRequestError, 400,
                 lambda: chat(client, name, max_tokens=2, extra_body={"temprature": 1.9}),
                 "an unknown parameter", param="temprature")
    expect_error(openai.BadRequestError, 400, lambda: chat(client, name, temperature=9),
                 "temperature 9", param="temperature")
    expect_error(openai.BadRequestError, 400,
                 lambda: complete(client, name, max_tokens=10 ** 7),
                 "max_tokens past the context", code="context_length_exceeded")
    expect_error(openai.BadRequestError, 400,
                 lambda: chat(client, name, response_format=schema_format(
                     {"type": "string", "pattern": "a+"})), "a refused schema keyword",
                 param="response_format")
    expect_error(openai.NotFoundError, 404, lambda: chat(client, "no-such-model"),
                 "an unknown model", code="model_not_found")
    expect_error(openai.NotFoundError, 404, lambda: client.models.retrieve("no-such-model"),
                 "GET /v1/models/no-such-model", code="model_not_found")
    bad = openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0)
    expect_error(openai.AuthenticationError, 401, lambda: chat(bad, name, max_tokens=2),
                 "a wrong API key")
    expect_error(openai.BadRequestError, 400, lambda: chat(client, name, n=129),
                 "n above the cap", param="n")
    expect_error(openai.BadRequestError, 400, lambda: chat(client, name, n=0), "n 0", param="n")
    expect_error(openai.BadRequestError, 400,
                 lambda: complete(client, name, prompt=["x"] * 65, n=2),
                 "65 prompts x n=2 (130 choices)", param="prompt")
    expect_error(openai.BadRequestError, 400,
                 lambda: complete(client, name, prompt=["x", ""]), "an empty second prompt",
                 param="prompt[1]")
    r = chat(client, name, max_tokens=2)
    check(r.choices[0].message.role == "assistant", "still serving after the errors")


def check_metrics(up):
    """/metrics after the requests above: phase histograms labelled by the workers' scheme,
    the end-to-end histogram, and the router's process metrics against its /proc entries."""
    m = serve_lib.metrics(up.port, headers={"Authorization": f"Bearer {KEY}"})
    scheme = "bf16:weight_only"  # the tiny model's checkpoint, served as it is
    for phase in ("prefill", "decode"):
        labels = f'{{phase="{phase}",scheme="{scheme}"}}'
        n = m.get(f"dq_request_phase_seconds_count{labels}", 0)
        per = m.get(f"dq_request_phase_seconds_per_token_count{labels}", 0)
        check(n > 0 and per > 0, f"/metrics: dq_request_phase_seconds{labels}: {n:.0f} "
              f"requests, {per:.0f} per-token samples")
    e2e = m.get("dq_e2e_request_latency_seconds_count", 0)
    ttft = m.get("dq_time_to_first_token_seconds_count", 0)
    check(e2e == ttft > 0, f"/metrics: dq_e2e_request_latency_seconds counts every request that "
          f"got a first token: {e2e:.0f} (TTFT's count {ttft:.0f})")
    pid = serve_lib.child_pid(up, "dq-router")
    with open(f"/proc/{pid}/status") as f:
        vm_rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = m.get("process_resident_memory_bytes", 0)
    start = m.get("process_start_time_seconds", 0)
    cpu = m.get("process_cpu_seconds_total", 0)
    check(abs(rss - vm_rss) < 0.2 * vm_rss and abs(m.get("process_open_fds", 0) - fds) <= 5
          and 0 < cpu and time.time() - 600 < start <= time.time(),
          f"/metrics: the router's process_*: rss {rss / 1e6:.1f} MB (/proc {vm_rss / 1e6:.1f}), "
          f"fds {m.get('process_open_fds', 0):.0f} (/proc {fds}), cpu {cpu:.2f} s, started "
          f"{time.time() - start:.0f} s ago")


def check_models(client):
    models = client.models.list().data
    check(len(models) == 1 and models[0].object == "model", f"/v1/models: one model: {models}")
    one = client.models.retrieve(models[0].id)
    check(one.id == models[0].id, f"/v1/models/{{id}}: the same model: {one}")
    return models[0].id


def main():
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"seed {seed}; openai {openai.__version__}, python {sys.version.split()[0]}",
          flush=True)
    work = tempfile.mkdtemp(prefix="dq-sdk-")
    os.environ["DQ_API_KEY"] = KEY  # `dqserve up` hands it to the router (api_key_env)
    up = None
    try:
        model, ids = tool_model(work)
        up = Up(work, "up", model, "")
        base_url = f"http://127.0.0.1:{up.port}/v1"
        client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)
        name = check_models(client)
        check_sampling(client, name)
        check_bias_min_tokens(client, name)
        check_logprobs(client, name)
        check_streaming(client, name)
        check_choices(client, name, up.port)
        check_structured(client, name, seed)
        check_tools(client, name, ids)
        check_errors(client, name, base_url)
        check_metrics(up)
    finally:
        if up is not None:
            check(up.stop() == 0, "dqserve up stopped cleanly")
            if serve_lib.failures:
                print("--- dqserve up log (tail)\n" + up.output()[-4000:])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run_main(main)
    finish()
