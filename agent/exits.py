"""Every way a run (or one trajectory of a parallel run) ends, as an exception: the loop raises one, its
class name is the exit status written to the log, its message says why, `exit_code` is the CLI's.

The process exit codes of `agent run` (docs/scripting.md): each says why the run stopped. Whether a
stopped run holds a correct kernel is in its summary (`best_speedup`); only a run that stopped on its own
(the model ended its turn) without one gets a code of its own, `NO_CORRECT_KERNEL`.
"""

from __future__ import annotations

OK = 0
NO_CORRECT_KERNEL = 1
USAGE = 2
HARNESS_ERROR = 3
TURN_LIMIT = 4
COST_LIMIT = 5
TIME_LIMIT = 6
INTERRUPTED = 130


class AgentExit(Exception):
    """Ends the run. The subclass name is the exit status; the message says why."""

    exit_code = OK

    @property
    def status(self) -> str:
        return type(self).__name__


class Finished(AgentExit):
    """The model ended its turn without a tool call."""


class TurnLimit(AgentExit):
    exit_code = TURN_LIMIT


class CostLimit(AgentExit):
    exit_code = COST_LIMIT


class TimeLimit(AgentExit):
    exit_code = TIME_LIMIT


class TargetReached(AgentExit):
    """A correct kernel reached --target-speedup (so the run always holds one)."""


class FloorReached(AgentExit):
    """The best kernel reached --stop-at-floor: that fraction of its speed-of-light floor (it is correct)."""


class Interrupted(AgentExit):
    exit_code = INTERRUPTED

    CTRL_C = "interrupted (Ctrl-C); in-flight compiles and benchmarks killed"


class Refused(AgentExit):
    exit_code = HARNESS_ERROR


class ContextExhausted(AgentExit):
    exit_code = HARNESS_ERROR


class ModelError(AgentExit):
    exit_code = HARNESS_ERROR


def run_exit_code(outcome: AgentExit, has_correct_kernel: bool) -> int:
    """The process exit code of a run that ended with `outcome`: the outcome's own code, except that a run
    that ended on its own (0) without a correct kernel exits `NO_CORRECT_KERNEL`."""
    if outcome.exit_code == OK and not has_correct_kernel:
        return NO_CORRECT_KERNEL
    return outcome.exit_code
