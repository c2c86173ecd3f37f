"""The functions the worker times with, captured before the submission is imported and compared
after every request: a submission that replaces one (a fake elapsed_time, a no-op synchronize)
has rewritten the clock its times are read from. The judge gets the names with every reply."""

import functools
import time

import torch

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

