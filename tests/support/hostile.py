"""Hostile shapes the unit tests and the red team both use: secrets that must never show
(and a finder of their pieces in output), and a chain of links that climbs out of its root."""

from __future__ import annotations

__all__ = ["CHAIN", "PEM", "SECRET", "pieces"]

PEM = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAoIB\n-----END KEY-----"
SECRET = "Zq7xW-4f0c9e41b7a2-kP3vY"  # no 6-character piece of it is a word
CHAIN = "d/d/d/../../.."
"""A link target that reads as harmless (three down, three up) but leaves its root when the
`d`s on the way are themselves links."""


def pieces(secret: str, text: str, least: int = 6) -> list[str]:
    """Substrings of `secret` of `least` or more characters that occur in `text`."""
    return [
        secret[i : i + least]
        for i in range(len(secret) - least + 1)
        if secret[i : i + least] in text
    ]
