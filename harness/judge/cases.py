"""One case, judged: inputs drawn here from the seeds, the submission called in the worker on
memory the judge shares with it, every figure and every verdict reached here.

What the inputs are, how they are drawn, what the reference is and how outputs are compared, and
the eval's numbers (calls per timed batch, the seed step, the leaderboard's recheck) are the
case's problem's (job.problem); this module knows tensors, rounds and verdicts. The judge keeps
a pristine copy of every input and the reference output; the worker sees only the tensors it is
handed (harness/judge/memory.py). Every call, whatever it is for (the first check, a warm-up, a
timed round, the recorded round, the recheck), reaches custom_kernel through one request, a
batch (harness/judge/rounds.py): the judge times it with its own clock and copies every output
inside that window, and checks every round's copies. What the worker says (its own times, its
GPU activity) is a claim, set against what the judge measured.
"""

import contextlib
import dataclasses
import random
import statistics
import time

import torch

from harness.judge import activity, claims, edits
from harness.judge.isolation import CaseStopped
from harness.judge.jobs import ERROR, FAIL, PASS, CaseResult, Job
from harness.judge.memory import SharedPool
from harness.judge.probes import ProbeEdits
from harness.judge.references import REFERENCES
from harness.judge.rounds import BATCH, Calibration, JudgeClock, Round
from harness.judge.verdicts import (Refills, all_pass_quickly, beyond_the_competition, bits, check_call, check_calls,
                                    claimed_figures_problem, clone_data, figures_problem, first_changed_inputs,
                                    input_leaves)
from harness.runner.calls import UNDER_COMPUTE_SANITIZER
from harness.shared.stats import MIN_ROUNDS, StoppingRule, calculate_stats
from harness.shared.wire import leaves

# Rounds of the calibration partner before and after the timed rounds, by device. On the CPU a
# round's fixed cost is the judge's wall clock around two processes' round trip, which varies by
# a good share of itself from round to round (docs/figures.md, row "the CPU's fixed cost of a
# round"); rounds cost little there, and more of them hold its median steady.
CALIBRATION_ROUNDS = {"cuda": 6, "cpu": 60}
# The worker's figure and the judge's may be apart by this share of the judge's, and by three
# standard deviations of the calibration's window (spread over the calls of a round), before the
# case fails. On the CPU the judge's window and the worker's host clock share two cores with the
# host's scheduling: a wider share there (docs/figures.md, row "the CPU's judged figure over the
# worker's").
FIGURE_TOLERANCE = {"cuda": 0.05, "cpu": 0.10}
CALIBRATION_SPREADS = 3.0
# The judge's flush may take this much longer while a worker waits for its go than while the
# calibration partner does: more is GPU work the worker ran during the flush, before the window.
FLUSH_TOLERANCE = 0.03
# A worker whose recorded round ran on more than one queue: a queue waiting on the GPU for another
# of its queues, itself waiting for the judge's go (a joined side stream), is given time slices
# during the flush with no work done, which lengthens the flush by most of the partner's flush
# (docs/figures.md, row "the judge's 16 GB flush while another process's queues wait for its go").
# Held to twice the partner's flush: what such a worker may run before the window is bounded by
# about one flush's time, not unbounded.
FLUSH_SIDE_QUEUE_TOLERANCE = 1.0
# The partner's flush, for any kind of its rounds, may take this much longer than the timed
# rounds' before the calibration counts as disturbed: GPU work the worker left queued when it was
# frozen (a spin in a context of its own) is time-sliced against the partner's rounds, which it
# lengthens, and against the flush beside them. Honest flushes differ by a few percent
# (docs/judge.md, the flush verdict).
CALIBRATION_FLUSH_TOLERANCE = 0.25
# After each timed round but the last, and after each probe, a probe (a timed round on edited
# inputs, harness/judge/probes.py) with this chance, and always after one of the first MIN_ROUNDS,
# drawn at random: no timed round can be told from a checked one on new values, so a replay in any
# of them risks the case.
PROBE_CHANCE = 1 / 8
FIRST_PROBE_WITHIN = MIN_ROUNDS
# The least time limit of a step of the calibration partner (its start included): no later case
# can replace it, so only a partner the submission stopped should run past it.
PARTNER_TIME_LIMIT_S = 300.0


@dataclasses.dataclass
class Judging:
    """What a case is judged with: the submission's worker, the calibration partner (timed modes),
    the judge's clock, the pool of shared memory, the progress line and the case's time limit."""

    worker: object
    partner: object | None
    clock: JudgeClock
    pool: SharedPool
    progress: object
    time_limit_s: float = float("inf")

    def restart_time_limit(self, *processes) -> None:
        """The case's time limit counted again from now for `processes`: what the judge itself
        spent (drawing the inputs and their references, the calibration) is not the submission's
        time; nor is a fresh process's start, which has a limit of its own (WorkerProcess.begin_case).
        The partner, the judge's own process, gets at least PARTNER_TIME_LIMIT_S: a short
        --timeout must not end it, since no later case can replace it."""
        for process in processes:
            if process is not None and process.alive:
                limit = max(self.time_limit_s, PARTNER_TIME_LIMIT_S) if process is self.partner else self.time_limit_s
                process.begin_case(limit, self.progress)

    @contextlib.contextmanager
    def judges_own_time(self):
        """The judge's own work inside a case, while the worker waits for its next request (the
        calibration, the draws and references of rechecks and probes, a leaderboard's fresh
        draws): the worker's time limit is moved on by what it took, so that the limit counts
        the submission's calls. On a CPU that work can take longer than the calls themselves."""
        started = time.monotonic()
        try:
            yield
        finally:
            if self.worker.alive:
                self.worker.add_time(time.monotonic() - started)


def _generate(job: Job, seed: int):
    return job.problem.generate(job.case.args, seed, job.device)


def _drawn(job: Job, seeds: list[int]) -> tuple[list, list]:
    """(inputs, references) for `seeds`, drawn before the worker sees the case. Sizes the problem's
    generator or reference cannot take (a K that is no multiple of its scale blocks, say) are the
    tests file's mistake, said as such, not the submission's failure."""
    def draw(seed: int) -> tuple:
        data = _generate(job, seed)
        return data, job.problem.expected(clone_data(data))

    try:
        pairs = [REFERENCES.drawn(job.problem, job.case.args, seed, job.device, lambda seed=seed: draw(seed)) for seed in seeds]
        return [data for data, _ in pairs], [reference for _, reference in pairs]
    except Exception as error:  # whatever the problem's own code raises names what is wrong
        raise CaseStopped(CaseResult(ERROR, f"the tests file's case cannot be drawn: {job.problem.name}'s generator or "
                                            f"reference refused it ({type(error).__name__}: {error})")) from None


def _buffers(data_list: list, job: Job) -> list[list]:
    """Each input's output buffers."""
    return [job.problem.outputs(data) for data in data_list]


def _written(device: torch.device) -> None:
    """What the judge wrote is in memory before a worker reads it: the judge's own queue waited for,
    not the whole device, where a queue it gave up with a worker never finishes
    (harness/judge/given_up.py)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def _hand_over(judging: Judging, data_list: list, device: torch.device, private: bool) -> list:
    """Copies of the inputs, in shared memory and held by the worker (and the partner) as BATCH;
    with `private` (--official), the worker's calls take copies of its own (harness/runner/calls.py
    `hold`)."""
    judging.progress("handing the inputs to the worker")  # the worker's start ends here, if it had not
    shared = judging.pool.copies(data_list)
    _written(device)
    judging.worker.request("hold", BATCH, shared, private)
    if judging.partner is not None:
        judging.partner.request("hold", BATCH, shared)
    return shared


def _load(worker) -> None:
    """Import the submission in the worker before any call, so that an import error is known as one."""
    try:
        worker.request("load")
    except CaseStopped as stopped:
        stopped.result.while_importing = True
        raise


def _value_problem(round_: Round, expected: list, inputs: list, shared: list, job: Job) -> str | None:
    """Why a round's outputs (the judge's copies) are not the answers, or None; `inputs`: the
    calls' inputs as the judge wrote them, which a folder's own check reads."""
    if job.rules.strict and round_.sharing:
        return round_.sharing
    if job.rules.strict and all_pass_quickly(expected, round_.outputs, job.problem):
        return None
    good, message = check_calls(expected, round_.outputs, _buffers(shared, job), job.rules.strict, job.problem, inputs)
    return None if good else message


def _activity_problem(round_: Round, job: Job, result: CaseResult, calls: int, with_times: bool) -> str | None:
    """The recorded round's GPU activity, judged (the competition records none)."""
    problem, result.activity = activity.judge_round(round_.records, round_.window_ns,
                                                    round_.worker_ns / calls if with_times else None, calls)
    # Under `make sanitize`, compute-sanitizer holds CUPTI's only subscriber slot.
    if problem and UNDER_COMPUTE_SANITIZER and problem.startswith(activity.NOT_RECORDED):
        result.warn(problem)
        return None
    return beyond_the_competition(problem, job.rules.strict, result)


def _inputs_problem(pristine: list, shared: list, job: Job, when: str = "") -> str | None:
    if not job.rules.strict:
        return None
    changed = first_changed_inputs(pristine, shared, job.problem)
    if not changed:
        return None
    problem = f"custom_kernel modified its input(s){when}: {changed[1]}"
    return f"input {changed[0]}: {problem}" if len(shared) > 1 else problem


def run_test(job: Job, judging: Judging) -> CaseResult:
    device = torch.device(job.device)
    judging.progress("generating inputs")
    (data,), expected = _drawn(job, [job.case.args["seed"]])
    judging.restart_time_limit(judging.worker, judging.partner)
    shared = _hand_over(judging, [data], device, private=not job.rules.strict)
    _load(judging.worker)
    judging.progress("calling custom_kernel")
    refills = Refills()
    round_ = judging.clock.round(judging.worker, shared, before_flush=lambda: refills.fill(job.problem.outputs(shared[0])),
                                 record=True)
    result = CaseResult(PASS)
    problem = (_inputs_problem([data], shared, job)
               or (_activity_problem(round_, job, result, 1, with_times=False) if device.type == "cuda" else None)
               or _value_problem(round_, expected, [data], shared, job))
    if problem:
        result.status, result.message = FAIL, problem
    return result


@dataclasses.dataclass
class Figures:
    """The timed rounds as measured: the judge's windows, the worker's figures (the competition's
    way) and host times per call; `judged_ns` gives the judge's per-call figures once a
    calibration is subtracted."""

    rounds: list[Round] = dataclasses.field(default_factory=list)
    calls: int = 1

    def add(self, round_: Round) -> None:
        round_.outputs = []  # checked already; the figures need none of them
        self.rounds.append(round_)

    def judged_ns(self, calibration: Calibration) -> list[float]:
        return [(round_.window_ns - calibration.fixed_ns(round_)) / self.calls for round_ in self.rounds]

    @property
    def worker_ns(self) -> list[float]:
        return [round_.worker_ns / self.calls for round_ in self.rounds]

    @property
    def host_ns(self) -> list[float]:
        return [round_.host_ns / self.calls for round_ in self.rounds]

    @property
    def flush_ns(self) -> list[float]:
        return [round_.flush_ns for round_ in self.rounds if round_.flush_ns is not None]


class BenchmarkCase:
    """The rounds of one benchmark case, in the competition's order: a checked first batch,
    warm-up, timed rounds until the stopping rule, then (ours) a recorded round and a recheck."""

    def __init__(self, job: Job, judging: Judging):
        self.job, self.judging = job, judging
        self.problem = job.problem
        self.device = torch.device(job.device)
        self.strict = job.rules.strict
        self.refills = Refills()
        eval_parameters = job.problem.eval
        seeds = eval_parameters.batch_seeds(job.case.args["seed"])
        judging.progress("generating inputs")
        self.pristine, self.expected = _drawn(job, seeds)
        judging.restart_time_limit(judging.worker, judging.partner)
        self.next_seed = seeds[-1]
        # The recheck's fresh draws: the batch's own step, or where every input of a batch is the
        # case's own (a step of 0), the leaderboard's step to a fresh input.
        self.fresh_step = eval_parameters.seed_step or eval_parameters.recheck_fresh_seed_step
        self.shared = _hand_over(judging, self.pristine, self.device, private=not self.strict)
        self.buffers = _buffers(self.shared, job)
        self.calls = len(self.shared)
        self.stale = False  # the shared inputs hold other values than the pristine ones (a probe's)
        self.rechecks = 0
        self._recheck_inputs: dict[tuple[int, bool], tuple] = {}
        self._recheck_edits = torch.Generator().manual_seed(self.next_seed)
        self.edits = ProbeEdits(self.shared, self.pristine, self.expected, self.problem)
        # Timed rounds carry edits (probes) outside --official; the calibration partner's rounds
        # then carry the same work, so that its rounds measure the same fixed cost.
        self.editing = self.strict and self.edits.possible
        if self.editing:
            with judging.judges_own_time():
                self.edits.draw_next()

    def round(self, process=None, record: bool = False, before_window=None) -> Round:
        return self.judging.clock.round(process or self.judging.worker, self.shared, before_flush=self._before_flush,
                                        before_window=before_window, record=record)

    def _before_flush(self) -> None:
        """The output buffers refilled; the pristine inputs written where the shared ones hold
        others (before the flush, so that the round after a probe, or on a new draw, starts from a
        cold L2 like any other)."""
        self.refills.fill([buffer for buffers in self.buffers for buffer in buffers])
        if self.stale:
            _write_inputs(self.shared, self.pristine, self.problem)
            self.stale = False
            if not self.strict:  # the worker calls on copies of its own: rewritten from these
                _written(self.device)
                self.judging.worker.request("refresh", BATCH)

    def renew(self, seed: int) -> None:
        """The next round's inputs drawn afresh from `seed` (every input of the batch the same
        draw), its references computed; written into the shared inputs before its flush."""
        with self.judging.judges_own_time():
            data = _generate(self.job, seed)
            reference = self.problem.expected(clone_data(data))
        self.pristine, self.expected = [data] * self.calls, [reference] * self.calls
        self.stale = True

    def recheck_inputs(self) -> tuple[list, list]:
        """(inputs, references) for the next recheck: at even indices fresh draws from the seeds
        after the timed ones (some parts of the timed input, at random, replaced by the fresh
        draw's), at odd ones near-duplicates of the timed inputs (a few bytes of random parts
        changed; harness/judge/edits.py). A batch of one call alternates between the two from one
        recheck to the next."""
        turn = self.rechecks if self.calls == 1 else 0
        self.rechecks += 1
        with self.judging.judges_own_time():
            pairs = [self._recheck_input(index, fresh=(index + turn) % 2 == 0) for index in range(self.calls)]
        return [data for data, _ in pairs], [reference for _, reference in pairs]

    def _recheck_input(self, index: int, fresh: bool) -> tuple:
        """One recheck input and its reference, drawn once per case, its answer another than the
        timed input's: a near-duplicate, or parts of a fresh draw; the whole fresh draw where the
        input holds no parts to edit or no edit changed its answer."""
        if (index, fresh) not in self._recheck_inputs:
            timed, reference = self.pristine[index], self.expected[index]
            draw = _generate(self.job, self.next_seed + self.fresh_step * (index + 1))
            if fresh:
                found = edits.mixed(timed, reference, draw, self.problem, self._recheck_edits)
            else:
                found = edits.near_duplicate(timed, reference, self.problem, self._recheck_edits)
            self._recheck_inputs[index, fresh] = found or (draw, self.problem.expected(clone_data(draw)))
        return self._recheck_inputs[index, fresh]

    def calibrate(self, own_kinds: bool) -> list[Round]:
        """The partner's rounds, with the worker frozen meanwhile: handing back views of the
        output buffers (and, with `own_kinds`, tensors of its own too), half replying at once and
        half once the GPU is idle, as the reference returns its outputs (one tensor, or a list)."""
        partner, rounds = self.judging.partner, []
        paths = {id(tensor): path for path, tensor in leaves(self.shared[0])}
        output_paths = [paths[id(buffer)] for buffer in self.buffers[0]]
        as_list = isinstance(self.expected[0], (list, tuple))
        self.judging.restart_time_limit(partner)
        with self.judging.judges_own_time(), self.judging.worker.paused(keep=partner.pids):
            for own in (False, True) if own_kinds else (False,):
                for reply_when_idle in (False, True):
                    partner.request("echo", own, reply_when_idle, output_paths, as_list)
                    rounds += [self.plain_round(partner) for _ in range(CALIBRATION_ROUNDS[self.device.type] // 2)]
        return rounds

    def edited_round(self, probe: bool, process=None) -> Round:
        """A timed round with the next probe's places written after the flush: with its edits, or
        the same work changing nothing (harness/judge/probes.py)."""
        return self.round(process, before_window=lambda: self.edits.write(probe))

    def plain_round(self, process=None) -> Round:
        """A round as the timed ones run, but a probe: with writes that change nothing where the
        timed rounds carry edits."""
        return self.edited_round(probe=False, process=process) if self.editing else self.round(process)

    def checked_round(self, check_every_round: bool, last_checked=None) -> tuple[Round, str | None]:
        round_ = self.plain_round()
        if check_every_round:
            return round_, _value_problem(round_, self.expected, self.pristine, self.shared, self.job)
        if last_checked is not None:
            return round_, last_checked(round_)
        return round_, None


def _competition_round_check(job: Job, case: BenchmarkCase):
    """--official: the rounds the competition's eval checks. The leaderboard checks every timed
    round's outputs, keeping only the last one's verdict where its eval's loop does; the
    benchmark checks none."""
    if not job.recheck:
        return None
    last_only = job.problem.eval.recheck_judges_last_output_only

    def check(round_: Round) -> str | None:
        for index in range(case.calls - 1 if last_only else 0, case.calls):
            good, message = check_call(case.expected[index], round_.outputs[index], case.buffers[index], False, job.problem,
                                       case.pristine[index])
            if not good:
                return message
        return None
    return check


def _time_rounds(case: BenchmarkCase, rule: StoppingRule, figures: Figures, calibration: Calibration, on_round) -> str | None:
    """Timed rounds until `rule` stops them, on the judge's figures (the worker's under --official,
    as the competition's own loop). Returns the first round's problem, if one fails. Under
    --official, a leaderboard whose eval draws every timed round afresh (its seed a step on from
    the last's) does so here."""
    started = rule.start()
    official_check = None if case.strict else _competition_round_check(case.job, case)
    fresh_step = case.problem.eval.recheck_fresh_seed_step if official_check else 0
    seed = case.job.case.args["seed"]
    chance = random.SystemRandom()
    first_probe = chance.randrange(FIRST_PROBE_WITHIN) if FIRST_PROBE_WITHIN else None
    while True:
        if fresh_step:
            seed += fresh_step
            case.renew(seed)
        round_, problem = case.checked_round(case.strict, official_check)
        figures.add(round_)
        if problem and (case.strict or case.job.recheck):
            return f"{'timed round' if case.strict else 'recheck'}: {problem}"
        steering = figures.judged_ns(calibration) if case.strict else figures.worker_ns
        if rule.should_stop(steering, started):
            return None
        on_round(rule.progress(steering, started))
        # A probe may follow a probe, with the same chance: the judge's longer gap after one (its
        # references) then tells nothing of the next round.
        probe = case.strict and (len(figures.rounds) - 1 == first_probe or chance.random() < PROBE_CHANCE)
        while probe:
            problem = _probe(case)
            if problem:
                return problem
            on_round(rule.progress(steering, started))
            probe = chance.random() < PROBE_CHANCE


def _probe(case: BenchmarkCase) -> str | None:
    """A timed round on edited inputs, checked against their references, and the next probe's
    edits drawn; where the inputs hold nothing to edit, the recheck's round on fresh draws."""
    if not case.edits.possible:
        return _recheck(case)
    round_ = case.edited_round(probe=True)
    case.edits.undo()
    problem = _value_problem(round_, case.edits.references, case.edits.inputs, case.shared, case.job)
    if problem:
        return f"probe on edited inputs among the timed rounds: {problem}"
    with case.judging.judges_own_time():
        case.edits.draw_next()
    return None


def _write_inputs(shared: list, values: list, problem) -> None:
    """`values` written into the shared inputs' own memory, the output buffers left alone."""
    for data, new in zip(shared, values):
        for (_, old), (_, value) in zip(input_leaves(data, problem), input_leaves(new, problem)):
            bits(old).copy_(bits(value))


def _recheck(case: BenchmarkCase) -> str | None:
    """New values written into the very tensors the kernel was timed on, after the judge's flush
    and right before its window, then the batch checked: a kernel that keys a cache on addresses,
    shapes, call counts or a sample of the input bytes returns stale output."""
    inputs, references = case.recheck_inputs()

    def write_new_values():
        _write_inputs(case.shared, inputs, case.problem)
        case.stale = True

    round_ = case.round(before_window=write_new_values)
    problem = _value_problem(round_, references, inputs, case.shared, case.job)
    return f"recheck on fresh and near-duplicate inputs: {problem}" if problem else None


def _judged_figures(case: BenchmarkCase, figures: Figures, calibration: Calibration) -> list[float]:
    """The judge's per-call figure of each timed round, as reported. On the CPU the fixed cost
    subtracted varies from round to round by more than short work takes, so that a round's
    estimate can fall below its work, below zero even: there each round's figure is at least the
    worker's own for it. A worker gains nothing by claiming more, and one that claims less is held
    to the judge's estimates, which the figures verdict compares with its claims as measured."""
    judged_ns = figures.judged_ns(calibration)
    if case.device.type != "cpu":
        return judged_ns
    return [max(judged, claimed) for judged, claimed in zip(judged_ns, figures.worker_ns)]


def _figures_verdict(case: BenchmarkCase, figures: Figures, calibration: Calibration, result: CaseResult) -> str | None:
    judged_ns = figures.judged_ns(calibration)
    tolerance_ns = (FIGURE_TOLERANCE[case.device.type] * statistics.fmean(judged_ns)
                    + CALIBRATION_SPREADS * calibration.spread_ns / case.calls)
    return beyond_the_competition(figures_problem(figures.worker_ns, judged_ns, tolerance_ns), case.strict, result)


def _flush_verdict(case: BenchmarkCase, figures: Figures, calibration: Calibration, recorded: Round,
                   result: CaseResult) -> str | None:
    """The timed rounds' flush against the partner's: longer is GPU work run before the window;
    shorter, beyond CALIBRATION_FLUSH_TOLERANCE for any kind of the partner's rounds, is GPU work
    the worker left queued when it was frozen, which lengthened the fixed cost subtracted.

    A worker whose recorded round, whose activity passed, ran on more than one queue is held to
    FLUSH_SIDE_QUEUE_TOLERANCE instead: a queue that waits on the GPU for another of the worker's
    queues, itself waiting for the judge's go (a side stream joined the way torch's documentation
    shows), is given time slices during the judge's flush with no work done, which cannot be told
    apart from work run in those slices. The recorded round is the worker's to shape (it can see
    that it is asked), so its second queue buys that allowance and no more."""
    if not (calibration.flush_ns and figures.flush_ns):
        return None
    timed_ns = statistics.median(figures.flush_ns)
    if calibration.longest_flush_ns > (1 + CALIBRATION_FLUSH_TOLERANCE) * timed_ns:
        return beyond_the_competition(
            f"the judge's L2 flush took {(calibration.longest_flush_ns - timed_ns) / 1e3:.0f} us longer while the "
            f"calibration partner ran than in the timed rounds: GPU work the worker left queued disturbed the "
            f"calibration of the fixed cost", case.strict, result)
    side_queues = len(activity.queues(recorded.records)) > 1
    tolerance = FLUSH_SIDE_QUEUE_TOLERANCE if side_queues else FLUSH_TOLERANCE
    excess_ns = timed_ns - calibration.flush_ns
    if excess_ns <= tolerance * calibration.flush_ns:
        return None
    allowance = (f", beyond the {tolerance:.0%} a worker waiting on a second queue is allowed" if side_queues else "")
    return beyond_the_competition(
        f"the judge's L2 flush took {excess_ns / 1e3:.0f} us longer while the worker waited for its batch than while "
        f"nothing ran{allowance}: GPU work before the timed window", case.strict, result)


def run_benchmark(job: Job, judging: Judging) -> CaseResult:
    progress = judging.progress
    case = BenchmarkCase(job, judging)
    _load(judging.worker)
    progress("checking the first batch")
    first = case.round()
    problem = _inputs_problem(case.pristine, case.shared, job) or _value_problem(first, case.expected, case.pristine, case.shared, job)
    if problem:
        return CaseResult(FAIL, problem)
    with judging.worker.neighbours_frozen():
        return _measured(case, first)


def _measured(case: BenchmarkCase, first: Round) -> CaseResult:
    """A benchmark case after its first batch checked: warm-up, calibration, timed rounds, the
    recorded round, the recheck and the baselines."""
    job, judging = case.job, case.judging
    progress = judging.progress
    last = first
    if job.warmup:
        progress("warm-up")
        rule, warm = StoppingRule(*job.warmup, min_total_ns=job.problem.eval.min_total_ns), Figures(calls=case.calls)
        started = rule.start()
        while True:
            last, problem = case.checked_round(case.strict)
            if problem:
                return CaseResult(FAIL, f"warm-up round: {problem}")
            warm.add(last)
            if rule.should_stop(warm.worker_ns, started):
                break
            progress(f"warm-up, {rule.progress(warm.worker_ns, started)}")

    progress("calibrating the judge's clock")
    # Tensors of a worker's own cost more to hand back (an IPC handle or their bytes each) than
    # views of the output buffers: the partner measures that kind too where the worker's rounds
    # so far or its timed rounds had it, and each round is charged its own kind's cost.
    calibration_rounds = case.calibrate(own_kinds=last.returned_own)
    figures = Figures(calls=case.calls)
    problem = _time_rounds(case, StoppingRule(*job.run, min_total_ns=job.problem.eval.min_total_ns), figures, Calibration.of(calibration_rounds),
                           on_round=lambda where: progress(f"timing, {where}"))
    if problem:
        return CaseResult(FAIL, problem)
    own_kinds = last.returned_own or any(round_.returned_own for round_ in figures.rounds)
    calibration = Calibration.of(calibration_rounds + case.calibrate(own_kinds))

    problem = claimed_figures_problem(figures.worker_ns)
    if problem:
        return CaseResult(FAIL, problem)
    judged, claimed = calculate_stats(_judged_figures(case, figures, calibration)), calculate_stats(figures.worker_ns)
    result = CaseResult(PASS, stats=judged if case.strict else claimed, worker_stats=claimed, judged_stats=judged,
                        fixed_ns=calibration.hidden_ns,
                        # On the CPU the round's wall time is the calls' time: no host time apart from it.
                        host_ns=statistics.fmean(figures.host_ns) if case.device.type == "cuda" else None)
    problem = _figures_verdict(case, figures, calibration, result) or _inputs_problem(case.pristine, case.shared, job, " while timed")
    if problem:
        return CaseResult(FAIL, problem, worker_stats=claimed, judged_stats=judged)
    if case.device.type == "cuda":
        progress("recorded round (CUPTI)")
        recorded = case.round(record=True)
        problem = (_activity_problem(recorded, job, result, case.calls, with_times=True)
                   or beyond_the_competition(_value_problem(recorded, case.expected, case.pristine, case.shared, job), case.strict, result)
                   or _flush_verdict(case, figures, calibration, recorded, result))
        if problem:
            return CaseResult(FAIL, problem, activity=result.activity)
    if job.rules.strict:
        progress("recheck on fresh and near-duplicate inputs")
        problem = _recheck(case)
        if problem:
            return CaseResult(FAIL, problem)
    if job.baselines:
        progress("baselines")
        result.baselines = {name: calculate_stats([claims.call_ns(value, f"a time of {name}") for value in values]) for name, values
                            in judging.worker.request("time_baselines", BATCH, job.run, job.problem.eval.flush_bytes).items()}
    result.flush = judging.clock.flush.description
    return result


def run_profile(job: Job, judging: Judging) -> CaseResult:
    data = _generate(job, job.case.args["seed"])
    _hand_over(judging, [data], torch.device(job.device), private=not job.rules.strict)
    return CaseResult(PASS, report=str(judging.worker.request("profile", BATCH, job.ncu)))


def run_ceilings(job: Job, judging: Judging) -> CaseResult:
    measured = judging.worker.request("measure_ceilings")
    return CaseResult(PASS, ceilings={"peak_flops": claims.rate(measured["peak_flops"], "its peak"),
                                      "bandwidth": claims.rate(measured["bandwidth"], "its bandwidth"),
                                      "source": str(measured["source"])[:200]})


RUNNERS = {"test": run_test, "benchmark": run_benchmark, "profile": run_profile, "ceilings": run_ceilings}
