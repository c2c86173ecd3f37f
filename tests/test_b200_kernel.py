"""The sm_100a kernel on a B200: every benchmark configuration, and the self-check's plain rung,
pinned on small shapes and checked with the self-check's own trial (three calls queued back to
back, the second by b negated: PDL overlap, arrival counters reset, partials reused). Skips
without a compute capability 10.x GPU."""

from __future__ import annotations

import pytest
import torch

import reference
import submission as sub

# (configuration, problem): every rung of every benchmark's ladder (`sm100_ladder`: the chosen
# configurations, then each without one more feature) and 64-row split-K, on shapes small enough
# for compute-sanitizer, with several units a CTA where the schedule allows it.
_BENCHMARK_1, _BENCHMARK_2, _BENCHMARK_3 = (sub.Problem(128, 7168, 16384, 1), sub.Problem(128, 4096, 7168, 1),
                                            sub.Problem(128, 7168, 2048, 1))
_LADDER_1, _LADDER_2, _LADDER_3 = ([config for _, config in sub.sm100_ladder(problem)]
                                   for problem in (_BENCHMARK_1, _BENCHMARK_2, _BENCHMARK_3))
CONFIG_CASES = [
    *((config, sub.Problem(128, 512, 4096, 2)) for config in _LADDER_1[:2]),  # 128-row split-K, with and without PDL
    *((config, sub.Problem(256, 1024, 2048, 1)) for config in _LADDER_2[:2]),
    *((config, sub.Problem(512, 7168, 1024, 1)) for config in _LADDER_3[:3]),
    (sub.Sm100Config(mma_n=64, split_k=2, stages=8), sub.Problem(128, 768, 8192, 1)),
    (sub.Sm100Config.one_cta(128), sub.Problem(384, 1536, 2304, 1)),
]

ON_B200 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10


@pytest.mark.gpu
@pytest.mark.skipif(not ON_B200, reason="needs a B200 (compute capability 10.x) to run the sm_100a kernel")
@pytest.mark.parametrize("config, problem", CONFIG_CASES, ids=lambda x: x.describe() if hasattr(x, "describe") else "x".join(map(str, x)))
def test_three_calls_back_to_back_are_right(config, problem):
    data = reference.generate_input(*problem, seed=4242)
    plan = sub.Sm100Gemm.launch_plan(problem, torch.device("cuda"), config)
    trial = sub.ThreeCalls(data, sub.exact_product(data))
    for _ in range(3):  # and again: the counters the previous trial's last call left
        assert trial.fault(plan) is None
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not ON_B200, reason="needs a B200 (compute capability 10.x) to run the sm_100a kernel")
@pytest.mark.skipif(not sub.HAVE_TVM_FFI, reason="apache-tvm-ffi is not installed: every rung already calls through CuTe pointers")
def test_the_chosen_configuration_without_tvm_ffi_is_right():
    """The rung a TVM-FFI that raises leaves: the same configuration compiled without TVM-FFI
    and called through CuTe pointers (here the first benchmark's, 128-row split-K with PDL)."""
    problem = sub.Problem(128, 512, 4096, 2)
    data = reference.generate_input(*problem, seed=4243)
    plan = sub.Sm100Gemm.launch_plan(problem, torch.device("cuda"), _LADDER_1[0], tvm_ffi=False)
    assert not plan.tvm_ffi
    trial = sub.ThreeCalls(data, sub.exact_product(data))
    for _ in range(3):
        assert trial.fault(plan) is None
    torch.cuda.synchronize()
