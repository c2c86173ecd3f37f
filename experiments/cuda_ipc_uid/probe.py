"""Which process may open the CUDA IPC handles of another: the same uid or not, inside a user
namespace or not, with the exporter's /dev/shm or a private one.

The judge exports its inputs (memory) and its timing events as CUDA IPC handles, and a worker
opens them (harness/shared/cuda_ipc.py); the sandbox chooses the worker's uid, namespaces and /dev
(harness/judge/sandbox.py). This exports one tensor and one interprocess event, then opens both
in a child started under each variation and prints one line each:

    python experiments/cuda_ipc_uid/probe.py        # as root on a GPU machine, bubblewrap on PATH or NVFP4_BWRAP
"""

import base64
import os
import pickle
import subprocess
import sys

import torch
from torch.multiprocessing.reductions import reduce_tensor

OPENER = r'''
import base64, os, pickle, sys, torch
kind, payload = sys.argv[1], pickle.loads(base64.b64decode(sys.argv[2]))
try:
    if kind == "event":
        torch.cuda.Event.from_ipc_handle(torch.device("cuda", 0), payload).synchronize()
    else:
        from torch.multiprocessing.reductions import rebuild_cuda_tensor
        float(rebuild_cuda_tensor(*payload).sum())
    print("opened as uid", os.getuid())
except Exception as error:
    print("refused as uid", os.getuid(), "-", type(error).__name__, str(error).splitlines()[0])
'''
GPU_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def variations(bwrap: str) -> dict[str, list[str]]:
    whole = [bwrap, "--bind", "/", "/", "--proc", "/proc", "--die-with-parent"]
    host_dev = ["--dev-bind", "/dev", "/dev"]
    gpu_dev = ["--dev", "/dev"] + [arg for node in GPU_NODES for arg in ("--dev-bind", node, node)]
    return {
        "no sandbox": [],
        "bubblewrap, root, the host's /dev": whole + host_dev,
        "bubblewrap, root, pid/ipc/net namespaces": whole + host_dev + ["--unshare-pid", "--unshare-ipc", "--unshare-net"],
        "bubblewrap, root, no capability": whole + host_dev + ["--cap-drop", "ALL"],
        "bubblewrap, root, GPU nodes and the exporter's /dev/shm": whole + gpu_dev + ["--bind", "/dev/shm", "/dev/shm"],
        "bubblewrap, root, GPU nodes and a private /dev/shm": whole + gpu_dev,
        "bubblewrap, uid 0 in a user namespace": whole + host_dev + ["--unshare-user", "--uid", "0", "--gid", "0"],
        "bubblewrap, uid 65534 in a user namespace (root outside)": whole + host_dev + ["--unshare-user", "--uid", "65534",
                                                                                       "--gid", "65534"],
        "setpriv, uid 65534, no namespace": ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"],
    }


def main() -> None:
    exported = torch.arange(1024, device="cuda", dtype=torch.float32)
    event = torch.cuda.Event(interprocess=True)
    event.record()
    torch.cuda.synchronize()
    handles = {"memory": reduce_tensor(exported)[1], "event": event.ipc_handle()}
    bwrap = os.environ.get("NVFP4_BWRAP", "bwrap")
    for name, prefix in variations(bwrap).items():
        for kind, handle in handles.items():
            separator = ["--"] if prefix[:1] == [bwrap] else []
            argv = prefix + separator + [sys.executable, "-c", OPENER, kind, base64.b64encode(pickle.dumps(handle)).decode()]
            child = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            said = (child.stdout.strip().splitlines() or [child.stderr.strip()[-200:]])[-1]
            print(f"{name:58s} {kind:6s} {said}", flush=True)


if __name__ == "__main__":
    main()
