"""The task registry."""
from .. import EvalError
from .base import DECODE, LOGLIK, PREFILL, Options, fingerprint  # noqa: F401
from .decode_tasks import Arith, ArithOneStep, Gsm8k, MmluPro, Units
from .mc import McArith, McFile
from .multiturn import MultiTurnRecall, MultiTurnRecall3
from .ruler import RULER_TASKS

TASKS = {t.name: t for t in [Arith, ArithOneStep, Units, Gsm8k, MmluPro, *RULER_TASKS, McArith,
                             McFile, MultiTurnRecall, MultiTurnRecall3]}
# Names that stand for several tasks.
GROUPS = {
    "ruler": [t.name for t in RULER_TASKS if t.name != "ruler-niah"],
    "decode": ["arith", "arith-1step", "units"],
    "builtin": ["arith", "arith-1step", "units", "ruler-niah", "ruler-vt", "ruler-cwe", "ruler-fwe", "mc-arith"],
}


def resolve(names):
    """'arith,ruler' -> [task instances], in order, without repeats; EvalError on a bad name."""
    out, seen = [], set()
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        expanded = GROUPS.get(name, [name])
        for n in expanded:
            if n not in TASKS:
                raise EvalError(f"unknown task \"{n}\" (known: {', '.join(sorted(TASKS))}; "
                                f"groups: {', '.join(sorted(GROUPS))}; see dq-eval list-tasks)")
            if n not in seen:
                seen.add(n)
                out.append(TASKS[n]())
    if not out:
        raise EvalError("no tasks given (--tasks NAME[,NAME...]; see dq-eval list-tasks)")
    return out
