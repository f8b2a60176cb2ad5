"""The judge: trusted code in the harness's own process. It plans an evaluation (seeds, cases, shapes),
has the truth made and the candidate run (through `tools.supervise`), compares every output with the
float64 truth, applies every guard and decides the verdict. A candidate never reaches this code. The
two tools' calls, `compile_kernel` and `benchmark`, are in tools/compile_kernel.py and tools/benchmark.py.

- `_evaluate`: one candidate's evaluation once its plan is made, and its verdict;
- `_plan`: the plan of one evaluation, and truth made ahead of time;
- `_verdicts`: what is decided while the candidate runs: cases, flags, clocks, library usage;
- `_compile`: what an import phase came to;
- `_sanitize`: `sanitize` (compute-sanitizer or ASan on a small case) and `with_sanitizer`, its report folded
  into a benchmark's verdict; `_sanitizer_output` reads the tools' logs;
- `_baselines`: `baselines` (the eager reference, its CUDA graph, torch.compile of it and the spec's library
  compositions, timed on the trusted side at the primary shape);
- `_profile`: `profile` (Nsight Compute on a candidate; tools/profile_kernel.py is the tool), `_ncu_output`
  reads ncu's CSV;
- `_check`: `check_problem` (a spec's reference runs);
- `_ratio`: a speedup's interval, and `too_wide` (too wide to rank one kernel against another);
- `_share`: one input set and its truth serving other candidates' evaluations in flight (`share_enabled`,
  `MAX_SHARED_USES`);
- `_static_checks`, `_phases`, `_calls`: source checks, the seconds per phase, the timed calls' schedule
  (output comparison is `tools/compare.py`, shared with the truth server).
"""

from tools.judge._baselines import baselines
from tools.judge._check import check_problem
from tools.judge._ratio import too_wide
from tools.judge._sanitize import sanitize, unavailable_report, with_sanitizer
from tools.judge._sanitizer_tools import availability as sanitizer_availability
from tools.judge._share import MAX_USES as MAX_SHARED_USES
from tools.judge._share import SHARE_ENV, share_enabled
from tools.judge._static_checks import RULES, check_source
from tools.judge._verdicts import PARENT_CLOCK_RATIO, PARENT_CLOCK_SLACK_MS, clock_disagreement

__all__ = [
    "baselines",
    "MAX_SHARED_USES",
    "PARENT_CLOCK_RATIO",
    "PARENT_CLOCK_SLACK_MS",
    "RULES",
    "SHARE_ENV",
    "check_problem",
    "check_source",
    "clock_disagreement",
    "sanitize",
    "sanitizer_availability",
    "share_enabled",
    "too_wide",
    "unavailable_report",
    "with_sanitizer",
]
