"""Back-to-back stress of the B200 kernel's split-K protocol on any Hopper or newer GPU.

    python experiments/splitk_protocol/run.py [--calls 200] [--rounds 10] [--tiles 150]

For each case (splits x subtiles: the B200's partials-ahead variants, refill and none), queues
`calls` launches back to back with PDL, `rounds` times, each on another of three inputs and
into its own output,
all sharing one partials buffer and one set of arrival counters, as a launch plan's calls do;
then checks every call's c against its exact sum and every counter back at zero. A call that
stored before the previous one finished, added another call's partials or found a counter left
unreset writes a wrong value or none (its output starts as NaN). Prints one line a case and
"SPLITK STRESS PASS" at the end, or the first wrong element and "SPLITK STRESS FAIL". Under
compute-sanitizer, pass a small --calls (README.md beside this file).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import protocol_kernel as protocol  # noqa: E402
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.runtime import make_ptr  # noqa: E402

CASES = ((2, 4), (2, 2), (3, 4), (4, 4))  # (splits, subtiles): 2 subtiles ahead, with and without refill; 1; 0
INPUTS = 3  # distinct inputs, so that neighbouring calls always differ


def _pointer(dtype, tensor: torch.Tensor):
    return make_ptr(dtype, tensor.data_ptr(), cute.AddressSpace.gmem, assumed_align=16)


def stress(splits: int, subtiles: int, calls: int, tiles: int, rounds: int = 1, seed: int = 0) -> str | None:
    """None where every call of every round was right and every counter is back at zero after
    each round; else the first fault. A round queues `calls` calls back to back."""
    compiled = protocol.compile_kernel(splits, subtiles)
    columns = protocol.SM100_EPILOGUE_COLUMNS * subtiles
    generator = torch.Generator(device="cuda").manual_seed(seed)
    # Small integers: every sum is exact in fp32 and in fp16.
    xs = [torch.randint(-64, 65, (tiles * splits, columns, protocol.ROWS), generator=generator, device="cuda",
                        dtype=torch.int32).float() for _ in range(INPUTS)]
    expected = [x.view(tiles, splits, columns, protocol.ROWS).sum(1).half() for x in xs]
    outputs = torch.empty((calls, tiles, columns, protocol.ROWS), dtype=torch.float16, device="cuda")
    partials = torch.empty_like(xs[0])
    counters = torch.zeros(tiles * protocol.WARPS, dtype=torch.int32, device="cuda")
    workspace = (_pointer(cutlass.Float32, partials), _pointer(cutlass.Int32, counters))
    x_pointers = [_pointer(cutlass.Float32, x) for x in xs]
    c_pointers = [_pointer(cutlass.Float16, c) for c in outputs]
    for round_number in range(rounds):
        outputs.fill_(float("nan"))
        torch.cuda.synchronize()
        for call in range(calls):
            compiled(x_pointers[(round_number + call) % INPUTS], c_pointers[call], *workspace, cutlass.Int32(tiles))
        torch.cuda.synchronize()
        for call in range(calls):
            want = expected[(round_number + call) % INPUTS]
            wrong = torch.nonzero(outputs[call] != want)
            if wrong.shape[0]:
                index = tuple(wrong[0].tolist())
                return (f"round {round_number}, call {call}: c[tile, column, row] {list(index)} = "
                        f"{outputs[call][index].item()!r}, expected {want[index].item()!r} ({wrong.shape[0]} wrong)")
        if torch.count_nonzero(counters):
            return f"round {round_number}: {torch.count_nonzero(counters).item()} counters not back at zero"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls queued back to back a round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tiles", type=int, default=150, help="output tiles a call (CTAs: tiles x splits)")
    args = parser.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, {args.rounds} rounds of {args.calls} calls a case, "
          f"{args.tiles} tiles a call")
    failed = False
    for splits, subtiles in CASES:
        start = time.perf_counter()
        fault = stress(splits, subtiles, args.calls, args.tiles, args.rounds)
        ahead = protocol.partials_ahead(splits, subtiles)
        print(f"split-K {splits}, {subtiles} subtiles, {ahead} ahead: {'ok' if fault is None else fault} "
              f"({time.perf_counter() - start:.1f} s)")
        failed |= fault is not None
    print("SPLITK STRESS FAIL" if failed else "SPLITK STRESS PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
