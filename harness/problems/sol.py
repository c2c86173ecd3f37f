"""Speed-of-light model: SOL = max(flops / peak, bytes / bandwidth) per shape and device."""

import dataclasses

SF_VEC_SIZE = 16


def gemm_bytes(m: int, n: int, k: int, l: int) -> int:
    """Bytes that must cross DRAM once: fp4 A and B, one fp8 scale per 16 K, fp16 C written."""
    return l * (m * k // 2 + n * k // 2 + m * k // SF_VEC_SIZE + n * k // SF_VEC_SIZE + 2 * m * n)


def gemm_flops(m: int, n: int, k: int, l: int) -> int:
    return 2 * m * n * k * l


def gemm_work(m: int, n: int, k: int, l: int) -> tuple[int, int]:
    return gemm_flops(m, n, k, l), gemm_bytes(m, n, k, l)


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """A device's rates. A call's work is (flops, DRAM bytes), by its problem's formula
    (`Problem.work`); its SOL is the longer of the two at these rates."""

    name: str
    peak_flops: float  # FLOP/s of the math the submission's path runs on this device
    bandwidth: float  # DRAM bytes/s
    source: str  # where the figures come from

    def seconds(self, work: tuple[float, float]) -> float:
        flops, dram_bytes = work
        return max(flops / self.peak_flops, dram_bytes / self.bandwidth)

    def bound_of(self, work: tuple[float, float]) -> str:
        flops, dram_bytes = work
        return "compute" if flops / self.peak_flops >= dram_bytes / self.bandwidth else "memory"

    def sol_seconds(self, m: int, n: int, k: int, l: int) -> float:
        """The GEMM's SOL (nvfp4_gemm's formula)."""
        return self.seconds(gemm_work(m, n, k, l))

    def held_by(self, reached: list[tuple[str, tuple[float, float], float]]) -> "Ceilings":
        """These ceilings, each raised to the highest rate a measured call reached where that is
        above it ((shape label, work, seconds per call)): a rate that is beaten is no ceiling, and
        the SOL of every shape stays at or below its time. The source says what was raised."""
        peak, bandwidth, peak_on, bandwidth_on = self.peak_flops, self.bandwidth, None, None
        for label, (flops, dram_bytes), seconds in reached:
            if flops / seconds > peak:
                peak, peak_on = flops / seconds, label
            if dram_bytes / seconds > bandwidth:
                bandwidth, bandwidth_on = dram_bytes / seconds, label
        raised = [f"{what}, reached on {on}" for what, on in (
            (f"peak to {peak / 1e12:.0f} TFLOP/s", peak_on), (f"bandwidth to {bandwidth / 1e12:.2f} TB/s", bandwidth_on)) if on]
        if not raised:
            return self
        return dataclasses.replace(self, peak_flops=peak, bandwidth=bandwidth,
                                   source=f"{self.source}; beaten, so raised: {'; '.join(raised)}")


# The competition's B200 SOL table is stated at a 1.5 GHz clock. 148 SMs x 32768 dense FP4
# FLOP/clk is our inference from NVIDIA's 9 PFLOPS dense FP4 at boost clock; 7.68e12 B/s is the
# bandwidth that reproduces the published table (8.994, 2.354, 1.333 us) to the printed digits.
B200_CLOCK_HZ = 1.5e9
B200_SMS = 148
B200_FP4_FLOP_PER_SM_CLK = 32768
B200_TABLE_BANDWIDTH = 7.68e12

# Hopper has no FP4 tensor cores. e2m1 x e4m3 products are exact in bf16, so the exact path
# runs at the dense bf16 tensor-core peak (989 TFLOP/s on H100 SXM and H200 alike).
HOPPER_BF16_DENSE = 989e12

DEVICES = {
    "B200": Ceilings(
        "B200",
        B200_SMS * B200_FP4_FLOP_PER_SM_CLK * B200_CLOCK_HZ,
        B200_TABLE_BANDWIDTH,
        "competition table: FP4 dense at 1.5 GHz, 7.68e12 B/s",
    ),
    "H100": Ceilings("H100", HOPPER_BF16_DENSE, 3.35e12, "H100 SXM datasheet: bf16 dense, 3.35 TB/s HBM3"),
    "H200": Ceilings("H200", HOPPER_BF16_DENSE, 4.8e12, "H200 datasheet: bf16 dense, 4.8 TB/s HBM3e"),
}


def device_key(device_name: str) -> str | None:
    """Map a CUDA device name to a DEVICES key; None when the table has no entry for it."""
    upper = device_name.upper()
    if "H100" in upper and "PCIE" in upper:
        return None  # a PCIe H100 has other ceilings than the SXM part in the table
    for key in DEVICES:
        if key in upper:
            return key
    return None


def ceilings_for(device_name: str, measured: dict | None) -> tuple[Ceilings | None, str]:
    """The ceilings to judge against and a note on their origin: measured ones when given."""
    if measured:
        return Ceilings(device_name, measured["peak_flops"], measured["bandwidth"], measured["source"]), "measured"
    if device_name == "cpu":
        return None, "no speed-of-light on the CPU"
    key = device_key(device_name)
    if key is None:
        return None, f"no ceilings table entry for {device_name!r}: use --ceilings measured"
    return DEVICES[key], "table"
