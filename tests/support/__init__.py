"""Helpers every kind of test shares: waiting for a condition, and process checks."""
