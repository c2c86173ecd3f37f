"""experiments/official_vs_eval: the folder it lays out for the competition's eval, and how it
reads the eval's figures (the timing itself needs a GPU and the competition's files)."""

import importlib.util
import shutil
from pathlib import Path

import pytest

from harness.problems import load_problem

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("official_vs_eval", ROOT / "experiments" / "official_vs_eval" / "run.py")
experiment = importlib.util.module_from_spec(spec)
spec.loader.exec_module(experiment)

EVAL_SOURCE = ("import torch.cuda\nfrom cutlass.cute.nvgpu.common import OpError\nfrom utils import set_seed\n"
               "NUM_ITERATIONS_PER_BENCHMARK = 50\n")


def test_the_eval_folder_holds_the_runner_files_and_an_optional_op_error(tmp_path):
    eval_dir = tmp_path / "competition"
    eval_dir.mkdir()
    (eval_dir / "eval_better_bench.py").write_text(EVAL_SOURCE)
    (eval_dir / "utils.py").write_text("def set_seed(seed=42):\n    pass\n")
    problem = load_problem("nvfp4_gemm")
    folder = experiment.eval_folder(eval_dir, problem, ROOT / "submission.py", "m: 1\n")
    try:
        names = sorted(path.name for path in folder.iterdir())
        assert names == ["benchmarks.txt", "eval.py", "hopper_stand_in.py", "reference.py", "submission.py", "task.py",
                         "utils.py"]
        written = (folder / "eval.py").read_text()
        assert experiment.OP_ERROR_OPTIONAL.rstrip("\n") in written and "NUM_ITERATIONS_PER_BENCHMARK = 50" in written
        assert (folder / "submission.py").read_text() == (ROOT / "submission.py").read_text()
        assert (folder / "reference.py").read_text() == (ROOT / "reference.py").read_text()  # the kit's, not the eval's
        assert (folder / "utils.py").read_text() == (eval_dir / "utils.py").read_text()  # the eval's own
    finally:
        shutil.rmtree(folder)


def test_an_eval_that_imports_op_error_otherwise_is_refused(tmp_path):
    (tmp_path / "eval_better_bench.py").write_text(EVAL_SOURCE.replace("import OpError", "import OpError  # the class"))
    (tmp_path / "utils.py").write_text("")
    with pytest.raises(SystemExit, match="imports OpError in a way this experiment does not make optional"):
        experiment.eval_folder(tmp_path, load_problem("nvfp4_gemm"), ROOT / "submission.py", "m: 1\n")


def test_the_eval_runs_in_its_folder_and_its_popcorn_lines_are_read(tmp_path):
    """A stand-in for the eval (the real one needs a GPU): it writes its figures to POPCORN_FD
    and prints plenty besides, as the eval's warnings do."""
    (tmp_path / "eval_better_bench.py").write_text(
        "import os, sys\n"
        "print('x' * 200000, file=sys.stderr)\n"
        "with os.fdopen(int(os.environ['POPCORN_FD']), 'w') as out:\n"
        "    out.write('check: pass\\nbenchmark.1.mean: 7.5\\nbenchmark.0.mean: 31.25\\n')\n")
    (tmp_path / "utils.py").write_text("")
    folder = experiment.eval_folder(tmp_path, load_problem("nvfp4_gemm"), ROOT / "submission.py", "m: 1\n")
    try:
        assert experiment.run_eval(folder) == [31.25, 7.5]
    finally:
        shutil.rmtree(folder)


def test_the_eval_means_are_read_per_shape_in_order():
    popcorn = ("benchmark-count: 2\nbenchmark.1.spec: m: 128\nbenchmark.1.mean: 5741.27\nbenchmark.0.mean: 36880.4\n"
               "benchmark.0.std: 12.5\ncheck: pass\n")
    assert experiment.popcorn_means(popcorn) == [36880.4, 5741.27]
    assert experiment.popcorn_means("check: fail\n") == []


# ---- process_context.py: the eval under each condition in which --official's worker differs -----------

context_spec = importlib.util.spec_from_file_location("process_context", ROOT / "experiments" / "official_vs_eval" / "process_context.py")
process_context = importlib.util.module_from_spec(context_spec)
context_spec.loader.exec_module(process_context)


def test_the_eval_runs_in_the_environment_a_worker_gets(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGES_SECRET_TOKEN", "not for workers")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    environment = process_context.worker_environment(tmp_path)
    assert "JUDGES_SECRET_TOKEN" not in environment and environment["CUDA_VISIBLE_DEVICES"] == "0"
    assert environment["HOME"] == str(tmp_path)


def test_the_changed_processes_and_judges_are_python_that_names_what_the_harness_has():
    import ast
    import inspect

    import harness.judge.rounds as rounds

    ast.parse(process_context.SITECUSTOMIZE)
    ast.parse(process_context.NEIGHBOUR)
    assert callable(rounds.own_flush_bytes)
    assert list(inspect.signature(rounds.JudgeClock.__init__).parameters) == ["self", "device", "flush_bytes", "own_flush"]
    assert {layer for variant in process_context.VARIANTS for layer in variant.layers_off} == set(process_context.LAYERS)
    assert {variant.patch for variant in process_context.VARIANTS if variant.patch} <= (
        set(process_context.SCHEDULING) | {"idle gap", "gpu gap", "host gap", "longer wait"})


def test_a_variants_line_gives_its_means_and_their_difference_from_the_first():
    assert process_context.line("eval beside", [110e3, 45e3], "pass", [100e3, 50e3], 12.0).split()[2:] == [
        "110.00", "45.00", "+10.0%", "-10.0%", "(12", "s)"]
    assert "none (exit 1)" in process_context.line("eval", [], "none (exit 1)", None, 3.0)
