"""The submission's self-check: the first call of a problem checks its result against the exact
product and falls back, loudly, to the conservative configuration, then to the exact product.
On the host with a stand-in kernel whose launch writes a chosen result; on a Hopper GPU through
the stand-in kernel's own dispatch (`kernel_for_arch`), with one element of its first result
made wrong."""

from __future__ import annotations

import time
import sys
from pathlib import Path

import pytest
import torch

import reference
import submission as sub

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = sub.Problem(128, 256, 512, 2)


def _data(seed: int, device="cpu"):
    return reference.generate_input(*PROBLEM, seed=seed, device=device)


_EXACT_PRODUCT = sub.exact_product  # the tests' own, apart from what the submission calls


def _rounded_exact(data) -> torch.Tensor:
    return _EXACT_PRODUCT(data).to(torch.float16)


class _Config:
    def __init__(self, name: str):
        self.name = name

    def describe(self) -> str:
        return self.name


class _WritingPlan:
    """A launch plan whose launch writes the exact product of the input at `addresses` into
    its c, with `fault` applied to it (None: left right; an exception: raised instead)."""

    def __init__(self, kernel, config: _Config, fault):
        self.kernel, self.config, self.fault = kernel, config, fault

    def launch(self, addresses):
        self.kernel.launches.append(self.config.name)
        if isinstance(self.fault, Exception):
            raise self.fault
        data = self.kernel.inputs[addresses]
        data[6].copy_(_rounded_exact(data))
        if self.fault is not None:
            self.fault(data[6])


def _stand_in_kernel(chosen_fault, conservative_fault):
    class Kernel:
        inputs = {}  # every input whose addresses were taken, by its addresses
        launches = []

        @classmethod
        def launch_plan(cls, problem, device, conservative=False):
            assert problem == PROBLEM
            if conservative:
                return _WritingPlan(cls, _Config("conservative"), conservative_fault)
            return _WritingPlan(cls, _Config("chosen"), chosen_fault)

    return Kernel


def _one_element_off(c):
    c[5, 17, 1] = c[5, 17, 1] * 1.01 + 2.0  # beyond rtol = atol = 1e-3 whatever its value


def _call(kernel, data, monkeypatch):
    """custom_kernel on a CPU input, with validation and dispatch standing in for the GPU's;
    the stand-in kernel finds every input (the self-check's own included) by its addresses."""
    addresses_of = sub.operand_addresses

    def recorded(inputs):
        addresses = addresses_of(inputs)
        kernel.inputs[addresses] = inputs
        return addresses

    monkeypatch.setattr(sub, "operand_addresses", recorded)
    monkeypatch.setattr(sub, "validate_inputs", lambda d: sub.Call(PROBLEM, 0, sub.operand_addresses(d)))
    monkeypatch.setattr(sub, "kernel_for_device", lambda device: kernel)
    return sub.custom_kernel(data)


@pytest.fixture
def fresh_plans(monkeypatch):
    """The check in the caller's process alone: the trial process before it has its own tests
    (test_first_run_trial.py), and these stand-ins are not importable by name."""
    monkeypatch.setattr(sub, "_PLANS", {})
    monkeypatch.setattr(sub, "SELF_CHECK", True)
    monkeypatch.setattr(sub, "TRIAL_IN_CHILD", False)


def _fallback_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(sub.FALLBACK_PREFIX)]


def test_the_exact_product_is_the_references_on_random_data():
    data = _data(7)
    exact = sub.exact_product(data)
    assert exact.abs().max() > 100  # random operands, not an all-zero product
    expected = reference.ref_kernel(data)  # exact decode-and-matmul off sm_100
    assert torch.equal(exact.to(torch.float16), expected)


def test_a_wrong_first_result_falls_back_to_the_conservative_configuration(fresh_plans, monkeypatch, capsys):
    kernel = _stand_in_kernel(_one_element_off, None)
    first = _data(1)
    out = _call(kernel, first, monkeypatch)
    assert torch.equal(out, _rounded_exact(first))
    (line,) = _fallback_lines(capsys.readouterr().err)
    assert "128x256x512x2" in line and "chosen" in line and "c[5, 17, 1]" in line
    assert "1 of 65536 elements wrong" in line and line.endswith("now the conservative configuration")
    assert kernel.launches == ["chosen"] * 3 + ["conservative"] * 3  # each tried with three calls

    # Later calls run what passed, unchecked.
    second = _data(2)
    _call(kernel, second, monkeypatch)
    assert kernel.launches[-1] == "conservative" and len(kernel.launches) == 7
    assert torch.equal(second[6], _rounded_exact(second))
    assert _fallback_lines(capsys.readouterr().err) == []


def test_two_wrong_configurations_leave_the_exact_product_for_every_call(fresh_plans, monkeypatch, capsys):
    kernel = _stand_in_kernel(_one_element_off, lambda c: c[0, 0, 0].fill_(float("nan")))
    first = _data(3)
    assert torch.equal(_call(kernel, first, monkeypatch), _rounded_exact(first))
    lines = _fallback_lines(capsys.readouterr().err)
    assert len(lines) == 2
    assert lines[0].endswith("now the conservative configuration")
    assert "conservative" in lines[1] and "c[0, 0, 0] = nan" in lines[1]
    assert lines[1].endswith("now the exact torch product")
    assert sub._PLANS[(PROBLEM, 0)] is sub.ExactGemm

    second = _data(4)
    second[6].fill_(float("nan"))
    _call(kernel, second, monkeypatch)
    assert kernel.launches == ["chosen"] * 3 + ["conservative"] * 3  # no kernel after the first call
    assert torch.equal(second[6], _rounded_exact(second))


def test_a_plan_that_raises_falls_back_too(fresh_plans, monkeypatch, capsys):
    """The exception's first line goes in the FALLBACK line (a CUDA error goes on with advice)."""
    kernel = _stand_in_kernel(RuntimeError("launch failed\nCompile with TORCH_USE_CUDA_DSA to enable device-side assertions."), None)
    first = _data(5)
    assert torch.equal(_call(kernel, first, monkeypatch), _rounded_exact(first))
    (line,) = _fallback_lines(capsys.readouterr().err)
    assert "chosen: RuntimeError: launch failed; now the conservative configuration" in line


def test_a_right_first_result_keeps_the_chosen_configuration_quietly(fresh_plans, monkeypatch, capsys):
    kernel = _stand_in_kernel(None, _one_element_off)
    _call(kernel, _data(6), monkeypatch)
    assert kernel.launches == ["chosen"] * 3
    assert capsys.readouterr().err == ""


class _CallPlan(_WritingPlan):
    """A plan that writes its input's right answer on every call but `skipped`'s, which writes
    nothing (a call that found its arrival counters unreset, or read another call's partials,
    leaving c as it found it)."""

    def __init__(self, kernel, skipped: int):
        super().__init__(kernel, _Config("chosen"), None)
        self.skipped, self.calls = skipped, 0

    def launch(self, addresses):
        self.calls += 1
        if self.calls != self.skipped:
            super().launch(addresses)


@pytest.mark.parametrize("skipped", [1, 2, 3])
def test_every_one_of_the_three_calls_is_checked(skipped, fresh_plans, monkeypatch, capsys):
    kernel = _stand_in_kernel(None, None)
    plan = _CallPlan(kernel, skipped)
    kernel.launch_plan = lambda problem, device, conservative=False: (
        _WritingPlan(kernel, _Config("conservative"), None) if conservative else plan)
    first = _data(10)
    assert torch.equal(_call(kernel, first, monkeypatch), _rounded_exact(first))
    (line,) = _fallback_lines(capsys.readouterr().err)
    assert f"call {skipped} of 3" in line and "= nan" in line and "65536 of 65536 elements wrong" in line
    assert ("b negated" in line) == (skipped == 2)


def test_the_second_call_multiplies_by_b_negated(fresh_plans, monkeypatch):
    """Its answer differs from its neighbours' everywhere the product is not zero, so a call
    that reads another's partials or output is wrong."""
    kernel = _stand_in_kernel(None, None)
    data = _data(11)
    _call(kernel, data, monkeypatch)
    outputs = [inputs[6] for inputs in kernel.inputs.values() if inputs[6] is not data[6]]
    assert len(outputs) == 2
    exact = sub.exact_product(data).to(torch.float16)
    assert sorted([torch.equal(c, exact), torch.equal(c, -exact)] for c in outputs) == [[False, True], [True, False]]
    assert (exact != 0).float().mean() > 0.9


def test_after_the_last_rung_the_exact_product_is_computed_once(fresh_plans, monkeypatch, capsys):
    kernel = _stand_in_kernel(_one_element_off, _one_element_off)
    computed = []
    exact_product = sub.exact_product
    monkeypatch.setattr(sub, "exact_product", lambda data: computed.append(1) or exact_product(data))
    first = _data(12)
    assert torch.equal(_call(kernel, first, monkeypatch), _rounded_exact(first))
    assert len(computed) == 1  # the check's own, written into c: not computed a second time
    assert _fallback_lines(capsys.readouterr().err)[-1].endswith("now the exact torch product")


def test_a_kernels_own_rungs_are_tried_in_order(fresh_plans, monkeypatch, capsys):
    """A kernel with `rungs` (the B200's configurations): each tried with three calls, the
    first that passes kept; one that raises is passed over too."""
    kernel = _stand_in_kernel(None, None)
    kernel.rungs = lambda problem, device: [
        ("the chosen configuration", lambda: _WritingPlan(kernel, _Config("chosen"), _one_element_off)),
        ("the conservative configuration", lambda: _WritingPlan(kernel, _Config("conservative"), RuntimeError("no"))),
        ("the plain configuration", lambda: _WritingPlan(kernel, _Config("plain"), None))]
    first = _data(13)
    _call(kernel, first, monkeypatch)
    lines = _fallback_lines(capsys.readouterr().err)
    assert [line.rsplit("; now ", 1)[1] for line in lines] == ["the conservative configuration", "the plain configuration"]
    assert "RuntimeError: no" in lines[1]
    assert kernel.launches == ["chosen"] * 3 + ["conservative"] + ["plain"] * 3
    assert torch.equal(first[6], _rounded_exact(first))
    assert sub._PLANS[(PROBLEM, 0)].config.name == "plain"


def test_with_the_check_off_the_first_result_is_not_checked(fresh_plans, monkeypatch, capsys):
    monkeypatch.setattr(sub, "SELF_CHECK", False)
    kernel = _stand_in_kernel(_one_element_off, None)
    first = _data(8)
    _call(kernel, first, monkeypatch)
    assert kernel.launches == ["chosen"]
    assert not torch.equal(first[6], _rounded_exact(first))
    assert capsys.readouterr().err == ""


def test_the_switch_is_the_environment_variable_read_at_import(submission_loaded_under):
    """Unset, then "0", then "1", each read as the module is loaded again."""
    loaded = [submission_loaded_under(**{sub.SELF_CHECK_ENV: value}).SELF_CHECK for value in ("", "0", "1")]
    assert loaded == [True, False, True]


def test_results_pass_where_the_competitions_check_passes_them():
    exact = torch.tensor([[[1000.25]], [[-3.0]], [[0.0]], [[70000.0]], [[0.0]]], dtype=torch.float64)
    rounded = exact.to(torch.float16)  # 1000.0 (ties to even), -3, 0, inf, 0
    assert sub.wrong_elements(rounded, exact) is None
    within = rounded.clone()
    within[0, 0, 0] = 1001.0  # |1001 - 1000| <= 1e-3 + 1e-3 * 1000: not exact, yet passes
    within[1, 0, 0] = -3.001953125  # one fp16 step from -3
    within[2, 0, 0] = 2.0 ** -10  # an exact zero may come out as anything within atol
    assert sub.wrong_elements(within, exact) is None
    beyond = rounded.clone()
    beyond[0, 0, 0] = 1001.5
    beyond[2, 0, 0] = 2.0 ** -9
    assert sub.wrong_elements(beyond, exact) == (2, (0, 0, 0))
    for bad in (float("nan"), float("-inf")):
        broken = rounded.clone()
        broken[4, 0, 0] = bad
        assert sub.wrong_elements(broken, exact) == (1, (4, 0, 0))


@pytest.mark.parametrize("seed", range(4))
def test_the_self_check_accepts_what_the_competitions_check_accepts(seed):
    """Against the exact product rounded to fp16 (what a reference that rounds once gives),
    `wrong_elements` and the competition's check (reference.py's rtol and atol, the runner's
    comparison) agree on outputs disturbed by steps around the tolerance."""
    assert (sub.SELF_CHECK_RTOL, sub.SELF_CHECK_ATOL) == (reference.RTOL, reference.ATOL)
    data = _data(20 + seed)
    exact = _EXACT_PRODUCT(data)
    expected = exact.to(torch.float16)
    generator = torch.Generator().manual_seed(seed)
    outcomes = set()
    for scale in (0.5, 1.0, 1.5, 3.0):
        relative = (torch.rand(expected.shape, generator=generator, dtype=torch.float64) - 0.5) * 2e-3 * scale
        output = (exact * (1 + relative)).to(torch.float16)
        passes, _ = reference.check_against(expected, output)
        assert (sub.wrong_elements(output, exact) is None) == passes
        outcomes.add(passes)
    assert outcomes == {True, False}  # both sides of the tolerance were tried


def test_sums_rounded_within_the_tolerance_keep_the_chosen_configuration(fresh_plans, monkeypatch, capsys):
    """A block-scaled MMA that does not add exactly in fp32 still passes, as it would pass the
    competition's check; a fault beyond the tolerance still falls back."""
    def rounded_sums(c):
        c.copy_((c.to(torch.float32) * (1 + 2.0 ** -11)).to(torch.float16))  # about half an fp16 step

    kernel = _stand_in_kernel(rounded_sums, None)
    first = _data(8)
    _call(kernel, first, monkeypatch)
    assert not torch.equal(first[6], _rounded_exact(first))  # not exact, yet kept
    assert kernel.launches == ["chosen"] * 3 and _fallback_lines(capsys.readouterr().err) == []

    monkeypatch.setattr(sub, "_PLANS", {})
    kernel = _stand_in_kernel(lambda c: c.mul_(1.003), None)  # three times rtol off
    assert torch.equal(_call(kernel, _data(9), monkeypatch), _rounded_exact(_data(9)))
    (line,) = _fallback_lines(capsys.readouterr().err)
    assert line.endswith("now the conservative configuration")


@pytest.mark.gpu
@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9),
                    reason="needs a Hopper GPU (compute capability 9.x) to run the sm_90a kernel")
@pytest.mark.parametrize("conservative_wrong", [False, True])
def test_a_wrong_first_result_on_hopper_falls_back(conservative_wrong, monkeypatch, capsys):
    """The stand-in kernel's chosen plan (timed among candidates on the first call) with one
    element of its first result changed after it ran; with `conservative_wrong`, the
    conservative plan's too. The fallback then runs on later calls and answers right."""
    from hopper_stand_in import HopperNvfp4Gemm

    problem = sub.Problem(128, 1536, 7168, 1)

    class Spoiled(HopperNvfp4Gemm):
        @classmethod
        def launch_plan(cls, problem, device, config=None, conservative=False):
            plan = HopperNvfp4Gemm.launch_plan(problem, device, config, conservative)
            if conservative and not conservative_wrong:
                return plan
            # The chosen plan times its candidates on the first call, then launches the fastest's
            # plan directly: each candidate is spoiled.
            for _, candidate in getattr(plan, "candidates", None) or [(None, plan)]:
                Spoiled.spoil(candidate)
            return plan

        @staticmethod
        def spoil(plan):
            launch = plan.launch

            def spoiled(addresses):
                launch(addresses)
                element = Spoiled.data[6][3, 1000, 0]
                element.copy_(element * 1.01 + 8.0)  # beyond rtol = atol = 1e-3 whatever its value

            plan.launch = spoiled

    monkeypatch.setattr(sub, "_PLANS", {})
    monkeypatch.setattr(sub, "SELF_CHECK", True)
    monkeypatch.setattr(sub, "TRIAL_IN_CHILD", False)  # the check in this process; the trial process's test is in test_first_run_trial.py
    monkeypatch.setattr(sub, "kernel_for_device", lambda device: Spoiled)
    for seed in (21, 22):
        data = Spoiled.data = reference.generate_input(*problem, seed=seed)
        expected = reference.ref_kernel(reference.generate_input(*problem, seed=seed))
        data[6].fill_(float("nan"))
        sub.custom_kernel(data)
        torch.cuda.synchronize()
        if conservative_wrong:  # no kernel passed: c holds the exact product, bit for bit
            assert torch.equal(data[6], sub.exact_product(data).to(torch.float16))
        ok, message = reference.check_against(expected, data[6])
        assert ok, message
        lines = _fallback_lines(capsys.readouterr().err)
        if seed == 21:
            assert len(lines) == (2 if conservative_wrong else 1)
            assert "call 3 of 3: c[3, 1000, 0]" in lines[0]  # the spoiled element is in the caller's c
        else:
            assert lines == []
    plan = sub._PLANS[(problem, torch.cuda.current_device())]
    if conservative_wrong:
        assert plan is sub.ExactGemm
    else:
        assert plan.config.splits == 1 and not plan.config.decode_in_grid


# ----- the judge's side: harness/judge/self_check.py -----

def test_the_judge_reads_the_submissions_prefix():
    from harness.judge import self_check

    assert self_check.FALLBACK_PREFIX == sub.FALLBACK_PREFIX


def test_the_judge_finds_every_fallback_line_and_nothing_else(fresh_plans, monkeypatch, capsys):
    from harness.judge.self_check import fallbacks_in

    kernel = _stand_in_kernel(_one_element_off, _one_element_off)
    print("compiling 128x256x512x2", file=sys.stderr)
    _call(kernel, _data(9), monkeypatch)
    print("a line that mentions nvfp4 self-check FALLBACK: in its middle", file=sys.stderr)
    err = capsys.readouterr().err
    found = fallbacks_in(err)
    assert len(found) == 2 and ", chosen:" in found[0] and ", conservative:" in found[1]
    assert found == _fallback_lines(err)
    assert fallbacks_in("worker ready\r\n") == []


# ----- the guard on the caller's own three calls: `CallerWatch` -----

def _done_after(seconds: float):
    """A `mark` for `CallerWatch`: the queued calls finish `seconds` after they are marked."""
    def mark():
        finished = time.monotonic() + seconds
        return lambda: time.monotonic() >= finished

    return mark


@pytest.fixture
def short_watch(monkeypatch):
    monkeypatch.setattr(sub.CallerWatch, "RUN_DEADLINE_S", 0.05)
    monkeypatch.setattr(sub.CallerWatch, "GIVE_UP_S", 0.5)


def test_calls_that_answer_in_time_pass_the_watch_quietly(short_watch, capsys):
    watch = sub.CallerWatch("128x256x512x2", "chosen", _done_after(0.0))
    assert watch() is None and not watch.late
    assert capsys.readouterr().err == ""


def test_calls_that_answer_late_are_a_fallback_said_at_the_deadline(short_watch, capsys):
    watch = sub.CallerWatch("128x256x512x2", "chosen", _done_after(0.2))
    late = watch()
    assert late.startswith("answered only after 0.") and watch.late
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{sub.HANG_PREFIX} M x N x K x L = 128x256x512x2, chosen: no answer within 0.05 s")


def test_calls_that_never_answer_end_the_process_after_a_second_line(short_watch, monkeypatch, capsys):
    def exit_(status):
        raise SystemExit(status)

    monkeypatch.setattr(sub.os, "_exit", exit_)
    began = time.monotonic()
    with pytest.raises(SystemExit) as ended:
        sub.CallerWatch("128x256x512x2", "chosen", _done_after(3600.0))()
    assert ended.value.code == 1 and 0.5 <= time.monotonic() - began < 5
    first, second = capsys.readouterr().err.splitlines()
    assert first.startswith(sub.HANG_PREFIX) and "waiting up to 0.5 s" in first
    assert second.startswith(sub.HANG_PREFIX) and "still no answer after 0.5 s" in second and second.endswith("it exits now")


def test_a_rung_late_in_the_callers_process_falls_back_and_is_passed_over_later(fresh_plans, short_watch, monkeypatch, capsys):
    """The chosen plan's calls answer late here: the next rung is kept, and the chosen one's
    traits are condemned for later problems as a hang in the trial process is."""
    monkeypatch.setattr(sub, "_TRIAL", sub.TrialProcess())
    kernel = _stand_in_kernel(None, None)
    monkeypatch.setattr(sub.CallerWatch, "on", classmethod(lambda cls, device, shape, what: cls(
        shape, what, _done_after(0.2 if what == "chosen" else 0.0))))
    first = _data(14)
    _call(kernel, first, monkeypatch)
    assert sub._PLANS[(PROBLEM, 0)].config.name == "conservative" and torch.equal(first[6], _rounded_exact(first))
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith(sub.HANG_PREFIX)]) == 1
    (line,) = _fallback_lines(err)
    assert ", chosen: answered only after" in line and line.endswith("now the conservative configuration")
    assert frozenset({"the chosen configuration"}) in sub._TRIAL.condemned
