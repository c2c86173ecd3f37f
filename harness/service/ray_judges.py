"""Judges across a Ray cluster (`pip install ".[cluster]"`, `serve --ray ADDRESS`): one actor per
GPU of every node (or, for `--device cpu`, `per_node` actors a node), each running a judge
process of its own on its node (harness/service/judges.py LocalJudge), or one per lane under
`serve --test-lanes N`, behind the same front and API. Ray places the actors; the front feeds
each lane as it does a local judge. A trainer already in the cluster can call the actors itself:
`JudgeActor.judge.remote(request)` takes the judge's request (harness/service/judge.py) and
returns its reply.
"""

import socket
import threading

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from harness.service.judges import JUDGE_PROGRAM, JudgeEnded, LocalJudge, workers_ready_after
from harness.service.lanes import replenished_lanes, waiting_workers

HEARTBEAT_TIMEOUT_S = 5.0


@ray.remote
class JudgeActor:
    """The judge processes of this actor's GPU (Ray's CUDA_VISIBLE_DEVICES gives it the GPU) or
    CPU slot, on its node: one per lane (harness/service/lanes.py), each called by its lane."""

    def __init__(self, device: str, memory_limit_mib: int | None, environment: dict, slot: int = 0,
                 program: tuple[str, ...] = JUDGE_PROGRAM, lanes: int = 1):
        import os

        gpus = [str(gpu) for gpu in ray.get_gpu_ids()]
        self._judges = [LocalJudge(device, visible_devices=",".join(gpus) if gpus else None, memory_limit_mib=memory_limit_mib,
                                   environment={**os.environ, **environment}, slot=slot, program=program, lane=lane,
                                   lanes=lanes)
                        for lane in range(lanes)]

    def start(self, lane: int = 0) -> dict:
        return {**self._judges[lane].start(), "node": ray.get_runtime_context().get_node_id(), "name": self._judges[lane].name}

    def judge(self, request: dict, lane: int = 0) -> dict:
        return self._judges[lane].judge(request)

    def replenish(self, lane: int = 0) -> int:
        self._judges[lane].replenish()
        return self._judges[lane].workers_ready

    def heartbeat(self, lane: int = 0) -> bool:
        return self._judges[lane].alive

    def revive(self, lane: int = 0) -> None:
        self._judges[lane].revive()

    def cancel(self, candidate_id: str, lane: int = 0) -> bool:
        return self._judges[lane].cancel(candidate_id)

    def status(self, lane: int = 0) -> dict:
        return {**self._judges[lane].status(), "host": socket.gethostname()}

    def end(self, lane: int = 0) -> None:
        self._judges[lane].end()

    def close(self, lane: int = 0) -> None:
        self._judges[lane].close()


class SharedActor:
    """One actor, shared by the lanes of its GPU: made again once, by whichever lane finds it
    gone first; the others then start their judge processes in the new one."""

    def __init__(self, make_actor, lanes: int = 1):
        self._make_actor = make_actor
        self.handle = make_actor()
        self.made = 1
        self._open_lanes = lanes
        self._lock = threading.Lock()

    def release(self) -> None:
        """A lane closed; the actor killed with the last."""
        with self._lock:
            self._open_lanes -= 1
            if self._open_lanes == 0:
                ray.kill(self.handle)

    def renew(self, seen) -> None:
        """A new actor where `seen` is still the current one."""
        with self._lock:
            if self.handle is seen:
                ray.kill(seen)
                self.handle = self._make_actor()
                self.made += 1


class RayJudge:
    """One lane of an actor, seen from the front as a local judge is. An actor that dies (its node
    lost, its process killed) fails the calls it was running at once; the actor is then made again
    and each lane's judge started in it, and the front queues their candidates again. Lane 0
    judges every mode; the others test mode only, beside it (harness/service/lanes.py)."""

    def __init__(self, actor: SharedActor, node_id: str, slot: int, device: str, lane: int = 0, lanes: int = 1):
        self._shared, self.device, self.lane = actor, device, lane
        self.shares = f"{device} #{slot} on node {node_id[:8]}"
        self.name = self.shares if lane == 0 else f"{self.shares} lane {lane}"
        self.modes = None if lane == 0 else ("test",)
        self.waiting, self.replenished = waiting_workers(device, lanes), replenished_lanes(device, lanes)
        self.workers_ready = self.waiting
        self._alive = False
        self._lock = threading.Lock()

    @property
    def _actor(self):
        return self._shared.handle

    @property
    def recreated(self) -> int:
        return self._shared.made - 1

    @property
    def alive(self) -> bool:
        return self._alive

    def start(self) -> dict:
        ready = ray.get(self._actor.start.remote(self.lane))
        self.name = f"{ready['name']} on node {ready['node'][:8]}" if ready.get("name") else self.name
        self._alive = True
        self.workers_ready = self.waiting
        return ready

    def judge(self, request: dict) -> dict:
        reply = self._call("judge", request)
        self.workers_ready = workers_ready_after(reply)
        return reply

    def replenish(self) -> None:
        self.workers_ready = self._call("replenish")

    def _call(self, method: str, *arguments):
        """The actor's `method` for this lane, its failures as a local judge's."""
        try:
            return ray.get(getattr(self._actor, method).remote(*arguments, self.lane))
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
            self._alive = bool(ray.get(self._actor.heartbeat.remote(self.lane), timeout=HEARTBEAT_TIMEOUT_S))
        except Exception:  # gone, or not answering
            self._alive = False
        return self._alive

    def revive(self) -> None:
        """This lane's judge started again, in a new actor where the actor itself is gone."""
        with self._lock:
            actor = self._actor
            try:
                ray.get(actor.heartbeat.remote(self.lane), timeout=HEARTBEAT_TIMEOUT_S)
                ray.get(actor.revive.remote(self.lane))
                self._alive = True
                return
            except ray.exceptions.RayActorError:
                pass
            self._shared.renew(actor)
            self.start()

    def cancel(self, candidate_id: str) -> bool:
        try:
            return bool(ray.get(self._actor.cancel.remote(candidate_id, self.lane), timeout=HEARTBEAT_TIMEOUT_S))
        except Exception:
            return False

    def status(self) -> dict:
        try:
            found = ray.get(self._actor.status.remote(self.lane), timeout=HEARTBEAT_TIMEOUT_S)
        except Exception:  # gone
            found = {}
        return {**found, "judge": self.name, "actors_made": self._shared.made}

    def end(self) -> None:
        try:
            ray.get(self._actor.end.remote(self.lane), timeout=HEARTBEAT_TIMEOUT_S)
        except Exception:
            pass

    def close(self) -> None:
        try:
            ray.get(self._actor.close.remote(self.lane), timeout=60)
        except Exception:  # gone already
            pass
        finally:
            self._shared.release()


def cluster_judges(device: str, per_node: int = 1, memory_limit_mib: int | None = None,
                   environment: dict | None = None, program: tuple[str, ...] = JUDGE_PROGRAM, lanes: int = 1) -> list[RayJudge]:
    """An actor per GPU of every alive node (`device` cuda), or `per_node` a node (`device` cpu),
    each pinned to its node and running `lanes` judge processes, a RayJudge each; `program` the
    judge's command line (harness/service/judges.py)."""
    judges = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        gpus = int(node.get("Resources", {}).get("GPU", 0))
        slots = gpus if device.startswith("cuda") else per_node
        for slot in range(slots):
            def make_actor(node_id=node["NodeID"], slot=slot):
                # Each lane's call may wait for its judge's reply, beside the heartbeats, status and cancels.
                return JudgeActor.options(
                    num_gpus=1 if device.startswith("cuda") else 0, num_cpus=0, max_concurrency=lanes + 4,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote("cuda" if device.startswith("cuda") else device, memory_limit_mib, environment or {}, slot, program, lanes)

            actor = SharedActor(make_actor, lanes)
            judges += [RayJudge(actor, node["NodeID"], slot, device, lane, lanes) for lane in range(lanes)]
    if not judges:
        raise RuntimeError(f"the Ray cluster has no node with a {'GPU' if device.startswith('cuda') else 'CPU'} for a judge")
    return judges
