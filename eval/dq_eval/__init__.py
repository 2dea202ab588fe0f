"""dq-eval: the accuracy harness of dqserve (issue #6). Standard library only."""
__version__ = "0.1"


class EvalError(Exception):
    """A problem the user can fix (bad input, unreachable endpoint): printed as one
    `error: ...` line, exit status 1."""
