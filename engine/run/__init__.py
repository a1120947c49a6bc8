"""The machinery of one run: the pure, table-driven FSM (spec §6), the RunDriver that
carries out its commands against a provider and a node, the control service that
admits and talks to nodes, the transfer client (push and pull), run records (logs,
run.json, phase clocks) and recovery after an operator restart. Imports `jobs`,
`report`, `state` and `providers.base`; never a concrete provider, `engine.engine`
or `cli`.
"""
