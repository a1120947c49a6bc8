"""Many runs of one job: a grid of parameter variants, run a few at a time under one cap."""
