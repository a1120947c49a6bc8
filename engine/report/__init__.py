"""What a run tells the world: the typed events of the datastream (pydantic, one
discriminated union), the datastream itself (events.jsonl plus bounded pub/sub), the
run and pool views a console draws, folded from events by `runbook`, and how money is
written. Everything here is data and pure functions over it: imports only
`agent.protocol` (the log-line types); never `run`, `state`, `providers` or `cli`.
"""
