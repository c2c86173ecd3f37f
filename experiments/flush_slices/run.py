"""Whether a second process's queues, waiting on the GPU for this process's go, slow this
process's kernels: the judge's L2 flush (normal_ over a large buffer) timed by its own events,
then an interprocess go; a child queues its work behind go while the flush runs, as a worker does.

Variants of the child: idle; one queue waiting for go; a side stream joined the way torch's
documentation shows (it waits for the current queue, itself waiting for go); two queues each
waiting for go; the joined side stream with its tensor marked as used on the current queue.

    python experiments/flush_slices/run.py parent [GB]
"""
import pickle
import statistics
import subprocess
import sys

import torch

VARIANTS = ["idle", "one-queue", "side-stream-joined", "two-queues-on-go", "side-stream-record"]

def child():
    """Queues its variant's work behind go for each line on stdin; `queued` once queued."""
    variant = sys.argv[2]
    handles = pickle.loads(bytes.fromhex(sys.stdin.readline().strip()))
    dev = torch.device("cuda", 0)
    go, done = (torch.cuda.Event.from_ipc_handle(dev, h) for h in handles)
    x = torch.randn(256, 256, device=dev)
    side = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    print("ready", flush=True)
    for line in sys.stdin:
        if variant != "idle":
            cur.wait_event(go)
            if variant == "two-queues-on-go":
                side.wait_event(go)
                with torch.cuda.stream(side):
                    y = x @ x
                e = torch.cuda.Event(); e.record(side); cur.wait_event(e)
            elif variant.startswith("side-stream"):
                side.wait_stream(cur)
                with torch.cuda.stream(side):
                    y = x @ x
                    e = torch.cuda.Event(); e.record()
                x @ x
                cur.wait_event(e)
                if variant == "side-stream-record":
                    y.record_stream(cur)
            else:
                x @ x
            done.record()
        else:
            done.record()
        print("queued", flush=True)
        torch.cuda.synchronize()

def parent():
    """Twelve flushes per variant, each with the child's work queued behind go; the median of the last ten."""
    dev = torch.device("cuda", 0)
    gb = float(sys.argv[2]) if len(sys.argv) > 2 else 8
    buf = torch.empty(int(gb * 2**30 // 4), device=dev)
    for variant in VARIANTS:
        go, done = torch.cuda.Event(interprocess=True), torch.cuda.Event(interprocess=True)
        p = subprocess.Popen([sys.executable, __file__, "child", variant], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        p.stdin.write(pickle.dumps((go.ipc_handle(), done.ipc_handle())).hex() + "\n"); p.stdin.flush()
        assert p.stdout.readline().strip() == "ready"
        times = []
        for r in range(12):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); buf.normal_(); b.record(); go.record()
            p.stdin.write("run\n"); p.stdin.flush()
            assert p.stdout.readline().strip() == "queued"
            torch.cuda.current_stream().wait_event(done)
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        p.stdin.close(); p.wait()
        t = times[2:]
        print(f"{variant:22s} flush median {statistics.median(t):8.3f} ms  min {min(t):8.3f}  max {max(t):8.3f}", flush=True)

if __name__ == "__main__":
    child() if sys.argv[1] == "child" else parent()
