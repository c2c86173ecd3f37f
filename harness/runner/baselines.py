"""What plain torch, cuBLAS and an empty CuTeDSL kernel achieve on the same inputs, timed beside
the submission: nvfp4_gemm's inputs (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c), and no
other problem's (harness/judge/modes.py refuses --baselines for them)."""

import functools
import importlib.util

import torch

from harness.problems import PROBLEMS


def dequantized_operands(data, dtype=torch.bfloat16):
    """(a, b) as (l, m, k) and (l, n, k) tensors of `dtype`, scales applied; exact in bf16/fp16."""
    a, b, sfa, sfb, _, _, _ = data
    dequantize = PROBLEMS["nvfp4_gemm"].reference.dequantize
    return (
        dequantize(a, sfa).permute(2, 0, 1).to(dtype).contiguous(),
        dequantize(b, sfb).permute(2, 0, 1).to(dtype).contiguous(),
    )


def cublas_matmul(operands):
    """cuBLAS bf16 GEMM on operands dequantized beforehand (the dequantization is not timed)."""
    a, b = operands
    return torch.bmm(a, b.transpose(1, 2))


def torch_dequantize_matmul(data):
    """Dequantize in torch, then an fp16 GEMM with fp32 accumulation: a correct C, every call."""
    a, b = dequantized_operands(data, torch.float16)
    return torch.bmm(a, b.transpose(1, 2)).permute(1, 2, 0)


class EmptyCuteDslCall:
    """An empty CuTeDSL kernel whose host function takes the five pointers a kernel reads and
    writes (a, b, sfa_permuted, sfb_permuted, c), compiled for this process's GPU: through TVM-FFI
    where apache-tvm-ffi is installed (bare addresses, the TVM-FFI function called as it is, not
    through the compiled object's Python __call__), else for CuTe pointers. Its host time per
    call, arguments made beforehand, is the floor under any CuTeDSL submission's on this machine.
    Raises ImportError without CuTeDSL."""

    OPERANDS = (0, 1, 4, 5, 6)

    def __init__(self):
        import cutlass
        import cutlass.cute as cute
        from cutlass.cute.runtime import make_ptr

        @cute.kernel
        def empty_kernel():
            pass

        @cute.jit
        def launch(a: cute.Pointer, b: cute.Pointer, sfa: cute.Pointer, sfb: cute.Pointer, c: cute.Pointer):
            empty_kernel().launch(grid=(1, 1, 1), block=(32, 1, 1))

        self.tvm_ffi = importlib.util.find_spec("tvm_ffi") is not None
        self._pointer = functools.partial(make_ptr, cutlass.Uint8, mem_space=cute.AddressSpace.gmem, assumed_align=16)
        compiled = cute.compile(launch, *[self._pointer(0)] * len(self.OPERANDS),
                                options="--enable-tvm-ffi" if self.tvm_ffi else "")
        self._call = compiled
        if self.tvm_ffi:
            import tvm_ffi

            # CuTeDSL 4.8 holds the TVM-FFI function; under 4.5 the compiled object is one.
            self._call = tvm_ffi.Function.__call__.__get__(getattr(compiled, "__tvm_ffi_object__", lambda: compiled)())

    @property
    def call_path(self) -> str:
        return "TVM-FFI" if self.tvm_ffi else "CuTe pointers"

    def arguments(self, data) -> tuple:
        addresses = [data[index].data_ptr() for index in self.OPERANDS]
        return tuple(addresses) if self.tvm_ffi else tuple(map(self._pointer, addresses))

    def __call__(self, arguments: tuple) -> None:
        self._call(*arguments)
