"""Probes: the same writes before every timed round, changing inputs only in a probe, each edited
input's answer changed."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.judge import edits, probes
from harness.judge.verdicts import bits, clone_data
from harness.problems import PROBLEMS

GEMM = PROBLEMS["nvfp4_gemm"]
pytestmark = pytest.mark.usefixtures("one_thread")
SPEC = {"m": 128, "n": 256, "k": 256, "l": 1}


def _changed(pristine, shared) -> set[int]:
    return {index for index, (old, new) in enumerate(zip(pristine, shared))
            if not all(torch.equal(bits(a), bits(b)) for a, b in zip(old[:6], new[:6]))}


def _probe_batch():
    pristine = [GEMM.generate(SPEC, seed, "cpu") for seed in range(1, 9)]
    shared = [clone_data(data) for data in pristine]
    expected = [GEMM.expected(clone_data(data)) for data in pristine]
    return pristine, shared, expected, probes.ProbeEdits(shared, pristine, expected, GEMM)


def test_a_plain_round_changes_nothing_and_a_probe_changes_a_few_inputs_until_undone():
    pristine, shared, expected, probe = _probe_batch()
    assert probe.possible
    probe.draw_next()
    probe.write(probe=False)
    assert _changed(pristine, shared) == set()
    probe.write(probe=True)
    changed = _changed(pristine, shared)
    assert len(changed) == probes.EDITED_INPUTS
    assert {index for index, reference in enumerate(probe.references) if reference is not expected[index]} == changed
    probe.undo()
    assert _changed(pristine, shared) == set()


def test_a_probes_references_are_those_of_the_edited_inputs_and_each_differs():
    pristine, shared, expected, probe = _probe_batch()
    probe.draw_next()
    probe.write(probe=True)
    for index, (data, reference) in enumerate(zip(shared, probe.references)):
        assert torch.equal(reference, GEMM.expected(clone_data(data))), index
        if index in _changed(pristine, shared):
            assert edits.changes_the_answer(expected[index], reference, GEMM), index


def test_each_probe_edits_other_places():
    pristine, shared, expected, probe = _probe_batch()
    drawn = []
    for _ in range(2):
        probe.draw_next()
        drawn.append([(index, write.leaf, write.places.tolist()) for index, writes in probe._pending for write in writes])
    assert drawn[0] != drawn[1]


class _Operations(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append((str(func), tuple(tuple(arg.shape) for arg in args if isinstance(arg, torch.Tensor))))
        return func(*args, **(kwargs or {}))


def test_a_plain_round_and_a_probe_run_the_same_operations_on_the_same_shapes():
    _, _, _, probe = _probe_batch()
    probe.draw_next()
    runs = []
    for is_probe in (False, True):
        with _Operations() as operations:
            probe.write(probe=is_probe)
        runs.append(operations.seen)
    probe.undo()
    assert runs[0] == runs[1] and runs[0]
