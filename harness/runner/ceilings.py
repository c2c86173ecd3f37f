"""Ceilings measured on the spot: a large device-to-device copy and a large bf16 matmul."""

import time

import torch

COPY_BYTES = 1 << 30
MATMUL_SIZE = 8192
REPEATS = 20


def _best_seconds(work, device) -> float:
    work()  # first call pays for cuBLAS heuristics and allocations
    torch.cuda.synchronize(device)
    best = float("inf")
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        torch.cuda.synchronize(device)
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def measure(device: torch.device) -> dict:
    """peak_flops (bf16 dense matmul) and bandwidth (bytes read + written by a copy), both best-of."""
    source = torch.empty(COPY_BYTES // 2, dtype=torch.float16, device=device).normal_()
    target = torch.empty_like(source)
    copy_s = _best_seconds(lambda: target.copy_(source), device)
    del source, target
    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, dtype=torch.bfloat16, device=device)
    b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, dtype=torch.bfloat16, device=device)
    matmul_s = _best_seconds(lambda: a @ b, device)
    return {
        "bandwidth": 2 * COPY_BYTES / copy_s,
        "peak_flops": 2 * MATMUL_SIZE**3 / matmul_s,
        "source": f"measured {time.strftime('%H:%M:%S')}: {COPY_BYTES >> 20} MiB D2D copy, bf16 {MATMUL_SIZE}^3 matmul, best of {REPEATS}",
    }
