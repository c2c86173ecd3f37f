"""Checks on custom_kernel's calls: output type, values, untouched inputs, no shared or stale
outputs, no thread left running, the clock unchanged."""

import torch

from harness.jobs import FAIL
from harness.wire import NotATensor
from reference import check_against

INPUT_NAMES = ("a", "b", "sfa", "sfb", "sfa_permuted", "sfb_permuted", "c")
OUTPUT_INDEX = INPUT_NAMES.index("c")


def clone_data(data):
    return tuple(tensor.clone() for tensor in data)


def poison_output(data) -> None:
    """NaN in every element of c, so elements the kernel never writes cannot pass."""
    data[OUTPUT_INDEX].fill_(float("nan"))


def refill_outputs(data_list, round_index: int) -> None:
    """Before a timed round: every c to a value no right answer has, new each round and not NaN,
    so that a kernel that skips calls it takes for unchecked (c not poisoned, a buffer it filled
    before) leaves that value behind for the check of the last round."""
    for data in data_list:
        data[OUTPUT_INDEX].fill_(-60000.0 + round_index)


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


def threads_left(names: list[str]) -> str | None:
    if not names:
        return None
    return (f"custom_kernel left thread(s) running after it returned ({', '.join(map(str, names))}): "
            "work that goes on after the call escapes the timing")


def beyond_the_competition(problem: str | None, strict: bool, result) -> str | None:
    """A problem of a check the competition does not make: returned (the case's failure) by
    default; under --official a warning on `result` instead, and None."""
    if problem and not strict:
        result.warn(f"the competition would have missed this: {problem}")
        return None
    return problem


def judge_clock(result, replaced: set[str], strict: bool) -> None:
    """A case whose submission replaced a clock function fails (a warning under --official)."""
    if not replaced:
        return
    said = f"the submission replaced {', '.join(sorted(replaced))}: times read from that clock mean nothing"
    if beyond_the_competition(said, strict, result):
        result.status, result.message = FAIL, said
