"""The self-check's trial process: every rung is tried first in a second process, so that a rung
that hangs or kills its process falls back like a wrong one, and the caller's process builds
only the first rung that passed there. On the host with the stand-in kernels of
tests/trial_kernels.py (CPU tensors); on a Hopper GPU with the stand-in kernel's plan launched at
an unmapped address and behind a spin."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch

import reference
import submission as sub
import trial_kernels as kernels

GPU_RUN_DEADLINE_S = sub.TrialProcess.RUN_DEADLINE_S  # the submission's own

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = sub.Problem(128, 256, 512, 2)
# The stand-ins' three calls run on a CPU that other tests share: more time than a GPU's calls
# get, so that a loaded machine is not taken for a hang.
RUN_DEADLINE_S = 10.0


@pytest.fixture(autouse=True)
def trial(monkeypatch):
    """A trial process of the test's own, ended after it; the stand-ins' records emptied."""
    process = sub.TrialProcess()
    monkeypatch.setattr(sub, "_TRIAL", process)
    monkeypatch.setattr(sub, "SELF_CHECK", True)
    monkeypatch.setattr(sub, "TRIAL_IN_CHILD", True)
    monkeypatch.setattr(sub.TrialProcess, "RUN_DEADLINE_S", RUN_DEADLINE_S)
    kernels.StandInKernel.builds.clear()
    kernels.StandInKernel.launches.clear()
    yield process
    process.close()


def _data(seed: int, problem=PROBLEM):
    return reference.generate_input(*problem, seed=seed, device="cpu")


def _first_call(kernel, data, problem=PROBLEM):
    return sub.first_call(kernel, sub.Call(problem, 0, sub.operand_addresses(data)), data)


def _right(data) -> bool:
    return torch.equal(data[6], reference.ref_kernel(_data_copy(data)))


def _data_copy(data):
    return tuple(t.clone() for t in data)


def _lines(err: str, prefix: str = sub.FALLBACK_PREFIX) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(prefix)]


@pytest.mark.e2e  # trial processes started and waited for: seconds each
def test_a_rung_that_hangs_is_killed_at_the_deadline_and_not_launched_again(trial, capsys):
    began = time.monotonic()
    data = _data(1)
    plan = _first_call(kernels.HangsFirst, data)
    elapsed = time.monotonic() - began
    assert plan.config.describe() == "stand-in right" and _right(data)
    (line,) = _lines(capsys.readouterr().err)
    assert "M x N x K x L = 128x256x512x2, stand-in hang:" in line
    assert f"no answer within {RUN_DEADLINE_S:g} s in the trial process, which was killed" in line
    assert line.endswith("now the right rung")
    assert kernels.StandInKernel.builds == ["right"]  # the hanging rung never built here
    assert kernels.StandInKernel.launches == ["right"] * 3
    assert RUN_DEADLINE_S <= elapsed < kernels.HANG_S

    later = _data(2)
    plan.launch(sub.operand_addresses(later))
    assert _right(later)

    # Another problem: the rung that hung is passed over before it is built anywhere.
    other = sub.Problem(256, 128, 256, 1)
    began = time.monotonic()
    data = _data(3, other)
    plan = _first_call(kernels.HangsFirst, data, other)
    assert time.monotonic() - began < RUN_DEADLINE_S
    assert plan.config.describe() == "stand-in right" and _right(data)
    (line,) = _lines(capsys.readouterr().err)
    assert ("256x128x256x1, the hang rung: not tried: it keeps what failed before "
            "(stand-in hang hung for 128x256x512x2); now the right rung") in line
    assert kernels.StandInKernel.builds == ["right"] * 2  # the hanging rung built in no process of this one


@pytest.mark.e2e  # trial processes started and waited for: seconds each
def test_rungs_that_kill_their_process_fall_back_each_in_a_new_one(trial, capsys):
    """Each death names its rung; a rung that shares nothing with them is still tried; after
    the last rung the exact product answers."""
    data = _data(5)
    assert _first_call(kernels.KillsItsProcess, data) is sub.ExactGemm
    assert _right(data)
    aborted, segfaulted, wrong = _lines(capsys.readouterr().err)
    assert "stand-in abort: the trial process died of SIGABRT in its three calls; now the segfault rung" in aborted
    assert "stand-in segfault: the trial process died of SIGSEGV in its three calls; now the wrong rung" in segfaulted
    assert "stand-in wrong: call 1 of 3: c[5, 17, 1]" in wrong and wrong.endswith("now the exact torch product")
    assert kernels.StandInKernel.builds == [] and kernels.StandInKernel.launches == []
    assert set(trial.condemned) == {frozenset({"the abort rung"}), frozenset({"the segfault rung"})}


@pytest.mark.e2e  # trial processes started and waited for: seconds each
def test_condemned_rungs_pass_over_only_what_they_share_in_later_problems(trial, capsys):
    """Two rungs that killed their process do not end the trials of a later problem: its rungs
    that share nothing with them are tried, in the same process as ever."""
    _first_call(kernels.KillsItsProcess, _data(5))
    capsys.readouterr()
    other = sub.Problem(128, 128, 256, 1)
    data = _data(6, other)
    plan = _first_call(kernels.WrongThenRaisesThenRight, data, other)
    assert plan.config.describe() == "stand-in right" and _right(data)
    wrong, raised = _lines(capsys.readouterr().err)
    assert "stand-in wrong:" in wrong and "stand-in raise: RuntimeError" in raised
    assert kernels.StandInKernel.builds == ["right"]


@pytest.mark.e2e  # trial processes started and waited for: seconds each
def test_once_hangs_and_faults_have_spent_the_budget_the_exact_product_answers(trial, monkeypatch, capsys):
    """Past `LOST_BUDGET_S` of deadlines and new processes no rung is tried, here or there."""
    monkeypatch.setattr(sub.TrialProcess, "LOST_BUDGET_S", 0.0)
    data = _data(5)
    assert _first_call(kernels.KillsItsProcess, data) is sub.ExactGemm and _right(data)
    aborted, spent = _lines(capsys.readouterr().err)
    assert "died of SIGABRT" in aborted and aborted.endswith("now the segfault rung")
    assert "the segfault rung (not built): not tried: hangs, faults and new trial processes have taken" in spent
    assert spent.endswith("now the exact torch product") and trial.process is None

    other = sub.Problem(128, 128, 256, 1)
    data = _data(6, other)
    assert _first_call(kernels.RightFirst, data, other) is sub.ExactGemm and _right(data)
    (line,) = _lines(capsys.readouterr().err)
    assert "the right rung (not built): not tried:" in line
    assert kernels.StandInKernel.builds == [] and trial.process is None


def test_wrong_and_raising_rungs_fall_back_there_and_the_one_that_passed_is_built_here_once(trial, capsys):
    data = _data(6)
    plan = _first_call(kernels.WrongThenRaisesThenRight, data)
    pid = trial.process.pid
    assert plan.config.describe() == "stand-in right" and _right(data)
    wrong, raised = _lines(capsys.readouterr().err)
    assert "stand-in wrong: call 1 of 3: c[5, 17, 1]" in wrong and "(1 of 65536 elements wrong)" in wrong
    assert wrong.endswith("now the raise rung")
    assert "stand-in raise: RuntimeError: the stand-in raised; now the right rung" in raised
    assert kernels.StandInKernel.builds == ["right"]
    later = _data(7)
    plan.launch(sub.operand_addresses(later))
    assert _right(later)
    assert kernels.StandInKernel.launches == ["right"] * 4  # three checked calls, then the later one

    # Another problem: the same process tries its rungs; a wrong answer condemned nothing.
    other = sub.Problem(128, 128, 256, 3)
    data = _data(8, other)
    _first_call(kernels.WrongThenRaisesThenRight, data, other)
    assert _right(data) and trial.process.pid == pid and trial.condemned == {}
    assert len(_lines(capsys.readouterr().err)) == 2
    assert kernels.StandInKernel.builds == ["right"] * 2


def test_the_callers_own_check_still_catches_what_the_trial_process_passed(trial, monkeypatch, capsys):
    """A rung right on the trial process's input and wrong in the caller's process: the caller's
    check on its own input falls back, and the trial process tries the rungs after it."""
    monkeypatch.setenv(kernels.WRONG_IN_PID_ENV, str(os.getpid()))
    data = _data(10)
    plan = _first_call(kernels.WrongOnlyInTheCaller, data)
    assert plan.config.describe() == "stand-in right" and _right(data)
    (line,) = _lines(capsys.readouterr().err)
    assert "stand-in wrong in the caller: call 1 of 3: c[5, 17, 1]" in line and line.endswith("now the right rung")
    assert kernels.StandInKernel.builds == ["wrong in the caller", "right"]


def test_without_a_trial_process_the_rungs_are_tried_here_after_one_line(trial, monkeypatch, capsys):
    def refused(*args, **kwargs):
        raise PermissionError("no new processes here")

    monkeypatch.setattr(sub.subprocess, "Popen", refused)
    data = _data(12)
    plan = _first_call(kernels.WrongThenRaisesThenRight, data)
    assert plan.config.describe() == "stand-in right" and _right(data)
    err = capsys.readouterr().err
    (line,) = _lines(err, sub.NO_TRIAL_PROCESS)
    assert "it could not be started: PermissionError: no new processes here" in line
    assert line.endswith("each rung is tried in this process alone")
    assert len(_lines(err)) == 2
    assert kernels.StandInKernel.builds == ["wrong", "raise", "right"]

    other = sub.Problem(128, 128, 256, 1)
    _first_call(kernels.RightFirst, _data(13, other), other)
    assert capsys.readouterr().err == ""  # said once a process


def test_a_trial_process_that_fails_itself_leaves_the_rungs_to_this_process(trial, monkeypatch, capsys):
    def broken(*args):
        raise RuntimeError("a reply no request asked for")

    monkeypatch.setattr(sub.TrialProcess, "_screen", broken)
    data = _data(17)
    plan = _first_call(kernels.WrongThenRaisesThenRight, data)
    assert plan.config.describe() == "stand-in right" and _right(data)
    err = capsys.readouterr().err
    (line,) = _lines(err, sub.NO_TRIAL_PROCESS)
    assert "it failed: RuntimeError: a reply no request asked for" in line
    assert len(_lines(err)) == 2 and trial.process is None


def test_a_kernel_class_the_trial_process_cannot_import_is_tried_here(trial, capsys):
    class Local(kernels.StandInKernel):
        RUNGS = ("wrong", "right")

    data = _data(14)
    _first_call(Local, data)
    err = capsys.readouterr().err
    (line,) = _lines(err, sub.NO_TRIAL_PROCESS)
    assert "cannot be imported by name" in line
    assert kernels.StandInKernel.builds == ["wrong", "right"] and _right(data)


def test_a_kernel_module_the_trial_process_cannot_import_is_said_once(trial, capsys):
    stray = type("Stray", (kernels.StandInKernel,), {"RUNGS": ("right",), "__module__": "no_module_of_this_name"})
    data = _data(16)
    _first_call(stray, data)
    (line,) = _lines(capsys.readouterr().err, sub.NO_TRIAL_PROCESS)
    assert "it could not run here: ModuleNotFoundError: No module named 'no_module_of_this_name'" in line
    assert trial.process is None and _right(data)


@pytest.mark.e2e  # trial processes started and waited for: seconds each
def test_what_the_imports_print_on_stdout_is_no_reply_of_the_trial_process(trial, capfd):
    import trial_kernels_noisy

    data = _data(17)
    _first_call(trial_kernels_noisy.WrongThenRightAfterNoise, data)
    err = capfd.readouterr().err  # this process's and the trial process's
    assert not _lines(err, sub.NO_TRIAL_PROCESS)
    assert "a note printed on stdout as this module is imported" in err  # the child's, sent to stderr
    (line,) = _lines(err)
    assert "stand-in wrong:" in line and line.endswith("now the right rung")
    assert kernels.StandInKernel.builds == ["right"] and _right(data)


@pytest.mark.e2e  # trial processes started and waited for: seconds each
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA: the trial process must find none")
def test_a_trial_process_without_cuda_says_so_and_ends(trial):
    why = trial._start(kernels.RightFirst, torch.device("cuda", 0))
    assert why is not None and why.startswith("it could not run here: ")
    assert trial.process is None


def test_with_the_switch_off_no_trial_process_starts(trial, monkeypatch, capsys):
    monkeypatch.setattr(sub, "TRIAL_IN_CHILD", False)
    monkeypatch.setattr(sub.subprocess, "Popen", lambda *args, **kwargs: pytest.fail("a process was started"))
    data = _data(15)
    _first_call(kernels.WrongThenRaisesThenRight, data)
    assert len(_lines(capsys.readouterr().err)) == 2 and _right(data)
    assert kernels.StandInKernel.builds == ["wrong", "raise", "right"]


def test_a_kernel_run_on_its_own_chip_is_tried_in_the_callers_process_alone(trial, monkeypatch, capsys):
    """A kernel class may keep its rungs out of the trial process (the Hopper stand-in does; the
    B200 kernel, never run on its chip, does not)."""
    from hopper_stand_in import HopperNvfp4Gemm

    assert sub.Sm100Gemm.TRIAL_IN_CHILD and not HopperNvfp4Gemm.TRIAL_IN_CHILD
    monkeypatch.setattr(kernels.WrongThenRaisesThenRight, "TRIAL_IN_CHILD", False, raising=False)
    monkeypatch.setattr(sub.subprocess, "Popen", lambda *args, **kwargs: pytest.fail("a process was started"))
    data = _data(16)
    _first_call(kernels.WrongThenRaisesThenRight, data)
    assert len(_lines(capsys.readouterr().err)) == 2 and _right(data)


# ----- the ladder: a failure passes over only the rungs that keep what it put in doubt -----

def test_a_wrong_answer_passes_over_its_twin_without_tvm_ffi_and_drops_one_feature(trial, capsys):
    data = _data(30)
    plan = _first_call(kernels.LadderWrongFirst, data)
    assert plan.config.rung == "without PDL" and _right(data)
    (line,) = _lines(capsys.readouterr().err)
    assert "stand-in wrong (the chosen configuration): call 1 of 3" in line and line.endswith("now without PDL")
    assert kernels.StandInKernel.builds == ["without PDL"] and trial.condemned == {}


def test_a_tvm_ffi_that_raises_leaves_the_chosen_configuration_without_it_for_every_problem(trial, capsys):
    data = _data(31)
    plan = _first_call(kernels.LadderTvmFfiRaises, data)
    assert plan.config.rung == "the chosen configuration without TVM-FFI" and _right(data)
    (line,) = _lines(capsys.readouterr().err)
    assert "RuntimeError: the stand-in raised; now the chosen configuration without TVM-FFI" in line
    assert trial.condemned.keys() == {frozenset({sub.TVM_FFI})}

    other = sub.Problem(128, 128, 256, 1)
    data = _data(32, other)
    plan = _first_call(kernels.LadderTvmFfiRaises, data, other)
    assert plan.config.rung == "the chosen configuration without TVM-FFI" and _right(data)
    (line,) = _lines(capsys.readouterr().err)
    assert "128x128x256x1, the chosen configuration: not tried: it keeps what failed before" in line
    assert kernels.StandInKernel.builds == ["the chosen configuration without TVM-FFI"] * 2


@pytest.mark.e2e  # trial processes started and waited for: seconds each
@pytest.mark.parametrize("kernel, kind", [(kernels.LadderHangsFirst, "hung"), (kernels.LadderFaultsFirst, "faulted")])
def test_a_hang_or_a_fault_passes_over_what_it_keeps_in_later_problems_too(kernel, kind, trial, capsys):
    data = _data(33)
    plan = _first_call(kernel, data)
    assert plan.config.rung == "without PDL" and _right(data)
    (line,) = _lines(capsys.readouterr().err)
    assert "(the chosen configuration)" in line and line.endswith("now without PDL")
    assert trial.condemned.keys() == {frozenset({sub.PDL, sub.TWO_CTAS})}
    assert kind in next(iter(trial.condemned.values()))

    other = sub.Problem(128, 128, 256, 1)
    data = _data(34, other)
    began = time.monotonic()
    plan = _first_call(kernel, data, other)
    assert plan.config.rung == "without PDL" and _right(data) and time.monotonic() - began < RUN_DEADLINE_S
    (line,) = _lines(capsys.readouterr().err)
    assert "128x128x256x1, the chosen configuration: not tried: it keeps what failed before" in line
    assert line.endswith("now without PDL")
    assert "the chosen configuration" not in kernel.builds and "the chosen configuration" not in kernel.launches


def test_the_switch_is_the_environment_variable_read_at_import(submission_loaded_under):
    loaded = [submission_loaded_under(**{sub.TRIAL_IN_CHILD_ENV: value}).TRIAL_IN_CHILD for value in ("", "0")]
    assert loaded == [True, False]


@pytest.mark.parametrize("problem", [sub.Problem(128, 256, 512, 2), sub.Problem(384, 128, 768, 1)])
def test_the_trial_input_is_laid_out_and_drawn_as_the_competitions(problem):
    data = sub.TrialProcess.trial_input(problem, torch.device("cpu"), seed=3)
    assert sub._accept_layout_fast(data)[0] == problem  # every dtype, shape and stride the kernels take
    a, b, sfa, sfb, sfa_permuted, sfb_permuted, _ = data
    for plain, permuted in ((sfa, sfa_permuted), (sfb, sfb_permuted)):
        rows, columns, batches = (torch.arange(n) for n in plain.shape)
        index = reference.permuted_index(rows[:, None, None], columns[None, :, None], batches[None, None, :])
        assert torch.equal(permuted[index].float(), plain.float())
        assert set(plain.float().unique().tolist()) == {0.0, 1.0, 2.0, 3.0}
    assert len(a.view(torch.uint8).unique()) == 256 and len(b.view(torch.uint8).unique()) == 256
    exact = sub.exact_product(data)
    assert torch.equal(exact.to(torch.float16), reference.ref_kernel(data))
    assert (exact != 0).float().mean() > 0.9


# ----- on a Hopper GPU: a launch that faults the device, a launch that never ends -----

@pytest.mark.gpu
@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9),
                    reason="needs a Hopper GPU (compute capability 9.x) to run the sm_90a kernel")
def test_on_hopper_a_device_fault_and_a_spin_fall_back_to_the_conservative_plan(trial, monkeypatch, capsys):
    """The stand-in kernel's conservative plan launched with A at an unmapped address (the
    trial process's CUDA context is lost), then behind a spin that outlasts the deadline (the
    trial process is killed): both fall back, and the conservative plan answers every call in
    this process, whose CUDA context stays whole."""
    monkeypatch.setattr(sub.TrialProcess, "RUN_DEADLINE_S", GPU_RUN_DEADLINE_S)
    problem = sub.Problem(128, 1536, 7168, 1)
    kernel = kernels.HopperFaultsThenSpins
    plans = {}
    for seed in (31, 32, 33):
        data = reference.generate_input(*problem, seed=seed)
        expected = reference.ref_kernel(reference.generate_input(*problem, seed=seed))
        data[6].fill_(float("nan"))
        call = sub.validate_inputs(data)
        plan = plans.get(problem)
        if plan is None:
            plan = plans[problem] = sub.first_call(kernel, call, data)
        else:
            plan.launch(call.addresses)
        torch.cuda.synchronize()
        ok, message = reference.check_against(expected, data[6])
        assert ok, message
    fault, spin = _lines(capsys.readouterr().err)
    assert "A at an unmapped address" in fault and fault.endswith("now a launch that never ends")
    assert f"behind a spin: no answer within {GPU_RUN_DEADLINE_S:g} s in the trial process, which was killed" in spin
    assert spin.endswith("now the conservative configuration")
    assert plan.config.splits == 1 and not plan.config.decode_in_grid
    print(f"fault: {fault}\nspin: {spin}", file=sys.__stderr__)
