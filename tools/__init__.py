"""The harness's evaluation side, by trust zone (docs/architecture.md has the picture):

- `tools.judge`: trusted, in the harness's own process. Plans an evaluation, compares outputs with the
  float64 truth, applies every guard, decides the verdict. Public: `benchmark`, `compile_kernel`,
  `check_problem`.
- `tools.worker`: runs in worker processes: beside a candidate (the candidate worker, its runtime guard,
  the timing loop, the builder and compiler shim, the zygote that forks them) or in the trusted truth
  worker. It imports nothing from the judge or from supervision (a test checks this).
- `tools.supervise`: process supervision in the harness's process: spawning and containing workers,
  deadlines, job folders, the warm pool.
- `tools.cache`: what is kept between evaluations: builds and reference times.
- Shared data, no behaviour: `tools.problem` (specs), `tools.results` (typed results), `tools.wire`
  (the worker messages), `tools.envinfo` (facts about the machine).
"""
