"""The compile checker (harness/submitting/compile.py): it passes the real kernels and fails kernels that
lack what it checks for. Compiles with fake pointers, so it needs no GPU."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console

import cutlass
import cutlass.cute as cute
import submission as sub
from harness.submitting import compile as checker

ROOT = Path(__file__).resolve().parent.parent
SUBMISSION = ROOT / "submission.py"


def _run(arch: str, tmp_path: Path) -> tuple[int, str]:
    console = Console(record=True, width=250)
    status = checker.run_check(SUBMISSION, arch, tmp_path / "sass", console)
    return status, console.export_text()


@pytest.mark.e2e
def test_sm100a_kernel_passes_for_every_official_shape(tmp_path):
    status, report = _run("sm_100a", tmp_path)
    assert status == 0, report
    check_table, model_table = report.split("B200 cost model: a model's times, not measurements")
    rows = [line for line in check_table.splitlines() if re.match(r"│ \d+x\d+x\d+x\d+", line)]
    assert len(rows) == len(checker.official_shapes()) == 13
    # The model's time per benchmark shape, with its PDL fact.
    model_rows = [line.split("│") for line in model_table.splitlines() if re.match(r"│ (\d+x\d+x\d+x\d+|geomean)", line)]
    assert [row[1].strip() for row in model_rows] == ["128x7168x16384x1", "128x4096x7168x1", "128x7168x2048x1", "geomean"]
    assert all(row[3].strip() == "yes" for row in model_rows[:3])
    assert all("PASS" in row for row in rows)
    sass_files = list((tmp_path / "sass").glob("sm_100a_*.sass"))
    assert sass_files, "the SASS of each configuration is kept on request"
    sass = sass_files[0].read_text()
    assert re.search(checker.MMA_BLOCK16.pattern, sass)


@pytest.mark.e2e
def test_sm90a_check_compiles_the_hopper_stand_in_from_beside_the_submission(tmp_path):
    status, report = _run("sm_90a", tmp_path)
    assert status == 0, report
    assert "COMPILE CHECK PASS (sm_90a)" in report


def test_a_target_the_submission_has_no_kernel_for_is_named(tmp_path):
    only_b200 = tmp_path / "only_b200.py"
    only_b200.write_text("def kernel_for_arch(arch):\n    return None\n\n\ndef custom_kernel(data):\n    return data[6]\n")
    console = Console(record=True, width=250)
    assert checker.run_check(only_b200, "sm_90a", None, console) == checker.EXIT_PATH_MISSING
    assert "no sm_90a kernel in" in console.export_text()


class _PlainKernel:
    """A kernel with none of the instructions the sm_100a rules require (a plain store)."""

    smem_bytes = 1024

    @classmethod
    def config_for(cls, problem):
        return "plain"

    @classmethod
    def compile_for_check(cls, problem, arch, extra_options):
        @cute.kernel
        def store_one(out: cute.Tensor):
            tidx, _, _ = cute.arch.thread_idx()
            out[tidx] = cutlass.Float16(1.0)

        @cute.jit
        def launch(out_ptr: cute.Pointer):
            store_one(cute.make_tensor(out_ptr, cute.make_layout(128))).launch(grid=(1, 1, 1), block=(128, 1, 1))

        cute.compile(launch, sub.fake_pointer(cutlass.Float16),
                     options=sub.compile_options(arch, tvm_ffi=False, extra=extra_options))
        return sub.CompileFacts("plain store", cls.smem_bytes, tmem_columns=600)


def test_checker_fails_a_kernel_without_the_required_instructions():
    result = checker.check_config(_PlainKernel, sub.Problem(128, 128, 256, 1), "sm_100a",
                                  checker.RULES["sm_100a"], sass_dir=None)
    assert "no tcgen05.mma block16 (UTCOMMA.4X)" in result.failures
    assert "no tcgen05.cp (UTCCP)" in result.failures
    assert "no TMA load (UTMALDG)" in result.failures
    assert any("tensor memory columns 600" in f for f in result.failures)


def test_checker_fails_shared_memory_over_the_limit(monkeypatch):
    monkeypatch.setattr(_PlainKernel, "smem_bytes", checker.SMEM_LIMIT_BYTES + 1)
    result = checker.check_config(_PlainKernel, sub.Problem(128, 128, 256, 1), "sm_90a",
                                  checker.RULES["sm_90a"], sass_dir=None)
    assert any(f.startswith("shared memory") for f in result.failures)


@pytest.mark.parametrize("line, spills", [
    ("        /*0100*/                   STL [R1+0x4], R2 ;", 1),
    ("        /*0100*/                   LDL.64 R2, [R1] ;", 1),
    ("        /*0100*/                   STG.E [R2.64], R4 ;", 0),
    ("        /*0100*/                   UTCOMMA.4X gdesc[UR4], gdesc[UR6], tmem[UR8] ;", 0),
])
def test_local_memory_instructions_are_counted(line, spills):
    assert checker.count_instructions(line, checker.RULES["sm_100a"].forbidden)["local memory"] == spills


def _sass(*instructions: str) -> str:
    """Instructions as cuobjdump prints them: address, text, encoding, then an encoding line."""
    lines = []
    for i, text in enumerate(instructions):
        lines.append(f"        /*{16 * i:04x}*/                   {text} ;   /* 0x000000000000000{i % 10} */")
        lines.append("                                                        /* 0x000fe20000000000 */")
    return "\n".join(lines)


_HGMMA = "HGMMA.64x128x16.F32 R24, R88, gdesc[UR8], R24"


@pytest.mark.parametrize("instructions, serialized", [
    # ptxas short of registers: a wait for every MMA between each two HGMMAs.
    ([_HGMMA + ", gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "WARPGROUP.ARRIVE", _HGMMA + ", gsb0",
      "WARPGROUP.DEPBAR.LE gsb0, 0x0", "MOV R2, R3", "WARPGROUP.ARRIVE", _HGMMA + ", gsb0"], 2),
    # Pipelined: one group of four, one group left in flight.
    ([_HGMMA, _HGMMA, _HGMMA, _HGMMA + ", gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x1", "WARPGROUP.ARRIVE", _HGMMA], 0),
    # Waiting for the whole group, then work before the next one: not serialized.
    ([_HGMMA, _HGMMA + ", gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0"] + ["LOP3.LUT R4, R5, 0x3, RZ, 0xc0, !PT"] * 8
     + ["WARPGROUP.ARRIVE", _HGMMA], 0),
])
def test_serialized_wgmma_is_counted(instructions, serialized):
    counts = checker.count_instructions(_sass(*instructions), checker.RULES["sm_90a"].forbidden)
    assert counts["serialized wgmma"] == serialized


def test_resource_usage_is_read_from_cuobjdump_output():
    text = " Function kernel_x:\n  REG:112 STACK:0 SHARED:1024 LOCAL:8 CONSTANT[0]:1764 TEXTURE:0\n"
    assert checker.resource_usage(text) == (112, 1024, 8)


def test_resource_usage_takes_the_largest_over_the_cubins_kernels():
    text = (" Function kernel_decode:\n  REG:32 STACK:0 SHARED:0 LOCAL:16 CONSTANT[0]:624\n"
            " Function kernel_gemm:\n  REG:128 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:1184\n")
    assert checker.resource_usage(text) == (128, 1024, 16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="launches with made-up addresses: only safe where no GPU can run it")
@pytest.mark.parametrize("tvm_ffi", [True, False] if sub.HAVE_TVM_FFI else [False],
                         ids=lambda on: "tvm-ffi" if on else "cute-pointers")
def test_compiled_sm100_kernel_accepts_the_call_paths_arguments(tvm_ffi):
    """The arguments a launch plan passes get through the compiled function's argument checks,
    as the plan calls it, and fail only at the CUDA runtime, for want of a device; one argument
    short fails before it."""
    compiled, _ = sub.Sm100Gemm.compile(sub.Sm100Config(64, 1, 8), "sm_100a", tvm_ffi=tvm_ffi)
    entry = sub.bare_tvm_ffi_function(compiled)
    pointers = [sub.pointer_arg(dtype, 4096 * (i + 1), tvm_ffi=tvm_ffi)
                for i, dtype in enumerate(sub.Sm100BlockScaledGemm.POINTER_TYPES)]
    with pytest.raises(Exception, match=r"(?i)cuda"):
        entry(*pointers, *sub.int32_args(128, 7168, 2048, 1, 112, tvm_ffi=tvm_ffi))
    with pytest.raises(Exception, match="num_ctas"):
        entry(*pointers, *sub.int32_args(128, 7168, 2048, 1, tvm_ffi=tvm_ffi))


# ----- any CuTeDSL submission: its own calls, every cute.compile captured -----

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.e2e
def test_a_foreign_cutedsl_file_is_compiled_for_every_shape_without_a_gpu(tmp_path):
    """The template-style file of the tests: one cute.compile at its first call, then cached."""
    console = Console(record=True, width=250)
    status = checker.run_check(FIXTURES / "template_cutedsl_submission.py", "sm_100a", tmp_path / "sass", console)
    report = console.export_text()
    assert status == 0, report
    assert report.count("stopped at its launch") == len(checker.official_shapes()) == 13
    row = next(line for line in report.splitlines() if "│ gemm " in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells[:4] == ["#0", "gemm", "13", "1"]  # compile 0 served all 13 shapes, one launch
    shape_rows = [line for line in report.splitlines() if re.match(r"│ \d+x\d+x\d+x\d+ ", line)]
    assert len(shape_rows) == 13 and all("│ #0 " in line for line in shape_rows)
    assert int(cells[-4]) > 0 and cells[-1] == "PASS"  # registers, verdict
    assert "COMPILE CHECK PASS (sm_100a)" in report
    assert list((tmp_path / "sass").glob("sm_100a_0_gemm.sass"))


@pytest.mark.e2e  # compiles this kit's kernels for every official shape: minutes on two cores
@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_this_kits_kernel_and_any_other_files_are_counted_under_the_same_instruction_names(arch):
    ours, foreign = {}, {}
    checker.run_check(SUBMISSION, arch, None, Console(record=True, width=250), ours)
    checker.run_check(FIXTURES / "template_cutedsl_submission.py", arch, None, Console(record=True, width=250), foreign)
    names = [instruction.name for instruction in checker.RULES[arch].instructions]
    assert list(ours["shapes"][0]["instructions"]) == list(foreign["kernels"][0]["instructions"]) == names
    assert {need.name for need in checker.RULES[arch].required} <= set(names)
    assert ours["shapes"][0]["shape"] == foreign["shapes"][0]["shape"] == "128x256x256x1"


def test_a_file_that_fails_before_compiling_is_told_about_the_hook(tmp_path):
    needs_a_gpu = tmp_path / "needs_a_gpu.py"
    needs_a_gpu.write_text("import torch\n\ndef custom_kernel(data):\n    torch.cuda.current_device()\n    return data[-1]\n")
    console = Console(record=True, width=300)
    status = checker.run_check(needs_a_gpu, "sm_100a", None, console)
    report = console.export_text()
    assert status == checker.EXIT_CHECK_FAILED
    assert "before any compile (define compile_for_check(m, n, k, l, arch)" in report
    assert "no cute.compile was reached for any shape" in report


def test_another_problems_shapes_and_inputs_are_its_own(tmp_path):
    """--problem nvfp4_group_gemm: its cases (per-group lists), its inputs handed to the file, its
    sizes named in the hook's signature."""
    from harness.problems import PROBLEMS

    problem = PROBLEMS["nvfp4_group_gemm"]
    needs_a_gpu = tmp_path / "needs_a_gpu.py"
    needs_a_gpu.write_text("import torch\n\ndef custom_kernel(data):\n    assert len(data[0]) == len(data[3])\n"
                           "    torch.cuda.current_device()\n")
    console = Console(record=True, width=300)
    status = checker.run_check(needs_a_gpu, "sm_100a", None, console, problem=problem)
    report = console.export_text()
    assert status == checker.EXIT_CHECK_FAILED
    assert len(checker.official_shapes(problem)) == 14
    assert "M x N x K x G" in report and "m64..248 n4096 k7168 g8" in report
    assert "before any compile (define compile_for_check(m, n, k, g, arch)" in report


@pytest.mark.parametrize("source, cause", [
    ("import torch\n\ndef custom_kernel(data)\n    return data[-1]\n", "SyntaxError: expected ':' ({path}, line 3)"),
    ("import torch\n\ndef kernel(data):\n    return data[-1]\n", "AttributeError: the submission defines no callable custom_kernel"),
])
def test_a_file_that_cannot_be_loaded_gets_a_fail_verdict_naming_the_cause(harness_in_process, tmp_path, source, cause):
    broken = tmp_path / "broken.py"
    broken.write_text(source)
    result = harness_in_process("compile", "--arch", "sm_100a", "--submission", str(broken))
    assert result.returncode == checker.EXIT_CHECK_FAILED
    shown = result.stdout + result.stderr
    assert shown.splitlines()[-1] == f"COMPILE CHECK FAIL: {broken} cannot be loaded: {cause.format(path=broken)}"
    assert "click" not in shown and "importlib" not in shown and "harness/" not in shown and "runner-" not in shown


def test_what_a_file_raises_is_shown_without_escapes_and_under_its_own_path(tmp_path):
    coloured = tmp_path / "coloured.py"
    coloured.write_text("def custom_kernel(data):\n    raise ValueError('\\x1b[31mno tile fits\\x1b[0m in ' + __file__)\n")
    console = Console(record=True, width=400)
    assert checker.run_check(coloured, "sm_100a", None, console) == checker.EXIT_CHECK_FAILED
    report = console.export_text(styles=False)
    assert f"raised ValueError: no tile fits in {coloured} before any compile" in report
    assert "\x1b" not in report and "runner-" not in report


@pytest.mark.e2e
def test_the_hook_replaces_custom_kernel_and_reports_what_it_compiled(tmp_path):
    hooked = tmp_path / "hooked.py"
    source = (FIXTURES / "template_cutedsl_submission.py").read_text()
    hooked.write_text(source + "\n\ndef compile_for_check(m, n, k, l, arch):\n    compiled_gemm()\n")
    console = Console(record=True, width=250)
    status = checker.run_check(hooked, "sm_90a", None, console)
    report = console.export_text()
    assert status == 0, report
    assert report.count("compile_for_check returned") == 13
    assert "COMPILE CHECK PASS (sm_90a)" in report


def test_capture_reads_the_sm100_kernels_shared_and_tensor_memory_from_its_artifacts():
    """The facts the check reads for a foreign kernel (launch smem from the host code, TMEM
    columns from the PTX) agree with what this kit's kernel says of itself."""
    from harness.submitting.compile_capture import capturing_compiles, launch_smem_bytes, tmem_columns

    config = sub.Sm100Gemm.config_for(sub.Problem(128, 7168, 16384, 1))
    with capturing_compiles("sm_100a") as capture:  # the artifacts live as long as the capture
        _, kernel = sub.Sm100Gemm.compile(config, "sm_100a", tvm_ffi=False)
        record = capture.compiles[-1]
        assert launch_smem_bytes(record.host_ir) == [kernel.launch_smem_bytes]
        assert tmem_columns(record.ptx) == config.tmem_columns == 512


@pytest.mark.parametrize("pdl", [True, False], ids=["pdl", "conservative"])
def test_the_sm100_kernel_waits_for_the_previous_grid_only_with_pdl(pdl):
    """With PDL the TMA warp lets the next grid launch at once and the epilogue waits for the
    previous grid before its first store; the conservative configuration has neither."""
    config = sub.Sm100Config(mma_n=128, split_k=2, stages=6, pdl=pdl)
    ptx = _ptx(config)
    expected = 1 if pdl else 0
    assert ptx.count("griddepcontrol.launch_dependents") == expected
    assert ptx.count("griddepcontrol.wait") == expected
    assert ("PDL on" if pdl else "PDL off") in config.describe()


@functools.cache
def _ptx(config: sub.Sm100Config) -> str:
    """The PTX of `config`'s sm_100a kernel, compiled once a test process: the tests that read a
    configuration's PTX share it (seconds of compile each)."""
    from harness.submitting.compile_capture import capturing_compiles

    with capturing_compiles("sm_100a") as capture:
        sub.Sm100Gemm.compile(config, "sm_100a", tvm_ffi=False)
        return capture.compiles[-1].ptx


ARRIVAL = re.compile(r"atom\.global(?:\.relaxed)?(?:\.gpu)?\.add\.u32\s+%r\d+, \[(%rd\d+)\], 1;")


def test_one_relaxed_count_between_a_release_and_an_acquire_fence():
    """A split's arrival is one relaxed atomic add: a warp barrier and lane 0's fence before
    it (release), and, for the last arrival, lane 0's fence and a warp barrier before the first
    load of another split's partial (acquire); the last arrival resets the counter."""
    ptx = _ptx(sub.Sm100Config(mma_n=128, split_k=2, stages=6))
    assert re.findall(r"atom\.global[.\w]*\.(max|add|exch)\.", ptx) == ["add", "exch"]
    assert "acq_rel.add" not in ptx and "acquire.add" not in ptx and "release.add" not in ptx
    count = ARRIVAL.search(ptx)
    assert count, "no relaxed 32-bit count of an arrival"
    ordering = r"\b(bar\.warp\.sync|fence\.acq_rel\.gpu|ld\.global|st\.global|atom\.global)\b"
    before = re.findall(ordering, ptx[:count.start()])
    assert before[-3:] == ["st.global", "bar.warp.sync", "fence.acq_rel.gpu"], before[-6:]
    after = re.findall(ordering, ptx[count.end():])
    assert after[:3] == ["fence.acq_rel.gpu", "bar.warp.sync", "ld.global"], after[:6]
    assert re.search(rf"atom\.global(?:\.relaxed)?(?:\.gpu)?\.exch\.b32\s+%r\d+, \[{re.escape(count.group(1))}\], 0;",
                     ptx[count.end():])


@pytest.mark.parametrize("mma_n, stages", [(128, 6), (64, 8)])
def test_the_last_split_loads_partials_ahead_of_the_subtile_it_adds(mma_n, stages):
    """After the acquire, the last arrival's loads of `partials_ahead` subtiles' partials all
    come before its first accumulator load: with two splits, two subtiles of the other split's;
    with four (whose partials of one subtile fill the register budget), one subtile of each of
    the three others."""
    def loads_before_first_accumulator_load(config):
        ptx = _ptx(config)
        acquired = ptx.index("fence.acq_rel.gpu", ARRIVAL.search(ptx).end())
        reduction = ptx[acquired:ptx.index("tcgen05.ld", acquired)]
        return len(re.findall(r"\bld\.global\b", reduction))

    two, four = sub.Sm100Config(mma_n, 2, stages), sub.Sm100Config(mma_n, 4, stages)
    assert (two.partials_ahead, four.partials_ahead) == (2, 0)  # SM100_PARTIAL_REGISTERS' worth
    one_subtile_of_one_split = loads_before_first_accumulator_load(four) / 3
    assert one_subtile_of_one_split > 0
    assert loads_before_first_accumulator_load(two) == 2 * one_subtile_of_one_split


def test_two_ctas_an_sm_fit_in_its_registers_and_shared_memory():
    """The benchmarks' two-CTA configuration: within the registers two CTAs' threads leave
    each, the shared memory the host side counts (dynamic as launched, static as the cubin
    holds) and the tensor-memory columns it allocates twice within an SM's, no spills."""
    problem = sub.Problem(128, 7168, 2048, 1)
    config = sub.sm100_config(problem)
    assert config.ctas_per_sm == 2

    class Pinned(sub.Sm100Gemm):
        @classmethod
        def config_for(cls, problem, num_sms=sub.SM100_NUM_SMS):
            return config

    result = checker.check_config(Pinned, problem, "sm_100a", checker.RULES["sm_100a"], None)
    assert not result.failures, result.failures
    assert "2 CTAs an SM" in result.config
    # Registers are allocated a warp at a time in units of 256 (8 a thread): two CTAs of 6
    # warps fit the SM's 65,536 up to 168 a thread.
    assert -(-result.registers // 8) * 8 * 2 * sub.Sm100BlockScaledGemm.THREADS <= 65536
    assert 2 * result.tmem_columns <= sub.SM100_TMEM_COLUMNS
    assert result.static_smem == sub.SM100_STATIC_SMEM_BYTES
    assert result.dynamic_smem == config.smem_bytes
    assert 2 * (result.dynamic_smem + result.static_smem + sub.SM100_SMEM_RESERVED) <= sub.SM100_SMEM_PER_SM


def _carveout(compiled) -> int | None:
    """The preferred shared-memory carveout the compiled kernel sets as it loads: a function
    attribute CuTeDSL 4.5 keeps beside the module, the kernel's `cu_attrs` in 4.8's module."""
    from cuda.bindings import driver

    (attributes,) = compiled.kernel_info.values()
    carveout = attributes.get(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)
    found = re.findall(r"preferred_shared_memory_carveout = (\d+)", str(compiled.ir_module))
    return carveout if carveout is not None else (int(found[0]) if found else None)


@pytest.mark.parametrize("launch_bound", [1, 2])
def test_the_launch_of_two_ctas_an_sm_sets_the_carveout_that_holds_both(launch_bound, monkeypatch):
    """The launch plans compile a two-CTA configuration with a launch bound of two: the kernel
    then carries a carveout that holds two CTAs' shared memory (the driver rounds it up to a
    size the SM has); with a bound of one (the compile check's) it carries none. The device's
    shared memory an SM, which CuTeDSL reads as it compiles, is the B200's here."""
    import cutlass.base_dsl.runtime.cuda as cuda_helpers

    monkeypatch.setattr(cuda_helpers, "get_device_attribute", lambda attribute, *args: sub.SM100_SMEM_PER_SM)
    config = sub.sm100_config(sub.Problem(128, 7168, 2048, 1))
    assert config.ctas_per_sm == 2
    compiled, kernel = sub.Sm100Gemm.compile(config, "sm_100a", tvm_ffi=False, launch_bound=launch_bound)
    carveout = _carveout(compiled)
    if launch_bound == 1:
        assert carveout is None
    else:
        assert carveout * sub.SM100_SMEM_PER_SM >= 100 * 2 * kernel.launch_smem_bytes
        assert carveout < 100  # what two CTAs take, not the whole: the rest stays L1


def test_every_lane_fences_its_own_partial_stores_before_the_count(tmp_path):
    """In the SASS: after a split's last partial store, the warp's GPU-scope fence runs
    unbranched (every lane), then the count on lane 0's branch; ptxas compiles the converged
    warp's barrier to nothing, so no lane's stores rely on lane 0's fence alone."""
    config = sub.Sm100Config(mma_n=128, split_k=2, stages=6)

    class Pinned(sub.Sm100Gemm):
        @classmethod
        def config_for(cls, problem, num_sms=sub.SM100_NUM_SMS):
            return config

    checker.check_config(Pinned, sub.Problem(128, 512, 4096, 1), "sm_100a", checker.RULES["sm_100a"], tmp_path)
    (sass,) = [path.read_text() for path in tmp_path.glob("*.sass")]
    instructions = [(int(address, 16), text) for address, text in re.findall(r"/\*([0-9a-f]{4})\*/\s+([^;]*);", sass)]
    count = next(i for i, (_, text) in enumerate(instructions) if text.startswith("ATOMG.E.ADD"))
    last_store = max(i for i, (_, text) in enumerate(instructions[:count]) if text.startswith("STG"))
    between = instructions[last_store + 1:count]
    fence = next(i for i, (_, text) in enumerate(between) if text.startswith("MEMBAR.ALL.GPU"))

    def forward_branches(part):  # a loop's back edge jumps back; one that skips the fence, forward
        return [text for address, text in part
                if (target := re.search(r"\bBRA\b.*\b0x([0-9a-f]+)", text)) and int(target.group(1), 16) > address]

    assert forward_branches(between[:fence]) == [], between[:fence + 1]
    assert forward_branches(between[fence:]), "the count is not on one lane's branch"


def test_the_kernel_refuses_a_tensor_memory_allocation_its_tensors_overrun(monkeypatch):
    """The kernel places the accumulators, SFA and SFB by their layouts' spans; a configuration
    that allocates fewer columns than they take fails as it compiles, not on the chip."""
    config = sub.Sm100Config(mma_n=128, split_k=1, stages=6)
    monkeypatch.setattr(sub.Sm100Config, "tmem_columns", property(lambda self: 256))  # 256 + 16 + 16 needed
    with pytest.raises(ValueError, match=r"tensor memory takes 288 columns \(256 accumulator, 16 SFA, 16 SFB\), 256 allocated"):
        sub.Sm100Gemm.compile(config, "sm_100a", tvm_ffi=False)
