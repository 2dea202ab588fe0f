"""What is known about the deployment behind an endpoint: the served model and both phases'
formats (/v1/models), the workers' checkpoints (/health, dqserve only), speed counters
(/metrics, Prometheus), bits per weight of a format, the commit of this harness."""
import os
import re
import subprocess

from . import EvalError
from .client import HttpError, Malformed, Unreachable, parse_prometheus

METRIC_KEYS = [
    "dq_prompt_tokens_total", "dq_generation_tokens_total",
    "dq_time_to_first_token_seconds_sum", "dq_time_to_first_token_seconds_count",
    "dq_time_per_output_token_seconds_sum", "dq_time_per_output_token_seconds_count",
    "dq_queue_time_seconds_sum", "dq_queue_time_seconds_count",
    "dq_kv_transfer_bytes_total", "dq_prompt_cached_tokens_total",
]
# Per-worker series recorded as their sum over the workers of a role (the prefix caches).
SUMMED_KEYS = ["dq_worker_prefix_hit_blocks_total", "dq_worker_prefix_queried_blocks_total"]


def probe(client, retries=3):
    """GET /v1/models: (model entry dict or None). EvalError when nothing answers."""
    try:
        j = client.json("GET", "/v1/models", retries=retries, timeout=30)
    except Unreachable as e:
        raise EvalError(f"cannot reach the endpoint {client.base} ({e}); is the server "
                        f"running?") from None
    except HttpError as e:
        if e.status in (401, 403):
            raise EvalError(f"{client.base} refused /v1/models with HTTP {e.status}: give the "
                            f"key with --api-key-env") from None
        return None  # some servers do not list models: --model is then needed
    except Malformed:
        return None
    data = j.get("data")
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return data
    return None


def pick_model(models, wanted):
    if models is None:
        if not wanted:
            raise EvalError("the endpoint does not list its models (/v1/models); give --model")
        return {"id": wanted}
    ids = [m.get("id") for m in models]
    if wanted:
        for m in models:
            if m.get("id") == wanted:
                return m
        raise EvalError(f"model \"{wanted}\" is not served here (served: {', '.join(map(str, ids))})")
    return models[0]


def health(client):
    try:
        return client.json("GET", "/health", retries=0, timeout=10)
    except (HttpError, Unreachable, Malformed):
        return None


def metrics(client):
    """The counters dq-eval uses, or None when the endpoint has no /metrics."""
    try:
        text = client.text("/metrics", retries=1)
    except (HttpError, Unreachable):
        return None
    m = parse_prometheus(text)
    out = {k: m[k] for k in METRIC_KEYS if k in m}
    for name in SUMMED_KEYS:
        for role in ("prefill", "decode"):
            rows = [v for k, v in m.items() if k.startswith(name + "{") and f'role="{role}"' in k]
            if rows:
                out[f"{name}{{role={role}}}"] = sum(rows)
    return out or None


def path_bytes(path):
    """Bytes of a checkpoint (a file, or a directory's *.safetensors / *.gguf), or None."""
    try:
        if os.path.isfile(path):
            return os.path.getsize(path)
        if os.path.isdir(path):
            total = 0
            for name in os.listdir(path):
                if name.endswith((".safetensors", ".gguf")):
                    total += os.path.getsize(os.path.join(path, name))
            return total or None
    except OSError:
        return None
    return None


def weight_memory(health_json):
    """Weight bytes per phase from the checkpoints the workers report in /health, when those
    paths are readable here (same machine); {"prefill": n, "decode": n} or {}."""
    out = {}
    if not isinstance(health_json, dict):
        return out
    for w in health_json.get("workers") or []:
        if not isinstance(w, dict) or not w.get("checkpoint"):
            continue
        role = w.get("role")
        if role in ("prefill", "decode") and role not in out:
            n = path_bytes(w["checkpoint"])
            if n:
                out[role] = n
    return out


GGUF_BPW = {"q4_0": 4.5, "q4_1": 5.0, "q5_0": 5.5, "q5_1": 6.0, "q8_0": 8.5, "q2_k": 2.625,
            "q3_k": 3.4375, "q4_k": 4.5, "q5_k": 5.5, "q6_k": 6.5625, "iq2_xxs": 2.0625,
            "iq3_xxs": 3.0625, "iq4_nl": 4.5, "f16": 16.0, "bf16": 16.0, "f32": 32.0,
            "fp16": 16.0, "fp32": 32.0}
COMPUTE_MODES = ("weight_only", "w8a8", "w4a4")


def split_scheme(scheme):
    """'nvfp4:w4a4' -> ('nvfp4', 'w4a4'); 'gguf:IQ2_XXS' -> ('iq2_xxs', ''); 'int2-g32:weight_only'
    -> ('int2-g32', 'weight_only')."""
    if not scheme:
        return "", ""
    parts = [p for p in scheme.lower().split(":") if p]
    compute = parts.pop() if parts and parts[-1] in COMPUTE_MODES else ""
    parts = [p for p in parts if p not in ("gguf", "dq", "safetensors")]
    return (parts[-1] if parts else ""), compute


def bits_per_weight(scheme):
    """Stored bits per weight of a format, scales included (the codecs' BitsPerWeight for
    SmolLM2-sized matrices); None when unknown."""
    storage, _ = split_scheme(scheme)
    if not storage:
        return None
    m = re.fullmatch(r"int(\d)(?:-g(\d+))?", storage)
    if m:  # packed bits + an fp16 scale and a uint8 zero per group
        return int(m.group(1)) + 24.0 / int(m.group(2) or 128)
    m = re.fullmatch(r"lut(\d)", storage)
    if m:  # + one fp8 scale per 16 weights
        return int(m.group(1)) + 0.5
    if storage.startswith("nvfp4"):
        return 4.5
    if storage.startswith("fp8"):
        return 8.0
    return GGUF_BPW.get(storage)


def pretty_scheme(scheme):
    """'nvfp4:w4a4' -> 'nvfp4 w4a4'; 'bf16:weight_only' -> 'bf16'; 'nvfp4:weight_only' ->
    'nvfp4 a16'."""
    if not scheme:
        return "unknown"
    storage, compute = split_scheme(scheme)
    if not storage:
        return scheme
    if compute in ("", "weight_only"):
        return storage + (" a16" if storage in ("nvfp4", "fp8") else "")
    return f"{storage} {compute}"


def commit():
    """The git commit of this harness's checkout ('-dirty' when it has local changes), or
    'unknown'."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20)
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
