"""The judge and the worker driven by a Problem: each of the four NVFP4 problems judged end to end
on the CPU (modes.run_tests and the benchmark's jobs, workers and all: the e2e tests), the
grouped problem's nested inputs and list outputs shared, poisoned and checked group by group,
and the wire's description of list outputs, bounded against forged replies."""

import dataclasses
import io
import multiprocessing
import pickle
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from rich.console import Console

from harness.judge import modes

from harness.judge import edits
from harness.judge.jobs import FAIL, PASS
from harness.judge.memory import SharedPool
from harness.judge.rounds import JudgeClock
from harness.judge.verdicts import bits, changed_inputs, check_call, clone_data, repeated_outputs, shared_outputs
from harness.problems import PROBLEMS
from harness.problems.shapes import Case
from harness.results.console import Reporter
from harness.results.document import run_document
from harness.shared import wire

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "problems"
MISMATCH = "mismatch found! custom implementation doesn't match reference: "
# Small cases, quick on the CPU; the grouped one has an m that leaves padding in the scales' atoms.
# nvfp4_gemv's is larger: its eval's batch is one call, so that the judge's wake-up after a batch
# that took milliseconds, which the CPU's calibration does not see and a batch of 15 or 50 calls
# spreads thin, stays well inside the figures verdict's 5 %.
SPECS = {
    "nvfp4_gemm": dict(m=128, n=128, k=256, l=2),
    "nvfp4_gemv": dict(m=1024, k=2048, l=2),
    "nvfp4_dual_gemm": dict(m=128, n=128, k=256, l=1),
    "nvfp4_group_gemm": dict(m=(64, 128), n=(128, 128), k=(256, 256), g=2),
}
QUICK = 3  # --max-repeats
GROUPED = PROBLEMS["nvfp4_group_gemm"]


def case(name: str, seed: int = 1111) -> Case:
    args = {**SPECS[name], "seed": seed}
    spec = "; ".join(f"{key}: {list(value) if isinstance(value, tuple) else value}" for key, value in args.items())
    return Case(spec=spec, args=args)


def options(name: str, submission: Path, **fields) -> modes.RunOptions:
    return modes.RunOptions(submission=submission, device="cpu", timeout_s=120.0, max_repeats=QUICK,
                            problem=PROBLEMS[name], **fields)


def reporter() -> Reporter:
    return Reporter(console=Console(file=io.StringIO(), width=200))


def run_tests(name: str, submission: Path, **fields) -> tuple[int, list[dict]]:
    """modes.run_tests on the problem's small case: (exit status, each case's document entry)."""
    record = modes.run_tests([case(name)], options(name, submission, **fields), reporter())
    return record.exit_status, run_document(record)["cases"]


def judge_benchmarks(name: str, submission: Path, leaderboard: bool = False, **fields) -> list:
    """The benchmark's jobs (modes._benchmark_jobs) through the Executor, as run_benchmarks runs
    them, without its speed-of-light tail (which reads a GEMM's m, n, k and l): each case's
    CaseResult."""
    run_options = options(name, submission, **fields)
    warmups, measured = modes._benchmark_jobs([case(name)], run_options, leaderboard)
    with modes.Executor.open(run_options, reporter(), timed=True) as executor:
        for job in warmups:
            executor.run(job, "warm-up")
        return [executor.run(job, f"benchmark {index}") for index, job in enumerate(measured)]


def write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


# ---- each problem's template-style fixtures, end to end -------------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_the_torch_fixture_passes_and_the_wrong_one_fails_with_the_problems_message(name):
    status, (entry,) = run_tests(name, FIXTURES / f"{name}_torch.py")
    assert (status, entry["status"]) == (modes.EXIT_PASS, PASS), entry
    status, (entry,) = run_tests(name, FIXTURES / f"{name}_wrong.py")
    assert status != modes.EXIT_PASS and entry["status"] == FAIL, entry
    assert entry["message"].startswith(MISMATCH + ("group 0 (counting from 0): Number of mismatched elements: " if name == "nvfp4_group_gemm"
                                                   else "Number of mismatched elements: ")), entry


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_a_short_benchmark_of_the_torch_fixture_passes(name):
    (result,) = judge_benchmarks(name, FIXTURES / f"{name}_torch.py")
    assert result.status == PASS, (result.message, result.output)
    assert result.stats.runs == QUICK and result.stats.mean > 0


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_a_short_benchmark_of_the_wrong_fixture_fails_in_its_first_batch(name):
    (result,) = judge_benchmarks(name, FIXTURES / f"{name}_wrong.py")
    assert result.status == FAIL and MISMATCH in result.message, result.message


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["nvfp4_gemm", "nvfp4_dual_gemm"])
def test_run_benchmarks_passes_the_torch_fixture(name):
    record = modes.run_benchmarks([case(name)], options(name, FIXTURES / f"{name}_torch.py"), reporter(), leaderboard=False)
    document = run_document(record)
    assert record.exit_status == modes.EXIT_PASS, document
    assert document["cases"][0]["stats"]["runs"] == QUICK


@pytest.mark.e2e
def test_the_submission_imports_the_problems_own_files(tmp_path):
    """`task`, `utils` and `reference` beside the submission are the grouped problem's: its
    generator takes `g`, its check compares lists."""
    source = (FIXTURES / "nvfp4_group_gemm_torch.py").read_text()
    checked = write(tmp_path, "imports_the_grouped_files", source + textwrap.dedent("""
        import inspect

        import reference
        import utils

        assert "g" in inspect.signature(reference.generate_input).parameters, reference.__file__
        assert "output length mismatch" in inspect.getsource(utils.match_reference), utils.__file__
        """))
    status, (entry,) = run_tests("nvfp4_group_gemm", checked)
    assert entry["status"] == PASS, entry


# ---- the grouped problem's structure: shared, poisoned, checked per group --------------------

GROUPED_HEADER = (FIXTURES / "nvfp4_group_gemm_torch.py").read_text()


@pytest.mark.e2e
def test_a_kernel_that_writes_only_the_first_groups_output_fails_on_the_refill(tmp_path):
    submission = write(tmp_path, "first_group_only", GROUPED_HEADER + textwrap.dedent("""
        _honest = custom_kernel


        def custom_kernel(data):
            abc, sfasfb, reordered, sizes = data
            _honest((abc[:1], sfasfb[:1], reordered[:1], sizes[:1]))
            return [c for _, _, c in abc]
        """))
    status, (entry,) = run_tests("nvfp4_group_gemm", submission)
    assert entry["status"] == FAIL, entry
    assert entry["message"].startswith(MISMATCH + "group 1 (counting from 0): Number of mismatched elements: 16384\n"), entry
    assert entry["competition_message"].startswith(MISMATCH + "1 ['Number of mismatched elements: 16384'"), entry
    assert "-32768" in entry["message"]  # group 1's c as the judge filled it


@pytest.mark.e2e
@pytest.mark.parametrize("target, named", [("abc_tensors[1][1]", "b of group 1"), ("sfasfb_tensors[1][0]", "sfa of group 1"),
                                           ("sfasfb_reordered[1][1]", "sfb_reordered of group 1")])
def test_a_kernel_that_changes_an_input_of_group_1_fails_naming_it(tmp_path, target, named):
    submission = write(tmp_path, "changes_group_1", GROUPED_HEADER + textwrap.dedent(f"""
        _honest = custom_kernel


        def custom_kernel(data):
            abc_tensors, sfasfb_tensors, sfasfb_reordered, _ = data
            outputs = _honest(data)
            changed = {target}.view(torch.uint8)
            changed[(1,) + (0,) * (changed.dim() - 1)] ^= 1
            return outputs
        """))
    status, (entry,) = run_tests("nvfp4_group_gemm", submission)
    assert (entry["status"], entry["message"]) == (FAIL, f"custom_kernel modified its input(s): {named}"), entry
    status, (entry,) = run_tests("nvfp4_group_gemm", submission, official=True)
    assert entry["status"] == PASS, entry  # the competition compares outputs only


@pytest.mark.e2e
def test_a_list_of_the_wrong_length_fails_saying_so(tmp_path):
    submission = write(tmp_path, "one_output_short", GROUPED_HEADER + textwrap.dedent("""
        _honest = custom_kernel


        def custom_kernel(data):
            return _honest(data)[:1]
        """))
    status, (entry,) = run_tests("nvfp4_group_gemm", submission)
    assert entry["message"] == "custom_kernel returned a list of 1 item, expected a list of 2 tensors", entry
    status, (entry,) = run_tests("nvfp4_group_gemm", submission, official=True)
    assert entry["message"] == "output length mismatch: got 1, expected 2", entry  # the grouped utils.py's own words


@pytest.mark.e2e
def test_a_groups_output_of_the_wrong_dtype_fails_by_default_and_passes_officially(tmp_path):
    submission = write(tmp_path, "second_group_in_fp32", GROUPED_HEADER + textwrap.dedent("""
        _honest = custom_kernel


        def custom_kernel(data):
            outputs = _honest(data)
            return [outputs[0], outputs[1].float()]
        """))
    status, (entry,) = run_tests("nvfp4_group_gemm", submission)
    assert entry["message"] == ("custom_kernel returned a torch.float32 tensor of shape (128, 128, 1) on cpu as output 1, "
                                "expected a torch.float16 tensor of shape (128, 128, 1) on cpu"), entry
    status, (entry,) = run_tests("nvfp4_group_gemm", submission, official=True)
    assert entry["status"] == PASS, entry


def grouped_batch(seeds=(5, 6)):
    data_list = [GROUPED.generate(SPECS["nvfp4_group_gemm"], seed, "cpu") for seed in seeds]
    return data_list, [GROUPED.expected(clone_data(data)) for data in data_list]


def test_group_outputs_sharing_memory_or_repeating_the_last_call_are_named():
    data_list, expected = grouped_batch()
    shared = [[tensor.clone() for tensor in expected[0]], [expected[0][0].clone(), expected[0][1]]]
    shared[1][1] = shared[0][1]
    assert shared_outputs(shared) == "output 1 of call 0 and output 1 of call 1 share memory (cached or reused output buffer)"
    stale = [[tensor.clone() for tensor in expected[0]], [expected[1][0].clone(), expected[0][1].clone()]]
    assert repeated_outputs(stale, expected) == ("output 1 of call 1 holds the same values as that of call 0 although "
                                                 "the inputs differ (cached result)")
    assert repeated_outputs([[t.clone() for t in e] for e in expected], expected) is None


def test_the_grouped_check_is_the_problems_with_strict_checks_on_each_element():
    (data,), (expected,) = grouped_batch((5,))
    buffers = GROUPED.outputs(data)
    assert check_call(expected, [t.clone() for t in expected], buffers, True, GROUPED) == (True, "")
    assert not check_call(expected, expected[0], buffers, True, GROUPED)[0]  # a tensor where a list is due
    assert check_call(expected, expected[0], buffers, False, GROUPED) == (False, "custom_kernel returned a torch.float16 tensor "
                                                                           "of shape (64, 128, 1) on cpu")
    off = [t.clone() for t in expected]
    off[1][5, 7, 0] += 1
    good, message = check_call(expected, off, buffers, True, GROUPED)
    assert not good and message.startswith(MISMATCH + "1 ['Number of mismatched elements: 1', 'ERROR AT (5, 7, 0)")


def test_changed_inputs_and_near_duplicates_walk_the_groups():
    (data,), _ = grouped_batch((5,))
    copy = clone_data(data)
    assert copy[3] == data[3] and copy[0][1][2] is not data[0][1][2]  # sizes as they are, tensors cloned
    copy[2][0][0].view(torch.uint8)[1, 0, 0, 0, 0, 0] ^= 1
    copy[0][1][2].fill_(0)  # an output buffer: no input
    assert changed_inputs(data, copy, GROUPED) == ["sfa_reordered of group 0"]
    generator, seen = torch.Generator().manual_seed(1), set()
    reference = GROUPED.expected(clone_data(data))
    for _ in range(12):
        near, _ = edits.near_duplicate(data, reference, GROUPED, generator)
        seen |= {GROUPED.input_name(path) for (path, old), (_, new) in zip(wire.leaves(data), wire.leaves(near))
                 if not torch.equal(bits(old), bits(new))}
    # Every group's operands and scales, each scale in both layouts; never the sizes or an output.
    assert seen == {f"{name} of group {group}" for group in (0, 1)
                    for name in ("a", "b", "sfa", "sfb", "sfa_reordered", "sfb_reordered")}


def test_input_names_are_the_problems_or_the_place():
    gemm, dual = PROBLEMS["nvfp4_gemm"], PROBLEMS["nvfp4_dual_gemm"]
    assert [gemm.input_name((index,)) for index in (1, 4)] == ["b", "sfa_permuted"]
    assert dual.input_name((2,)) == "b2" and GROUPED.input_name((1, 1, 0)) == "sfa of group 1"
    assert GROUPED.input_name((3, 0, 2)) == "data[3][0][2]" and gemm.input_name((9,)) == "data[9]"
    assert dataclasses.replace(gemm, input_names=()).input_name((1,)) == "data[1]"


def test_the_shared_pool_copies_nested_inputs_into_sealed_memory():
    """Every CPU tensor copied into one memfd that no process can shrink or grow: a worker that
    truncates what it is handed cannot make the judge's next read of it die of SIGBUS."""
    import fcntl
    import os

    (data,), _ = grouped_batch((5,))
    pool = SharedPool(torch.device("cpu"))
    (shared,) = pool.copies([data])
    pairs = list(zip(wire.leaves(data), wire.leaves(shared)))
    assert len(pairs) == 14 and shared[3] == data[3]
    assert all(path == copied_path and copy.data_ptr() != tensor.data_ptr() and copy.stride() == tensor.stride()
               and torch.equal(bits(copy), bits(tensor))
               for (path, tensor), (copied_path, copy) in pairs)
    fds: list[int] = []
    described = [pool.describe(copy, fds) for _, copy in wire.leaves(shared)]
    assert len(fds) == 1 and {item.memory[:2] for item in described} == {("host", 0)}
    seals = fcntl.fcntl(fds[0], fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW and seals & fcntl.F_SEAL_SEAL
    with pytest.raises(PermissionError):
        os.ftruncate(fds[0], 0)


# ---- the eval's numbers from the problem -----------------------------------------------------

def test_the_benchmark_schedule_is_the_problems_eval():
    for name, leaderboard in (("nvfp4_gemm", False), ("nvfp4_group_gemm", True), ("nvfp4_gemv", True)):
        eval_parameters = PROBLEMS[name].eval
        run_options = modes.RunOptions(submission=Path("x.py"), problem=PROBLEMS[name], official=True)
        warmups, measured = modes._benchmark_jobs([case(name), case(name, seed=7)], run_options, leaderboard)
        run = eval_parameters.leaderboard_run if leaderboard else eval_parameters.benchmark_run
        warmup = eval_parameters.leaderboard_warmup if leaderboard else eval_parameters.benchmark_warmup
        assert [job.run for job in measured] == [run, run] and all(job.problem is PROBLEMS[name] for job in measured)
        assert [job.run for job in warmups] == [warmup] * (2 if leaderboard and eval_parameters.leaderboard_warms_every_case else 1)
        assert all(job.recheck == leaderboard for job in measured)


def test_baselines_are_refused_for_a_problem_they_do_not_know():
    with pytest.raises(ValueError, match="--baselines times cuBLAS and torch on nvfp4_gemm's inputs; nvfp4_gemv has none"):
        modes.RunOptions(submission=Path("x.py"), baselines=True, problem=PROBLEMS["nvfp4_gemv"])
    assert modes.RunOptions(submission=Path("x.py"), baselines=True).baselines


CACHES_BY_ADDRESS = """
    _honest = custom_kernel
    _kept = {}


    def custom_kernel(data):
        c = data[-1]
        if c.data_ptr() not in _kept:
            _kept[c.data_ptr()] = _honest(data).clone()
        return c.copy_(_kept[c.data_ptr()])
    """


@pytest.mark.e2e
def test_the_plain_evals_leaderboard_draws_every_timed_round_afresh(tmp_path):
    """--official leaderboard on nvfp4_gemv (eval.py): each timed round on a new draw, checked,
    so a cache keyed on addresses fails there as on the competition's; the benchmark, whose
    rounds repeat their input, lets it through."""
    submission = write(tmp_path, "gemv_caches_by_address",
                       (FIXTURES / "nvfp4_gemv_torch.py").read_text() + textwrap.dedent(CACHES_BY_ADDRESS))
    (result,) = judge_benchmarks("nvfp4_gemv", submission, official=True)
    assert result.status == PASS, result.message
    (result,) = judge_benchmarks("nvfp4_gemv", submission, leaderboard=True, official=True)
    assert result.status == FAIL and result.message.startswith("recheck: " + MISMATCH), result.message


# ---- the wire: list outputs described and rebuilt, forged ones refused ----------------------

def held_grouped():
    (data,), _ = grouped_batch((5,))
    return SharedPool(torch.device("cpu")).copies([data])


def through_the_pipe(spec):
    """As the judge reads a worker's reply: encoded by the worker, unpickled as plain values."""
    return wire._PlainValuesUnpickler(io.BytesIO(wire.encode(spec))).load()


def rebuild(spec, held):
    return wire.rebuild(spec, held, opened=None)  # no CUDA output of a worker's own on the CPU


def test_a_list_output_round_trips_as_views_of_the_held_memory_and_own_tensors():
    held = held_grouped()
    first, second = wire.at(held, (0, 0, 0, 2)), wire.at(held, (0, 0, 1, 2))
    own = torch.full((128, 128, 1), 3.0, dtype=torch.float16)
    spec = wire.returned([first, second[:64], own], wire.storage_index(held))
    assert spec[:2] == ("sequence", "list") and [item[0] for item in spec[2]] == ["view", "view", "own host"]
    assert spec[2][0][1] == (0, 0, 0, 2)
    rebuilt = rebuild(through_the_pipe(spec), held)
    assert isinstance(rebuilt, list) and len(rebuilt) == 3
    assert rebuilt[0].data_ptr() == first.data_ptr() and rebuilt[0].stride() == first.stride()
    assert rebuilt[1].data_ptr() == second.data_ptr() and rebuilt[1].shape == (64, 128, 1)
    assert torch.equal(rebuilt[2], own)
    assert isinstance(rebuild(wire.returned((first,), wire.storage_index(held)), held), tuple)


def test_an_honest_worker_describes_a_list_beyond_the_bounds_by_its_type_only():
    assert wire.returned([None] * (wire.MAX_ITEMS + 1), {}) == ("not a tensor", f"list of {wire.MAX_ITEMS + 1} items")
    assert wire.returned([[[torch.zeros(1)]]], {})[2][0][2][0] == ("not a tensor", "list of 1 item")


def nested(depth: int):
    spec = ("not a tensor", "int")
    for _ in range(depth):
        spec = ("sequence", "list", [spec])
    return spec


@pytest.mark.parametrize("forged, words", [
    (nested(wire.MAX_DEPTH + 1), "nested 3 deep, 1 long"),
    (("sequence", "list", [("not a tensor", "int")] * (wire.MAX_ITEMS + 1)), "nested 1 deep, 1025 long"),
    (("sequence", "dict", []), "which no reply holds"),
    (("view", (0, 3, 0), 0, (2,), (1,), "float16"), "holds no tensor"),  # problem_sizes: no tensor
    (("view", (0, 0, 5, 2), 0, (2,), (1,), "float16"), "lack"),
    (("view", (0, 0, -1, 2), 0, (2,), (1,), "float16"), "lack"),
    (("view", (0, True, 0, 2), 0, (2,), (1,), "float16"), "lack"),
    (("view", (0,) * 9, 0, (2,), (1,), "float16"), "no place"),
    (("view", [0, 0, 0, 2], 0, (2,), (1,), "float16"), "no place"),
    (("view", (0, 0, 0, 2), 0, (64, 128, 2), (128, 1, 1), "float16"), "outside the memory"),
    (("view", (0, 0, 0, 2), 0, (2,), (1,), "Tensor"), "outside the memory"),
    (("own", "not a tensor"), "which no reply holds"),
    (("own host", b"\0" * 6, (2, 2), "float16"), "6 bytes for a float16 tensor of shape"),
    (("own host", "text", (2,), "float16"), "no array of bytes"),
    (("own host", b"\0" * 4, (2,), "Tensor"), "no dtype is named"),
    ("a string", "as str"),
])
def test_a_forged_description_is_refused(forged, words):
    with pytest.raises(wire.UntrustedMessageError, match=words):
        rebuild(through_the_pipe(forged), held_grouped())


def test_a_reply_without_an_output_for_every_call_is_refused():
    """A worker that answers a batch with fewer outputs than calls would leave calls unchecked."""
    class Forger:
        def request(self, operation, *arguments):
            return ([], 10.0) if operation == "run_batch" else (1.0, None)

    held = held_grouped()
    with pytest.raises(wire.UntrustedMessageError, match="a batch of 1 calls with 0 outputs"):
        JudgeClock(torch.device("cpu"), 0).round(Forger(), held)


@pytest.mark.e2e
@pytest.mark.parametrize("official", [False, True])
def test_a_worker_that_answers_with_no_outputs_fails(official):
    status, (entry,) = run_tests("nvfp4_gemm", FIXTURES.parent / "cheat_answers_with_no_outputs.py", official=official)
    assert (entry["status"], entry["message"]) == (FAIL, "the worker answered a batch of 1 calls with 0 outputs"), entry


@pytest.mark.parametrize("named", [Path("x"), torch.zeros(2)])
def test_the_unpickler_admits_plain_values_only(named):
    """No class at all: not a path, not even a tensor (tensors travel as descriptions)."""
    with pytest.raises(wire.UntrustedMessageError, match="plain values only"):
        wire._PlainValuesUnpickler(io.BytesIO(pickle.dumps(("sequence", "list", [named])))).load()


def test_a_reply_naming_a_descriptor_is_refused_unread():
    """multiprocessing's DupFd connects back to the sender for a descriptor when rebuilt: a
    worker that never sends one would hang the judge."""
    from multiprocessing.resource_sharer import DupFd

    forged = pickle.dumps(("reply", DupFd(0)))
    with pytest.raises(wire.UntrustedMessageError, match="resource_sharer.DupFd"):
        wire._PlainValuesUnpickler(io.BytesIO(forged)).load()


def test_a_message_longer_than_any_reply_is_refused_unread():
    judge_end, worker_end = multiprocessing.Pipe()

    def send():
        try:
            worker_end.send_bytes(b"x" * (wire.MAX_MESSAGE_BYTES + 1))
        except BrokenPipeError:  # the judge stopped reading: what a forger gets
            pass
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    with pytest.raises(OSError, match="bad message length"):
        wire.receive_untrusted(judge_end)
    judge_end.close()
    sender.join(timeout=10)
