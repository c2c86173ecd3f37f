"""The runner side: what runs in the worker process, beside the submission.

The submission can reach and change everything here, so nothing here decides a verdict: it calls
the submission on inputs the judge shares with it, flushes L2, times rounds with CUDA events,
records one round's GPU activity, and sends back what it saw (harness/wire.py).
"""
