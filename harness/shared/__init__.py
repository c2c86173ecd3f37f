"""What the judge's process and the worker's both import: the messages between them (wire.py),
the memory they share (host_memory.py, cuda_ipc.py), the L2 flush (l2_flush.py), the
statistics (stats.py) and the kit's folders and commit (paths.py). Nothing here imports the
judge's or the worker's packages."""
