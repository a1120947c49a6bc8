"""Where nodes come from: providers turn a pool designation into a node running
`swjob-agent` and tear it down (`base` is the protocol, `local` the built-in pool,
`vastai` and its `vast_*` helpers the Vast.ai adapter, with the SDK imported only
through `vast_sdk`), and `gc` finds and destroys nodes that bill without a live run.
Imports `jobs`, `state` and `errors`; never `run`, `engine.engine` or `cli`.
"""
