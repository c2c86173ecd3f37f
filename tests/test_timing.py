import contextlib
import dataclasses
import time

import pytest
import torch

from harness.judge import cases
from harness.judge.jobs import Job, Rules
from harness.judge.memory import SharedPool
from harness.judge.rounds import Calibration, JudgeClock, Round
from harness.judge.verdicts import bits
from harness.problems import BETTER_BENCH, PLAIN_EVAL, PROBLEMS
from harness.runner.timing import time_rounds
from harness.shared.l2_flush import L2Flush, flush_bytes
from reference import ref_kernel
from harness.problems.shapes import parse_cases
from harness.shared.stats import StoppingRule
from harness.shared.wire import returned, storage_index

CPU = torch.device("cpu")
COMPETITION_FLUSH_BYTES = BETTER_BENCH.flush_bytes  # 64 GB: the better-bench evals'


def gemm_with_batches_of(calls: int, eval_parameters=BETTER_BENCH, **changes):
    """nvfp4_gemm with `calls` inputs per timed batch (quick rounds on the CPU), under
    `eval_parameters` with `changes`."""
    return dataclasses.replace(PROBLEMS["nvfp4_gemm"],
                               eval=dataclasses.replace(eval_parameters, calls_per_batch=calls, **changes))


def test_rounds_time_every_input_and_stop_at_the_cap():
    calls = []
    durations_ns, host_ns = time_rounds(lambda x: calls.append(x) or x, list(range(5)), StoppingRule(4, 1e12),
                                        L2Flush(CPU, COMPETITION_FLUSH_BYTES), CPU)
    assert len(durations_ns) == 4 == len(host_ns)
    assert calls == list(range(5)) * 4
    assert all(d > 0 for d in durations_ns)


class ScriptedWorker:
    """Stands in for a worker process on the CPU, speaking the judge's requests: each batch calls
    `kernel(round index, data)` on every held input, returns c as a view of the shared memory,
    and says it took `claimed_ns`; `after_reply` runs when the judge asks for the batch's time,
    that is after the reply, as work a submission leaves running would."""

    def __init__(self, kernel, claimed_ns=1000.0, after_reply=None, sleep_s=0.0):
        self.kernel, self.claimed_ns, self.after_reply, self.sleep_s = kernel, claimed_ns, after_reply, sleep_s
        self.rounds, self.held = 0, None
        self.opened = None  # the judge maps no own CUDA output of this stand-in
        self.events = []  # ("time limit", seconds) and each request's operation, in order

    pids: set = set()
    alive = True

    def begin_case(self, timeout_s, on_progress):
        self.events.append(("time limit", timeout_s))
        return False

    def paused(self, keep):
        return contextlib.nullcontext()

    def add_time(self, seconds):
        self.events.append(("time added", seconds))

    def request(self, operation, *arguments):
        self.events.append(operation)
        if operation == "hold":
            self.held = arguments[1]
            self.storages = storage_index(self.held)
            return len(self.held)
        if operation == "run_batch":
            time.sleep(self.sleep_s)
            for data in self.held:
                self.kernel(self.rounds, data)
            self.rounds += 1
            return [returned(data[6], self.storages) for data in self.held], 10.0
        if operation == "batch_time":
            if self.after_reply is not None:
                self.after_reply(self.held)
            return self.claimed_ns * len(self.held), None
        return None  # load, return_own_outputs, release


@pytest.fixture(autouse=True)
def no_probes_unless_asked(monkeypatch):
    monkeypatch.setattr(cases, "PROBE_CHANCE", 0.0)
    monkeypatch.setattr(cases, "FIRST_PROBE_WITHIN", 0)


NO_FIXED_COST = Calibration({(own, exposed): 0.0 for own in (False, True) for exposed in (False, True)}, spread_ns=0.0, flush_ns=None,
                            longest_flush_ns=None)


def _judging(worker, partner=None):
    return cases.Judging(worker, partner or ScriptedWorker(lambda index, data: None), JudgeClock(CPU, COMPETITION_FLUSH_BYTES),
                         SharedPool(CPU), progress=lambda text: None)


def _case(worker, strict=True, count=3, recheck=False, problem=None):
    job = Job("benchmark", parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 5")[0], device="cpu",
              rules=Rules(strict=strict), recheck=recheck, problem=problem or gemm_with_batches_of(count))
    return cases.BenchmarkCase(job, _judging(worker))


def _answering(case, wrong_in_round=None):
    def kernel(round_index, data):
        index = next(i for i, shared in enumerate(case.shared) if shared[6].data_ptr() == data[6].data_ptr())
        data[6].copy_(case.expected[index] + (1 if round_index == wrong_in_round else 0))
    return kernel


def test_every_timed_round_is_checked_by_default():
    worker = ScriptedWorker(None)
    case = _case(worker)
    worker.kernel = _answering(case, wrong_in_round=2)
    problem = cases._time_rounds(case, StoppingRule(5, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None)
    assert problem.startswith("timed round: ") and "mismatch" in problem and worker.rounds == 3


def test_the_competitions_benchmark_checks_no_timed_round():
    worker = ScriptedWorker(None)
    case = _case(worker, strict=False)
    worker.kernel = _answering(case, wrong_in_round=2)
    assert cases._time_rounds(case, StoppingRule(5, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None) is None
    assert worker.rounds == 5


def test_a_round_whose_calls_write_nothing_fails_on_the_refill():
    worker = ScriptedWorker(None)
    case = _case(worker)
    answering = _answering(case)
    worker.kernel = lambda round_index, data: answering(round_index, data) if round_index == 0 else None
    problem = cases._time_rounds(case, StoppingRule(5, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None)
    assert problem.startswith("timed round: ") and worker.rounds == 2


def test_outputs_written_after_the_reply_are_missing_from_the_judges_copy():
    worker = ScriptedWorker(lambda round_index, data: None)
    case = _case(worker)
    answering = _answering(case)
    worker.after_reply = lambda held: [answering(0, data) for data in held]
    round_ = case.round()
    assert all(torch.equal(copy, shared[6]) is False for copy, shared in zip(round_.outputs, case.shared))
    assert cases._value_problem(round_, case.expected, case.pristine, case.shared, case.job) is not None


def test_the_judges_clock_is_its_own_on_the_cpu():
    """A worker that claims a microsecond per call but holds the reply for 50 ms is timed at 50 ms."""
    worker = ScriptedWorker(lambda round_index, data: None, claimed_ns=1000.0, sleep_s=0.05)
    case = _case(worker)
    round_ = case.round()
    assert round_.worker_ns == 1000.0 * case.calls
    assert round_.window_ns >= 0.05e9


def test_the_partners_rounds_give_the_fixed_cost_and_are_subtracted():
    worker = ScriptedWorker(lambda round_index, data: None, sleep_s=0.01)
    partner = ScriptedWorker(lambda round_index, data: None, sleep_s=0.01)
    job = Job("benchmark", parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 5")[0], device="cpu", problem=gemm_with_batches_of(2))
    case = cases.BenchmarkCase(job, _judging(worker, partner))
    calibration = Calibration.of(case.calibrate(own_kinds=False))
    assert partner.rounds == cases.CALIBRATION_ROUNDS["cpu"] and worker.rounds == 0
    assert calibration.hidden_ns >= 0.01e9
    figures = cases.Figures(calls=case.calls)
    figures.add(case.round())
    assert abs(figures.judged_ns(calibration)[0]) < 0.01e9 / case.calls  # the same sleep, calibrated away


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_cpu_rounds_figure_is_never_below_the_workers_own(device):
    """Windows shorter than the fixed cost (its spread on a busy CPU) give estimates below zero:
    on the CPU each round reports at least the worker's own figure; elsewhere the estimate
    stands as measured."""
    case = type("Case", (), {"device": torch.device(device)})()
    figures = cases.Figures(calls=2)
    for window_ns, worker_ns in ((400e3, 60e3), (560e3, 60e3), (700e3, 80e3)):
        figures.add(Round(window_ns, worker_ns, worker_ns, [], 0.0, None, None))
    calibration = Calibration({(False, True): 500e3}, 50e3, None, None)
    reported = cases._judged_figures(case, figures, calibration)
    assert figures.judged_ns(calibration) == [-50e3, 30e3, 100e3]
    assert reported == ([30e3, 30e3, 100e3] if device == "cpu" else [-50e3, 30e3, 100e3])


def test_each_round_is_charged_the_fixed_cost_of_its_own_hand_over():
    """A worker that returned tensors of its own while the partner calibrated and views while it
    was timed (or the other way round) is charged each round's own kind: no style shown at one
    time moves what another time's rounds are charged."""
    def round_of(own: bool, exposed: bool, window_ns: float):
        return Round(window_ns, 0.0, 0.0, [], own, None, None, exposed=exposed)

    calibration = Calibration.of([round_of(own, exposed, window) for own, exposed, window in
                                  ((False, False, 100.0), (False, True, 150.0), (True, False, 400.0), (True, True, 450.0))])
    assert calibration.fixed_ns(round_of(False, False, 0.0)) == 100.0
    assert calibration.fixed_ns(round_of(False, True, 0.0)) == 150.0
    assert calibration.fixed_ns(round_of(True, True, 0.0)) == 450.0
    views_only = Calibration.of([round_of(False, True, 150.0), round_of(False, False, 100.0)])
    assert views_only.fixed_ns(round_of(True, True, 0.0)) == 150.0  # never more than was measured for it
    assert views_only.hidden_ns == 100.0
    # A round whose calls mixed the two is charged for the hand-overs it made: 40 copies of 50.
    assert calibration.fixed_ns(round_of(0.8, True, 0.0)) == 150.0 + 0.8 * (450.0 - 150.0)


def test_flush_is_the_competitions_size_where_the_device_holds_it():
    """64 GB on a 141 GB H200 or a 180 GB B200, as the competition writes: its GPU time hides the
    host's enqueueing of the timed calls, so a smaller flush would time host overhead it does not."""
    assert COMPETITION_FLUSH_BYTES == 16000 * 1024 * 1024 * 4
    assert flush_bytes(139 * 2**30, COMPETITION_FLUSH_BYTES) == COMPETITION_FLUSH_BYTES
    assert flush_bytes(178 * 2**30, COMPETITION_FLUSH_BYTES) == COMPETITION_FLUSH_BYTES


def test_flush_leaves_half_the_memory_on_a_smaller_device():
    free = 78 * 2**30 + 6  # an 80 GB H100
    size = flush_bytes(free, COMPETITION_FLUSH_BYTES)
    assert size < COMPETITION_FLUSH_BYTES
    assert size % 4 == 0 and free / 2 - 4 < size <= free / 2


def test_a_replay_in_the_timed_rounds_meets_a_probe_among_them(monkeypatch):
    """A kernel that computes in the first round and replays that answer afterwards, at the same
    addresses, fails in the timed rounds: a probe among the first three edits a few bytes of a
    few inputs in the very tensors, and the timed rounds after it get the timed inputs back."""
    monkeypatch.setattr(cases, "FIRST_PROBE_WITHIN", cases.MIN_ROUNDS)
    remembered = {}

    def replaying(round_index, data):
        key = data[6].data_ptr()
        if key not in remembered:
            remembered[key] = ref_kernel(tuple(tensor.clone() for tensor in data)).clone()
        data[6].copy_(remembered[key])

    worker = ScriptedWorker(replaying)
    case = _case(worker)
    problem = cases._time_rounds(case, StoppingRule(20, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None)
    assert problem.startswith("probe on edited inputs among the timed rounds: ")
    assert len(remembered) == case.calls


def test_after_a_probe_the_timed_inputs_are_back(monkeypatch):
    monkeypatch.setattr(cases, "FIRST_PROBE_WITHIN", 1)  # a probe after the first timed round
    worker = ScriptedWorker(lambda round_index, data: data[6].copy_(ref_kernel(tuple(t.clone() for t in data))))
    case = _case(worker)
    assert cases._time_rounds(case, StoppingRule(3, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None) is None
    assert worker.rounds == 4  # three timed rounds and the probe
    assert cases._inputs_problem(case.pristine, case.shared, case.job) is None


@pytest.mark.parametrize("last_only", [True, False])
def test_the_official_leaderboard_judges_the_last_output_only_where_its_eval_does(last_only):
    """Wrong in the first call of every round: the better-bench evals' recheck loop keeps only the
    last call's verdict, and --official reproduces that hole; an eval that kept every verdict
    would fail it."""
    worker = ScriptedWorker(None)
    case = _case(worker, strict=False, recheck=True,
                 problem=gemm_with_batches_of(3, recheck_judges_last_output_only=last_only))
    answering = _answering(case)

    def first_call_wrong(round_index, data):
        answering(round_index, data)
        if data[6].data_ptr() == case.shared[0][6].data_ptr():
            data[6].add_(1)
    worker.kernel = first_call_wrong
    problem = cases._time_rounds(case, StoppingRule(4, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None)
    if last_only:
        assert problem is None and worker.rounds == 4
    else:
        assert problem.startswith("recheck: mismatch found!") and worker.rounds == 1


def test_the_official_leaderboard_of_the_plain_eval_draws_every_round_afresh():
    """eval.py's leaderboard: every timed round on a new draw, its seed 13 past the last's, written
    before the round's flush and checked; a cache keyed on addresses fails there."""
    problem = gemm_with_batches_of(1, PLAIN_EVAL)
    seen = []

    def honest(round_index, data):
        seen.append(bits(data[0]).sum().item())
        data[6].copy_(ref_kernel(tuple(tensor.clone() for tensor in data)))
    worker = ScriptedWorker(honest)
    case = _case(worker, strict=False, recheck=True, problem=problem)
    first_input = bits(case.shared[0][0]).sum().item()
    assert cases._time_rounds(case, StoppingRule(4, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None) is None
    assert len(seen) >= 3 and len(set(seen + [first_input])) == len(seen) + 1  # the rule may stop at 3
    redrawn = problem.generate(case.job.case.args, 5 + len(seen) * 13, "cpu")
    assert torch.equal(bits(case.shared[0][0]), bits(redrawn[0])) and torch.equal(case.expected[0], ref_kernel(redrawn))

    kept = {}

    def caching(round_index, data):
        key = data[6].data_ptr()
        kept.setdefault(key, ref_kernel(tuple(tensor.clone() for tensor in data)).clone())
        data[6].copy_(kept[key])
    worker = ScriptedWorker(caching)
    case = _case(worker, strict=False, recheck=True, problem=problem)
    problem_text = cases._time_rounds(case, StoppingRule(4, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None)
    assert problem_text.startswith("recheck: mismatch found!")
    # Without the leaderboard's recheck (the benchmark) the rounds repeat the case's input.
    worker = ScriptedWorker(caching)
    case = _case(worker, strict=False, problem=problem)
    assert cases._time_rounds(case, StoppingRule(4, 1e12), cases.Figures(), NO_FIXED_COST, on_round=lambda text: None) is None


def test_a_batch_of_one_call_rechecks_with_a_fresh_draw_and_a_near_duplicate_in_turn():
    """nvfp4_gemv's batch is one call, on the case's own seed: its rechecks take parts of a fresh
    draw (the leaderboard's step on, 13) and a near-duplicate of the timed input in turn, each
    drawn once, each with another answer."""
    problem = gemm_with_batches_of(1, PLAIN_EVAL)
    case = _case(ScriptedWorker(None), problem=problem)
    (fresh,), (fresh_reference,) = case.recheck_inputs()
    (near,), (near_reference,) = case.recheck_inputs()
    (again,), _ = case.recheck_inputs()
    drawn = problem.generate(case.job.case.args, 5 + 13, "cpu")
    assert again is fresh
    # Each input of the fresh one the timed input's or the fresh draw's, at least one the draw's.
    sources = [torch.equal(bits(ours), bits(theirs)) for ours, theirs in zip(fresh[:6], drawn[:6])]
    assert any(sources) and all(taken or torch.equal(bits(ours), bits(timed))
                                for taken, ours, timed in zip(sources, fresh, case.pristine[0]))
    changed = [int((bits(new) != bits(old)).sum()) for new, old in zip(near, case.pristine[0])]
    assert 1 <= sum(changed[:6]) and all(count <= 4 for count in changed[:6])  # a few bytes of some parts
    assert changed[2:4] == changed[4:6]  # a scale edited in both layouts alike
    for reference in (fresh_reference, near_reference):
        assert not torch.equal(reference, case.expected[0])


def test_the_time_limit_starts_once_the_judge_has_drawn_and_the_partner_gets_its_own():
    """What the judge spends drawing inputs and references is not the worker's time, and the
    partner's limit starts afresh before each calibration: the judge's own limit never ends it."""
    worker, partner = ScriptedWorker(lambda index, data: None), ScriptedWorker(lambda index, data: None)
    judging = cases.Judging(worker, partner, JudgeClock(CPU, COMPETITION_FLUSH_BYTES), SharedPool(CPU),
                            progress=lambda text: None, time_limit_s=42.0)
    job = Job("benchmark", parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 5")[0], device="cpu", problem=gemm_with_batches_of(2))
    drawn = []
    real_drawn = cases._drawn
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cases, "_drawn", lambda *args: (drawn.append(list(worker.events)), real_drawn(*args))[1])
        case = cases.BenchmarkCase(job, judging)
    assert drawn == [[]]  # nothing asked of the worker, and no limit started, while the judge drew
    partner_limit = max(42.0, cases.PARTNER_TIME_LIMIT_S)
    assert worker.events[:2] == [("time limit", 42.0), "hold"] and partner.events[:2] == [("time limit", partner_limit), "hold"]
    partner.events.clear()
    case.calibrate(own_kinds=False)
    assert partner.events[0] == ("time limit", partner_limit) and "echo" in partner.events


def test_the_judges_own_work_inside_a_case_moves_the_workers_time_limit_on():
    """The calibration (the partner's rounds) and a recheck's draws and references are the
    judge's time, not the submission's: the worker's limit is moved on by at least what each took,
    and the worker's own rounds move it on by nothing."""
    worker, partner = ScriptedWorker(lambda index, data: None), ScriptedWorker(lambda index, data: None, sleep_s=0.002)
    judging = cases.Judging(worker, partner, JudgeClock(CPU, COMPETITION_FLUSH_BYTES), SharedPool(CPU),
                            progress=lambda text: None, time_limit_s=42.0)
    job = Job("benchmark", parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 5")[0], device="cpu", problem=gemm_with_batches_of(2))
    case = cases.BenchmarkCase(job, judging)
    worker.kernel = _answering(case)

    def added():
        moved = [seconds for event, *seconds in worker.events if event == "time added" for seconds in seconds]
        worker.events.clear()
        return moved

    added()
    case.calibrate(own_kinds=False)
    (calibration,) = added()
    assert calibration >= cases.CALIBRATION_ROUNDS["cpu"] * partner.sleep_s
    real_generate = cases._generate
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cases, "_generate", lambda *args: (time.sleep(0.05), real_generate(*args))[1])
        case.recheck_inputs()
    (recheck,) = added()
    assert recheck >= 2 * 0.05  # a draw for each of the batch's two calls
    case.plain_round()
    assert added() == []


def _flush_round(flush_ms: float, queues: tuple = ("stream 7 of cuda:0",)) -> Round:
    records = [("spin_kernel", queues[0], 0, 1000)] + [("gemm", queue, 2000, 9000) for queue in queues]
    return Round(window_ns=1e6, worker_ns=1e6, host_ns=1e5, outputs=[], own_share=0.0, records=records,
                 flush_ns=flush_ms * 1e6)


@pytest.mark.parametrize("strict", [True, False])
def test_a_flush_longer_than_the_partners_fails_and_a_second_queue_buys_a_bounded_allowance(strict):
    """GPU work before the window lengthens the judge's flush: it fails (a warning under
    --official). A worker whose recorded round ran on two queues (a joined side stream, whose wait
    the GPU time-slices against the flush: 17.2 ms against 9.5 ms on an H200) passes that
    honest length, and fails a flush longer than twice the partner's: showing a second queue in
    the recorded round no longer buys unbounded work before the window."""
    from harness.judge.jobs import PASS, CaseResult

    case = dataclasses.make_dataclass("Case", ["strict"])(strict)
    calibration = Calibration({(False, False): 0.0}, spread_ns=0.0, flush_ns=9.5e6, longest_flush_ns=9.5e6)
    within = cases.Figures(rounds=[_flush_round(9.7) for _ in range(5)])
    assert cases._flush_verdict(case, within, calibration, _flush_round(9.7), CaseResult(PASS)) is None

    longer = cases.Figures(rounds=[_flush_round(17.2) for _ in range(5)])
    result = CaseResult(PASS)
    problem = cases._flush_verdict(case, longer, calibration, _flush_round(9.6), result)
    if strict:
        assert problem is not None and "GPU work before the timed window" in problem
    else:
        assert problem is None and "GPU work before the timed window" in result.warning

    two_queues = _flush_round(17.2, ("stream 7 of cuda:0", "stream 9 of cuda:0"))
    assert cases._flush_verdict(case, longer, calibration, two_queues, CaseResult(PASS)) is None

    much_longer = cases.Figures(rounds=[_flush_round(40.0) for _ in range(5)])
    result = CaseResult(PASS)
    problem = cases._flush_verdict(case, much_longer, calibration, two_queues, result)
    found = problem if strict else result.warning
    assert found is not None and "a worker waiting on a second queue is allowed" in found
    assert (problem is None) != strict


@pytest.mark.parametrize("strict", [True, False])
def test_a_calibration_whose_flush_ran_long_for_one_kind_of_round_was_disturbed(strict):
    """GPU work a worker left queued when it was frozen runs through the partner's rounds of one
    kind (they run in a row) and the judge's flush beside them, lengthening the fixed cost
    subtracted: it fails (a warning under --official). An honest difference passes."""
    from harness.judge.jobs import PASS, CaseResult

    case = dataclasses.make_dataclass("Case", ["strict"])(strict)
    kinds = [(own, exposed) for own in (0.0, 1.0) for exposed in (False, True)]  # three rounds each, in a row
    honest = [dataclasses.replace(_flush_round(flush_ms), own_share=own, exposed=exposed)
              for own, exposed in kinds for flush_ms in (9.9, 9.5, 9.6)]
    timed = cases.Figures(rounds=[_flush_round(9.5) for _ in range(5)])
    assert cases._flush_verdict(case, timed, Calibration.of(honest), _flush_round(9.5), CaseResult(PASS)) is None

    spun = honest[:3] + [dataclasses.replace(round_, flush_ns=19.0e6) for round_ in honest[3:6]] + honest[6:]
    calibration = Calibration.of(spun)
    assert calibration.flush_ns < 1.25 * 9.5e6  # the median over every round does not show it
    result = CaseResult(PASS)
    problem = cases._flush_verdict(case, timed, calibration, _flush_round(9.5), result)
    found = problem if strict else result.warning
    assert found is not None and "disturbed the calibration" in found
    assert (problem is None) != strict
