"""The terminal's views of a run, pure functions of data (the CLI owns the console): one event
(`event`), a result (`result`), a kernel's source (`kernel`), a whole run and the run list (`run`), the
live status line (`live`), `show --follow` (`follow`), the `--json` output (`json_view`), and the numbers
and layout pieces they share (`fmt`)."""
