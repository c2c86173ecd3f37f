"""harness/ is laid out by who uses each module (docs/harness-layout.md): packages in a layer order
the doc states, each importing only its own and lower layers; nothing imports the command line;
no modules import each other, directly or round a longer loop; what the judge and the worker both
import sits in the folders the doc names as shared; the worker never imports the judge's folder,
and the judge reads only the worker's modules the doc names."""

import ast
import re
from pathlib import Path

import networkx
import pytest

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "harness"
LAYOUT = (ROOT / "docs" / "harness-layout.md").read_text()
# A module may stand loose in harness/ only as the command line or the public module under it.
LOOSE_MODULES = {"__init__", "__main__", "cli", "api"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(path: Path) -> bool:
    """A file of the package: every folder from harness/ down to it is a package (a built-in
    problem's folder holds the problem's own files, imported under names of their own)."""
    return all((folder / "__init__.py").exists() for folder in path.parents if HARNESS in (folder, *folder.parents))


MODULES = {module_name(path): path for path in sorted(HARNESS.rglob("*.py")) if is_module(path)}


def imported_modules(path: Path) -> set[str]:
    """Every harness module the file imports, at any depth of the file (a function's import too)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "harness":
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                imported.add(candidate if candidate in MODULES else node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names if alias.name in MODULES)
    imported.discard("harness")  # the package's root, a name space: `import harness` finds its folder
    return imported


GRAPH = networkx.DiGraph()
GRAPH.add_nodes_from(MODULES)
GRAPH.add_edges_from((module, imported) for module, path in MODULES.items()
                     for imported in imported_modules(path) if imported != module)


def section(heading: str) -> str:
    """The doc's text under `heading`, up to the next heading."""
    start = LAYOUT.index(heading)
    following = re.search(r"^#", LAYOUT[start + len(heading):], re.M)
    return LAYOUT[start:start + len(heading) + following.start()] if following else LAYOUT[start:]


def layers() -> list[list[str]]:
    """The layer order, top first: each numbered line of the doc's layers section, as the files
    and folders of harness/ named in backquotes before its colon (`cli.py`, `judge/`)."""
    lines = re.findall(r"^\d+\. (.+?):", section("### Layers"), re.M)
    return [re.findall(r"`([\w.]+/?)`", line) for line in lines]


def home(module: str) -> str:
    """The file or folder of harness/ a module sits in: `cli.py` for harness.cli, `judge/` for
    harness.judge.modes."""
    name = module.split(".")[1]
    return f"{name}/" if (HARNESS / name).is_dir() else f"{name}.py"


def layer_of(module: str) -> int:
    return next(index for index, homes in enumerate(layers()) if home(module) in homes)


def cycle_through(module: str) -> list[str]:
    """The shortest loop of imports from `module` back to it, or [] where there is none."""
    loops = [networkx.shortest_path(GRAPH, imported, module) for imported in GRAPH.successors(module)
             if networkx.has_path(GRAPH, imported, module)]
    return [module, *min(loops, key=len)] if loops else []


def shared_paragraph() -> str:
    return " ".join(LAYOUT[LAYOUT.index("**Shared by both processes.**"):].split("\n\n", 1)[0].split())


def reached_from(package: str) -> set[str]:
    """Every module a package's modules import, directly or through others."""
    starts = [module for module in MODULES if module.startswith(f"harness.{package}.")]
    return set().union(*(networkx.descendants(GRAPH, module) for module in starts))


MODULES_BUT_THE_ROOT = sorted(module for module in MODULES if module != "harness")


@pytest.mark.parametrize("module", MODULES_BUT_THE_ROOT)
def test_no_module_imports_the_command_line(module):
    if module != "harness.__main__":  # the program's entry runs the command line
        assert not GRAPH.has_edge(module, "harness.cli"), f"{module} imports harness.cli"


@pytest.mark.parametrize("module", MODULES_BUT_THE_ROOT)
def test_no_module_is_part_of_an_import_cycle(module):
    loop = cycle_through(module)
    assert not loop, " -> ".join(loop)


@pytest.mark.parametrize("module", MODULES_BUT_THE_ROOT)
def test_each_module_imports_only_its_own_and_lower_layers(module):
    above = sorted(imported for imported in GRAPH.successors(module) if layer_of(imported) < layer_of(module))
    assert not above, f"{module} ({home(module)}) imports from a layer above it: {above}"


def test_the_layer_order_names_every_folder_and_loose_module_of_harness_once():
    named = [name for homes in layers() for name in homes]
    assert len(named) == len(set(named)), named
    assert {home(module) for module in MODULES_BUT_THE_ROOT} <= set(named), layers()


def test_only_the_command_line_and_the_public_module_stand_loose_in_harness():
    loose = {path.stem for path in HARNESS.glob("*.py")}
    assert loose <= LOOSE_MODULES, sorted(loose - LOOSE_MODULES)


def test_what_both_processes_import_sits_in_the_folders_named_as_shared():
    # Whatever the worker imports outside its own folder, the judge's side imports too (or may).
    outside = {home(module) for module in reached_from("runner") if not module.startswith("harness.runner.")}
    paragraph = shared_paragraph()
    named = set(re.findall(r"`(\w+/)`", paragraph.split("Three of the")[0]))
    assert outside and outside <= named, (outside, paragraph)


def test_every_shared_module_is_imported_on_both_sides():
    shared = {module for module in MODULES if module.startswith("harness.shared.")}
    assert shared and shared <= reached_from("runner") & reached_from("judge"), (
        shared - reached_from("runner"), shared - reached_from("judge"))


def test_the_worker_never_imports_the_judges_folder():
    assert not [module for module in reached_from("runner") if module.startswith("harness.judge")]


def test_the_judge_reads_only_the_workers_modules_the_layout_names():
    read = {imported.split(".")[2] for module in MODULES if module.startswith("harness.judge.")
            for imported in GRAPH.successors(module) if imported.startswith("harness.runner.")}
    paragraph = shared_paragraph()
    assert read and all(f"`runner/{name}.py`" in paragraph for name in read), (read, paragraph)
