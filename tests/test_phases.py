"""A case's seconds per phase (harness/judge/phases.py) and a worker's traceback as --json gives it
(harness/results/document.py error_trace)."""

import time
from pathlib import Path

from harness.judge.phases import PhaseTimer, phase_of
from harness.results.document import error_trace, raised_where


def test_each_progress_line_starts_its_phase_and_the_time_before_the_first_is_the_start():
    timer, shown = PhaseTimer(), []
    progress = timer.wrap(shown.append)
    time.sleep(0.02)
    progress("generating inputs")
    time.sleep(0.03)
    progress(None)  # a wait's tick: no phase
    progress("timing, 3 rounds")
    time.sleep(0.01)
    progress("timing, 9 rounds")
    progress("an unknown line")
    seconds = timer.finish()
    assert shown == ["generating inputs", None, "timing, 3 rounds", "timing, 9 rounds", "an unknown line"]
    assert set(seconds) == {"start", "references", "rounds"}
    assert seconds["start"] >= 0.02 and seconds["references"] >= 0.03 and seconds["rounds"] >= 0.01
    assert phase_of("recheck on fresh and near-duplicate inputs") == phase_of("recorded round (CUPTI)") == "checks"


HARNESS = Path(__file__).resolve().parent.parent / "harness"
WORKER_OUTPUT = f"""starting
Traceback (most recent call last):
  File "{HARNESS}/runner/worker.py", line 110, in serve
    encoded = wire.encode((wire.REPLY, getattr(calls, operation)(*arguments)))
  File "/tmp/nvfp4-pool-x/runner-y/submission.py", line 12, in custom_kernel
    return helper(data)
  File "/tmp/nvfp4-pool-x/runner-y/submission.py", line 7, in helper
    raise ValueError("no")
ValueError: no
"""


def test_the_traceback_names_the_users_file_and_where_it_was_raised():
    text = error_trace("an earlier line\n" + WORKER_OUTPUT, "mine/kernel.py")
    assert 'File "mine/kernel.py", line 12, in custom_kernel' in text and "worker.py" not in text
    assert text.startswith("Traceback") and text.endswith("ValueError: no")
    assert error_trace("no traceback here", "mine/kernel.py") is None
    assert raised_where("submission.py:7", "mine/kernel.py") == {"file": "mine/kernel.py", "line": 7}
    assert raised_where("torch/functional.py:88", "mine/kernel.py") == {"file": "torch/functional.py", "line": 88}
    assert raised_where("", "mine/kernel.py") is None
