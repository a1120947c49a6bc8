"""What outlives the process: the run index (sqlite, for history and recovery), the
instance ledger (every rented node, written before the create call), the operator's
persistent iroh identity slots, and the platform paths they live under. Imports only
`engine.report` (the views it stores); never `run`, `providers` or `cli`.
"""
