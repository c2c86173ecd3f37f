"""Stand-in kernels for the tests of the self-check's trial process (tests/test_first_run_trial.py).

A kernel here is a class the trial process can import by name, as it imports the B200's and the
Hopper's. Its rungs run on CPU tensors: a plan reads its operands at the addresses it is given,
as a kernel does, and writes the exact product into c, or does what its rung's behaviour says:
hang, kill its process, raise, or write one element wrong. Every build and launch is recorded in
the process that made it, so a test sees what its own process built and ran.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import time

import torch

import submission as sub
from hopper_stand_in import HopperNvfp4Gemm

# Longer than any test waits: a hanging rung run in the test's own process fails the test (its
# c stays unwritten) after this, instead of hanging it.
HANG_S = 120.0
# The process in which the "wrong in the caller" rung writes one element wrong (a process id).
WRONG_IN_PID_ENV = "NVFP4_TEST_WRONG_IN_PID"


def _tensor_at(address: int, dtype: torch.dtype, shape: tuple, strides: tuple) -> torch.Tensor:
    """The CPU tensor of `shape` and `strides` whose first element is at `address`."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))
    item = torch.empty((), dtype=dtype).element_size()
    raw = (ctypes.c_uint8 * (span * item)).from_address(address)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).as_strided(shape, strides)


def operands_at(problem: sub.Problem, addresses: tuple[int, ...]) -> tuple:
    """(a, b, sfa, sfb, c) of `problem` read at the addresses a launch is given (a, b,
    sfa_permuted, sfb_permuted, c), the plain scales taken out of their atoms."""
    _, shapes, strides = sub._expected_layouts(*problem)
    a = _tensor_at(addresses[0], sub._FP4, shapes[0], strides[0])
    b = _tensor_at(addresses[1], sub._FP4, shapes[1], strides[1])
    c = _tensor_at(addresses[4], torch.float16, shapes[6], strides[2])

    def plain(address: int, shape: tuple, atom_strides: tuple) -> torch.Tensor:
        atoms = _tensor_at(address, sub._FP8, shape, atom_strides)  # (32, 4, rest, 4, rest_k, L)
        rows, columns = shape[2] * 128, shape[4] * 4
        return atoms.permute(2, 1, 0, 4, 3, 5).reshape(rows, columns, shape[5])

    return a, b, plain(addresses[2], shapes[4], strides[3]), plain(addresses[3], shapes[5], strides[4]), c


class _Config:
    def __init__(self, behaviour: str, rung: str | None = None):
        self.behaviour, self.rung = behaviour, rung

    def describe(self) -> str:
        return f"stand-in {self.behaviour}" + (f" ({self.rung})" if self.rung else "")


class StandInPlan:
    def __init__(self, kernel: type, behaviour: str, problem: sub.Problem, rung: str | None = None):
        self.kernel, self.config, self.problem = kernel, _Config(behaviour, rung), problem

    def launch(self, addresses):
        behaviour = self.config.behaviour
        self.kernel.launches.append(behaviour)
        if behaviour == "hang":
            time.sleep(HANG_S)
            return
        if behaviour == "abort":
            os.abort()
        if behaviour == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if behaviour == "raise":
            raise RuntimeError("the stand-in raised")
        a, b, sfa, sfb, c = operands_at(self.problem, addresses)
        c.copy_(sub.exact_product((a, b, sfa, sfb, None, None, c)).to(torch.float16))
        if behaviour == "wrong" or (behaviour == "wrong in the caller"
                                    and os.environ.get(WRONG_IN_PID_ENV) == str(os.getpid())):
            c[5, 17, 1] = c[5, 17, 1] * 1.01 + 2.0  # beyond rtol = atol = 1e-3 whatever its value


class StandInKernel:
    """A kernel whose rungs behave as `RUNGS` says, in order ("right", "wrong", "wrong in the
    caller", "hang", "abort", "segfault", "raise")."""

    RUNGS: tuple[str, ...] = ()
    builds: list[str] = []  # the behaviours of the rungs built in this process
    launches: list[str] = []

    @classmethod
    def rungs(cls, problem, device):
        return [(f"the {behaviour} rung", functools.partial(cls.plan, behaviour, problem)) for behaviour in cls.RUNGS]

    @classmethod
    def plan(cls, behaviour: str, problem, rung: str | None = None) -> StandInPlan:
        cls.builds.append(behaviour if rung is None else rung)
        return StandInPlan(cls, behaviour, problem, rung)


class HangsFirst(StandInKernel):
    RUNGS = ("hang", "right")


class KillsItsProcess(StandInKernel):
    RUNGS = ("abort", "segfault", "wrong")


class WrongThenRaisesThenRight(StandInKernel):
    RUNGS = ("wrong", "raise", "right")


class RightFirst(StandInKernel):
    RUNGS = ("right", "wrong")


class WrongOnlyInTheCaller(StandInKernel):
    RUNGS = ("wrong in the caller", "right")


class Ladder(StandInKernel):
    """Rungs with the B200's traits (`Sm100Gemm.rungs`): each configuration of `LADDER` called
    through TVM-FFI, then without it; each rung right unless `BEHAVIOURS` names it."""

    LADDER = (("the chosen configuration", {sub.PDL, sub.TWO_CTAS}), ("without PDL", {sub.TWO_CTAS}),
              ("one CTA an SM", set()))
    BEHAVIOURS: dict[str, str] = {}

    @classmethod
    def rungs(cls, problem, device):
        return [sub.Rung(name + suffix, functools.partial(cls.plan, cls.BEHAVIOURS.get(name + suffix, "right"),
                                                          problem, name + suffix), frozenset(traits | tvm_ffi))
                for name, traits in cls.LADDER
                for suffix, tvm_ffi in (("", {sub.TVM_FFI}), (" without TVM-FFI", set()))]


class LadderWrongFirst(Ladder):
    BEHAVIOURS = {"the chosen configuration": "wrong"}


class LadderTvmFfiRaises(Ladder):
    BEHAVIOURS = {"the chosen configuration": "raise", "without PDL": "raise", "one CTA an SM": "raise"}


class LadderHangsFirst(Ladder):
    BEHAVIOURS = {"the chosen configuration": "hang"}


class LadderFaultsFirst(Ladder):
    BEHAVIOURS = {"the chosen configuration": "segfault"}


class _Spoiled:
    """A plan's configuration, described as the plan's way of going wrong, so that the plan is
    told apart from the same configuration launched rightly."""

    def __init__(self, config, how: str):
        self.config, self.how = config, how

    def describe(self) -> str:
        return f"{self.config.describe()}, {self.how}"


class HopperFaultsThenSpins(HopperNvfp4Gemm):
    """The Hopper stand-in with two rungs before its conservative plan: that plan launched with
    A at an address no allocation holds (the device faults), then launched behind a spin on the
    GPU that outlasts every deadline (the calls never finish)."""

    TRIAL_IN_CHILD = True  # tried in the trial process, unlike the stand-in's own rungs
    UNMAPPED = 1 << 16  # 16-byte aligned, as a TMA descriptor's base must be; below every allocation

    @classmethod
    def rungs(cls, problem, device):
        conservative = functools.partial(HopperNvfp4Gemm.launch_plan, problem, device, conservative=True)
        return [("a launch at an unmapped address", functools.partial(cls._spoiled, conservative, "fault")),
                ("a launch that never ends", functools.partial(cls._spoiled, conservative, "spin")),
                ("the conservative configuration", conservative)]

    @classmethod
    def _spoiled(cls, build, how: str):
        plan = build()
        launch = plan.launch
        if how == "fault":
            plan.launch = lambda addresses: launch((cls.UNMAPPED, *addresses[1:]))
            plan.config = _Spoiled(plan.config, "A at an unmapped address")
        else:
            def spinning(addresses):
                torch.cuda._sleep(1 << 42)  # some 40 minutes of clock cycles
                launch(addresses)

            plan.launch = spinning
            plan.config = _Spoiled(plan.config, "behind a spin")
        return plan
