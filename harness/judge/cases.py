"""One case, judged: inputs drawn here from the seeds, the submission called in the worker on
memory the judge shares with it, every verdict reached here.

The judge keeps a pristine copy of every input and the reference output; the worker sees only
the tensors it is handed. What the calls wrote is read from the judge's own mapping of that
memory, so nothing the submission changes in its process (a checker, a reference, a generator)
touches a verdict. The times come from the worker's events; the verification round sets them
against the GPU activity CUPTI recorded (harness/judge/activity.py).
"""

import dataclasses

import torch

from harness import wire
from harness.jobs import FAIL, PASS, CaseResult, Job
from harness.judge import activity
from harness.judge.isolation import WorkerProcess
from harness.judge.verdicts import (OUTPUT_INDEX, beyond_the_competition, bits, check_call, check_calls, clone_data,
                                    first_changed_inputs, poison_output, refill_outputs, threads_left)
from harness.runner.timing import synchronize
from harness.stats import StoppingRule, calculate_stats
from reference import generate_input, ref_kernel

SEED_STEP = 42  # the competition adds 42 to the seed before drawing each benchmark input
TIMED = "timed"  # the name under which the worker holds the timed inputs
HANDED = "handed"  # ... and the copies handed to single checked calls


def _generate(job: Job, seed: int):
    args = {**job.case.args, "seed": seed}
    return generate_input(args["m"], args["n"], args["k"], args["l"], args["seed"], device=job.device)


def _benchmark_seeds(start: int, count: int) -> list[int]:
    return [start + SEED_STEP * (i + 1) for i in range(count)]


def _hold(worker: WorkerProcess, name: str, data_list: list, device: torch.device) -> None:
    synchronize(device)  # what the judge wrote is in memory before the worker reads it
    worker.request("hold", name, data_list)


def _outputs(specs: list, held: list) -> list:
    return [wire.rebuild(spec, held) for spec in specs]


def _checked_calls(worker: WorkerProcess, data_list: list, expected: list, job: Job, check_copy: list,
                   result: CaseResult | None = None) -> str | None:
    """Each of `data_list` (handed copies, c poisoned when strict) called once and judged; with
    `result`, the calls' GPU activity is recorded and judged too (activity on it)."""
    device = torch.device(job.device)
    if job.rules.poison_output:
        for data in data_list:
            poison_output(data)
    _hold(worker, HANDED, data_list, device)
    replies, records = worker.request("call", HANDED, result is not None)
    worker.request("release", HANDED)
    many = len(data_list) > 1
    for index, (_, left) in enumerate(replies):
        problem = threads_left(left) if job.rules.strict else None
        if problem:
            return f"input {index}: {problem}" if many else problem
    if job.rules.check_inputs_unchanged:
        changed = first_changed_inputs(check_copy, data_list)
        if changed:
            index, names = changed
            problem = f"custom_kernel modified its input(s): {names}"
            return f"input {index}: {problem}" if many else problem
    if records is not None:
        problem = _judge_activity(records, None, len(data_list), job, result)
        if problem:
            return problem
    outputs = _outputs([spec for spec, _ in replies], data_list)
    cs = [data[OUTPUT_INDEX] for data in data_list]
    if many:
        good, message = check_calls(expected, outputs, cs, job.rules.strict)
    else:
        good, message = check_call(expected[0], outputs[0], cs[0], job.rules.check_dtype_and_shape)
    return None if good else message


def _judge_activity(records: list, event_ns_per_call: float | None, calls: int, job: Job, result: CaseResult) -> str | None:
    """The recorded GPU activity's problem, if any (the competition records none)."""
    problem, result.activity = activity.judge_round(records, event_ns_per_call, calls)
    return beyond_the_competition(problem, job.rules.strict, result)


def run_test(job: Job, worker: WorkerProcess, progress) -> CaseResult:
    data = _generate(job, job.case.args["seed"])
    expected = ref_kernel(clone_data(data))
    progress("calling custom_kernel")
    result = CaseResult(PASS)
    problem = _checked_calls(worker, [clone_data(data)], [expected], job, [data], result)
    if problem:
        result.status, result.message = FAIL, problem
    return result


@dataclasses.dataclass
class Measurement:
    durations_ns: list[float]  # per call, one value per round
    host_ns: list[float]  # host time of one call, one value per round
    error: str = ""  # set when a round's check failed; timing stopped there


def _time_rounds(worker: WorkerProcess, data_list: list, rule: StoppingRule, on_round, before_round=None, check_round=None) -> Measurement:
    """Timed rounds in the worker until `rule` stops them; between rounds the judge may rewrite
    the outputs (`before_round`) and check what a round returned (`check_round`)."""
    device = data_list[0][0].device
    measurement = Measurement([], [])
    started = rule.start()
    while True:
        if before_round is not None:
            before_round(len(measurement.durations_ns))
            synchronize(device)
        duration_ns, host_ns, specs = worker.request("timed_round", TIMED)
        measurement.durations_ns.append(duration_ns)
        measurement.host_ns.append(host_ns)
        last = rule.should_stop(measurement.durations_ns, started)
        if check_round is not None:
            problem = check_round(_outputs(specs, data_list), last)
            if problem:
                measurement.error = problem
                return measurement
        on_round(rule.progress(measurement.durations_ns, started))
        if last:
            return measurement


def _round_checker(expected, data_list, job: Job):
    """Check of a timed round's outputs, given whether it is the last: the leaderboard checks
    every round; strict benchmark checks the last (its c were refilled with a value no answer
    has, so a kernel that skips calls it takes for unchecked is seen)."""
    cs = [data[OUTPUT_INDEX] for data in data_list]
    if job.recheck and not job.rules.recheck_every_output:
        def check(outputs, last):
            # The competition's loop checks every output but keeps only the last verdict.
            good, message = check_call(expected[-1], outputs[-1], cs[-1], strict=False)
            return None if good else message
        return check
    if not job.recheck and not job.rules.strict:
        return None

    def check(outputs, last):
        if not (job.recheck or last):
            return None
        good, message = check_calls(expected, outputs, cs, strict=True)
        return None if good else f"{'recheck' if job.recheck else 'last timed round'}: {message}"
    return check


def _fresh_inputs(job: Job, count: int, next_seed: int) -> tuple[list, list]:
    """(inputs, references) from the seeds after the timed ones, for the recheck."""
    fresh = [_generate(job, seed) for seed in _benchmark_seeds(next_seed, count)]
    return fresh, [ref_kernel(data) for data in fresh]


def _fresh_recheck(worker: WorkerProcess, data_list, fresh: list, expected: list, device: torch.device) -> str | None:
    """New values written into the very tensors the kernel was timed on, then all calls checked.

    A kernel that keys a cache on tensor addresses, shapes or call counts returns stale output.
    """
    for data, new in zip(data_list, fresh):
        for old, value in zip(data, new):
            bits(old).copy_(bits(value))
        poison_output(data)
    synchronize(device)
    replies, _ = worker.request("call", TIMED)
    good, message = check_calls(expected, _outputs([spec for spec, _ in replies], data_list),
                                [data[OUTPUT_INDEX] for data in data_list], strict=True)
    return None if good else f"recheck on fresh inputs: {message}"


def _ask_verification_round(worker: WorkerProcess, data_list, device: torch.device) -> None:
    """One more round with its GPU activity recorded, its c refilled first. The reply is
    collected by `_judge_verification_round`: the judge draws the recheck's inputs meanwhile."""
    refill_outputs(data_list, -1)
    synchronize(device)
    worker.ask("verification_round", TIMED)


def _judge_verification_round(worker: WorkerProcess, data_list, expected, job: Job, result: CaseResult) -> str | None:
    """The recorded round's kernels' queues and times judged, its outputs checked."""
    duration_ns, specs, records = worker.reply()
    problem = _judge_activity(records, duration_ns, len(data_list), job, result)
    if problem:
        return problem
    good, message = check_calls(expected, _outputs(specs, data_list), [data[OUTPUT_INDEX] for data in data_list], strict=True)
    return None if good else beyond_the_competition(f"verification round: {message}", job.rules.strict, result)


def run_benchmark(job: Job, worker: WorkerProcess, progress) -> CaseResult:
    device = torch.device(job.device)
    seeds = _benchmark_seeds(job.case.args["seed"], job.inputs_per_case)
    progress("generating inputs")
    data_list = [_generate(job, seed) for seed in seeds]
    check_copy = [clone_data(data) for data in data_list]
    expected = [ref_kernel(data) for data in check_copy]  # writes only c, which no check compares

    progress("correctness pass")
    problem = _checked_calls(worker, [clone_data(data) for data in data_list], expected, job, check_copy)
    if problem:
        return CaseResult(FAIL, problem)

    _hold(worker, TIMED, data_list, device)
    if job.warmup:
        progress("warm-up")
        _time_rounds(worker, data_list, StoppingRule(*job.warmup), on_round=lambda where: progress(f"warm-up, {where}"))

    measurement = _time_rounds(
        worker, data_list, StoppingRule(*job.run),
        on_round=lambda where: progress(f"timing, {where}"),
        before_round=(lambda index: refill_outputs(data_list, index)) if job.rules.strict else None,
        check_round=_round_checker(expected, data_list, job),
    )
    worker.timing_done()
    if measurement.error:
        return CaseResult(FAIL, measurement.error)

    result = CaseResult(
        PASS,
        stats=calculate_stats(measurement.durations_ns),
        # On the CPU the round's wall time is the time of the calls: no host time apart from it.
        host_ns=sum(measurement.host_ns) / len(measurement.host_ns) if device.type == "cuda" else None,
    )
    if job.rules.check_inputs_unchanged:
        changed = first_changed_inputs(check_copy, data_list)
        if changed:
            return CaseResult(FAIL, f"input {changed[0]}: custom_kernel modified its input(s) while timed: {changed[1]}")
    if device.type == "cuda":
        progress("verification round (CUPTI)")
        _ask_verification_round(worker, data_list, device)
    fresh = _fresh_inputs(job, len(data_list), seeds[-1]) if job.rules.recheck_fresh_inputs else None
    if device.type == "cuda":
        problem = _judge_verification_round(worker, data_list, expected, job, result)
        if problem:
            return CaseResult(FAIL, problem, activity=result.activity)
    if fresh is not None:
        progress("recheck on fresh inputs")
        problem = _fresh_recheck(worker, data_list, *fresh, device)
        if problem:
            return CaseResult(FAIL, problem)
    if job.baselines:
        progress("baselines")
        result.baselines = {name: calculate_stats(values)
                            for name, values in worker.request("time_baselines", TIMED, job.run).items()}
    result.flush = worker.request("flush_description")
    return result


def run_profile(job: Job, worker: WorkerProcess, progress) -> CaseResult:
    data = _generate(job, job.case.args["seed"])
    _hold(worker, HANDED, [data], torch.device(job.device))
    return CaseResult(PASS, report=str(worker.request("profile", HANDED, job.ncu)))


def run_ceilings(job: Job, worker: WorkerProcess, progress) -> CaseResult:
    measured = worker.request("measure_ceilings")
    return CaseResult(PASS, ceilings={"peak_flops": float(measured["peak_flops"]), "bandwidth": float(measured["bandwidth"]),
                                      "source": str(measured["source"])})


RUNNERS = {"test": run_test, "benchmark": run_benchmark, "profile": run_profile, "ceilings": run_ceilings}
