"""Subscribers to the engine's datastream that act on what runs tell: notifications
(notices, notifier) and the bad-host memory (hostwatch). Above report, jobs and state;
below the engine, which starts them, and beside run: they never drive a run."""
