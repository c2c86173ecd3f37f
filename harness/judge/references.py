"""The inputs and reference outputs of cases whose seeds are fixed, kept across the runs of one
judge process (the service's, harness/service/judge.py), so that candidate after candidate on
the same tests does not draw and compute them again.

Off unless the judge turns it on; never on with a secret seed (POPCORN_SEED), whose cases are
not to outlive their run. Whoever asks gets copies: a run may write its pristine inputs (a
probe's edits), and the next run must start from the drawn values again.
"""

import collections

import torch

from harness.judge.verdicts import clone_data
from harness.shared.wire import leaves


def _bytes_of(value) -> int:
    return sum(tensor.numel() * tensor.element_size() for _, tensor in leaves(value))


class References:
    """(inputs, references) per (problem, sizes, seed, device), the least recently used dropped
    beyond `max_bytes`."""

    def __init__(self):
        self._kept: collections.OrderedDict = collections.OrderedDict()
        self._bytes = 0
        self.max_bytes = 0  # 0: off
        self.hits = self.misses = 0

    def enable(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def clear(self) -> None:
        self._kept.clear()
        self._bytes = 0

    def drawn(self, problem, args: dict, seed: int, device: str, draw):
        """A copy of `draw()`'s (inputs, reference) for the case, drawn once while kept."""
        if not self.max_bytes:
            return draw()
        key = (problem.name, str(getattr(problem, "folder", "")), repr(sorted(args.items())), seed, str(torch.device(device)))
        if key in self._kept:
            self.hits += 1
            self._kept.move_to_end(key)
        else:
            self.misses += 1
            value = draw()
            size = _bytes_of(value)
            if size > self.max_bytes:
                return value
            self._kept[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._kept.popitem(last=False)
                self._bytes -= dropped
        inputs, reference = self._kept[key][0]
        return clone_data(inputs), clone_data(reference)


REFERENCES = References()
