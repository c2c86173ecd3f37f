"""Edits no part of an input predicts: over many draws every part of every problem's input is
edited and left alone, both scale layouts stay one input, and every kept edit changes the answer
beyond the check's tolerance."""

import collections

import pytest
import torch

from harness.judge import edits
from harness.judge.verdicts import bits, clone_data, input_leaves
from harness.problems import PROBLEMS
from harness.shared.wire import leaves

# Small cases of each problem; the grouped one's m leaves padding in the scales' atoms.
SPECS = {
    "nvfp4_gemm": {"m": 128, "n": 256, "k": 256, "l": 2},
    "nvfp4_gemv": {"m": 256, "k": 512, "l": 2},
    "nvfp4_dual_gemm": {"m": 128, "n": 128, "k": 256, "l": 1},
    "nvfp4_group_gemm": {"m": (40, 128), "n": (128, 256), "k": (256, 512), "g": 2},
}
DRAWS = 40
pytestmark = pytest.mark.usefixtures("one_thread")


def _input(name: str, seed: int = 3):
    problem = PROBLEMS[name]
    data = problem.generate(SPECS[name], seed, "cpu")
    return problem, data, problem.expected(clone_data(data))


def _changed_leaves(old, new, problem) -> set[int]:
    return {index for index, ((_, before), (_, after)) in enumerate(zip(input_leaves(old, problem), input_leaves(new, problem)))
            if not torch.equal(bits(before), bits(after))}


@pytest.fixture(scope="module", params=list(SPECS))
def drawn(request, one_thread):
    """A small input of each problem, its reference, and DRAWS near-duplicates of it with theirs:
    the tests that take it only read them."""
    problem, data, reference = _input(request.param)
    generator = torch.Generator().manual_seed(1)
    return problem, data, reference, [edits.near_duplicate(data, reference, problem, generator) for _ in range(DRAWS)]


def test_every_part_is_edited_and_left_alone_across_draws_and_every_edit_changes_the_answer(drawn):
    problem, data, reference, draws = drawn
    found = edits.parts(data, problem)
    kinds = {part.scale for part in found}
    assert kinds == {False, True} and len(found) >= 4
    edited, left = collections.Counter(), collections.Counter()
    for copy, new_reference in draws:
        recomputed = problem.expected(clone_data(copy))
        assert all(torch.equal(ours, theirs) for (_, ours), (_, theirs) in zip(leaves(new_reference), leaves(recomputed)))
        assert edits.changes_the_answer(reference, recomputed, problem)
        changed = _changed_leaves(data, copy, problem)
        assert changed
        for part in found:
            (edited if part.leaves[0] in changed else left)[part.name] += 1
    assert set(edited) == set(left) == {part.name for part in found}, (edited, left)
    assert sum(edited.values()) > DRAWS  # several parts in some edits


@pytest.mark.parametrize("name", SPECS)
def test_a_scale_edit_writes_both_layouts_alike_with_finite_values_the_generators_range_holds(name):
    problem, data, reference = _input(name)
    generator = torch.Generator().manual_seed(2)
    scales = [part for part in edits.parts(data, problem) if part.scale]
    for _ in range(DRAWS):
        copy, _ = edits.near_duplicate(data, reference, problem, generator)
        tensors = [tensor for _, tensor in input_leaves(copy, problem)]
        for part in scales:
            plain, permuted = (tensors[leaf] for leaf in part.leaves)
            rebuilt = permuted.clone()
            problem.reference.place_in_atoms(plain, rebuilt)
            assert torch.equal(bits(rebuilt), bits(permuted)), part.name
            values = plain.float()
            assert torch.isfinite(values).all() and values.max() <= max(edits.SCALE_VALUES + (3.0,))


def test_gemv_edits_only_the_row_of_b_and_its_scales_that_the_product_reads():
    problem, data, reference = _input("nvfp4_gemv")
    generator = torch.Generator().manual_seed(4)
    for _ in range(DRAWS):
        copy, _ = edits.near_duplicate(data, reference, problem, generator)
        for index in (1, 3):  # b and sfb: 128 rows, the first read
            assert torch.equal(bits(copy[index][1:]), bits(data[index][1:]))


def test_every_e2m1_byte_gets_two_codes_of_other_values():
    decode = torch.tensor((0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0))
    old = torch.arange(256, dtype=torch.uint8).repeat(20)
    new = edits._other_e2m1_byte(old, torch.Generator().manual_seed(5))
    for shift in (0, 4):
        before, after = decode[((old >> shift) & 0xF).long()], decode[((new >> shift) & 0xF).long()]
        assert (before != after).all()  # -0.0 == 0.0: a sign flip of a zero is no change


def test_an_input_no_edit_can_change_gets_none():
    problem, data, reference = _input("nvfp4_gemm")
    for operand in data[:2]:
        operand.view(torch.uint8).zero_()  # every product zero, whatever one operand or scale becomes
    reference = problem.expected(clone_data(data))
    generator = torch.Generator().manual_seed(6)
    assert edits.edited(data, reference, problem, generator) is None
    assert edits.near_duplicate(data, reference, problem, generator) is None


def test_changes_the_answer_needs_a_change_beyond_the_checks_tolerance_and_no_new_infinity():
    problem = PROBLEMS["nvfp4_gemm"]
    old = torch.full((4, 4, 1), 100.0, dtype=torch.float16)
    assert not edits.changes_the_answer(old, old.clone(), problem)
    within = old.clone()
    within[0, 0, 0] = 100.0625  # within 1e-3 + 1e-3 * 100
    assert not edits.changes_the_answer(old, within, problem)
    beyond = old.clone()
    beyond[0, 0, 0] = 101.0
    assert edits.changes_the_answer(old, beyond, problem)
    beyond[1, 1, 0] = float("inf")
    assert not edits.changes_the_answer(old, beyond, problem)


@pytest.mark.parametrize("name", SPECS)
def test_a_mixed_fresh_draw_takes_some_parts_of_the_fresh_input_and_keeps_the_others(name):
    problem, data, reference = _input(name)
    fresh = problem.generate(SPECS[name], 99, "cpu")
    found = edits.parts(data, problem)
    generator = torch.Generator().manual_seed(7)
    taken = collections.Counter()
    for _ in range(DRAWS // 3):
        copy, new_reference = edits.mixed(data, reference, fresh, problem, generator)
        assert edits.changes_the_answer(reference, new_reference, problem)
        from_fresh = _changed_leaves(data, copy, problem)
        assert from_fresh and _changed_leaves(fresh, copy, problem) | from_fresh
        for part in found:
            here = {leaf in from_fresh for leaf in part.leaves}
            assert len(here) == 1, part.name  # a scale and its twin come from one input
            taken[part.name, here.pop()] += 1
    assert all(taken[part.name, True] and taken[part.name, False] for part in found), taken


@pytest.mark.parametrize("kept", ["a", "b", "sfa", "sfb"])
def test_a_memo_keyed_on_one_part_meets_edits_that_leave_it_and_change_the_answer(drawn, kept):
    """What a cheat keyed on one part (`a` alone, `b` alone, a scale in either layout) sees: edits
    its key does not tell, whose answers differ from the one it kept."""
    problem, data, reference, draws = drawn
    keyed = [part for part in edits.parts(data, problem) if part.name.split(" ")[0].rstrip("12") == kept]
    assert keyed
    missed = 0
    for copy, new_reference in draws:
        key_unchanged = not _changed_leaves(data, copy, problem) & {leaf for part in keyed for leaf in part.leaves}
        missed += key_unchanged and edits.changes_the_answer(reference, new_reference, problem)
    assert missed >= 3  # a quarter of the draws, where the key is two parts of eight
