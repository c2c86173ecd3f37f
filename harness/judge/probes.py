"""Probes: timed rounds on values the kernel has not seen, which nothing short of reading every
input byte tells from the others.

The next probe's edits are drawn ahead (harness/judge/edits.py): a few inputs of the batch, chosen
at random, each with an edit of random parts at random places, kept only where the problem's
reference says it changes that input's answer. Before every timed round's window (after the
judge's flush) those places are written: in a plain round with the bytes they hold, in a probe
with the edits. Both are the same work on the judge's host and queue, so neither the judge's gaps
between rounds nor the moment a round's go fires tell a probe coming. The next probe's edits are
drawn right after each probe, whose references the judge has just checked: that gap is the
longer one after every probe, and a probe may follow a probe. No part short of the whole input
tells an edited input from the plain one, so a kernel that keeps answers keyed on any part of
its inputs fails a probe's check; one that compares every input byte with what it saw before
(all the memory traffic these kernels have) saves compute only.
"""

import random

import torch

from harness.judge import edits
from harness.judge.edits import storage_bytes
from harness.judge.verdicts import clone_data, input_leaves

EDITED_INPUTS = 4  # inputs of the batch a probe edits
# Inputs tried, at most, for the EDITED_INPUTS whose edits change their answers.
INPUTS_TRIED = 4 * EDITED_INPUTS


class ProbeEdits:
    """The probes of one case's timed rounds, on the inputs the worker holds (`shared`): their edits
    drawn on the judge's own copies (`pristine`, whose references are `expected`)."""

    def __init__(self, shared: list, pristine: list, expected: list, problem):
        self._problem, self._pristine, self._expected = problem, pristine, expected
        self._targets = [[storage_bytes(tensor) for _, tensor in input_leaves(data, problem)] for data in shared]
        self._sources = [[storage_bytes(tensor) for _, tensor in input_leaves(data, problem)] for data in pristine]
        self._random = torch.Generator().manual_seed(random.SystemRandom().getrandbits(62))
        self._pending: list[tuple[int, list[edits.Write]]] = []
        self.references = list(expected)
        self.inputs = list(pristine)  # the next probe's inputs as edited: what a folder's own check reads
        # Whether the inputs hold parts to edit (a folder's problem may have none).
        self.possible = any(edits.parts(data, problem) for data in pristine)

    def draw_next(self) -> None:
        """The next probe's edits, each changing its input's answer, and the batch's references with them."""
        self._pending, self.references, self.inputs = [], list(self._expected), list(self._pristine)
        for index in torch.randperm(len(self._pristine), generator=self._random)[:INPUTS_TRIED].tolist():
            found = edits.edited(self._pristine[index], self._expected[index], self._problem, self._random)
            if found is not None:
                self._pending.append((index, found[0]))
                self.references[index] = found[1]
                if self._problem.own_check:
                    self.inputs[index] = clone_data(self._pristine[index])
                    edits.write(self.inputs[index], found[0], self._problem)
            if len(self._pending) == EDITED_INPUTS:
                break

    def write(self, probe: bool) -> None:
        """The next probe's places written in the shared inputs, on the judge's queue: with the
        bytes they hold, or in a probe with the edits (the same kernels either way)."""
        for index, writes in self._pending:
            for each in writes:
                old = self._sources[index][each.leaf][each.places].to(torch.int16)
                new = old + (each.values.to(torch.int16) - old) * int(probe)
                self._targets[index][each.leaf][each.places] = new.to(torch.uint8)

    def undo(self) -> None:
        for index, writes in self._pending:
            for each in writes:
                self._targets[index][each.leaf][each.places] = self._sources[index][each.leaf][each.places]
