"""Alert rules: a figure of a project's streams over a sliding window, a condition, and what to
tell whom when it holds (docs/alerts.md, "Rules").

- `figures`: a rule's figure over one window, read through `streams.stats` (the pages' own).
- `rule_state`: how a rule moves between ok, pending and firing (`step`, pure).
- `evaluate`: the live evaluation (the periodic job, one process per rule and tick) and the
  backtest, both through `observe` and `step`.
- `notices`: what a firing says (a `notify.Message`) and silences.
- `rules`: making and checking a rule (the form's and the API's one validation).
"""
