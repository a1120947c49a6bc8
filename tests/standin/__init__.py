"""A local stand-in of the Vast.ai REST API (see server.py) for the provider's tests."""
