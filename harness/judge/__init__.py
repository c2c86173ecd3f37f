"""The judge side: runs in the harness's own process, which never imports a submission.

It draws every input from the seeds with the run's problem's generator (harness/problems), holds
the tensors it shares with the worker (and pristine copies of them), computes the problem's
references, times every batch of calls with its own clock and copies every output inside that
window (rounds.py), and reaches every verdict: outputs, untouched inputs, the figures against the
worker's claims, and the GPU activity of the recorded round.
"""
