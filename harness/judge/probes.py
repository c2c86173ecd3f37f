"""Probes: timed rounds on values the kernel has not seen, which nothing short of reading every
input byte tells from the others.

Before every timed round's window (after the judge's flush), a few inputs of the batch, chosen at
random, get a few random bytes of their fp4 operands written: in a plain round with the bytes
they hold, in a probe with others. Both are the same work on the judge's host and queue, so
neither the judge's gaps between rounds nor the moment a round's go fires tell a probe coming,
and the places and values are new each round, so no input or pair of inputs the kernel has seen
answers a probe. A kernel that replays an answer kept from an earlier round fails the probe's
check; one that compares every input byte with what it saw before (all the memory traffic these
kernels have) saves compute only.
"""

import dataclasses
import random

import torch

from harness.judge.verdicts import clone_data, fp4_operands, storage_bytes

# Inputs of the batch edited before each timed round, and bytes of each of their fp4 operands.
EDITED_INPUTS = 4
EDITED_BYTES = 4


@dataclasses.dataclass
class Edit:
    index: int  # the input's place in the batch
    operand: int  # which of its fp4 operands
    places: torch.Tensor  # byte offsets in the operand's storage, on its device
    values: torch.Tensor  # the bytes written there


class ByteEdits:
    """The edits of one case's timed rounds, on the inputs the worker holds (`shared`), their
    values taken from the judge's own copies (`pristine`)."""

    def __init__(self, shared: list, pristine: list, problem):
        self._problem = problem
        self._targets = [[storage_bytes(tensor) for tensor in fp4_operands(data, problem)] for data in shared]
        self._sources = [[storage_bytes(tensor) for tensor in fp4_operands(data, problem)] for data in pristine]
        self._pristine = pristine
        seed = random.SystemRandom().getrandbits(62)
        self._choice = torch.Generator().manual_seed(seed)
        # Places and values are drawn where the operands live: a copy from the host's pageable
        # memory would wait for the judge's queue (the flush), and send the worker its request
        # only once the GPU is idle.
        devices = {target.device for targets in self._targets for target in targets}
        self._random = {device: torch.Generator(device).manual_seed(seed) for device in devices}

    @property
    def possible(self) -> bool:
        """Whether the inputs hold fp4 operands to edit (a folder's problem may have none)."""
        return any(self._targets)

    def write(self, probe: bool) -> list[Edit]:
        """Write this round's edits into the shared inputs, on the judge's queue: the bytes they
        hold, or in a probe other ones."""
        edits = []
        for index in torch.randperm(len(self._targets), generator=self._choice)[:EDITED_INPUTS].tolist():
            for operand, (target, source) in enumerate(zip(self._targets[index], self._sources[index])):
                draw = self._random[target.device]
                places = torch.randint(0, target.numel(), (EDITED_BYTES,), generator=draw, device=target.device)
                # A plain round's shift is drawn too and made 0: the same kernels as a probe's.
                shift = torch.randint(1, 256, (EDITED_BYTES,), generator=draw, device=target.device, dtype=torch.int16) * int(probe)
                values = ((source[places].to(torch.int16) + shift) % 256).to(torch.uint8)
                target[places] = values
                edits.append(Edit(index, operand, places, values))
        return edits

    def undo(self, edits: list[Edit]) -> None:
        for edit in edits:
            self._targets[edit.index][edit.operand][edit.places] = self._sources[edit.index][edit.operand][edit.places]

    def references(self, edits: list[Edit], expected: list) -> list:
        """`expected` with the references of the edited inputs, computed on the judge's own copies."""
        edited = {}
        for edit in edits:
            data = edited.setdefault(edit.index, clone_data(self._pristine[edit.index]))
            storage_bytes(fp4_operands(data, self._problem)[edit.operand])[edit.places] = edit.values
        references = list(expected)
        for index, data in edited.items():
            references[index] = self._problem.expected(data)
        return references
