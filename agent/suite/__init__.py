"""`agent suite`: many problems in one command. `records` (what a suite folder holds and the summary's
arithmetic), `folder` (finding the problems, the suite folder read and written), `runner` (the problems
run over the machine's leases, by a run function the CLI gives it), `kernels` (`--kernels DIR`: kernels
judged with no model)."""
