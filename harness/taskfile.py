"""task.yml in the competition's structure, generated from shapes/ so that the shapes live in one place."""

import json
from pathlib import Path

from harness.shapes import official_cases

TASK_YML = Path(__file__).resolve().parent.parent / "task.yml"

HEADER = """\
# Generated from shapes/tests.txt and shapes/benchmarks.txt by `python -m harness task-yml`.
# Edit the shapes there, then regenerate; a unit test fails while this file is stale.
files:
  - {"name": "submission.py", "source": "@SUBMISSION@"}
  - {"name": "reference.py", "source": "reference.py"}

lang: "py"

description: |
  NVFP4 block-scaled GEMM for NVIDIA B200. custom_kernel receives
  (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c):
  * a: M x K x L, K-major, nvfp4 (e2m1, two per byte: torch.float4_e2m1fn_x2)
  * b: N x K x L, K-major, nvfp4
  * sfa: M x (K // 16) x L, K-major, fp8 (e4m3fn); sfb: N x (K // 16) x L
  * sfa_permuted / sfb_permuted: the same scales in the (32, 4, rest_mn, 4, rest_k, L) layout
  * c: M x N x L, fp16, to be written and returned
  C = sum over K of A * SFA * B * SFB, checked with rtol = atol = 1e-3.
  M and N are multiples of 128 and K a multiple of 256. Ranking: geometric mean of the
  benchmark means. Speed of light on B200 at 1.5 GHz, max(FP4 math, DRAM traffic):
    M   N    K     L time[us]
    128 7168 16384 1 8.994
    128 4096 7168  1 2.354
    128 7168 2048  1 1.333

# The competition runs its eval_better_bench.py as eval.py; `python -m harness` stands in locally.
config:
  main: "eval.py"
"""


def _case_lines(name: str) -> str:
    return "".join(f"  - {json.dumps(case.args)}\n" for case in official_cases(name))


def render() -> str:
    return f'{HEADER}\ntests:\n{_case_lines("tests")}\nbenchmarks:\n{_case_lines("benchmarks")}\nranking_by: "geom"\n'


def is_current(path: Path = TASK_YML) -> bool:
    return path.exists() and path.read_text() == render()


def write(path: Path = TASK_YML) -> Path:
    path.write_text(render())
    return path
