"""experiments/splitk_protocol: the B200 kernel's split-K protocol (`submission.SplitKReduction`)
and PDL-waiting epilogue in a kernel for sm_90a. On the CPU: it compiles for sm_90a, with the
PDL instructions only where asked and the arrival's order as the B200 kernel has it. On a
Hopper or newer GPU: calls queued back to back, sharing partials and counters, are all right."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

EXPERIMENT = Path(__file__).resolve().parent.parent / "experiments" / "splitk_protocol"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"splitk_protocol_{name}", EXPERIMENT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


protocol = _load("protocol_kernel")
sys.modules.setdefault("protocol_kernel", protocol)  # run.py imports it by that name
run = _load("run")


def _ptx(splits: int, subtiles: int, pdl: bool = True) -> str:
    from harness.submitting.compile_capture import capturing_compiles

    with capturing_compiles("sm_90a") as capture:
        protocol.compile_kernel(splits, subtiles, pdl, arch="sm_90a")
        return capture.compiles[-1].ptx


@pytest.mark.parametrize("splits, subtiles", run.CASES)
def test_the_protocol_kernel_compiles_for_sm90a_with_the_b200s_arrival(splits, subtiles):
    ptx = _ptx(splits, subtiles)
    assert ptx.count("griddepcontrol.launch_dependents") == 1 and ptx.count("griddepcontrol.wait") == 1
    count = re.search(r"atom\.global(?:\.relaxed)?(?:\.gpu)?\.add\.u32\s+%r\d+, \[%rd\d+\], 1;", ptx)
    assert count, "no relaxed count of an arrival"
    ordering = r"\b(bar\.warp\.sync|fence\.acq_rel\.gpu|ld\.global|st\.global|atom\.global)\b"
    assert re.findall(ordering, ptx[:count.start()])[-3:] == ["st.global", "bar.warp.sync", "fence.acq_rel.gpu"]
    assert re.findall(ordering, ptx[count.end():])[:3] == ["fence.acq_rel.gpu", "bar.warp.sync", "ld.global"]
    assert re.search(r"atom\.global[.\w]*\.exch\.b32", ptx[count.end():])


def test_without_pdl_the_protocol_kernel_neither_triggers_nor_waits():
    ptx = _ptx(2, 4, pdl=False)
    assert "griddepcontrol" not in ptx


def test_the_cases_cover_the_b200s_partials_ahead_variants():
    """Two subtiles ahead with a refill (128-row tiles) and without (64-row), one, none."""
    assert [protocol.partials_ahead(splits, subtiles) for splits, subtiles in run.CASES] == [2, 2, 1, 0]


@pytest.mark.gpu
@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9),
                    reason="needs a Hopper or newer GPU (PDL, sm_90a)")
@pytest.mark.parametrize("splits, subtiles", run.CASES)
def test_calls_back_to_back_share_partials_and_counters_and_are_all_right(splits, subtiles):
    assert run.stress(splits, subtiles, calls=200, tiles=150, rounds=2) is None
