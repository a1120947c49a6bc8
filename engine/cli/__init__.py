"""The headless `swjob` program: run, validate, plan, runs, logs, attach, gc. It drives
an Engine like any other program and prints what the datastream says; nothing in the
engine imports it.
"""
