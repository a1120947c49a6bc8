"""swjob-tui: the operator's live console over the in-process engine."""
