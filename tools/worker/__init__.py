"""Code that runs in worker processes, never in the harness's own:

- beside a candidate: `candidate` (imports the candidate, runs its cases and timing), `guard` (the
  runtime audit hook), `timing` (the one timing loop), `build` and `ccshim` (its load_inline builds),
  and `zygote` (the fork server candidates start from);
- in the trusted truth worker: `truth` (inputs, weights, float64 truth, reference timing) and `refmod`.

Run as `python -m tools.worker.candidate|truth|zygote`. This package imports nothing from `tools.judge`
or `tools.supervise` (tests/test_architecture.py): what runs beside a candidate holds no verdict logic,
and the judge's state never enters a candidate's process. Nothing is imported here, so that a worker
loads only what it uses.
"""
