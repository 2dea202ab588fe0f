"""dq-bench serve: a load generator for an OpenAI-compatible endpoint (see docs/benchmarking.md).
Python 3 standard library only."""


class BenchError(Exception):
    """Bad input or an endpoint that cannot be benchmarked: one `error: ...` line, exit 1."""
