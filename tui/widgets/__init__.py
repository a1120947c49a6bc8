"""Widgets of the console, one per module."""
