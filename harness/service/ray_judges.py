"""Judges across a Ray cluster (`pip install ".[cluster]"`, `serve --ray ADDRESS`): one actor per
GPU of every node (or, for `--device cpu`, `per_node` actors a node), each running a judge
process of its own on its node (harness/service/judges.py LocalJudge), behind the same front
and API. Ray places the actors; the front feeds each as it does a local judge. A trainer already
in the cluster can call the actors itself: `JudgeActor.judge.remote(request)` takes the judge's
request (harness/service/judge.py) and returns its reply.
"""

import socket
import threading

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from harness.service.judges import JUDGE_PROGRAM, JudgeEnded, LocalJudge

HEARTBEAT_TIMEOUT_S = 5.0


@ray.remote(max_concurrency=4)  # its heartbeat, status and cancel are answered while it judges
class JudgeActor:
    """A judge process on this actor's node; Ray's CUDA_VISIBLE_DEVICES gives it its GPU."""

    def __init__(self, device: str, memory_limit_mib: int | None, environment: dict, slot: int = 0,
                 program: tuple[str, ...] = JUDGE_PROGRAM):
        import os

        gpus = [str(gpu) for gpu in ray.get_gpu_ids()]
        self._judge = LocalJudge(device, visible_devices=",".join(gpus) if gpus else None, memory_limit_mib=memory_limit_mib,
                                 environment={**os.environ, **environment}, slot=slot, program=program)

    def start(self) -> dict:
        return {**self._judge.start(), "node": ray.get_runtime_context().get_node_id(), "name": self._judge.name}

    def judge(self, request: dict) -> dict:
        return self._judge.judge(request)

    def heartbeat(self) -> bool:
        return self._judge.alive

    def revive(self) -> None:
        self._judge.revive()

    def cancel(self, candidate_id: str) -> bool:
        return self._judge.cancel(candidate_id)

    def status(self) -> dict:
        return {**self._judge.status(), "host": socket.gethostname()}

    def end(self) -> None:
        self._judge.end()

    def close(self) -> None:
        self._judge.close()


class RayJudge:
    """One actor, seen from the front as a local judge is. An actor that dies (its node lost, its
    process killed) fails the call it was running at once; the actor is then made again from
    `make_actor` and started, and the front queues its candidate again."""

    def __init__(self, make_actor, node_id: str, slot: int, device: str):
        self._make_actor, self.device = make_actor, device
        self._actor = make_actor()
        self.name = self.shares = f"{device} #{slot} on node {node_id[:8]}"
        self.modes = None  # every mode: one actor a GPU
        self._alive = False
        self._lock = threading.Lock()
        self.recreated = 0

    @property
    def alive(self) -> bool:
        return self._alive

    def start(self) -> dict:
        ready = ray.get(self._actor.start.remote())
        self.name = f"{ready['name']} on node {ready['node'][:8]}" if ready.get("name") else self.name
        self._alive = True
        return ready

    def judge(self, request: dict) -> dict:
        try:
            return ray.get(self._actor.judge.remote(request))
        except ray.exceptions.RayActorError as error:
            self._alive = False
            raise JudgeEnded(f"the judge actor {self.name} died: {error}") from None
        except ray.exceptions.RayTaskError as error:
            # The actor's judge process ended: its own JudgeEnded, as a local judge raises it, not
            # Ray's wrapper (the actor's traceback and terminal colours, kept in the candidate's notes).
            if isinstance(error.cause, JudgeEnded):
                raise error.cause from None
            raise

    def heartbeat(self) -> bool:
        try:
            self._alive = bool(ray.get(self._actor.heartbeat.remote(), timeout=HEARTBEAT_TIMEOUT_S))
        except Exception:  # gone, or not answering
            self._alive = False
        return self._alive

    def revive(self) -> None:
        """The actor's judge started again, or, where the actor itself is gone, a new actor."""
        with self._lock:
            try:
                ray.get(self._actor.heartbeat.remote(), timeout=HEARTBEAT_TIMEOUT_S)
                ray.get(self._actor.revive.remote())
                self._alive = True
                return
            except ray.exceptions.RayActorError:
                pass
            ray.kill(self._actor)
            self._actor = self._make_actor()
            self.recreated += 1
            self.start()

    def cancel(self, candidate_id: str) -> bool:
        try:
            return bool(ray.get(self._actor.cancel.remote(candidate_id), timeout=HEARTBEAT_TIMEOUT_S))
        except Exception:
            return False

    def status(self) -> dict:
        try:
            found = ray.get(self._actor.status.remote(), timeout=HEARTBEAT_TIMEOUT_S)
        except Exception:  # gone
            found = {}
        return {**found, "judge": self.name, "actors_made": self.recreated + 1}

    def end(self) -> None:
        try:
            ray.get(self._actor.end.remote(), timeout=HEARTBEAT_TIMEOUT_S)
        except Exception:
            pass

    def close(self) -> None:
        try:
            ray.get(self._actor.close.remote(), timeout=60)
        except Exception:  # gone already
            pass
        finally:
            ray.kill(self._actor)


def cluster_judges(device: str, per_node: int = 1, memory_limit_mib: int | None = None,
                   environment: dict | None = None, program: tuple[str, ...] = JUDGE_PROGRAM) -> list[RayJudge]:
    """An actor per GPU of every alive node (`device` cuda), or `per_node` a node (`device` cpu),
    each pinned to its node; `program` the judge's command line (harness/service/judges.py)."""
    judges = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        gpus = int(node.get("Resources", {}).get("GPU", 0))
        slots = gpus if device.startswith("cuda") else per_node
        for slot in range(slots):
            def make_actor(node_id=node["NodeID"], slot=slot):
                return JudgeActor.options(
                    num_gpus=1 if device.startswith("cuda") else 0, num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote("cuda" if device.startswith("cuda") else device, memory_limit_mib, environment or {}, slot, program)

            judges.append(RayJudge(make_actor, node["NodeID"], slot, device))
    if not judges:
        raise RuntimeError(f"the Ray cluster has no node with a {'GPU' if device.startswith('cuda') else 'CPU'} for a judge")
    return judges
