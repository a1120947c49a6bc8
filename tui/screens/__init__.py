"""Screens and modals of the console, one per module."""
