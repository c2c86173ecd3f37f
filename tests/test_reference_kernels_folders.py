"""A problem folder laid out as reference-kernels lays it out (tests/fixtures/reference_kernels/:
a family's utils.py and eval.py one folder up, named as `files` sources from `..`, an optional
case key with word values, a check_implementation of the folder's own making): loaded as it
stands, judged with its own check, its eval's flavour told; and experiments/problem_folders,
which judges such folders twice and compares."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.judge.verdicts import check_call
from harness.problems import PLAIN_EVAL, load_problem
from harness.problems.eval_flavours import FLAVOURS, UNKNOWN, flavour_of
from harness.problems.folder_task import TaskFileError, cases_as_tests_file
from harness.problems.shapes import CaseFormat, ShapeFileError, parse_cases
from harness.shared import stats, wire

ROOT = Path(__file__).resolve().parents[1]
FAMILY = ROOT / "tests" / "fixtures" / "reference_kernels" / "practice"
FOLDER = FAMILY / "running_sum_py"

spec = importlib.util.spec_from_file_location("problem_folders_check", ROOT / "experiments" / "problem_folders" / "check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def _tolerance(size: int) -> float:
    """The fixture's check_implementation's: 1e-5 times the square root of the length."""
    return 1e-5 * size ** 0.5


# ---- loading -------------------------------------------------------------------------------------

def test_files_sources_are_resolved_from_the_folder():
    problem = load_problem(FOLDER)
    files = problem.runner_files()
    assert files["utils"] == (FAMILY / "utils.py").resolve()
    assert files["task"] == (FOLDER / "task.py").resolve() and files["reference"] == (FOLDER / "reference.py").resolve()
    assert problem.modules()["utils"].__file__ == str((FAMILY / "utils.py").resolve())


def test_cases_keep_their_optional_word_key_and_task_yml_its_timeouts_and_ranking():
    problem = load_problem(FOLDER)
    assert (problem.spec_keys, problem.optional_keys, problem.text_keys) == (("size", "spread"), ("spread",), ("spread",))
    assert [case.args for case in problem.cases("tests")] == [
        {"size": 1000, "seed": 4101}, {"size": 3000, "seed": 4102, "spread": "wide"}, {"size": 5000, "seed": 4103}]
    assert [case.label for case in problem.cases("tests")] == ["1000", "3000 wide", "5000"]
    assert dict(problem.timeouts_s) == {"test": 60, "benchmark": 90, "leaderboard": 120}
    assert problem.ranking_by == "mean"
    narrow, wide = (problem.generate(case.args, case.args["seed"], "cpu")[0] for case in problem.cases("tests")[:2])
    assert narrow.abs().max() < 10 < wide.abs().max()  # the word reached the folder's generator


def test_a_missing_source_is_named_with_where_task_yml_takes_it_from(tmp_path):
    folder = tmp_path / "practice" / "running_sum_py"
    shutil.copytree(FOLDER, folder)
    with pytest.raises(TaskFileError, match=r"lacks utils\.py \(from \.\./utils\.py\)"):
        load_problem(folder)
    shutil.copyfile(FAMILY / "utils.py", folder / "utils.py")  # the source's copy brought into the folder
    assert load_problem(folder).runner_files()["utils"] == folder / "utils.py"


def test_files_task_yml_does_not_name_are_the_folders_own_and_one_neither_gives_is_named(tmp_path):
    folder = tmp_path / "running_sum_py"
    shutil.copytree(FOLDER, folder)
    shutil.copyfile(FAMILY / "utils.py", folder / "utils.py")
    task_yml = folder / "task.yml"
    task_yml.write_text("\n".join(line for line in task_yml.read_text().splitlines() if '"source"' not in line))
    assert load_problem(folder).runner_files()["reference"] == folder / "reference.py"
    (folder / "reference.py").unlink()
    with pytest.raises(FileNotFoundError, match="lacks reference.py"):
        load_problem(folder)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["size", "spread", "seed"]), st.one_of(st.integers(-10**6, 10**6),
                       st.text(alphabet="abcxyz_", min_size=1, max_size=8)), min_size=1))
def test_a_case_line_is_read_back_or_refused_with_the_key_named(args):
    case_format = CaseFormat(keys=("size", "spread", "seed"), optional_keys=("spread",), text_keys=("spread",))
    line = "; ".join(f"{key}: {value}" for key, value in args.items())
    well_typed = all(isinstance(value, str) == (key == "spread") for key, value in args.items())
    if well_typed and {"size", "seed"} <= args.keys():
        assert parse_cases(line, case_format=case_format)[0].args == args
    else:
        with pytest.raises(ShapeFileError, match="size|seed|spread"):
            parse_cases(line, case_format=case_format)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({"n": st.integers(1, 10**6), "sizes": st.lists(st.integers(1, 4096), min_size=1, max_size=4),
                                       "seed": st.integers(0, 2**31)},
                                      optional={"case": st.text(alphabet="abcxyz_", min_size=1, max_size=8)}),
                min_size=1, max_size=5))
def test_the_tests_file_written_from_task_yml_reads_back_as_its_cases(cases):
    case_format = CaseFormat(keys=("n", "sizes", "case", "seed"), list_keys=("sizes",), optional_keys=("case",),
                             text_keys=("case",))
    text = cases_as_tests_file(cases)
    assert len(text.splitlines()) == len(cases)
    read_back = [case.args for case in parse_cases(text, case_format=case_format)]
    assert read_back == [{**case, "sizes": tuple(case["sizes"])} for case in cases]


def test_an_unknown_key_names_the_keys_a_case_may_have():
    case_format = CaseFormat(keys=("n", "case", "seed"), optional_keys=("case",), text_keys=("case",))
    with pytest.raises(ShapeFileError, match="a case has exactly n, seed, and may have case"):
        parse_cases("n: 4; seed: 1; kind: dense", case_format=case_format)


# ---- the folder's own check ------------------------------------------------------------------------

def test_the_check_is_the_folders_own_on_the_calls_input():
    """An output off by half the folder's tolerance passes, as its eval would pass it, where the
    default comparison (match_reference's rtol 1e-5, atol 1e-8) would not; twice the tolerance fails."""
    problem = load_problem(FOLDER)
    case = problem.cases("tests")[2]
    data = problem.generate(case.args, case.args["seed"], "cpu")
    expected = problem.expected(data)
    size = case.args["size"]
    near = (expected + 0.5 * _tolerance(size) * (1 + expected.abs())).float()
    assert not problem.modules()["utils"].match_reference(None, near, lambda _: expected)[0]
    assert problem.own_check and check_call(expected, near, problem.outputs(data), True, problem, data) == (True, "")
    far = (expected + 2 * _tolerance(size) * (1 + expected.abs())).float()
    good, message = check_call(expected, far, problem.outputs(data), True, problem, data)
    assert not good and message.startswith("mismatch:")


def test_a_check_that_raises_on_the_output_is_the_outputs_failure():
    problem = load_problem(FOLDER)
    data = problem.generate({"size": 100}, 1, "cpu")
    on_no_device = torch.empty(100, device="meta")  # no arithmetic with the reference's tensor exists
    good, message = check_call(problem.expected(data), on_no_device, [], False, problem, data)
    assert not good and "check_implementation raised" in message


def test_loading_a_folder_again_writes_no_new_cases_files():
    first, again = load_problem(FOLDER), load_problem(FOLDER)
    assert (first.tests_file, first.benchmarks_file) == (again.tests_file, again.benchmarks_file)
    assert len(list(first.tests_file.parent.glob(f"{FOLDER.name}-*"))) == 2
    assert first.cases("tests")[1].args == {"size": 3000, "seed": 4102, "spread": "wide"}


# ---- the eval's flavour -----------------------------------------------------------------------------

@pytest.mark.parametrize("flavour", [flavour for flavour in FLAVOURS if flavour.markers], ids=lambda flavour: flavour.name)
def test_an_eval_is_told_by_what_its_source_holds(tmp_path, flavour):
    eval_file = tmp_path / "eval.py"
    eval_file.write_text("import torch\n" + "\n".join(f"# {marker}" for marker in flavour.markers) + "\n")
    assert flavour_of(eval_file) == flavour
    eval_file.write_text("import torch\n" + "\n".join(f"# {marker}" for marker in flavour.markers[:-1]) + "\n")
    assert flavour_of(eval_file) != flavour  # every marker, not some


def test_an_eval_not_shipped_is_told_by_its_name_and_an_unknown_one_keeps_the_plain_schedule(tmp_path):
    assert flavour_of(tmp_path / "eval_better_bench.py").name == "better-bench"
    assert flavour_of(tmp_path / "eval.py").parameters == PLAIN_EVAL
    (tmp_path / "eval.py").write_text("print('an eval of its own')\n")
    assert flavour_of(tmp_path / "eval.py") == UNKNOWN and UNKNOWN.parameters == PLAIN_EVAL
    problem = load_problem(FOLDER)  # the fixture's eval is its own: none of the known ones, run whole under --official
    assert problem.flavour == UNKNOWN.name and problem.eval_main == "eval.py" and not problem.official_refused


def test_pmpp_v2s_schedule():
    pmpp = next(flavour for flavour in FLAVOURS if flavour.name == "plain (pmpp_v2)").parameters
    assert (pmpp.flush_bytes, pmpp.benchmark_run, pmpp.min_total_ns) == (256 * 1024**2, (100, 10e9), 0)


def test_the_stopping_rule_waits_for_the_evals_own_floor():
    now = [0]
    durations = [1000.0, 1000.0, 1000.0]
    assert not stats.StoppingRule(100, 10e9, clock=lambda: now[0]).should_stop(durations, 0)  # NVIDIA's 100 ms floor
    assert stats.StoppingRule(100, 10e9, min_total_ns=0, clock=lambda: now[0] + 1).should_stop(durations, 0)


@pytest.mark.parametrize("ranking_by, score", [("geom", 4.0), ("mean", 5.0), ("last", 2.0)])
def test_ranking_by(ranking_by, score):
    assert stats.score([8.0, 2.0], ranking_by) == pytest.approx(score)
    with pytest.raises(ValueError, match="ranking_by 'best'"):
        stats.score([1.0], "best")


def test_torchs_named_results_cross_as_tuples():
    matrix = torch.randn(3, 4, 4)
    described = wire.returned(torch.geqrf(matrix), {})
    assert described[:2] == ("sequence", "tuple")
    rebuilt = wire.rebuild(described, [], None)
    assert isinstance(rebuilt, tuple) and torch.equal(rebuilt[0], torch.geqrf(matrix)[0])


# ---- experiments/problem_folders ---------------------------------------------------------------------

def test_the_check_finds_each_folders_solutions_with_their_expected_verdicts():
    found, skipped = check.submissions(FAMILY.parent, helion_error="ModuleNotFoundError: No module named 'helion'")
    assert [(submission.label, submission.expected) for submission in found] == [
        ("practice/running_sum_py: solutions/correct/fp32_cumsum.py", "pass"),
        ("practice/running_sum_py: solutions/wrong/exclusive.py", "fail")]
    assert skipped == []


def test_a_file_from_outside_its_folder_is_labelled_by_its_own_path(tmp_path):
    elsewhere = tmp_path / "fp32_cumsum_variant.py"
    assert check.Submission(FOLDER, elsewhere, "pass").label == f"practice/running_sum_py: {elsewhere}"


def test_helions_folders_are_skipped_with_the_imports_error_where_it_fails(tmp_path):
    for family in ("helion", "practice"):
        shutil.copytree(FOLDER, tmp_path / family / FOLDER.name)
    error = "ModuleNotFoundError: No module named 'helion'"
    found, skipped = check.submissions(tmp_path, helion_error=error)
    assert {submission.folder.parent.name for submission in found} == {"practice"}
    assert skipped == [f"helion/{FOLDER.name}: helion does not import here ({error})"]
    found, skipped = check.submissions(tmp_path, helion_error="")
    assert {submission.folder.parent.name for submission in found} == {"helion", "practice"} and skipped == []


def test_the_eval_runs_in_a_folder_laid_out_as_the_runner_lays_it_out():
    submission = check.Submission(FOLDER, FOLDER / "solutions" / "wrong" / "exclusive.py", "fail")
    cases = [{"size": 1000, "seed": 4101}, {"size": 3000, "seed": 4102, "spread": "wide"}]
    folder = check.eval_folder(submission, cases)
    try:
        assert sorted(path.name for path in folder.iterdir()) == ["cases.txt", "eval.py", "reference.py", "submission.py",
                                                                 "task.py", "utils.py"]
        assert (folder / "cases.txt").read_text() == "size: 1000; seed: 4101\nsize: 3000; seed: 4102; spread: wide\n"
    finally:
        shutil.rmtree(folder)
    logged = []
    assert check.run_eval(submission, "test", cases, logged.append) == ("fail", [])
    assert '"test.0.status": "fail"' in logged[0] and '"test.1.spec": "size: 3000; seed: 4102; spread: wide"' in logged[0]


@pytest.mark.parametrize("exit_status, passed, said", [(0, True, "pass"), (1, False, "fail"), (116, False, "no verdict (exit 116)"),
                                                         (2, None, "no verdict (exit 2)")])
def test_the_judges_infrastructure_failure_is_no_fail_in_the_table(monkeypatch, exit_status, passed, said):
    """A run whose judge's machine failed (exit 116, its document still saying passed: false) is
    no verdict on the file: the row cannot agree or disagree on it."""
    document = json.dumps({"passed": passed, "cases": []} if passed is not None else {"cases": []})
    monkeypatch.setattr(check.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, exit_status, document, ""))
    submission = check.Submission(FOLDER, FOLDER / "solutions" / "correct" / "fp32_cumsum.py", "pass")
    assert check.run_ours(submission, "test", [{"size": 1000, "seed": 4101}], "cpu", False, lambda text: None) == (said, [])


@pytest.mark.parametrize("theirs, ours, official, fault, agrees", [
    ("pass", "pass", "pass", None, True), ("pass", "fail", "pass", None, False), ("pass", "pass", "fail", None, False),
    ("fail", "fail", "fail", None, False),  # all alike, but not what the folder files the solution under
    ("fail", "fail", "fail", "a fault of the folder's", True), ("fail", "pass", "fail", "a fault of the folder's", False)])
def test_a_row_agrees_where_every_verdict_is_the_one_due(monkeypatch, theirs, ours, official, fault, agrees):
    submission = check.Submission(FOLDER, FOLDER / "solutions" / "correct" / "fp32_cumsum.py", "pass")
    monkeypatch.setattr(check, "run_eval", lambda *args: (theirs, []))
    monkeypatch.setattr(check, "run_ours", lambda submission, mode, cases, device, official_, log: (official if official_ else ours, []))
    monkeypatch.setattr(check, "load_problem", lambda folder: type("Followed", (), {"official_refused": ""}))
    monkeypatch.setattr(check, "KNOWN_FAULTS", {submission.label: fault} if fault else {})
    row = check.compare_tests(submission, "cpu", lambda text: None)
    assert (row.theirs, row.ours, row.ours_official, row.agrees) == (theirs, ours, official, agrees)
    assert (fault in row.note) if fault and agrees else (row.note == "") == agrees


@pytest.mark.parametrize("ours, official, agrees", [("fail", "pass", True), ("pass", "pass", False), ("fail", "fail", False)])
def test_a_wrong_solution_its_eval_passes_agrees_where_official_passes_it_and_the_default_fails_it(monkeypatch, ours,
                                                                                                 official, agrees):
    submission = check.Submission(FOLDER, FOLDER / "solutions" / "wrong" / "exclusive.py", "fail")
    monkeypatch.setattr(check, "run_eval", lambda *args: ("pass", []))
    monkeypatch.setattr(check, "run_ours", lambda submission, mode, cases, device, official_, log: (official if official_ else ours, []))
    monkeypatch.setattr(check, "load_problem", lambda folder: type("Followed", (), {"official_refused": ""}))
    monkeypatch.setattr(check, "KNOWN_FAULTS", {submission.label: "the eval misses this cheat"})
    assert check.compare_tests(submission, "cpu", lambda text: None).agrees == agrees


@pytest.mark.parametrize("theirs, ours, agrees, said", [
    ([100.0, 101.0, 99.0], [103.0, 104.0, 102.0], True, ""),  # +3 %
    ([100.0, 160.0, 95.0], [108.0, 109.0, 107.0], True, "within the eval's own spread over 3 runs (65.0%)"),
    ([100.0, 101.0, 99.0], [110.0, 111.0, 109.0], False, "beyond 5% and beyond the eval's own spread (2.0%)")])
def test_means_agree_within_five_percent_or_the_evals_own_spread(monkeypatch, theirs, ours, agrees, said):
    submission = check.Submission(FOLDER, FOLDER / "solutions" / "correct" / "fp32_cumsum.py", "pass")
    turns = {"eval": iter(theirs), "ours": iter(ours)}
    monkeypatch.setattr(check, "run_eval", lambda *args: ("pass", [next(turns["eval"])]))
    monkeypatch.setattr(check, "run_ours", lambda *args: ("pass", [next(turns["ours"])]))
    row = check.Row(submission)
    check.compare_means(row, 1, "cpu", lambda text: None, repeats=3)
    assert row.agrees == agrees and said in row.note and "(medians of 3)" in row.means


# ---- end to end -------------------------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("solution, exit_status", [("correct/fp32_cumsum.py", 0), ("wrong/exclusive.py", 112)])
def test_the_judge_gives_the_solutions_their_verdicts_on_the_cpu(solution, exit_status):
    completed = subprocess.run([sys.executable, "-m", "harness", "test", "--problem", str(FOLDER), "--device", "cpu",
                                "--submission", str(FOLDER / "solutions" / solution), "--json"],
                               cwd=ROOT, capture_output=True, text=True, timeout=300)
    document = json.loads(completed.stdout)
    assert completed.returncode == exit_status and document["passed"] == (exit_status == 0), completed.stderr
    assert [case["status"] for case in document["cases"]] == ["pass" if exit_status == 0 else "fail"] * 3


@pytest.mark.e2e
def test_a_cache_keyed_on_the_length_fails_the_recheck_under_the_folders_own_check():
    completed = subprocess.run([sys.executable, "-m", "harness", "benchmark", "--problem", str(FOLDER), "--device", "cpu",
                                "--submission", str(FAMILY.parent / "running_sum_caches_by_length.py"), "--max-repeats", "5",
                                "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    case = json.loads(completed.stdout)["cases"][0]
    assert completed.returncode == 112 and case["status"] == "fail", completed.stderr
    assert case["message"].startswith(("recheck on fresh", "probe on edited")) and "mismatch" in case["message"]


STAGED = ROOT / ".reference-kernels" / "problems"


@pytest.mark.e2e
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the folders' generators draw on CUDA: needs a CUDA device")
@pytest.mark.skipif(not STAGED.is_dir(), reason="no folders staged: experiments/problem_folders/stage.sh PATH_TO_REFERENCE_KERNELS")
def test_every_staged_pmpp_v2_solution_gets_its_evals_verdict(tmp_path):
    completed = subprocess.run([sys.executable, str(ROOT / "experiments" / "problem_folders" / "check.py"), "--only", "pmpp_v2",
                                "--benchmarks", "0", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                               timeout=900, env={**os.environ})
    assert completed.returncode == 0, completed.stdout[-4000:]
