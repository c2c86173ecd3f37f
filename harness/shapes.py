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
    def label(self) -> str:
        m, n, k, l = self.mnkl
        return f"{m}x{n}x{k}" + (f"x{l}" if l != 1 else "")

    def with_seed(self, seed: int) -> "Case":
        return Case(spec=self.spec, args={**self.args, "seed": seed})


def parse_cases(text: str, source: str = "<text>") -> list[Case]:
    cases = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        args = {}
        for part in line.split(";"):
            field = _FIELD.fullmatch(part)
            if field is None:
                raise ShapeFileError(f"{source}:{number}: invalid test case: '{line}': '{part}'")
            key, value = field.groups()
            args[key] = int(value) if re.fullmatch(r"[+-]?[0-9]+", value) else value
        missing = [key for key in GEMM_KEYS if key not in args]
        if missing:
            raise ShapeFileError(f"{source}:{number}: '{line}' lacks {', '.join(missing)}")
        cases.append(Case(spec=line, args=args))
    if not cases:
        raise ShapeFileError(f"{source}: no cases")
    return cases


def load_cases(path) -> list[Case]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ShapeFileError(f"could not open tests file `{path}`: {error}") from error
    return parse_cases(text, source=str(path))


def official_cases(name: str) -> list[Case]:
    return load_cases(OFFICIAL_SETS[name])


def combine_seeds(a: int, b: int) -> int:
    """The competition's Cantor-style pairing: a large secret seed stays large when combined."""
    return a + (a + b) * (a + b + 1) // 2


def apply_secret_seed(cases: list[Case], secret: int | None) -> list[Case]:
    if secret is None:
        return list(cases)
    return [case.with_seed(combine_seeds(case.args["seed"], secret)) if "seed" in case.args else case for case in cases]
