"""Operations on runs and pools that any client asks for by name: stop a run from any
terminal, follow its log, list a pool's offers, check the pools file. The CLI's verbs
print what these return; `engine.api` re-exports them for the console and Python users."""
