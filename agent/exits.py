"""Every way a run (or one trajectory of a parallel run) ends, as an exception: the loop raises one, its
class name is the exit status written to the log, its message says why, `exit_code` is the CLI's."""

from __future__ import annotations


class AgentExit(Exception):
    """Ends the run. The subclass name is the exit status; the message says why."""

    exit_code = 0

    @property
    def status(self) -> str:
        return type(self).__name__


class Finished(AgentExit):
    """The model ended its turn without a tool call."""


class TurnLimit(AgentExit):
    pass


class CostLimit(AgentExit):
    pass


class TimeLimit(AgentExit):
    pass


class TargetReached(AgentExit):
    pass


class Interrupted(AgentExit):
    exit_code = 130


class Refused(AgentExit):
    exit_code = 3


class ContextExhausted(AgentExit):
    exit_code = 3


class ModelError(AgentExit):
    exit_code = 3
