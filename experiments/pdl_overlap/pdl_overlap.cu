// A synthetic persistent kernel that asks one question of the GPU's block scheduler: with
// programmatic dependent launch (PDL) and an SM that has room for two CTAs, does the next
// call's CTA start beside this call's on every SM, so that two calls are in flight?
// harness/b200/model.py's figure for 128 x 7168 x 2048 (two CTAs an SM) rests on it.
// Its epilogue can also be the B200 kernel's own (a c tile of fp16 stores, a row a thread, and
// split-K's exchange of fp32 partials), with two probes of the GPU's memory (an L2 round trip,
// an SM's streaming rate), so that the model's epilogue terms can be measured the same way.
//
// One process runs a list of cases read from stdin (one a line, `key=value` words; see
// run.py), so that the context, the buffers and the measured DRAM rate are shared. For each
// case it prints one JSON line and writes every CTA's stamps of the last round to a file.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o pdl_overlap pdl_overlap.cu (run.py does it).

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "pdl_overlap: %s failed: %s (%s:%d)\n", #call,                       \
                   cudaGetErrorString(err_), __FILE__, __LINE__);                                \
      std::exit(3);                                                                              \
    }                                                                                            \
  } while (0)

namespace {

// Four warps: the B200 kernel's main loop is driven by one load warp and one MMA warp, which
// leave most of an SM's issue slots to a second CTA; eight warps of FMA chains on each of two
// CTAs would saturate the FP32 pipes and measure contention instead of scheduling.
constexpr int kThreads = 128;
// Three stages, as the B200 configuration that takes two CTAs an SM has (`Sm100Config.max_stages(64, 2)`).
constexpr int kStages = 3;
constexpr int kStampWords = 16;
// Columns of c an epilogue thread holds at once: submission.py's SM100_EPILOGUE_COLUMNS (a
// subtile of the accumulator loaded to registers).
constexpr int kSubtile = 32;

enum Stamp : int {
  kEntry = 0,     // %globaltimer at the CTA's first instruction
  kStartEnd = 1,  // after the start phase (and the trigger, with PDL)
  kMainEnd = 2,   // after the last K tile's work
  kWaitEnd = 3,   // after griddepcontrol.wait (== kMainEnd + the wait's time)
  kExit = 4,      // after the tail's stores were issued
  kSmid = 5,
  kClockEntry = 6,  // clock64 at the same points: phase lengths where %globaltimer is coarse
  kClockStartEnd = 7,
  kClockMainEnd = 8,
  kClockWaitEnd = 9,
  kClockExit = 10,
  // The c-tile epilogue (tile_cols > 0), as thread 0 (warp 0's lane 0) sees it:
  kClockStored = 11,   // its c tile's (or its fp32 partial's) stores issued
  kClockArrived = 12,  // split-K: its warp's release fence and arrival count returned
  kArrivals = 13,      // split-K: the arrivals its warp counted before its own (split_k - 1: the last)
  kClockReduced = 14,  // split-K: the last arrival's adds and c stores issued (== kClockArrived otherwise)
};

struct Params {
  const uint4* in;               // this call's input
  uint4* out;                    // this call's output
  unsigned long long* stamps;    // this call's stamps, kStampWords per CTA
  int k_tiles;                   // K tiles each CTA streams
  int tile_chunks;               // 16-byte chunks per K tile
  int share;                     // CTAs that read the same slab (L2 reuse, as A's tile is shared)
  int fma_per_tile;              // dependent FMAs per thread per K tile: the MMA's share of a K tile
  long long start_cycles;        // the start phase's latency (barrier init, descriptor prefetch, TMEM alloc)
  long long tail_cycles;         // the epilogue's latency before its stores (accumulator to registers)
  int out_chunks;                // 16-byte chunks each CTA stores (tile_cols == 0)
  int pdl;
  int tile_cols;                 // > 0: the tail is a c tile of kThreads rows x tile_cols fp16 columns
  int split_k;                   // CTAs a c tile: each stores an fp32 partial, the last adds them into c
  float* partials;               // split-K: every CTA's partial, shared by all calls as the kernel's workspace is
  int* counters;                 // split-K: arrivals a (tile, warp), zeroed once; the last arrival resets its own
};

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// %globaltimer, not moved across the loads around it (the chase's walks).
__device__ __forceinline__ unsigned long long globaltimer_ordered() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// One thread waits out a latency, sleeping between polls, while the others wait at the barrier
// that follows: a prologue or an epilogue's wait takes the CTA's time, not the SM's issue slots,
// which the other CTA on the SM needs.
__device__ __forceinline__ void latency(long long cycles) {
  if (threadIdx.x == 0 && cycles > 0) {
    long long begin = clock64();
    while (clock64() - begin < cycles) __nanosleep(32);
  }
  __syncthreads();
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

__device__ __forceinline__ void cp_async_wait_stages() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
}

__device__ __forceinline__ void stamp(unsigned long long* mine, int slot, int clock_slot) {
  if (threadIdx.x == 0) {
    mine[slot] = globaltimer();
    mine[clock_slot] = static_cast<unsigned long long>(clock64());
  }
}

__device__ __forceinline__ void clock_stamp(unsigned long long* mine, int slot) {
  if (threadIdx.x == 0) mine[slot] = static_cast<unsigned long long>(clock64());
}

__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// The B200 kernel's epilogue from registers (submission.py's `_store_c` and `SplitKReduction`):
// thread t owns row t of the tile (TMEM lane t there) and stores its columns one at a time, so
// that a warp's store of one column is 64 contiguous bytes of fp16 c (128 of an fp32 partial).
// With split-K, the grid's CTAs are grouped by tile as the kernel's work units are (tiles vary
// fastest, then splits): each stores its partial; each warp counts its arrival (the warp's
// stores, a release fence every lane runs, one relaxed add); the warp that arrives last
// acquires, adds the other partials a subtile at a time, stores c and resets its counter.
__device__ void tile_epilogue(const Params& p, float value, unsigned long long* mine) {
  const int tiles = gridDim.x / p.split_k;
  const int tile = blockIdx.x % tiles, split = blockIdx.x / tiles;
  const int row = threadIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t tile_elems = static_cast<size_t>(kThreads) * p.tile_cols;
  __half* c = reinterpret_cast<__half*>(p.out) + tile * tile_elems;
  if (p.split_k == 1) {
    for (int col = 0; col < p.tile_cols; ++col) c[col * kThreads + row] = __float2half(value + col);
    clock_stamp(mine, kClockStored);
    return;
  }
  float* partials = p.partials + tile * p.split_k * tile_elems;
  float* own = partials + split * tile_elems;
  for (int col = 0; col < p.tile_cols; ++col) own[col * kThreads + row] = value + col;
  clock_stamp(mine, kClockStored);
  __syncwarp();
  fence_acq_rel_gpu();
  int* counter = p.counters + tile * (kThreads / 32) + warp;
  int arrived = 0;
  if (lane == 0) arrived = atomicAdd(counter, 1);  // relaxed, device scope
  arrived = __shfl_sync(0xffffffffu, arrived, 0);
  clock_stamp(mine, kClockArrived);
  if (threadIdx.x == 0) mine[kArrivals] = static_cast<unsigned long long>(arrived);
  if (arrived == p.split_k - 1) {
    fence_acq_rel_gpu();
    __syncwarp();
    for (int sub = 0; sub < p.tile_cols; sub += kSubtile) {
      float sums[kSubtile];
#pragma unroll
      for (int j = 0; j < kSubtile; ++j) sums[j] = value + (sub + j);
      for (int other = 0; other < p.split_k; ++other) {
        if (other == split) continue;
        const float* theirs = partials + other * tile_elems + static_cast<size_t>(sub) * kThreads + row;
#pragma unroll
        for (int j = 0; j < kSubtile; ++j) sums[j] += theirs[j * kThreads];
      }
#pragma unroll
      for (int j = 0; j < kSubtile; ++j) c[(sub + j) * kThreads + row] = __float2half(sums[j]);
    }
    if (lane == 0) atomicExch(counter, 0);
  }
  clock_stamp(mine, kClockReduced);
}

// The carveout tag only gives the two builds separate function attributes: one with the
// shared-memory carveout pinned to its maximum, one left to the driver's choice.
template <int kCarveoutTag>
__global__ void __launch_bounds__(kThreads, 2) persistent_call(Params p) {
  extern __shared__ __align__(128) uint4 smem[];
  // Stamps are kept in shared memory and written out once at exit, so that the phases carry no
  // global stores of their own (each call's buffers are its own: before the wait would be safe too).
  __shared__ unsigned long long mine[kStampWords];
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStampWords; ++i) mine[i] = 0ull;
  }
  stamp(mine, kEntry, kClockEntry);
  if (threadIdx.x == 0) mine[kSmid] = smid();

  // Start phase: what a GEMM's CTA does before its first load.
  latency(p.start_cycles);
  if (p.pdl) {
    // As the B200 kernel does after its pipeline's init: the next call may launch now; it
    // reads only its own inputs until its tail.
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  stamp(mine, kStartEnd, kClockStartEnd);

  // Main loop: K tiles streamed through kStages shared-memory stages; each K tile's work is a
  // dependent FMA chain on what it loaded (latency, like an MMA's, not issue throughput).
  const size_t slab_chunks = static_cast<size_t>(p.k_tiles) * p.tile_chunks;
  const uint4* slab = p.in + static_cast<size_t>(blockIdx.x / p.share) * slab_chunks;
  auto issue = [&](int k_tile) {
    if (k_tile < p.k_tiles) {
      uint4* stage = smem + (k_tile % kStages) * p.tile_chunks;
      const uint4* src = slab + static_cast<size_t>(k_tile) * p.tile_chunks;
      for (int c = threadIdx.x; c < p.tile_chunks; c += kThreads) cp_async16(stage + c, src + c);
    }
    cp_async_commit();  // an empty group past the last K tile keeps wait_group's count uniform
  };
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  float acc = 0.0f;
  for (int k_tile = 0; k_tile < p.k_tiles; ++k_tile) {
    issue(k_tile + kStages - 1);
    cp_async_wait_stages();
    __syncthreads();  // every thread's copies of this K tile have landed
    const uint4 word = smem[(k_tile % kStages) * p.tile_chunks + (threadIdx.x + 32) % p.tile_chunks];
    const float a = __uint_as_float(word.x), b = __uint_as_float(word.y);
    float x = acc;
#pragma unroll 4
    for (int i = 0; i < p.fma_per_tile; ++i) x = fmaf(x, a, b);
    acc = x;
    __syncthreads();  // the stage read here is the one the next iteration's issue overwrites
  }
  stamp(mine, kMainEnd, kClockMainEnd);

  // Tail: the epilogue, which alone touches what the previous call may still write.
  if (p.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  __syncthreads();
  stamp(mine, kWaitEnd, kClockWaitEnd);
  latency(p.tail_cycles);
  if (p.tile_cols > 0) {
    tile_epilogue(p, acc, mine);
  } else {
    uint4 value = make_uint4(__float_as_uint(acc), threadIdx.x, blockIdx.x, 0u);
    uint4* out = p.out + static_cast<size_t>(blockIdx.x) * p.out_chunks;
    for (int c = threadIdx.x; c < p.out_chunks; c += kThreads) out[c] = value;
  }
  __syncthreads();
  stamp(mine, kExit, kClockExit);
  if (threadIdx.x == 0) {
    unsigned long long* dst = p.stamps + static_cast<size_t>(blockIdx.x) * kStampWords;
    for (int i = 0; i < kStampWords; ++i) dst[i] = mine[i];
  }
}

// One thread a CTA: `hops` dependent loads through `next` (ld.global.cg: L2, not L1), each
// load's address the previous one's value, so that each takes one round trip. The first walk
// brings the lines into L2; the same walk again is timed.
__global__ void chase(const unsigned* next, unsigned words, int hops, unsigned long long* ns) {
  const unsigned start = (blockIdx.x * 32u * 131u) % words;
  unsigned i = start;
  for (int h = 0; h < hops; ++h) i = __ldcg(next + i);
  i = (i == 0xffffffffu) ? 0u : start;  // the timed walk starts once the first has ended
  const unsigned long long begin = globaltimer_ordered();
  for (int h = 0; h < hops; ++h) i = __ldcg(next + i);
  const unsigned long long end = globaltimer_ordered();
  ns[blockIdx.x] = (i == 0xffffffffu) ? 0ull : end - begin;  // reads i: the walk is not optimized out
}

// Holds the GPU for a while ahead of a timed round, so that the host has queued every call of
// the round before the first one runs: the events then time the GPU, not the host's launches.
__global__ void hold(unsigned long long ns) {
  unsigned long long begin = globaltimer();
  while (globaltimer() - begin < ns) __nanosleep(1000);
}

struct Case {
  std::string name = "case";
  std::string kind = "call";  // "call": persistent_call timed in the loop; "chase": the L2 round trip
  int k_tiles = 8;
  int smem_bytes = 100 * 1024;
  int grid = 0;  // 0: one CTA per SM
  int pdl = 0;
  int calls = 50;
  int rounds = 30;
  int tile_bytes = 2048;
  int share = 1;
  int fma_per_tile = 128;
  double start_ns = 1000;
  double tail_ns = 500;
  int out_bytes = 8192;
  int max_carveout = 1;
  int tile_cols = 0;
  int split_k = 1;
  int hops = 2000;
  std::string stamps_path;
};

Case parse_case(const std::string& line) {
  Case c;
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    auto eq = word.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "pdl_overlap: expected key=value, got %s\n", word.c_str());
      std::exit(2);
    }
    std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    if (key == "name") c.name = value;
    else if (key == "k_tiles") c.k_tiles = std::stoi(value);
    else if (key == "smem_bytes") c.smem_bytes = std::stoi(value);
    else if (key == "grid") c.grid = std::stoi(value);
    else if (key == "pdl") c.pdl = std::stoi(value);
    else if (key == "calls") c.calls = std::stoi(value);
    else if (key == "rounds") c.rounds = std::stoi(value);
    else if (key == "tile_bytes") c.tile_bytes = std::stoi(value);
    else if (key == "share") c.share = std::stoi(value);
    else if (key == "fma_per_tile") c.fma_per_tile = std::stoi(value);
    else if (key == "start_ns") c.start_ns = std::stod(value);
    else if (key == "tail_ns") c.tail_ns = std::stod(value);
    else if (key == "out_bytes") c.out_bytes = std::stoi(value);
    else if (key == "max_carveout") c.max_carveout = std::stoi(value);
    else if (key == "stamps") c.stamps_path = value;
    else if (key == "kind") c.kind = value;
    else if (key == "tile_cols") c.tile_cols = std::stoi(value);
    else if (key == "split_k") c.split_k = std::stoi(value);
    else if (key == "hops") c.hops = std::stoi(value);
    else {
      std::fprintf(stderr, "pdl_overlap: unknown key %s\n", key.c_str());
      std::exit(2);
    }
  }
  return c;
}

struct Device {
  int sms = 0;
  double clock_ghz = 0;
  size_t in_call_bytes = 0, out_call_bytes = 0, stamps_call_words = 0;
  int max_calls = 0;
  uint4* in = nullptr;
  uint4* out = nullptr;
  unsigned long long* stamps = nullptr;
  void* flush = nullptr;
  size_t flush_bytes = 0;
  float* partials = nullptr;
  size_t partial_bytes = 0;
  int* counters = nullptr;
  size_t counter_count = 0;
  unsigned* chase_next = nullptr;
  unsigned chase_words = 0;
  unsigned long long* chase_ns = nullptr;
};

using KernelFn = void (*)(Params);

KernelFn kernel_for(int max_carveout) {
  return max_carveout ? persistent_call<1> : persistent_call<0>;
}

void run_case(const Case& c, Device& dev, cudaStream_t stream) {
  const int grid = c.grid > 0 ? c.grid : dev.sms;
  const size_t in_bytes = static_cast<size_t>((grid + c.share - 1) / c.share) * c.k_tiles * c.tile_bytes;
  const size_t out_bytes = static_cast<size_t>(grid) * c.out_bytes;
  const size_t tile_bytes = static_cast<size_t>(kThreads) * c.tile_cols;  // fp16 c: 2 bytes, fp32 partial: 4
  if (c.calls > dev.max_calls || in_bytes > dev.in_call_bytes || out_bytes > dev.out_call_bytes ||
      static_cast<size_t>(grid) * kStampWords > dev.stamps_call_words || c.tile_bytes % 16 || c.out_bytes % 16 ||
      c.tile_bytes / 16 > 32 * kThreads || kStages * c.tile_bytes > c.smem_bytes || c.tile_cols % kSubtile ||
      c.split_k < 1 || grid % c.split_k || 2 * tile_bytes * (grid / c.split_k) > dev.out_call_bytes ||
      (c.split_k > 1 && (4 * tile_bytes * grid > dev.partial_bytes ||
                         static_cast<size_t>(grid / c.split_k) * (kThreads / 32) > dev.counter_count))) {
    std::fprintf(stderr, "pdl_overlap: case %s does not fit the buffers or the stages\n", c.name.c_str());
    std::exit(2);
  }
  KernelFn kernel = kernel_for(c.max_carveout);
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem_bytes));
  if (c.max_carveout) {
    // The footprint alone (its dynamic shared memory) decides how many CTAs an SM holds.
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  }
  int occupancy = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, kernel, kThreads, c.smem_bytes));
  cudaFuncAttributes attributes{};
  CHECK(cudaFuncGetAttributes(&attributes, kernel));

  auto params_for = [&](int call) {
    Params p{};
    p.in = dev.in + call * (dev.in_call_bytes / 16);
    p.out = dev.out + call * (dev.out_call_bytes / 16);
    p.stamps = dev.stamps + call * dev.stamps_call_words;
    p.k_tiles = c.k_tiles;
    p.tile_chunks = c.tile_bytes / 16;
    p.share = c.share;
    p.fma_per_tile = c.fma_per_tile;
    p.start_cycles = static_cast<long long>(c.start_ns * dev.clock_ghz);
    p.tail_cycles = static_cast<long long>(c.tail_ns * dev.clock_ghz);
    p.out_chunks = c.out_bytes / 16;
    p.pdl = c.pdl;
    p.tile_cols = c.tile_cols;
    p.split_k = c.split_k;
    p.partials = dev.partials;
    p.counters = dev.counters;
    return p;
  };
  cudaLaunchAttribute pdl_attribute{};
  pdl_attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl_attribute.val.programmaticStreamSerializationAllowed = 1;
  auto launch = [&](int call) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = c.smem_bytes;
    config.stream = stream;
    config.attrs = c.pdl ? &pdl_attribute : nullptr;
    config.numAttrs = c.pdl ? 1 : 0;
    CHECK(cudaLaunchKernelEx(&config, kernel, params_for(call)));
  };

  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  // The hold must outlast the host's launches of a round (a few us each).
  const unsigned long long hold_ns = 400000ull + 20000ull * c.calls;
  std::vector<double> per_call_us;
  double worst_enqueue_us = 0;
  for (int round = -2; round < c.rounds; ++round) {  // two rounds of warm-up
    hold<<<1, 32, 0, stream>>>(hold_ns);
    CHECK(cudaGetLastError());
    // The L2 flush: a buffer larger than the L2 written, so every input comes from DRAM.
    CHECK(cudaMemsetAsync(dev.flush, round & 0xff, dev.flush_bytes, stream));
    auto host_begin = std::chrono::steady_clock::now();
    CHECK(cudaEventRecord(begin, stream));
    for (int call = 0; call < c.calls; ++call) launch(call);
    CHECK(cudaEventRecord(end, stream));
    double enqueue_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - host_begin).count();
    CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, begin, end));
    if (round >= 0) {
      per_call_us.push_back(ms * 1000.0 / c.calls);
      worst_enqueue_us = std::max(worst_enqueue_us, enqueue_us);
    }
  }
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(end));

  if (!c.stamps_path.empty()) {
    std::vector<unsigned long long> host(static_cast<size_t>(c.calls) * grid * kStampWords);
    for (int call = 0; call < c.calls; ++call) {
      CHECK(cudaMemcpy(host.data() + static_cast<size_t>(call) * grid * kStampWords,
                       dev.stamps + call * dev.stamps_call_words, static_cast<size_t>(grid) * kStampWords * 8,
                       cudaMemcpyDeviceToHost));
    }
    FILE* f = std::fopen(c.stamps_path.c_str(), "wb");
    if (!f || std::fwrite(host.data(), 8, host.size(), f) != host.size()) {
      std::fprintf(stderr, "pdl_overlap: cannot write %s\n", c.stamps_path.c_str());
      std::exit(3);
    }
    std::fclose(f);
  }

  // Every split-K arrival counter is back at zero once the last arrival of each tile has reset
  // its own: the protocol's bookkeeping held over every call of every round.
  size_t counters_left = 0;
  if (c.split_k > 1) {
    std::vector<int> counters(dev.counter_count);
    CHECK(cudaMemcpy(counters.data(), dev.counters, counters.size() * sizeof(int), cudaMemcpyDeviceToHost));
    counters_left = static_cast<size_t>(std::count_if(counters.begin(), counters.end(), [](int v) { return v != 0; }));
  }

  std::printf("{\"case\": \"%s\", \"grid\": %d, \"threads\": %d, \"occupancy\": %d, \"registers\": %d, "
              "\"static_smem\": %zu, \"smem_bytes\": %d, \"in_bytes_per_call\": %zu, \"out_bytes_per_call\": %zu, "
              "\"hold_us\": %.1f, \"worst_enqueue_us\": %.1f, \"stamp_words\": %d, \"counters_left\": %zu, "
              "\"per_call_us\": [",
              c.name.c_str(), grid, kThreads, occupancy, attributes.numRegs, attributes.sharedSizeBytes,
              c.smem_bytes, in_bytes, out_bytes, hold_ns / 1000.0, worst_enqueue_us, kStampWords, counters_left);
  for (size_t i = 0; i < per_call_us.size(); ++i) std::printf("%s%.4f", i ? ", " : "", per_call_us[i]);
  std::printf("]}\n");
  std::fflush(stdout);
}

// The L2 round trip: every CTA's time a hop of its timed walk (one thread a CTA, a CTA an SM).
void run_chase(const Case& c, Device& dev, cudaStream_t stream) {
  const int grid = c.grid > 0 ? c.grid : dev.sms;
  if (static_cast<size_t>(grid) * kStampWords > dev.stamps_call_words || c.hops < 1) {  // grid <= --max-grid
    std::fprintf(stderr, "pdl_overlap: case %s does not fit the buffers\n", c.name.c_str());
    std::exit(2);
  }
  chase<<<grid, 1, 0, stream>>>(dev.chase_next, dev.chase_words, c.hops, dev.chase_ns);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream));
  std::vector<unsigned long long> ns(grid);
  CHECK(cudaMemcpy(ns.data(), dev.chase_ns, grid * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::printf("{\"case\": \"%s\", \"kind\": \"chase\", \"grid\": %d, \"hops\": %d, \"ns_per_hop\": [",
              c.name.c_str(), grid, c.hops);
  for (int i = 0; i < grid; ++i) std::printf("%s%.2f", i ? ", " : "", static_cast<double>(ns[i]) / c.hops);
  std::printf("]}\n");
  std::fflush(stdout);
}

// Device-to-device copy rate (bytes read + written per second), best of a few: the DRAM bound.
double dram_bytes_per_s(void* a, void* b, size_t bytes, cudaStream_t stream) {
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    CHECK(cudaEventRecord(begin, stream));
    CHECK(cudaMemcpyAsync(a, b, bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaEventRecord(end, stream));
    CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, begin, end));
    if (i > 0) best = std::max(best, 2.0 * bytes / (ms * 1e-3));
  }
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(end));
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  // Buffer sizes for the largest case: per-call input and output bytes, and calls.
  size_t in_call_bytes = 64ull << 20, out_call_bytes = 8ull << 20, partial_bytes = 0;
  int max_calls = 50, max_grid = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--in-call-bytes")) in_call_bytes = std::stoull(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--out-call-bytes")) out_call_bytes = std::stoull(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-calls")) max_calls = std::stoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-grid")) max_grid = std::stoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--partial-bytes")) partial_bytes = std::stoull(argv[i + 1]);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "pdl_overlap: no CUDA device\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  Device dev;
  dev.sms = prop.multiProcessorCount;
  dev.clock_ghz = clock_khz / 1e6;
  dev.in_call_bytes = (in_call_bytes + 255) / 256 * 256;
  dev.out_call_bytes = (out_call_bytes + 255) / 256 * 256;
  dev.stamps_call_words = static_cast<size_t>(max_grid) * kStampWords;
  dev.max_calls = max_calls;
  // Several times the L2, written before every round.
  dev.flush_bytes = std::max<size_t>(512ull << 20, 8ull * prop.l2CacheSize);
  CHECK(cudaMalloc(&dev.in, dev.in_call_bytes * max_calls));
  CHECK(cudaMalloc(&dev.out, dev.out_call_bytes * max_calls));
  CHECK(cudaMalloc(&dev.stamps, dev.stamps_call_words * 8 * max_calls));
  CHECK(cudaMalloc(&dev.flush, dev.flush_bytes));
  // 0x3c3c3c3c is 0.0115f: the FMA chains converge, with no infinities or denormals.
  CHECK(cudaMemset(dev.in, 0x3c, dev.in_call_bytes * max_calls));
  CHECK(cudaMemset(dev.out, 0, dev.out_call_bytes * max_calls));
  CHECK(cudaMemset(dev.stamps, 0, dev.stamps_call_words * 8 * max_calls));
  // Split-K's workspace, shared by every call as the B200 kernel's is; the counters zeroed once.
  dev.partial_bytes = std::max<size_t>(partial_bytes, 4);
  dev.counter_count = static_cast<size_t>(max_grid) * (kThreads / 32);
  CHECK(cudaMalloc(&dev.partials, dev.partial_bytes));
  CHECK(cudaMalloc(&dev.counters, dev.counter_count * sizeof(int)));
  CHECK(cudaMemset(dev.counters, 0, dev.counter_count * sizeof(int)));
  // The chase's walk: 4 MB (well within an L2), each word the index of one 97 lines of 128
  // bytes further on, so that consecutive hops touch distinct lines (32768 of them a cycle).
  dev.chase_words = 1u << 20;
  std::vector<unsigned> next(dev.chase_words);
  for (unsigned i = 0; i < dev.chase_words; ++i) next[i] = (i + 32u * 97u) % dev.chase_words;
  CHECK(cudaMalloc(&dev.chase_next, dev.chase_words * sizeof(unsigned)));
  CHECK(cudaMemcpy(dev.chase_next, next.data(), dev.chase_words * sizeof(unsigned), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&dev.chase_ns, static_cast<size_t>(max_grid) * sizeof(unsigned long long)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t copy_bytes = dev.flush_bytes / 2;
  double dram = dram_bytes_per_s(dev.flush, static_cast<char*>(dev.flush) + copy_bytes, copy_bytes, stream);

  std::printf("{\"device\": \"%s\", \"cc\": \"%d.%d\", \"sms\": %d, \"smem_per_sm\": %zu, \"smem_per_block_optin\": %zu, "
              "\"reserved_smem_per_block\": %zu, \"l2_bytes\": %d, \"clock_ghz\": %.3f, \"dram_bytes_per_s\": %.4e, "
              "\"flush_bytes\": %zu}\n",
              prop.name, prop.major, prop.minor, dev.sms, prop.sharedMemPerMultiprocessor, prop.sharedMemPerBlockOptin,
              prop.reservedSharedMemPerBlock, prop.l2CacheSize, dev.clock_ghz, dram, dev.flush_bytes);
  std::fflush(stdout);

  std::string line;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, stdin)) {
    line = buffer;
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const Case c = parse_case(line);
    if (c.kind == "chase") run_chase(c, dev, stream);
    else if (c.kind == "call") run_case(c, dev, stream);
    else {
      std::fprintf(stderr, "pdl_overlap: unknown kind %s\n", c.kind.c_str());
      std::exit(2);
    }
  }
  CHECK(cudaStreamSynchronize(stream));
  return 0;
}
