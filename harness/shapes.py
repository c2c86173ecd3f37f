"""Cases in the competition's tests-file format: one case a line, `m: 128; n: 256; k: 256; l: 1; seed: 1111`.

The official sets live in shapes/ as data; user sweep files use the same format and may add
blank lines and `#` comments (the official parser accepts neither, so shapes/*.txt keep none).
"""

import dataclasses
import re
from pathlib import Path

SHAPES_DIR = Path(__file__).resolve().parent.parent / "shapes"
OFFICIAL_SETS = {"tests": SHAPES_DIR / "tests.txt", "benchmarks": SHAPES_DIR / "benchmarks.txt"}
GEMM_KEYS = ("m", "n", "k", "l")
# What one nvfp4_gemm case holds, no more and no less: another problem passes its own keys.
GEMM_CASE_KEYS = (*GEMM_KEYS, "seed")

_FIELD = re.compile(r"\s*([a-zA-Z]+):\s*([a-zA-Z]+|[+-]?[0-9]+)\s*")


class ShapeFileError(ValueError):
    """A tests file that cannot be read or parsed (the official eval exits 113 on it)."""


@dataclasses.dataclass(frozen=True)
class Case:
    spec: str  # the line as written, reported back verbatim like the official eval does
    args: dict

    @property
    def mnkl(self) -> tuple[int, int, int, int]:
        return tuple(self.args[key] for key in GEMM_KEYS)

    @property
    def shape(self) -> tuple:
        """The case's sizes, its seed left out: two cases of one shape differ in their values only."""
        return tuple((key, value) for key, value in self.args.items() if key != "seed")

    @property
    def label(self) -> str:
        """`128x7168x16384` (an `l` of 1 left out); where a size is a list (one per group),
        `g8 m80..248 n4096 k7168`: its range, or its one value."""
        sizes = dict(self.shape)
        if all(isinstance(value, int) for value in sizes.values()):
            if sizes.get("l") == 1:
                del sizes["l"]
            return "x".join(str(value) for value in sizes.values())
        return " ".join(f"{key}{_span(value)}" for key, value in sizes.items())

    def with_seed(self, seed: int) -> "Case":
        return Case(spec=self.spec, args={**self.args, "seed": seed})


def _span(value) -> str:
    if isinstance(value, int):
        return str(value)
    low, high = min(value), max(value)
    return str(low) if low == high else f"{low}..{high}"


def _case_args(line: str, where: str, keys: tuple[str, ...]) -> dict:
    """The line's key-value pairs: exactly `keys`, each an integer, or a ShapeFileError naming the key."""
    args = {}
    for part in line.split(";"):
        field = _FIELD.fullmatch(part)
        if field is None:
            raise ShapeFileError(f"{where}: invalid test case: '{line}': '{part}'")
        key, value = field.groups()
        if key not in keys:
            raise ShapeFileError(f"{where}: unknown key `{key}` (a case has exactly {', '.join(keys)})")
        if key in args:
            raise ShapeFileError(f"{where}: key `{key}` given twice")
        if not re.fullmatch(r"[+-]?[0-9]+", value):
            raise ShapeFileError(f"{where}: key `{key}`: '{value}' is not an integer")
        args[key] = int(value)
    missing = [key for key in keys if key not in args]
    if missing:
        raise ShapeFileError(f"{where}: '{line}' lacks key{'s' if len(missing) > 1 else ''} {', '.join(f'`{key}`' for key in missing)}")
    return args


def parse_cases(text: str, source: str = "<text>", keys: tuple[str, ...] = GEMM_CASE_KEYS) -> list[Case]:
    """Every case of `text`, checked before any of them runs: a mistake in the file is the
    file's (exit 113), never a submission's failed case."""
    cases = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cases.append(Case(spec=line, args=_case_args(line, f"{source}:{number}", keys)))
    if not cases:
        raise ShapeFileError(f"{source}: no cases")
    return cases


def load_cases(path, keys: tuple[str, ...] = GEMM_CASE_KEYS) -> list[Case]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ShapeFileError(f"could not open tests file `{path}`: {error}") from error
    return parse_cases(text, source=str(path), keys=keys)


def official_cases(name: str) -> list[Case]:
    return load_cases(OFFICIAL_SETS[name])


def combine_seeds(a: int, b: int) -> int:
    """The competition's Cantor-style pairing: a large secret seed stays large when combined."""
    return a + (a + b) * (a + b + 1) // 2


def apply_secret_seed(cases: list[Case], secret: int | None) -> list[Case]:
    if secret is None:
        return list(cases)
    return [case.with_seed(combine_seeds(case.args["seed"], secret)) if "seed" in case.args else case for case in cases]
