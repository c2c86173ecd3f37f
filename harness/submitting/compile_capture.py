"""Every `cute.compile` of a submission, captured on a machine that need not have a GPU.

While a capture is active, `cutlass.cute.compile` compiles for the chosen arch (`--gpu-arch`),
keeps the cubin and the PTX in a folder of its own, and returns a stand-in for the compiled
function that stops the call where it would launch (`LaunchStopped`). So a submission's own
`custom_kernel`, called on CPU tensors, compiles exactly what it would compile on the GPU and
launches nothing.

What the compile check reads besides the cubin comes from the artifacts: the dynamic shared
memory of each launch from the host code CuTeDSL generates (the launch configuration's smem
field, where it is a constant), and the tensor-memory columns from the PTX's tcgen05.alloc.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


class LaunchStopped(Exception):
    """Raised by a captured compile's stand-in where the submission would launch its kernel."""


@dataclass
class CapturedCompile:
    index: int
    function: str  # the @cute.jit function's name
    dump_dir: Path
    host_ir: str
    shapes: list[str] = field(default_factory=list)  # shapes whose call reached its launch

    @property
    def cubins(self) -> list[Path]:
        return sorted(self.dump_dir.glob("*.cubin"))

    @property
    def ptx(self) -> str:
        return "\n".join(path.read_text() for path in sorted(self.dump_dir.glob("*.ptx")))


_GPU_ARCH_OPTION = re.compile(r"--gpu-arch[= ]\S+")


class _CompiledStandIn:
    """What a captured `cute.compile` returns: calling it records the shape and stops the call.
    It exposes nothing of the compiled function, so no path of the submission's reaches a launch."""

    def __init__(self, capture: "CompileCapture", record: CapturedCompile):
        self._capture, self._record = capture, record

    def __call__(self, *args, **kwargs):
        self._capture.launched(self._record)
        raise LaunchStopped(f"compile {self._record.index} ({self._record.function}) stopped before its launch")


class CompileCapture:
    """Stands in for `cutlass.cute.compile` (see the module's docstring)."""

    def __init__(self, real_compile, arch: str, root: Path):
        self._real, self._arch, self._root = real_compile, arch, root
        self.compiles: list[CapturedCompile] = []
        self.shape = ""  # the shape being called, for the records

    def launched(self, record: CapturedCompile) -> None:
        if self.shape and self.shape not in record.shapes:
            record.shapes.append(self.shape)

    def _options(self, options, dump_dir: Path) -> str:
        if options is not None and not isinstance(options, str):
            raise TypeError("the compile check adds its options to a string of options; "
                            f"this call passed {type(options).__name__}")
        own = _GPU_ARCH_OPTION.sub("", options or "").strip()
        return f"{own} --gpu-arch {self._arch} --keep-cubin --keep-ptx --dump-dir={dump_dir}".strip()

    def __call__(self, function, *args, options=None, **kwargs):
        index = len(self.compiles)
        dump_dir = self._root / f"compile-{index}"
        dump_dir.mkdir(parents=True)
        compiled = self._real(function, *args, options=self._options(options, dump_dir), **kwargs)
        name = getattr(function, "__name__", type(function).__name__)
        record = CapturedCompile(index, name, dump_dir, str(getattr(compiled, "ir_module", "")))
        self.compiles.append(record)
        return _CompiledStandIn(self, record)

    def __getitem__(self, options):  # cute.compile[options](...)
        def compile_with(function, *args, **kwargs):
            return self(function, *args, options=options, **kwargs)

        return compile_with


@contextlib.contextmanager
def capturing_compiles(arch: str):
    """`cutlass.cute.compile` captured (CompileCapture) inside the block, restored after it."""
    import cutlass.cute as cute

    real = cute.compile
    with tempfile.TemporaryDirectory(prefix="compile-capture-") as root:
        capture = CompileCapture(real, arch, Path(root))
        cute.compile = capture
        try:
            yield capture
        finally:
            cute.compile = real


# The launch configuration CuTeDSL's host code fills before cudaLaunchKernelEx: grid, block,
# dynamic shared memory bytes, then the attributes.
_LAUNCH_CONFIG = r"!llvm\.struct<\(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32\)>"
_SMEM_FIELD = re.compile(rf"(%\d+) = llvm\.getelementptr %\d+\[0, 2\] : \(!llvm\.ptr\) -> !llvm\.ptr, {_LAUNCH_CONFIG}")


def launch_smem_bytes(host_ir: str) -> list[int | None]:
    """Dynamic shared memory of each launch in the host code: the constant stored into the
    launch configuration's smem field, None where the value is computed at run time."""
    sizes = []
    for gep in _SMEM_FIELD.finditer(host_ir):
        store = re.compile(rf"llvm\.store (%\d+), {re.escape(gep.group(1))} : i64").search(host_ir, gep.end())
        if store is None:
            sizes.append(None)
            continue
        # The value's definition: the nearest one above the store (names repeat across functions).
        definitions = list(re.finditer(rf"{re.escape(store.group(1))} = llvm\.mlir\.constant\((\d+) : i64\)",
                                       host_ir[:store.start()]))
        sizes.append(int(definitions[-1].group(1)) if definitions else None)
    return sizes


_TMEM_ALLOC = re.compile(r"tcgen05\.alloc\S*\s+\[[^\]]+\],\s*(%r\d+|\d+);")


def tmem_columns(ptx: str) -> int | None:
    """Tensor-memory columns a kernel allocates (the largest tcgen05.alloc), None if it allocates none."""
    columns = []
    for alloc in _TMEM_ALLOC.finditer(ptx):
        operand = alloc.group(1)
        if operand.isdigit():
            columns.append(int(operand))
            continue
        moves = list(re.finditer(rf"mov\.b32\s+{re.escape(operand)},\s*(\d+);", ptx[:alloc.start()]))
        if moves:
            columns.append(int(moves[-1].group(1)))
    return max(columns) if columns else None
