"""Red team (`agent redteam PROBLEM`): the agent loop of `agent run`, told to obtain the highest reported
speedup by any means and to name its attack in each candidate; afterwards every candidate the evaluator
accepted is judged again by stricter checks, and each disagreement becomes a ready regression case.

- `attacks`: the red-team part of the system prompt, and reading a candidate's `# attack:` line;
- `strict`: the stricter problem (extra seeds, fresh shapes derived from the spec) and its verdict;
- `rejudge`: every benchmarked candidate's first and strict verdicts, as `RejudgeEvent`s;
- `cases`: a disagreement written out as `redteam/<case>/` (candidate.py, expected.json), and `promote`;
- `agent`: `RedTeamAgent`, the loop's `Agent` that logs attacks and re-judges before the run ends.
"""
