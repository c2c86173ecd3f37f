"""The runner side: what runs in the worker process, beside the submission.

The submission can reach and change everything here, so nothing here decides a verdict: it calls
the submission on inputs the judge shares with it, in batches bracketed by the judge's events,
times them its own way (the competition's, a claim the judge sets against its own clock), records
a batch's GPU activity when asked, and sends back what it saw (harness/shared/wire.py).
"""
