"""Checks on custom_kernel's calls: output type, values, untouched inputs, no shared or stale
outputs, and the figures: the worker's against the judge's own.

What a call returns is checked against the problem's reference output in the form the
reference returns it: one tensor, or a list of them (one per group of a grouped GEMM), each
element against its own output buffer (Problem.outputs). Every tensor of a call's input that is
not an output buffer is an input and must come back bit for bit.
"""

import math

import torch

from harness.problems import Problem
from harness.shared.wire import NotATensor, leaves, map_tensors


def clone_data(data):
    return map_tensors(data, torch.Tensor.clone)


def _is_sequence(value) -> bool:
    return isinstance(value, (list, tuple))


def _elements(value) -> list:
    """A call's output or reference as a list of its elements: a tensor (or whatever was
    returned in its place) is one element, a list or tuple holds one per item."""
    return list(value) if _is_sequence(value) else [value]


class Refills:
    """Before every round: each output buffer filled with a value no right answer has (far beyond
    what these inputs make), new every round and distinct in fp16 (every NVFP4 problem's output
    dtype) from every earlier one, so that an element a kernel does not write in a round cannot
    pass, and nothing in an output tells one round (a first call, a timed round, a recheck) from
    another. 4,096 values: more than any case's rounds."""

    # fp16 values in [-65504, -16384] and [16384, 65504]: 1,024 per binade and sign.
    _BINADES = ((32768.0, 32.0), (16384.0, 16.0))

    def __init__(self):
        self.used = 0

    def next_value(self) -> float:
        index, self.used = self.used, self.used + 1
        sign = -1.0 if index % 2 == 0 else 1.0
        binade, step = self._BINADES[(index // 2) // 1024 % 2]
        return sign * (binade + step * ((index // 2) % 1024))

    def fill(self, buffers: list[torch.Tensor]) -> None:
        value = self.next_value()
        for buffer in buffers:
            buffer.fill_(value)


_SAME_SIZE_INTEGER = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as integers of the same size: compared and copied bit for bit."""
    return tensor.view(_SAME_SIZE_INTEGER[tensor.element_size()])


def input_leaves(data, problem: Problem) -> list[tuple[tuple, torch.Tensor]]:
    """(path, tensor) of every tensor in `data` that is not an output buffer."""
    outputs = problem.outputs(data)
    return [(path, tensor) for path, tensor in leaves(data) if not any(tensor is output for output in outputs)]


def changed_inputs(before, after, problem: Problem) -> list[str]:
    """Names of the inputs (output buffers excluded) whose bits differ after the call."""
    return [problem.input_name(path) for (path, old), (_, new) in zip(input_leaves(before, problem), input_leaves(after, problem))
            if not torch.equal(bits(old), bits(new))]


def first_changed_inputs(originals, handed, problem: Problem) -> tuple[int, str] | None:
    """(call index, names) of the first call whose inputs changed, or None."""
    for index, (before, after) in enumerate(zip(originals, handed)):
        changed = changed_inputs(before, after, problem)
        if changed:
            return index, ", ".join(changed)
    return None


def describe_output(output) -> str:
    if isinstance(output, torch.Tensor):
        return f"a {output.dtype} tensor of shape {tuple(output.shape)} on {output.device}"
    if _is_sequence(output):
        return f"a {type(output).__name__} of {len(output)} item{'s' if len(output) != 1 else ''}"
    return f"a {output.type_name if isinstance(output, NotATensor) else type(output).__name__}"


def output_type_problem(output, buffer: torch.Tensor, which: str = "") -> str | None:
    """Why the output cannot stand for its buffer (wrong type, dtype, shape or device), or None;
    `which` names the element of a list."""
    returned = f"custom_kernel returned {describe_output(output)}{which}"
    if not isinstance(output, torch.Tensor):
        return f"{returned}, expected a {buffer.dtype} tensor of shape {tuple(buffer.shape)}"
    if output.dtype != buffer.dtype or output.shape != buffer.shape or output.device != buffer.device:
        return f"{returned}, expected {describe_output(buffer)}"
    return None


def _structure_problem(expected, output, buffers: list) -> str | None:
    """Strict: why the output is not what the reference is, element by element, or None."""
    if not _is_sequence(expected):
        return output_type_problem(output, buffers[0])
    if not _is_sequence(output) or len(output) != len(expected):
        return f"custom_kernel returned {describe_output(output)}, expected a list of {len(expected)} tensors"
    for index, (element, buffer) in enumerate(zip(output, buffers)):
        problem = output_type_problem(element, buffer, f" as output {index}")
        if problem:
            return problem
    return None


def check_call(expected, output, buffers: list, strict: bool, problem: Problem, data=None) -> tuple[bool, str]:
    """One call's output against its reference, with the problem's own check (the competition's:
    its arithmetic is the output's dtype, fp16 here), or a folder's check_implementation on a copy
    of the call's input `data` (pristine) where the problem checks its own way. Strict adds the
    dtype/shape/device verdict on every element written into an output buffer and, where the
    check is the reference comparison, the same check in fp32, so that no element the fp16
    rounding lets through passes: never more lenient."""
    if strict and buffers:
        type_problem = _structure_problem(expected, output, buffers)
        if type_problem:
            return False, type_problem
    elif not all(isinstance(element, torch.Tensor) for element in _elements(output)) or _is_sequence(output) != _is_sequence(expected):
        return False, f"custom_kernel returned {describe_output(output)}"
    if problem.own_check:
        try:
            return problem.check(expected, output, clone_data(data))
        except Exception as error:  # the folder's check on what the submission returned
            return False, f"{problem.name}'s check_implementation raised {type(error).__name__} on the output: {error}"
    good, message = problem.check(expected, output, data)
    if good and strict:
        good, message = problem.check(map_tensors(expected, torch.Tensor.float), map_tensors(output, torch.Tensor.float), data)
    return good, message


def _place(call: int, element: int | None) -> str:
    return f"call {call}" if element is None else f"output {element} of call {call}"


def shared_outputs(outputs) -> str | None:
    """Outputs of calls on different inputs (or of one call's groups) that share memory: a reused
    buffer or a cache."""
    seen = {}
    for call, output in enumerate(outputs):
        for element, tensor in enumerate(_elements(output)):
            if not isinstance(tensor, torch.Tensor) or tensor.numel() == 0:
                continue
            place = (call, element if _is_sequence(output) else None)
            earlier = seen.setdefault((tensor.device, tensor.data_ptr()), place)
            if earlier is place:
                continue
            if earlier[1] is None and place[1] is None:
                return f"outputs of calls {earlier[0]} and {call} on different inputs share memory (cached or reused output buffer)"
            return f"{_place(*earlier)} and {_place(*place)} share memory (cached or reused output buffer)"
    return None


def repeated_outputs(outputs, expected) -> str | None:
    """An output equal to the previous call's where the references differ: a stale result."""
    for call in range(1, len(outputs)):
        pairs = zip(_elements(outputs[call - 1]), _elements(outputs[call]), _elements(expected[call - 1]), _elements(expected[call]))
        for element, (previous, current, previous_reference, reference) in enumerate(pairs):
            if not (isinstance(previous, torch.Tensor) and isinstance(current, torch.Tensor)):
                continue
            if current.numel() == 0 or bool((current == current.reshape(-1)[0]).all()):
                continue  # one value throughout: what the judge filled the buffer with, not a result the call kept
            if previous.shape == current.shape and torch.equal(previous, current) and not torch.equal(previous_reference, reference):
                if not _is_sequence(outputs[call]):
                    return f"call {call} returned the same values as call {call - 1} although the inputs differ (cached result)"
                return (f"output {element} of call {call} holds the same values as that of call {call - 1} although the inputs "
                        "differ (cached result)")
    return None


def check_calls(expected, outputs, buffers: list, strict: bool, problem: Problem, inputs=None) -> tuple[bool, str]:
    """All outputs of a batch of calls (`buffers`: each call's output buffers, `inputs` each
    call's pristine input, which a folder's own check reads); the first failure is reported with
    its call index."""
    if strict:
        problem_text = shared_outputs(outputs) or repeated_outputs(outputs, expected)
        if problem_text:
            return False, problem_text
    inputs = inputs if inputs is not None else [None] * len(outputs)
    for index, (reference, output, call_buffers, data) in enumerate(zip(expected, outputs, buffers, inputs)):
        good, message = check_call(reference, output, call_buffers, strict, problem, data)
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


def all_pass_quickly(expected: list, outputs: list, problem: Problem) -> bool:
    """Whether every output passes both value checks of `check_call` (the fp16 and the fp32
    comparison), computed over the whole batch at once; False says only that some check needs
    `check_calls` for its message. Every round's outputs are checked, so this must be cheap. It
    reads the problem's check as the runner's utils.match_reference, the problem's rtol and atol
    on every element, as every problem's utils.py has it; a folder's own check is left to check_calls."""
    if problem.own_check or len(outputs) != len(expected):
        return False
    pairs = []
    for reference, output in zip(expected, outputs):
        if _is_sequence(reference) != _is_sequence(output) or len(_elements(reference)) != len(_elements(output)):
            return False
        pairs += zip(_elements(reference), _elements(output))
    if not pairs:
        return False
    first = pairs[0][0]
    if not all(isinstance(output, torch.Tensor) and output.dtype == reference.dtype == first.dtype
               and output.shape == reference.shape and output.device == reference.device == first.device
               for reference, output in pairs):
        return False
    received = torch.cat([output.reshape(-1) for _, output in pairs])
    wanted = torch.cat([reference.reshape(-1) for reference, _ in pairs])
    for got, want in ((received, wanted), (received.float(), wanted.float())):
        if (torch.isnan(got) != torch.isnan(want)).any() or (torch.isposinf(got) != torch.isposinf(want)).any() \
                or (torch.isneginf(got) != torch.isneginf(want)).any():
            return False
        finite = torch.isfinite(want)
        if ((got - want).abs() > problem.atol + problem.rtol * want.abs())[finite].any():
            return False
    return True


def claimed_figures_problem(worker_ns: list[float]) -> str | None:
    """Why the worker's figures (per call, each a time harness/judge/claims.py let through) are no
    figures at all, in every mode: a round claimed at 0 ns, which no batch of calls takes; the
    competition's eval, whose stopping rule divides by the mean, would stop on a mean of 0."""
    if any(value == 0 for value in worker_ns):
        return "the worker reported the batch's time as 0 ns: no time a batch of calls takes"
    return None


def figures_problem(worker_ns: list[float], judged_ns: list[float], tolerance_ns: float) -> str | None:
    """Why the figures cannot stand: a judged figure that is no finite positive time, or the
    worker's and the judge's apart beyond `tolerance_ns` per call (means over the timed rounds)
    either way: a worker that reports its batches faster than the judge's own clock saw them, or
    a judge's figure below the worker's own, which only a fixed cost the judge subtracted in
    excess gives (its calibration disturbed). The worker's figures are finite, each passed by
    harness/judge/claims.py."""
    if not all(math.isfinite(value) for value in judged_ns) or sum(judged_ns) <= 0:
        return "the judge's own clock saw no time spent in the calls"
    worker_mean, judged_mean = sum(worker_ns) / len(worker_ns), sum(judged_ns) / len(judged_ns)
    if worker_mean < judged_mean - tolerance_ns:
        return (f"the worker timed the calls at {worker_mean / 1e3:.3f} us each, but the judge's own clock around the "
                f"same batches saw {judged_mean / 1e3:.3f} us each (beyond the {tolerance_ns / 1e3:.3f} us allowed): "
                "the worker's clock or its work was not what it reported")
    if judged_mean < worker_mean - tolerance_ns:
        return (f"the judge's own clock, less the fixed cost of a round, saw {judged_mean / 1e3:.3f} us per call, below "
                f"the {worker_mean / 1e3:.3f} us the worker's own events timed (beyond the {tolerance_ns / 1e3:.3f} us "
                "allowed): the calibration of that fixed cost was disturbed")
    return None
