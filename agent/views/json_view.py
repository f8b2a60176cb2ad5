"""What `agent ls --json` and `agent show --json` print: a run as plain JSON data, built from the same
typed records as the rich views (agent.runlog.data), with the same turn selection as `agent show`.

Pure functions of data; the CLI prints the one object each returns.
"""

from __future__ import annotations

from typing import Any

from agent.runlog.data import RunData, TurnData
from agent.runlog.events import RejudgeEvent
from agent.runlog.reader import RunListing
from agent.views.run import ShowOptions, select_turns


def status_json(run: RunData) -> dict[str, Any]:
    """running / finished / killed, the exit status of a finished run, the phase of a running one."""
    return {"state": run.status.state, "exit_status": run.status.exit_status, "phase": run.status.phase}


def run_totals_json(run: RunData) -> dict[str, Any]:
    """One run in brief: what `agent ls` shows in a row, as data."""
    return {
        "run_dir": str(run.path),
        "run_id": run.run_id,
        "problem": run.info.problem,
        "provider": run.info.provider,
        "model": run.info.model,
        "scripted": run.scripted,
        "started_at": run.info.started_at,
        "status": status_json(run),
        "turns": run.turn_count,
        "trajectories": len(run.trajectories),
        "usage": run.usage.model_dump(mode="json"),
        "cost_usd": run.cost_usd,
        "wall_seconds": run.wall_seconds,
        "best_speedup": run.best_speedup,  # vs the launch-free reference (docs/ranking.md)
        "best_headline_metric": run.best_kernel.headline_metric if run.best_kernel else None,
        "best_headline": run.best_kernel.headline if run.best_kernel else None,
        "best_eager_speedup": run.best_kernel.eager_speedup if run.best_kernel else None,
        "best_kernel": run.best_kernel_path,
    }


def listing_json(listing: RunListing) -> dict[str, Any]:
    if listing.run is None:
        return {"run_dir": str(listing.path), "error": listing.error}
    return run_totals_json(listing.run) | {"error": None}


def ls_json(runs_dir: str, listings: list[RunListing]) -> dict[str, Any]:
    """`agent ls --json`: every run under `runs_dir`, newest first; an unreadable one says why."""
    return {"runs_dir": runs_dir, "runs": [listing_json(listing) for listing in listings]}


def turn_json(turn: TurnData) -> dict[str, Any]:
    return {
        "turn": turn.turn,
        "trajectory": turn.trajectory,
        "complete": turn.complete,
        "turn_seconds": turn.turn_seconds,
        "llm_seconds": turn.llm_seconds,
        "tool_seconds": turn.tool_seconds,
        "usage": turn.usage.model_dump(mode="json"),
        "cost_usd": turn.cost_usd,
        "events": [event.model_dump(mode="json") for event in turn.events],
        "unanswered_calls": [block.model_dump(mode="json") for block in turn.unanswered],
    }


def show_json(run: RunData, opts: ShowOptions) -> dict[str, Any]:
    """`agent show --json`: the run's record (run.json), totals and state, the selected turns with their
    events as logged, the summary and best record, and (unless --no-code) the kernel sources by path."""
    turns = select_turns(run.turns, opts)
    return run_totals_json(run) | {
        "info": run.info.model_dump(mode="json"),
        "summary": run.summary.model_dump(mode="json") if run.summary else None,
        "best": run.best.model_dump(mode="json") if run.best else None,
        "selection": {"trajectory": opts.trajectory, "turn": opts.turn, "last": opts.last},
        "selected_turns": [turn_json(turn) for turn in turns],
        "kernels": run.kernels if opts.code else {},
        "notes": run.notes,
        "rejudged": [
            e.model_dump(mode="json") for e in run.events if isinstance(e, RejudgeEvent)
        ],  # red team
    }
