"""The functions the harness times with, captured in the worker before the submission is imported
and checked after every case: a submission that replaces one (a fake elapsed_time, a no-op
synchronize) has rewritten the clock its times are read from."""

import functools
import time

import torch

from harness.jobs import FAIL

# Dotted names as a submission would reach them; each resolves to a module or class attribute.
CLOCK = (
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.cuda.synchronize",
    "torch.cuda.current_stream",
    "time.perf_counter",
    "time.perf_counter_ns",
)
_ROOTS = {"torch": torch, "time": time}


def _resolve(name: str):
    root, *path = name.split(".")
    return functools.reduce(getattr, path, _ROOTS[root])


def capture() -> dict:
    return {name: _resolve(name) for name in CLOCK}


def replaced(captured: dict) -> list[str]:
    """The clock functions that are no longer the ones captured."""
    return [name for name, original in captured.items() if _resolve(name) is not original]


def judge(result, captured: dict, strict: bool) -> None:
    """A case whose submission replaced a clock function fails; under --official (the
    competition never looks) it keeps its verdict and carries a warning."""
    changed = replaced(captured)
    if not changed:
        return
    said = f"the submission replaced {', '.join(changed)}: times read from that clock mean nothing"
    if strict:
        result.status, result.message = FAIL, said
    else:
        result.warning = f"the competition would have missed this: {said}"
