"""The B200 cost model (model.py), the published versions it is fitted on (calibration.py), its
tables (report.py) and the first run on a B200 that times every configuration (first_run.py)."""
