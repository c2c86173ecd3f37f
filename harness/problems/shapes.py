"""Cases in the competition's tests-file format: one case a line, `m: 128; n: 256; k: 256; l: 1; seed: 1111`.

The official sets are data: the GEMM's in shapes/, the other problems' beside their definitions
(harness/problems/). Each problem says which keys a case has (`CaseFormat`); the grouped GEMM's
per-group sizes are lists, `m: [80, 176]`. User sweep files use the same format and may add blank
lines and `#` comments (the official parser accepts neither, so the official files keep none).
"""

import dataclasses
import random
import re
from pathlib import Path

from harness.shared.paths import REPO_ROOT

SHAPES_DIR = REPO_ROOT / "shapes"
OFFICIAL_SETS = {"tests": SHAPES_DIR / "tests.txt", "benchmarks": SHAPES_DIR / "benchmarks.txt"}
GEMM_KEYS = ("m", "n", "k", "l")

# A value: an integer, a word (a problem's text keys, linalg's `case: dense`), or a list of
# integers in [] or () (the grouped eval's grammar).
_WORD = r"[a-zA-Z_][a-zA-Z0-9_]*"  # a key, or a word value (eigh's `case: lapack_diag_even_spectrum`)
_FIELD = re.compile(rf"\s*({_WORD})\s*:\s*(\[[^\]]*\]|\([^)]*\)|{_WORD}|[+-]?[0-9]+)\s*")
_INTEGER = re.compile(r"[+-]?[0-9]+")


class ShapeFileError(ValueError):
    """A tests file that cannot be read or parsed (the official eval exits 113 on it)."""


@dataclasses.dataclass(frozen=True)
class CaseFormat:
    """What one case of a problem holds, no more and no less: `keys` (the seed among them), each
    an integer, except `list_keys`, each a list of integers with one entry per group, as many as
    `count_key` says where the problem has one; `multiples`: (key, factor, why) where the problem's
    inputs need each of a key's values to be a multiple of factor; `optional_keys`, among `keys`,
    may be left out (the generator's default then applies); `text_keys` take a word instead."""

    keys: tuple[str, ...]
    list_keys: tuple[str, ...] = ()
    count_key: str | None = None
    multiples: tuple[tuple[str, int, str], ...] = ()
    optional_keys: tuple[str, ...] = ()
    text_keys: tuple[str, ...] = ()


GEMM_FORMAT = CaseFormat(keys=(*GEMM_KEYS, "seed"))


@dataclasses.dataclass(frozen=True)
class Case:
    spec: str  # the line as written, reported back verbatim like the official eval does
    args: dict  # key -> int, or tuple of ints for a list key

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
        `m80..248 n4096 k7168 g8`: its range, or its one value; words after the sizes
        (`16x512x4 rankdef`)."""
        sizes = dict(self.shape)
        if all(isinstance(value, (int, str)) for value in sizes.values()):
            if sizes.get("l") == 1:
                del sizes["l"]
            words = [value for value in sizes.values() if isinstance(value, str)]
            return " ".join(["x".join(str(value) for value in sizes.values() if isinstance(value, int)), *words])
        return " ".join(f"{key}{_span(value)}" for key, value in sizes.items())

    def with_seed(self, seed: int) -> "Case":
        return Case(spec=self.spec, args={**self.args, "seed": seed})


def _span(value) -> str:
    if isinstance(value, int):
        return str(value)
    low, high = min(value), max(value)
    return str(low) if low == high else f"{low}..{high}"


def _value(key: str, text: str, where: str, case_format: CaseFormat):
    if key in case_format.list_keys:
        items = [item.strip() for item in text[1:-1].split(",")] if text[0] in "[(" else None
        if not items or not all(_INTEGER.fullmatch(item) for item in items):
            raise ShapeFileError(f"{where}: key `{key}`: '{text}' is not a list of integers ([80, 176, ...])")
        return tuple(int(item) for item in items)
    if key in case_format.text_keys:
        if not re.fullmatch(_WORD, text):
            raise ShapeFileError(f"{where}: key `{key}`: '{text}' is not a word")
        return text
    if not _INTEGER.fullmatch(text):
        raise ShapeFileError(f"{where}: key `{key}`: '{text}' is not an integer")
    return int(text)


def _typo_hint(line: str, part: str) -> str:
    """What the common mistakes in a field are, said: the hint for `part` of `line`."""
    text = part.strip()
    if not text:
        return ("a `;` ends the line: the last field takes none" if line.rstrip().endswith(";")
                else "two `;` with nothing between them")
    if "," in text and text.count(":") > 1:
        return "fields are separated by `;`, not `,`: `m: 128; n: 256; ...`"
    if ":" not in text and "=" in text:
        return "a field is `key: value`, with a colon"
    if ":" not in text:
        return "a field is `key: value`; is a `:` or a `;` missing?"
    if text.count(":") > 1:
        return "two fields with no `;` between them"
    return "a value is an integer, or for a grouped size a list of them: `[80, 176]`"


def _invalid_field(line: str, part: str, where: str) -> ShapeFileError:
    """The field the parser cannot read, named once (not again where it is the whole line), with
    a hint for the mistake it looks like."""
    field = "" if part.strip() in ("", line.strip()) else f" at '{part.strip()}'"
    return ShapeFileError(f"{where}: invalid test case: '{line}'{field} ({_typo_hint(line, part)})")


def _keys_said(case_format: CaseFormat) -> str:
    required = [key for key in case_format.keys if key not in case_format.optional_keys]
    said = f"a case has exactly {', '.join(required)}"
    return f"{said}, and may have {', '.join(case_format.optional_keys)}" if case_format.optional_keys else said


def _case_args(line: str, where: str, case_format: CaseFormat) -> dict:
    """The line's key-value pairs: exactly the format's keys, each of its type, or a ShapeFileError naming the key."""
    keys, args = case_format.keys, {}
    for part in line.split(";"):
        field = _FIELD.fullmatch(part)
        if field is None:
            raise _invalid_field(line, part, where)
        key, value = field.groups()
        if key not in keys:
            raise ShapeFileError(f"{where}: unknown key `{key}` ({_keys_said(case_format)})")
        if key in args:
            raise ShapeFileError(f"{where}: key `{key}` given twice")
        args[key] = _value(key, value, where, case_format)
    missing = [key for key in keys if key not in args and key not in case_format.optional_keys]
    if missing:
        raise ShapeFileError(f"{where}: '{line}' lacks key{'s' if len(missing) > 1 else ''} {', '.join(f'`{key}`' for key in missing)}")
    lengths = {key: len(args[key]) for key in case_format.list_keys}
    if case_format.count_key is not None and any(length != args[case_format.count_key] for length in lengths.values()):
        raise ShapeFileError(f"{where}: `{case_format.count_key}: {args[case_format.count_key]}` groups, but "
                             + ", ".join(f"`{key}` lists {length}" for key, length in lengths.items()))
    for key, factor, why in case_format.multiples:
        values = args[key] if key in case_format.list_keys else (args[key],) if key in args else ()
        off = [value for value in values if value % factor]
        if off:
            raise ShapeFileError(f"{where}: `{key}: {off[0]}` is not a multiple of {factor} ({why})")
    return args


def parse_cases(text: str, source: str = "<text>", case_format: CaseFormat = GEMM_FORMAT) -> list[Case]:
    """Every case of `text`, checked before any of them runs: a mistake in the file is the
    file's (exit 113), never a submission's failed case. Every line is read, and the error names
    each line's mistake, a line each, so that one fix of the file mends them all."""
    cases, mistakes = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            cases.append(Case(spec=line, args=_case_args(line, f"{source}:{number}", case_format)))
        except ShapeFileError as mistake:
            mistakes.append(str(mistake))
    if mistakes:
        raise ShapeFileError("\n".join(mistakes))
    if not cases:
        raise ShapeFileError(f"{source}: no cases")
    return cases


def load_cases(path, case_format: CaseFormat = GEMM_FORMAT) -> list[Case]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ShapeFileError(f"could not open tests file `{path}`: {error}") from error
    return parse_cases(text, source=str(path), case_format=case_format)


def official_cases(name: str) -> list[Case]:
    """nvfp4_gemm's official tests or benchmarks (another problem's: `Problem.cases`)."""
    return load_cases(OFFICIAL_SETS[name])


def combine_seeds(a: int, b: int) -> int:
    """The competition's Cantor-style pairing: a large secret seed stays large when combined."""
    return a + (a + b) * (a + b + 1) // 2


def apply_secret_seed(cases: list[Case], secret: int | None) -> list[Case]:
    if secret is None:
        return list(cases)
    return [case.with_seed(combine_seeds(case.args["seed"], secret)) if "seed" in case.args else case for case in cases]


# What the competition's eval seeds Python's, NumPy's and torch's generators with before a
# submission runs where POPCORN_SEED is unset (`set_seed(seed or 42)`).
EVAL_RNG_SEED = 42
# Under a secret seed the eval seeds them with the secret itself. A worker is never handed the
# secret (its cases' inputs are the judge's to draw): it gets this instead, drawn once per process
# from the system's entropy, which tells nothing of the secret, not even by a search over a small
# secret's every value, as a hash of it would.
_UNRELATED_SEED = random.SystemRandom().getrandbits(32)  # NumPy's seed is below 2**32


def worker_rng_seed(secret: int | None) -> int:
    """The seed a worker's generators start from before the submission runs: the eval's where
    there is no secret seed, else one unrelated to the secret."""
    return EVAL_RNG_SEED if secret is None else _UNRELATED_SEED
