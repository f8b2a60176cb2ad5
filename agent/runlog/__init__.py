"""A run's log on disk: its typed records (`events`), the writer (`writer.RunLog`, the run folder), the
reader (`reader`: `read_events`, `EventTail`, `load_run`, `list_runs`) and the run as typed data
(`data.RunData`: turns, trajectories, leases, totals). Imports nothing from the views, the CLI or the loop."""
