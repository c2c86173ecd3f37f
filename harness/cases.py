"""One case, inside a worker process: generate inputs, call the submission, judge, time."""

import contextlib
import threading

import torch

from harness import baselines, ceilings
from harness.jobs import FAIL, PASS, CaseResult, Job
from harness.stats import StoppingRule, calculate_stats
from harness.timing import L2Flush, synchronize, time_rounds
from harness.verdicts import OUTPUT_INDEX, bits, changed_inputs, check_call, check_calls, clone_data, poison_output, refill_outputs
from reference import generate_input, ref_kernel

SEED_STEP = 42  # the competition adds 42 to the seed before drawing each benchmark input


def _generate(job: Job, seed: int):
    args = {**job.case.args, "seed": seed}
    return generate_input(args["m"], args["n"], args["k"], args["l"], args["seed"], device=job.device)


def _benchmark_seeds(start: int, count: int) -> list[int]:
    return [start + SEED_STEP * (i + 1) for i in range(count)]


def _judged_call(kernel, data, job: Job):
    """Call on a copy (poisoned when strict); returns (output, copy handed in, problem)."""
    handed_in = clone_data(data)
    if job.rules.poison_output:
        poison_output(handed_in)
    threads_before = set(threading.enumerate())
    output = kernel(handed_in)
    problem = None
    if job.rules.strict:
        left = [thread.name for thread in threading.enumerate() if thread not in threads_before and thread.is_alive()]
        if left:
            return output, handed_in, (f"custom_kernel left thread(s) running after it returned ({', '.join(left)}): "
                                       "work that goes on after the call escapes the timing")
    if job.rules.check_inputs_unchanged:
        changed = changed_inputs(data, handed_in)
        if changed:
            problem = f"custom_kernel modified its input(s): {', '.join(changed)}"
    return output, handed_in, problem


def run_test(job: Job, kernel, progress) -> CaseResult:
    device = torch.device(job.device)
    data = _generate(job, job.case.args["seed"])
    synchronize(device)
    progress("calling custom_kernel")
    output, handed_in, problem = _judged_call(kernel, data, job)
    synchronize(device)
    if problem:
        return CaseResult(FAIL, problem)
    progress("checking")
    good, message = check_call(ref_kernel(data), output, handed_in[OUTPUT_INDEX], job.rules.check_dtype_and_shape)
    return CaseResult(PASS if good else FAIL, message)


def _correctness_pass(kernel, data_list, expected, job: Job) -> str | None:
    outputs, handed_cs = [], []
    for index, data in enumerate(data_list):
        output, handed_in, problem = _judged_call(kernel, data, job)
        if problem:
            return f"input {index}: {problem}"
        outputs.append(output)
        handed_cs.append(handed_in[OUTPUT_INDEX])
    synchronize(torch.device(job.device))
    good, message = check_calls(expected, outputs, handed_cs, job.rules.strict)
    return None if good else message


def _fresh_recheck(kernel, data_list, job: Job, next_seed: int) -> str | None:
    """New values written into the very tensors the kernel was timed on, then all calls checked.

    A kernel that keys a cache on tensor addresses, shapes or call counts returns stale output.
    """
    device = torch.device(job.device)
    seeds = _benchmark_seeds(next_seed, len(data_list))
    expected = []
    for data, seed in zip(data_list, seeds):
        fresh = _generate(job, seed)
        for old, new in zip(data, fresh):
            bits(old).copy_(bits(new))
        expected.append(ref_kernel(fresh))
        poison_output(data)
    outputs = [kernel(data) for data in data_list]
    synchronize(device)
    good, message = check_calls(expected, outputs, [data[OUTPUT_INDEX] for data in data_list], strict=True)
    return None if good else f"recheck on fresh inputs: {message}"


def _round_checker(expected, data_list, job: Job):
    cs = [data[OUTPUT_INDEX] for data in data_list]
    if job.rules.recheck_every_output:
        def check(outputs):
            good, message = check_calls(expected, outputs, cs, strict=True)
            return None if good else f"recheck: {message}"
    else:
        def check(outputs):
            # The competition's loop checks every output but keeps only the last verdict.
            good, message = check_call(expected[-1], outputs[-1], cs[-1], strict=False)
            return None if good else message
    return check


def run_benchmark(job: Job, kernel, progress) -> CaseResult:
    device = torch.device(job.device)
    seeds = _benchmark_seeds(job.case.args["seed"], job.inputs_per_case)
    progress("generating inputs")
    data_list = [_generate(job, seed) for seed in seeds]
    check_copy = [clone_data(data) for data in data_list]
    expected = [ref_kernel(data) for data in check_copy]

    progress("correctness pass")
    problem = _correctness_pass(kernel, data_list, expected, job)
    if problem:
        return CaseResult(FAIL, problem)

    flush = L2Flush(device)
    if job.warmup:
        progress("warm-up")
        time_rounds(kernel, data_list, StoppingRule(*job.warmup), flush, device,
                    on_round=lambda where: progress(f"warm-up, {where}"))

    check_round = _round_checker(expected, data_list, job) if job.recheck else None
    measurement = time_rounds(
        kernel, data_list, StoppingRule(*job.run), flush, device, check_round,
        on_round=lambda where: progress(f"timing, {where}"),
        before_round=(lambda index: refill_outputs(data_list, index)) if job.rules.strict else None,
    )
    if measurement.error:
        return CaseResult(FAIL, measurement.error)
    if job.rules.strict and not job.recheck:  # the leaderboard checked every round already
        good, message = check_calls(expected, measurement.last_outputs, [data[OUTPUT_INDEX] for data in data_list], strict=True)
        if not good:
            return CaseResult(FAIL, f"last timed round: {message}")

    if job.rules.check_inputs_unchanged:
        for index, (original, now) in enumerate(zip(check_copy, data_list)):
            changed = changed_inputs(original, now)
            if changed:
                return CaseResult(FAIL, f"input {index}: custom_kernel modified its input(s) while timed: {', '.join(changed)}")
    if job.rules.recheck_fresh_inputs:
        progress("recheck on fresh inputs")
        problem = _fresh_recheck(kernel, data_list, job, seeds[-1])
        if problem:
            return CaseResult(FAIL, problem)

    result = CaseResult(
        PASS,
        stats=calculate_stats(measurement.durations_ns),
        # On the CPU the round's wall time is the time of the calls: no host time apart from it.
        host_ns=sum(measurement.host_ns) / len(measurement.host_ns) if device.type == "cuda" else None,
        flush=flush.description,
    )
    if job.baselines:
        result.baselines = _time_baselines(job, data_list, flush, progress)
    return result


def _time_baselines(job: Job, data_list, flush, progress) -> dict:
    device = torch.device(job.device)
    timed = {}
    progress("baseline: cuBLAS bf16 on dequantized operands")
    operands = [baselines.dequantized_operands(data) for data in data_list]
    measurement = time_rounds(baselines.cublas_matmul, operands, StoppingRule(*job.run), flush, device)
    timed["cublas_bf16"] = calculate_stats(measurement.durations_ns)
    del operands
    progress("baseline: torch dequantize + matmul")
    measurement = time_rounds(baselines.torch_dequantize_matmul, data_list, StoppingRule(*job.run), flush, device)
    timed["torch_dequant_matmul"] = calculate_stats(measurement.durations_ns)
    if device.type == "cuda":
        try:
            empty_call = baselines.EmptyCuteDslCall()
        except ImportError:  # no CuTeDSL here: the table shows no host floor
            return timed
        progress(f"baseline: host time of an empty CuTeDSL kernel's call ({empty_call.call_path})")
        arguments = [empty_call.arguments(data) for data in data_list]
        for each in arguments:  # untimed: the first call loads the kernel's module
            empty_call(each)
        synchronize(device)
        measurement = time_rounds(empty_call, arguments, StoppingRule(*job.run), flush, device)
        timed["empty_cutedsl_call_host"] = calculate_stats(measurement.host_ns)
    return timed


def nvtx_range_for(device: torch.device):
    """NVTX ranges let ncu/nsys find the call (`--nvtx-include custom_kernel/`); CPU builds lack them."""
    return torch.cuda.nvtx.range if device.type == "cuda" else lambda name: contextlib.nullcontext()


def run_profile(job: Job, kernel, progress) -> CaseResult:
    device = torch.device(job.device)
    nvtx_range = nvtx_range_for(device)
    with nvtx_range("generate input"):
        data = _generate(job, job.case.args["seed"])
        synchronize(device)
    handed_in = clone_data(data)
    if job.ncu:
        # One call before the range, so that first-call work (compiling, a submission timing its
        # candidate configs: hundreds of launches, each replayed by ncu) stays out of the profile.
        progress("first call, outside the profiled range")
        kernel(clone_data(data))
        synchronize(device)
        with nvtx_range("custom_kernel"):
            kernel(handed_in)
            synchronize(device)
        return CaseResult(PASS)
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        with nvtx_range("custom_kernel"):
            kernel(handed_in)
            synchronize(device)
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return CaseResult(PASS, report=profiler.key_averages().table(sort_by=sort_by, row_limit=20))


def run_ceilings(job: Job, kernel, progress) -> CaseResult:
    progress("measuring copy bandwidth and bf16 matmul peak")
    return CaseResult(PASS, ceilings=ceilings.measure(torch.device(job.device)))


RUNNERS = {"test": run_test, "benchmark": run_benchmark, "profile": run_profile, "ceilings": run_ceilings}
