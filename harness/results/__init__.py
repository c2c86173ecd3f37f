"""A run's results and where they go: what people read (console.py), the --json document
(document.py), the POPCORN_FD lines (popcorn.py), a worker's text made readable for both
(worker_text.py), a timed run's rows and their CSV (rows.py), the verdicts' store (store.py,
recording.py), comparing runs (compare.py), and every table's fit to the terminal (tables.py)."""
