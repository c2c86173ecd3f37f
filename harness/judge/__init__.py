"""The judge side: runs in the harness's own process, which never imports a submission.

It draws every input from the seeds, holds the tensors it shares with the worker (and pristine
copies of them), computes the references, and reaches every verdict: outputs, untouched inputs,
threads left running, the clock, and the GPU activity of the verification round.
"""
