"""What the user hands in: job files (TOML → a strict schema, exactly spec §4, one-line errors
naming file, line and field), pool designations (provider, resources, image, selection,
caps; the built-in `local` pool) and the workspace push plan shown before anything is
rented. Pure input handling: imports only `engine.state.paths` (where the pools file
lives) and the agent's tree walk; never `run`, `providers`, `report` or `cli`.
"""
