"""What a run sets up (harness/judge/modes.py Executor.open): the pieces in their named order, each
from the module that owns it, taken down in the reverse order; constructing an Executor itself
sets nothing up."""

import ast
import io
from pathlib import Path

import pytest
from rich.console import Console

from harness.judge import modes
from harness.problems import PROBLEMS
from harness.results.console import Reporter

ROOT = Path(__file__).resolve().parent.parent


class Recorder:
    """Stands in for each piece of a run, noting when it is built and taken down."""

    def __init__(self):
        self.calls: list[str] = []

    def piece(self, name: str, **attributes):
        calls = self.calls

        class Piece:
            def __init__(self, *args, **kwargs):
                calls.append(name)
                self.__dict__.update(attributes)

            def close(self, ask_to_exit=False):
                calls.append(f"{name} closed")

            def describe(self, *args):
                return None

        return Piece


class RecordedWorkers:
    pids = frozenset()
    folders_root = None

    def __init__(self, recorder: Recorder):
        self._recorder = recorder

    def worker(self, sandbox, log_dir, files, options, describe, echo=False):
        name = "partner" if echo else "worker"
        return self._recorder.piece(name)()


@pytest.fixture
def recorded(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(modes, "protect_the_judge", lambda: recorder.calls.append("protection") or ["refused for the test"])
    monkeypatch.setattr(modes, "Sandbox", recorder.piece("sandbox", refused=[], layers={}))
    monkeypatch.setattr(modes, "JudgeClock", recorder.piece("clock"))
    monkeypatch.setattr(modes, "SharedPool", recorder.piece("shared memory"))
    monkeypatch.setattr(modes, "end_strays", lambda pids: recorder.calls.append("strays ended"))
    monkeypatch.setattr(modes, "import_the_row_writer", lambda: recorder.calls.append("row writer imported"))
    monkeypatch.setattr(modes, "CodeWatch", recorder.piece("code watch"))
    return recorder


def reporter() -> Reporter:
    return Reporter(console=Console(file=io.StringIO(), width=120))


@pytest.mark.parametrize("timed", [False, True])
def test_a_run_builds_its_pieces_in_the_named_order_and_takes_them_down_in_reverse(recorded, timed, tmp_path):
    options = modes.RunOptions(submission=ROOT / "tests" / "fixtures" / "torch_submission.py", device="cpu")
    with modes.Executor.open(options, reporter(), timed=timed, workers=RecordedWorkers(recorded)) as executor:
        built = list(recorded.calls)
        assert isinstance(executor, modes.Executor)
    workers = ["worker", "partner"] if timed else ["worker"]
    assert built == ["protection", "sandbox", "clock", "shared memory", *workers, "row writer imported", "code watch"]
    assert recorded.calls[len(built):] == [f"{name} closed" for name in workers] + ["strays ended", "sandbox closed"]


@pytest.mark.parametrize("timed", [False, True])
def test_only_a_timed_run_asks_its_clock_for_the_eval_s_flush(monkeypatch, recorded, timed):
    """Test mode flushes nothing (the competition's test mode does not): test-mode runs side by
    side on one GPU would otherwise each hold a flush buffer of up to half the memory left."""
    asked = []
    monkeypatch.setattr(modes, "JudgeClock", lambda device, flush_bytes, own_flush=False: asked.append(flush_bytes))
    options = modes.RunOptions(submission=ROOT / "tests" / "fixtures" / "torch_submission.py", device="cpu")
    with modes.Executor.open(options, reporter(), timed=timed, workers=RecordedWorkers(recorded)):
        pass
    assert asked == [options.problem.eval.flush_bytes if timed else 0] and options.problem.eval.flush_bytes > 0


def test_a_flush_of_no_bytes_holds_no_buffer_on_any_device():
    import torch

    from harness.shared.l2_flush import L2Flush

    flush = L2Flush(torch.device("cuda", 0), 0)  # no CUDA call is made: nothing to allocate
    flush()
    assert (flush.buffer, flush.bytes) == (None, 0) and "untimed" in flush.description


def test_what_a_run_sets_up_is_taken_down_when_building_it_fails(recorded, monkeypatch):
    def no_watch(*args, **kwargs):
        raise OSError("the watch could not stamp a file")

    monkeypatch.setattr(modes, "CodeWatch", no_watch)
    options = modes.RunOptions(submission=ROOT / "tests" / "fixtures" / "torch_submission.py", device="cpu")
    with pytest.raises(OSError), modes.Executor.open(options, reporter(), workers=RecordedWorkers(recorded)):
        pass
    assert recorded.calls[-3:] == ["worker closed", "strays ended", "sandbox closed"]


def test_the_judges_code_is_loaded_before_the_watch_stamps_it(monkeypatch):
    """The problem's files and pandas (the rows are appended after the cases) are in this
    process before the watch takes its stamps, so that it watches them."""
    import sys

    problem = PROBLEMS["nvfp4_gemv"]
    stamped_with = {}

    def watch(extra=()):
        stamped_with["modules"] = set(sys.modules)
        stamped_with["extra"] = extra

    monkeypatch.setattr(modes, "CodeWatch", watch)
    modes._watch_the_judges_code(problem)
    assert "pandas" in stamped_with["modules"]
    assert {module.__name__ for module in problem.modules().values()} <= stamped_with["modules"]
    assert set(stamped_with["extra"]) == set(problem.runner_files().values())


def test_constructing_an_executor_sets_nothing_up(recorded):
    """Everything a run sets up happens in Executor.open; the constructor only keeps what it is given."""
    options = modes.RunOptions(submission=ROOT / "tests" / "fixtures" / "torch_submission.py", device="cpu")
    modes.Executor(options, reporter(), clock=None, pool=None, worker=None, partner=None,
                   workers=RecordedWorkers(recorded), watch=None, reuse=False, deadline=0.0, sandbox_layers={},
                   runner_copies=None)
    assert recorded.calls == []


def test_the_modes_import_nothing_inside_a_function():
    """An import in a function body of modes.py would be one done for its side effect, out of
    sight of the run's named order."""
    tree = ast.parse((ROOT / "harness" / "judge" / "modes.py").read_text())
    functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    imports = [(function.name, inner.lineno) for function in functions for inner in ast.walk(function)
               if isinstance(inner, (ast.Import, ast.ImportFrom))]
    assert imports == []
