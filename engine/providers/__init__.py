"""Providers turn a pool designation into a node running `swjob-agent`, and tear it down."""
