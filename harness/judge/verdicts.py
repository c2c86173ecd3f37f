"""Checks on custom_kernel's calls: output type, values, untouched inputs, no shared or stale
outputs, and the figures: the worker's against the judge's own."""

import math

import torch

from harness.wire import NotATensor
from reference import ATOL, RTOL, check_against

INPUT_NAMES = ("a", "b", "sfa", "sfb", "sfa_permuted", "sfb_permuted", "c")
OUTPUT_INDEX = INPUT_NAMES.index("c")


def clone_data(data):
    return tuple(tensor.clone() for tensor in data)


class Refills:
    """Before every round: each c filled with a value no right answer has (far beyond what these
    inputs make), new every round and distinct in fp16 from every earlier one, so that an element
    a kernel does not write in a round cannot pass, and nothing in c tells one round (a first
    call, a timed round, a recheck) from another. 4,096 values: more than any case's rounds."""

    # fp16 values in [-65504, -16384] and [16384, 65504]: 1,024 per binade and sign.
    _BINADES = ((32768.0, 32.0), (16384.0, 16.0))

    def __init__(self):
        self.used = 0

    def next_value(self) -> float:
        index, self.used = self.used, self.used + 1
        sign = -1.0 if index % 2 == 0 else 1.0
        binade, step = self._BINADES[(index // 2) // 1024 % 2]
        return sign * (binade + step * ((index // 2) % 1024))

    def fill(self, data_list) -> None:
        value = self.next_value()
        for data in data_list:
            data[OUTPUT_INDEX].fill_(value)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.uint8) if tensor.element_size() == 1 else tensor.view(torch.int16)


def changed_inputs(before, after) -> list[str]:
    """Names of inputs (c excluded: it is the output buffer) whose bits differ after the call."""
    return [
        name
        for name, old, new in zip(INPUT_NAMES, before, after)
        if name != "c" and not torch.equal(bits(old), bits(new))
    ]


def first_changed_inputs(originals, handed) -> tuple[int, str] | None:
    """(index, names) of the first input whose tensors other than c changed, or None."""
    for index, (before, after) in enumerate(zip(originals, handed)):
        changed = changed_inputs(before, after)
        if changed:
            return index, ", ".join(changed)
    return None


def describe_output(output) -> str:
    if isinstance(output, torch.Tensor):
        return f"a {output.dtype} tensor of shape {tuple(output.shape)} on {output.device}"
    return f"a {output.type_name if isinstance(output, NotATensor) else type(output).__name__}"


def output_type_problem(output, c: torch.Tensor) -> str | None:
    """Why the output cannot stand for c (wrong type, dtype, shape or device), or None."""
    if not isinstance(output, torch.Tensor):
        return f"custom_kernel returned {describe_output(output)}, expected a torch.float16 tensor of shape {tuple(c.shape)}"
    if output.dtype != c.dtype or output.shape != c.shape or output.device != c.device:
        return f"custom_kernel returned {describe_output(output)}, expected {describe_output(c)}"
    return None


def check_call(expected: torch.Tensor, output, c: torch.Tensor, strict: bool) -> tuple[bool, str]:
    """One output against its reference, with the competition's check (its arithmetic is the
    output's dtype: fp16 here). Strict adds the dtype/shape/device verdict and the same check in
    fp32, so that no element the fp16 rounding lets through passes: never more lenient."""
    if strict:
        problem = output_type_problem(output, c)
        if problem:
            return False, problem
    elif not isinstance(output, torch.Tensor):
        return False, f"custom_kernel returned {describe_output(output)}"
    good, message = check_against(expected, output)
    if good and strict:
        good, message = check_against(expected.float(), output.float())
    return good, message


def shared_outputs(outputs) -> str | None:
    """Outputs of calls on different inputs that share memory: a reused buffer or a cache."""
    seen = {}
    for index, output in enumerate(outputs):
        if not isinstance(output, torch.Tensor) or output.numel() == 0:
            continue
        pointer = output.data_ptr()
        if pointer in seen:
            return f"outputs of calls {seen[pointer]} and {index} on different inputs share memory (cached or reused output buffer)"
        seen[pointer] = index
    return None


def repeated_outputs(outputs, expected) -> str | None:
    """An output equal to the previous call's where the references differ: a stale result."""
    for index in range(1, len(outputs)):
        previous, current = outputs[index - 1], outputs[index]
        if not (isinstance(previous, torch.Tensor) and isinstance(current, torch.Tensor)):
            continue
        if current.numel() == 0 or bool((current == current.reshape(-1)[0]).all()):
            continue  # one value throughout: what the judge filled c with, not a result the call kept
        if previous.shape == current.shape and torch.equal(previous, current) and not torch.equal(expected[index - 1], expected[index]):
            return f"call {index} returned the same values as call {index - 1} although the inputs differ (cached result)"
    return None


def check_calls(expected, outputs, cs, strict: bool) -> tuple[bool, str]:
    """All outputs of a batch of calls; the first failure is reported with its call index."""
    if strict:
        problem = shared_outputs(outputs) or repeated_outputs(outputs, expected)
        if problem:
            return False, problem
    for index, (reference, output, c) in enumerate(zip(expected, outputs, cs)):
        good, message = check_call(reference, output, c, strict)
        if not good:
            return False, f"input {index}: {message}" if strict and len(outputs) > 1 else message
    return True, ""


def beyond_the_competition(problem: str | None, strict: bool, result) -> str | None:
    """A problem of a check the competition does not make: returned (the case's failure) by
    default; under --official a warning on `result` instead, and None."""
    if problem and not strict:
        result.warn(f"the competition would have missed this: {problem}")
        return None
    return problem


def all_pass_quickly(expected: list, outputs: list) -> bool:
    """Whether every output passes both value checks of `check_call` (the fp16 and the fp32
    comparison), computed over the whole batch at once; False says only that some check needs
    `check_calls` for its message. Every round's outputs are checked, so this must be cheap."""
    if len(outputs) != len(expected) or not all(isinstance(output, torch.Tensor) and output.dtype == reference.dtype
                                                and output.shape == reference.shape and output.device == reference.device
                                                for output, reference in zip(outputs, expected)):
        return False
    received, wanted = torch.stack(outputs), torch.stack(expected)
    for got, want in ((received, wanted), (received.float(), wanted.float())):
        if (torch.isnan(got) != torch.isnan(want)).any() or (torch.isposinf(got) != torch.isposinf(want)).any() \
                or (torch.isneginf(got) != torch.isneginf(want)).any():
            return False
        finite = torch.isfinite(want)
        if ((got - want).abs() > ATOL + RTOL * want.abs())[finite].any():
            return False
    return True


def near_duplicate(data, generator: torch.Generator, changes: int = 4):
    """A copy of `data` with `changes` random bytes of each operand (a, b) set to other random
    values: a fingerprint sampled from the inputs most likely misses every change, while the
    answer differs (the caller checks that it does)."""
    copy = clone_data(data)
    for tensor in copy[:2]:
        storage = tensor.untyped_storage()  # a clone's storage holds its elements and nothing else
        flat = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage, 0, (storage.nbytes(),), (1,))
        places = torch.randint(0, flat.numel(), (changes,), generator=generator)
        shift = torch.randint(1, 256, (changes,), generator=generator, dtype=torch.int16)
        flat[places.to(flat.device)] = ((flat[places.to(flat.device)].to(torch.int16) + shift.to(flat.device)) % 256).to(flat.dtype)
    return copy


def figures_problem(worker_ns: list[float], judged_ns: list[float], tolerance_ns: float) -> str | None:
    """Why the figures cannot stand: a worker figure that is no finite positive time, a judged
    one that is none, or a worker that reports its batches faster than the judge's own clock saw
    them beyond `tolerance_ns` per call (means over the timed rounds)."""
    bad = [value for value in worker_ns if not (math.isfinite(value) and value > 0)]
    if bad:
        return f"the worker reported a round time of {bad[0]!r} ns: no time a batch of calls can take"
    if not all(math.isfinite(value) for value in judged_ns) or sum(judged_ns) <= 0:
        return "the judge's own clock saw no time spent in the calls"
    worker_mean, judged_mean = sum(worker_ns) / len(worker_ns), sum(judged_ns) / len(judged_ns)
    if worker_mean < judged_mean - tolerance_ns:
        return (f"the worker timed the calls at {worker_mean / 1e3:.3f} us each, but the judge's own clock around the "
                f"same batches saw {judged_mean / 1e3:.3f} us each (beyond the {tolerance_ns / 1e3:.3f} us allowed): "
                "the worker's clock or its work was not what it reported")
    return None
