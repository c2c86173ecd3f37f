"""Every built-in problem's runner files stand alone, as reference-kernels' problem folders do:
they import the standard library, torch and each other only; copied into a folder of their own
and imported there by their plain names, in a Python that has no harness, they draw the same
inputs and give the same references as the harness's loading of them; and where two of them (or
the judge's scale_layout.py) carry the same helper, it is the same code."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.problems import PROBLEMS
from harness.problems.folder import RUNNER_MODULES

REPO_ROOT = Path(__file__).resolve().parents[1]
ALLOWED_TOP_LEVEL = set(sys.stdlib_module_names) | {"torch"} | set(RUNNER_MODULES)
SMALL = {
    "nvfp4_gemm": dict(m=128, n=256, k=256, l=2),
    "nvfp4_gemv": dict(m=256, k=512, l=2),
    "nvfp4_dual_gemm": dict(m=192, n=128, k=320, l=2),
    "nvfp4_group_gemm": dict(m=(72, 160), n=(128, 256), k=(256, 512), g=2),
}
SEEDS = (1, 4321)

# Helpers a runner file defines for itself and another (or the judge) defines again: each name
# must have the same source wherever it is defined.
SHARED_REFERENCE_NAMES = (
    "sf_vec_size", "ATOM_ROWS_INNER", "ATOM_ROWS_OUTER", "ATOM_ROWS", "ATOM_SF_COLS", "DRAWN_TO_PERMUTED",
    "E2M1_MAGNITUDES", "ceil_div", "atoms_shape", "permuted_index", "place_in_atoms", "to_blocked", "decode_e2m1",
    "dequantize", "exact_block_scaled_mm", "round_to_float16",
)
SHARED_UTILS_NAMES = (
    "set_seed", "get_device", "_mismatch_details", "verbose_allclose", "verbose_allequal", "make_match_reference",
    "DeterministicContext", "_fill_and_free", "clear_l2_cache_large",
)

# Run in a fresh `python -I` (no PYTHONPATH, no current folder on sys.path): for each folder, its
# files alone on sys.path under their plain names, then the digests of every input tensor and of
# the reference for each seed.
STANDALONE = r"""
import hashlib, json, sys
import torch

def digest(value, hasher):
    if isinstance(value, torch.Tensor):
        hasher.update(f"{value.dtype} {tuple(value.shape)} {value.stride()}".encode())
        hasher.update(value.reshape(-1).clone().view(torch.uint8).numpy().tobytes())
    elif isinstance(value, (list, tuple)):
        for item in value:
            digest(item, hasher)
    else:
        hasher.update(repr(value).encode())
    return hasher

def digests(generate_input, ref_kernel, spec, seeds):
    found = []
    for seed in seeds:
        data = generate_input(**spec, seed=seed, device="cpu")
        inputs = digest(data, hashlib.sha256()).hexdigest()
        found.append([inputs, digest(ref_kernel(data), hashlib.sha256()).hexdigest()])
    return found

if __name__ == "__main__":
    jobs = json.loads(sys.argv[1])
    found = {}
    for name, (folder, spec, seeds) in jobs.items():
        sys.path.insert(0, folder)
        for module in ("task", "utils", "reference"):
            sys.modules.pop(module, None)
        import reference
        found[name] = digests(reference.generate_input, reference.ref_kernel, spec, seeds)
        sys.path.remove(folder)
    outside = sorted(module for module in sys.modules if module.split(".")[0] == "harness")
    print(json.dumps({"digests": found, "harness_modules": outside}))
"""


def _imports(tree: ast.AST):
    """(top-level module name, line, optional) for every import in `tree`; optional where a try
    around it catches ImportError."""
    optional_bodies = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(handler.type, ast.Name) and handler.type.id in ("ImportError", "ModuleNotFoundError")
                for handler in node.handlers):
            optional_bodies.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno, id(node) in optional_bodies
        elif isinstance(node, ast.ImportFrom):
            yield ("." * node.level) + (node.module or "").split(".")[0], node.lineno, id(node) in optional_bodies


def _definitions(path: Path) -> dict[str, str]:
    """Top-level name -> ast dump of its def, class or assignment."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = ast.dump(node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = ast.dump(node.value)
    return found


def _runner_file_paths(module: str) -> list[Path]:
    return sorted({problem.runner_files()[module].resolve() for problem in PROBLEMS.values()})


@pytest.mark.parametrize("name", PROBLEMS)
def test_runner_files_import_the_standard_library_torch_and_each_other_only(name):
    for module, path in PROBLEMS[name].runner_files().items():
        outside = [f"{path.relative_to(REPO_ROOT)}:{line}: {imported}"
                   for imported, line, optional in _imports(ast.parse(path.read_text()))
                   if imported not in ALLOWED_TOP_LEVEL and not optional]
        assert not outside, f"{module}.py imports beyond the standard library, torch and its folder: {outside}"


def test_the_import_check_sees_a_harness_import_and_lets_an_optional_one_pass():
    tree = ast.parse("import os\ntry:\n    import numpy\nexcept ImportError:\n    pass\n"
                     "def f():\n    from harness.problems import PROBLEMS\n")
    outside = [imported for imported, _, optional in _imports(tree) if imported not in ALLOWED_TOP_LEVEL and not optional]
    assert outside == ["harness"]


def test_each_folder_imported_alone_draws_and_references_as_the_harness_does(tmp_path):
    jobs = {}
    for name, spec in SMALL.items():
        folder = tmp_path / name
        folder.mkdir()
        for module, path in PROBLEMS[name].runner_files().items():
            shutil.copyfile(path, folder / f"{module}.py")
        jobs[name] = (str(folder), {key: list(value) if isinstance(value, tuple) else value for key, value in spec.items()},
                      SEEDS)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-I", "-c", STANDALONE, json.dumps(jobs)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    standalone = json.loads(result.stdout)
    assert standalone["harness_modules"] == []

    helpers = {}
    exec(compile(STANDALONE, "standalone", "exec"), helpers)
    for name, spec in SMALL.items():
        problem = PROBLEMS[name]
        generate = lambda seed, device="cpu", **_: problem.generate(spec, seed, device)  # noqa: E731
        in_harness = helpers["digests"](generate, problem.expected, spec, SEEDS)
        assert standalone["digests"][name] == in_harness, name
        assert len({inputs for inputs, _ in in_harness}) == len(SEEDS)  # the seeds draw different data


@pytest.mark.parametrize(("module", "names", "judge_copy"), [
    ("reference", SHARED_REFERENCE_NAMES, REPO_ROOT / "harness" / "problems" / "scale_layout.py"),
    ("utils", SHARED_UTILS_NAMES, None),
])
def test_a_helper_defined_in_several_runner_files_is_the_same_code_in_each(module, names, judge_copy):
    paths = _runner_file_paths(module) + ([judge_copy] if judge_copy else [])
    assert len(paths) >= 2
    definitions = {path: _definitions(path) for path in paths}
    for name in names:
        holders = {str(path.relative_to(REPO_ROOT)): found[name] for path, found in definitions.items() if name in found}
        assert len(holders) >= 2, f"{name} is defined in {list(holders)} only: drop it from the shared names"
        assert len(set(holders.values())) == 1, f"{name} differs between {list(holders)}"
