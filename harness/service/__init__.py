"""The judge as a service (docs/service.md): a judge process per GPU kept alive across candidates
(judge.py, pool.py), fed by a front (front.py) behind an HTTP API (app.py, client.py), its
verdicts in SQLite (harness/results/store.py); across a Ray cluster with ray_judges.py."""
