"""Probes: the same writes before every timed round, changing inputs only in a probe."""

import torch

from harness.judge import probes
from harness.judge.verdicts import clone_data
from harness.problems import PROBLEMS

GEMM = PROBLEMS["nvfp4_gemm"]
SPEC = {"m": 128, "n": 256, "k": 256, "l": 1}


def _batch(count: int = 8):
    pristine = [GEMM.generate(SPEC, seed, "cpu") for seed in range(1, count + 1)]
    return pristine, [clone_data(data) for data in pristine]


def _changed(pristine, shared) -> set[int]:
    return {index for index, (old, new) in enumerate(zip(pristine, shared))
            if not all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(old[:2], new[:2]))}


def test_a_plain_rounds_edits_change_nothing_and_a_probes_change_a_few_inputs_until_undone():
    pristine, shared = _batch()
    edits = probes.ByteEdits(shared, pristine, GEMM)
    assert edits.possible
    plain = edits.write(probe=False)
    assert len(plain) == probes.EDITED_INPUTS * 2 and _changed(pristine, shared) == set()
    probe = edits.write(probe=True)
    changed = _changed(pristine, shared)
    assert changed and changed <= {edit.index for edit in probe} and len({edit.index for edit in probe}) == probes.EDITED_INPUTS
    edits.undo(probe)
    assert _changed(pristine, shared) == set()


def test_each_round_edits_other_places():
    pristine, shared = _batch()
    edits = probes.ByteEdits(shared, pristine, GEMM)
    first, second = (edits.write(probe=True) for _ in range(2))
    assert [(edit.index, edit.places.tolist()) for edit in first] != [(edit.index, edit.places.tolist()) for edit in second]


def test_a_probes_references_are_those_of_the_edited_inputs():
    pristine, shared = _batch()
    expected = [GEMM.expected(clone_data(data)) for data in pristine]
    edits = probes.ByteEdits(shared, pristine, GEMM)
    probe = edits.write(probe=True)
    references = edits.references(probe, expected)
    for index, (data, reference) in enumerate(zip(shared, references)):
        assert torch.equal(reference, GEMM.expected(clone_data(data))), index
    assert any(not torch.equal(reference, old) for reference, old in zip(references, expected))
