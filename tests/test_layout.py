"""Each module sits in the folder of the process that runs it (docs/harness-layout.md): what the
judge and the worker both import sits at harness/'s top level and is named as shared; the worker
never imports the judge's folder; the judge reads only the worker's modules the layout names."""

import ast
import re
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "harness"
LAYOUT = (HARNESS.parent / "docs" / "harness-layout.md").read_text()


def harness_imports(folder: str) -> set[str]:
    """Every harness module the folder's files import, at any depth of the file: `harness.x.y`."""
    imported = set()
    for path in (HARNESS / folder).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
                for alias in node.names:
                    candidate = f"{node.module}.{alias.name}"
                    as_path = HARNESS.parent / candidate.replace(".", "/")
                    imported.add(candidate if as_path.with_suffix(".py").exists() or as_path.is_dir() else node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names if alias.name.startswith("harness."))
    return imported


def shared_paragraph() -> str:
    return " ".join(LAYOUT[LAYOUT.index("**Shared by both processes.**"):].split("\n\n", 1)[0].split())


def top_level_file(module: str) -> str:
    name = module.split(".")[1]
    return f"{name}/" if (HARNESS / name).is_dir() else f"{name}.py"


def test_what_both_processes_import_sits_at_the_top_level_and_is_named_as_shared():
    # Whatever the worker imports outside its own folder, the judge's side imports too (or may).
    shared = {".".join(module.split(".")[:2]) for module in harness_imports("runner")
              if not module.startswith(("harness.runner", "harness.judge"))}
    paragraph = shared_paragraph()
    named = set(re.findall(r"`(\w+(?:\.py|/))`", paragraph.split("Three of the")[0]))
    assert {top_level_file(module) for module in shared} <= named, paragraph


def test_the_worker_never_imports_the_judges_folder():
    assert not [module for module in harness_imports("runner") if module.startswith("harness.judge")]


def test_the_judge_reads_only_the_workers_modules_the_layout_names():
    read = {module.split(".")[2] for module in harness_imports("judge") if module.startswith("harness.runner.")}
    paragraph = shared_paragraph()
    assert read and all(f"`runner/{name}.py`" in paragraph for name in read), (read, paragraph)
