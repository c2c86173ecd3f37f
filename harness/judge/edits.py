"""Edits to an input that nothing short of reading all of it tells from the input as it was: the
probes' (harness/judge/probes.py), the near-duplicates' and the fresh draws' of the recheck
(harness/judge/cases.py).

An input's parts are what a kernel can read apart from the rest: each fp4 operand, and each
block scale together with its permuted twin (the same values in the tensor cores' layout, which a
kernel may read instead: an edit writes both, so that the two stay one input). An edit takes
each part or leaves it, at random, never none, and writes a few random bytes of each part taken,
in the rows the reference reads (Problem.rows_read), with values that differ from the old ones:
both e2m1 codes of an fp4 byte change value (+0 and -0 are one value), and a scale becomes
another of SCALE_VALUES, finite e4m3 values no larger than the generators draw, so that no sum
nears fp16's range. A kernel that keeps answers keyed on
any part, or any set of parts short of all of them, meets edits that leave its key as it was; an
edit is kept only where the problem's reference says the answer changed beyond the check's
tolerance, so each of those catches a replay.
"""

import dataclasses

import torch

from harness.judge.verdicts import clone_data, input_leaves
from harness.problems import Problem
from harness.shared.wire import leaves

FP4 = torch.float4_e2m1fn_x2
EDITED_BYTES = 4  # bytes written in each part an edit takes
TRIES = 8  # draws of an edit before the input is left as it is
# What an edited scale becomes: a value the problems' generators draw (0 to 3), or 0.5 or 1.5.
SCALE_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
_SCALE_BYTES = torch.tensor(SCALE_VALUES).to(torch.float8_e4m3fn).view(torch.uint8)
E2M1_SIGN = 0x8
E2M1_MAGNITUDE = 0x7
E2M1_MAGNITUDE_TOP = 0x4


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    leaves: tuple[int, ...]  # places in input_leaves(data, problem): the tensor, then its permuted twin if any
    rows: int | None  # the rows the reference reads, all where None
    permuted_index: object = None  # a scale's: its plain index (row, col, batch) -> its twin's; None: an fp4 operand

    @property
    def scale(self) -> bool:
        return self.permuted_index is not None


@dataclasses.dataclass
class Write:
    leaf: int  # place in input_leaves(data, problem)
    places: torch.Tensor  # byte offsets in the leaf's storage, on its device
    values: torch.Tensor  # the bytes written there


def storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """Every byte of the tensor's storage, flat. A clone's storage, and so every input the judge
    holds or shares, holds its elements and nothing else."""
    storage = tensor.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage, 0, (storage.nbytes(),), (1,))


def parts(data, problem: Problem) -> list[Part]:
    """The input's parts: every fp4 operand, and the block scales the problem names with their
    twins (a problem that names none, a folder's, gets its fp4 operands edited only)."""
    found = input_leaves(data, problem)
    named = {problem.named(path): index for index, (path, _) in enumerate(found)}
    rows_read = dict(problem.rows_read)
    result = []
    for index, (path, tensor) in enumerate(found):
        name, group = problem.named(path) or (problem.input_name(path), None)
        if tensor.dtype == FP4:
            result.append(Part(problem.input_name(path), (index,), rows_read.get(name)))
        elif problem.scale_twins is not None:
            for plain, permuted in problem.scale_twins.pairs:
                if name == plain and (permuted, group) in named:
                    result.append(Part(problem.input_name(path), (index, named[permuted, group]), rows_read.get(name),
                                       problem.scale_twins.permuted_index))
    return result


def _offsets(tensor: torch.Tensor, index: tuple) -> torch.Tensor:
    """Storage offsets of the elements at `index` (one index tensor per dimension)."""
    offset = torch.full_like(index[0], tensor.storage_offset())
    for position, stride in zip(index, tensor.stride()):
        offset = offset + position * stride
    return offset


def _random_index(tensor: torch.Tensor, rows: int | None, count: int, generator: torch.Generator) -> tuple:
    """`count` random element indices of `tensor`, the first dimension below `rows`."""
    limits = (min(rows, tensor.shape[0]) if rows else tensor.shape[0], *tensor.shape[1:])
    return tuple(torch.randint(0, limit, (count,), generator=generator) for limit in limits)


def _other_e2m1_byte(old: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Bytes whose two e2m1 codes each hold another value than `old`'s: a random nonzero change of
    each code, where it would only flip the sign of a zero, the magnitude changed too."""
    new = torch.zeros_like(old)
    for shift in (0, 4):
        code = (old >> shift) & 0xF
        change = torch.randint(1, 16, old.shape, generator=generator, dtype=torch.uint8)
        zero_sign_flip = (change == E2M1_SIGN) & ((code & E2M1_MAGNITUDE) == 0)
        change = torch.where(zero_sign_flip, change | E2M1_MAGNITUDE_TOP, change)
        new |= (code ^ change) << shift
    return new


def _other_scale(old: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """e4m3 bytes of SCALE_VALUES, each another value than `old`'s."""
    values = []
    for old_value in old.view(torch.float8_e4m3fn).float().tolist():
        others = [byte for value, byte in zip(SCALE_VALUES, _SCALE_BYTES.tolist()) if value != old_value]
        values.append(others[torch.randint(0, len(others), (1,), generator=generator).item()])
    return torch.tensor(values, dtype=torch.uint8)


def _distinct(index: tuple, offsets: torch.Tensor) -> tuple[tuple, torch.Tensor]:
    """`index` and `offsets` without repeated places: two values written to one place would leave
    either."""
    first = sorted({offset: place for place, offset in reversed(list(enumerate(offsets.tolist())))}.values())
    keep = torch.tensor(first)
    return tuple(position[keep] for position in index), offsets[keep]


def _part_writes(part: Part, tensors: list, generator: torch.Generator) -> list[Write]:
    """A few random bytes of the part, new values for them; the same values at the same scales'
    places in the twin."""
    tensor = tensors[part.leaves[0]]
    index = _random_index(tensor, part.rows, EDITED_BYTES, generator)
    index, offsets = _distinct(index, _offsets(tensor, index))
    old = storage_bytes(tensor)[offsets.to(tensor.device)].cpu()
    values = _other_scale(old, generator) if part.scale else _other_e2m1_byte(old, generator)
    writes = [Write(part.leaves[0], offsets, values)]
    for twin_leaf in part.leaves[1:]:
        twin = tensors[twin_leaf]
        writes.append(Write(twin_leaf, _offsets(twin, part.permuted_index(*index)), values))
    return [Write(write.leaf, write.places.to(tensors[write.leaf].device), write.values.to(tensors[write.leaf].device))
            for write in writes]


def _tensors(data, problem: Problem) -> list[torch.Tensor]:
    return [tensor for _, tensor in input_leaves(data, problem)]


def draw(data, problem: Problem, generator: torch.Generator) -> list[Write]:
    """An edit of `data` (not written): each part taken or left at random, at least one taken."""
    found = parts(data, problem)
    if not found:
        return []
    taken = []
    while not taken:
        taken = [part for part in found if torch.randint(0, 2, (1,), generator=generator).item()]
    tensors = _tensors(data, problem)
    return [write for part in taken for write in _part_writes(part, tensors, generator)]


def write(data, writes: list[Write], problem: Problem) -> None:
    tensors = _tensors(data, problem)
    for each in writes:
        storage_bytes(tensors[each.leaf])[each.places] = each.values


def changes_the_answer(old, new, problem: Problem) -> bool:
    """Whether the reference `new` differs from `old` where the problem's check would see it (beyond
    its tolerance), with every value finite where the old one was."""
    pairs = [(before.float(), after.float()) for (_, before), (_, after) in zip(leaves(old), leaves(new))]
    if any((torch.isfinite(before) & ~torch.isfinite(after)).any() for before, after in pairs):
        return False
    return any(((after - before).abs() > problem.atol + problem.rtol * before.abs()).any() for before, after in pairs)


def edited(data, reference, problem: Problem, generator: torch.Generator) -> tuple[list[Write], object] | None:
    """(an edit of `data`, the reference of the edited input) where a draw among TRIES changes the
    answer (`reference` is data's), else None."""
    for _ in range(TRIES):
        writes = draw(data, problem, generator)
        if not writes:
            return None
        copy = clone_data(data)
        write(copy, writes, problem)
        new_reference = problem.expected(copy)
        if changes_the_answer(reference, new_reference, problem):
            return writes, new_reference
    return None


def near_duplicate(data, reference, problem: Problem, generator: torch.Generator) -> tuple[object, object] | None:
    """(a copy of `data` with an edit that changes the answer, its reference), or None."""
    found = edited(data, reference, problem, generator)
    if found is None:
        return None
    copy = clone_data(data)
    write(copy, found[0], problem)
    return copy, found[1]


def mixed(data, reference, fresh, problem: Problem, generator: torch.Generator) -> tuple[object, object] | None:
    """(a copy of `data` with some of its parts, each taken or left at random and at least one, from
    the fresh draw `fresh` of the same shapes, its reference) where a draw among TRIES changes the
    answer, else None."""
    found = parts(data, problem)
    for _ in range(TRIES if found else 0):
        taken = [part for part in found if torch.randint(0, 2, (1,), generator=generator).item()]
        if not taken:
            continue
        copy, sources = clone_data(data), _tensors(fresh, problem)
        targets = _tensors(copy, problem)
        for leaf in (leaf for part in taken for leaf in part.leaves):
            storage_bytes(targets[leaf]).copy_(storage_bytes(sources[leaf]))
        new_reference = problem.expected(clone_data(copy))
        if changes_the_answer(reference, new_reference, problem):
            return copy, new_reference
    return None
