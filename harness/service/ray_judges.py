"""Judges across a Ray cluster (`pip install ".[cluster]"`, `serve --ray ADDRESS`): one actor per
GPU of every node (or, for `--device cpu`, `per_node` actors a node), each running a judge
process of its own on its node (harness/service/judges.py LocalJudge), behind the same front
and API. Ray places the actors; the front feeds each as it does a local judge. A trainer already
in the cluster can call the actors itself: `JudgeActor.judge.remote(request)` takes the judge's
request (harness/service/judge.py) and returns its reply.
"""

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from harness.service.judges import LocalJudge


@ray.remote
class JudgeActor:
    """A judge process on this actor's node; Ray's CUDA_VISIBLE_DEVICES gives it its GPU."""

    def __init__(self, device: str, memory_limit_mib: int | None, environment: dict):
        import os

        self._judge = LocalJudge(device, memory_limit_mib=memory_limit_mib, environment={**os.environ, **environment})

    def start(self) -> dict:
        return {**self._judge.start(), "node": ray.get_runtime_context().get_node_id()}

    def judge(self, request: dict) -> dict:
        return self._judge.judge(request)

    def status(self) -> dict:
        return self._judge.status()

    def close(self) -> None:
        self._judge.close()


class RayJudge:
    """One actor, seen from the front as a local judge is."""

    def __init__(self, actor, node_id: str, slot: int, device: str):
        self._actor, self.device = actor, device
        self.name = f"{device} #{slot} on node {node_id[:8]}"
        self._last_status: dict = {}

    def start(self) -> dict:
        return ray.get(self._actor.start.remote())

    def judge(self, request: dict) -> dict:
        return ray.get(self._actor.judge.remote(request))

    def status(self) -> dict:
        try:
            # The actor answers between candidates (its calls run one at a time).
            self._last_status = ray.get(self._actor.status.remote(), timeout=0.5)
        except Exception:  # busy judging, or gone
            pass
        return {**self._last_status, "judge": self.name}

    def close(self) -> None:
        try:
            ray.get(self._actor.close.remote(), timeout=60)
        finally:
            ray.kill(self._actor)


def cluster_judges(device: str, per_node: int = 1, memory_limit_mib: int | None = None,
                   environment: dict | None = None) -> list[RayJudge]:
    """An actor per GPU of every alive node (`device` cuda), or `per_node` a node (`device` cpu),
    each pinned to its node."""
    judges = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        gpus = int(node.get("Resources", {}).get("GPU", 0))
        slots = gpus if device.startswith("cuda") else per_node
        for slot in range(slots):
            actor = JudgeActor.options(
                num_gpus=1 if device.startswith("cuda") else 0, num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote("cuda" if device.startswith("cuda") else device, memory_limit_mib, environment or {})
            judges.append(RayJudge(actor, node["NodeID"], slot, device))
    if not judges:
        raise RuntimeError(f"the Ray cluster has no node with a {'GPU' if device.startswith('cuda') else 'CPU'} for a judge")
    return judges
