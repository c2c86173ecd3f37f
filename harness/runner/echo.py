"""The judge's calibration partner: a second worker process, started like any worker but never
importing a submission, that runs the very requests a submission's worker runs
(harness/runner/calls.py), with a kernel of the judge's own that does no work and returns what the submission returned (its inputs' output buffers, or tensors of its
own, alone or in a list as the problem's reference returns them), replying at once or once the
GPU is idle. The judge's window around such a batch is the fixed cost of a round: the two
processes' hand-over on the GPU, the replies, the judge's copies. Measured with a partner the
submission cannot reach, it cannot be inflated to make the submission's rounds look shorter.
"""

import torch

from harness.runner.calls import Calls
from harness.shared.wire import at


class EchoKernel:
    """Returns each input's output buffers (at `paths` in the input) as they are, or (`own`) new
    tensors like them, allocated as a submission that returns its own tensors would: no GPU work
    either way. A list of them where the problem's outputs are a list, else the one tensor."""

    def __init__(self):
        self.own = False
        self.paths: list[tuple] = []
        self.as_list = False

    def __call__(self, data):
        outputs = [at(data, path) for path in self.paths]
        if self.own:
            outputs = [torch.empty_like(output) for output in outputs]
        return outputs if self.as_list else outputs[0]


class EchoCalls(Calls):
    def __init__(self, runner_folder: str, device: str, rng_seed: int, progress):
        super().__init__(runner_folder, device, rng_seed, progress, kernel=EchoKernel())
        self._reply_when_idle = False

    def echo(self, own: bool, reply_when_idle: bool, paths: list, as_list: bool) -> None:
        """How the next batches answer: `own`, `paths` and `as_list` as EchoKernel's;
        `reply_when_idle`, only once the GPU has reached the judge's done event, so that the
        reply's hand-over lies in the judge's window as it does for a worker whose calls are bound
        by the host."""
        self.kernel.own = bool(own)
        self.kernel.paths = [tuple(path) for path in paths]
        self.kernel.as_list = bool(as_list)
        self._reply_when_idle = bool(reply_when_idle)

    def run_batch(self, name: str, record_activity: bool = False) -> tuple:
        reply = super().run_batch(name, record_activity)
        if self._reply_when_idle and self._device.type == "cuda":
            self._judge_events[1].synchronize()
        return reply
