"""Offer search as the Vast.ai API does it: validate the filter document, filter, order.

The SDK sends `POST /api/v0/bundles/` with a JSON document of `{field: {op: value}}`
filters plus `order`, `type`, `limit`, `allocated_storage`. Values arrive the way the
SDK's query parser leaves them: strings for most fields ("1", "0.6", "RTX 4090"),
booleans for true/false, lists for in/notin, and floats already multiplied for
`gpu_ram`/`cpu_ram` (MB). A malformed document is a 400, as the real API would say.
"""

from __future__ import annotations

import operator
from typing import Any

from vastai.api.query import offers_fields

CONTROL_KEYS = {"order", "type", "limit", "allocated_storage", "disable_bundling"}
OPS = {
    "eq": operator.eq,
    "neq": operator.ne,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}
MULTIPLIED = {"gpu_ram", "cpu_ram", "gpu_total_ram"}


class BadRequest(Exception):
    pass


def validate(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise BadRequest("search body must be an object")
    for key, value in doc.items():
        if key in CONTROL_KEYS:
            continue
        if key not in offers_fields:
            raise BadRequest(f"unknown search field {key!r}")
        if not isinstance(value, dict) or not set(value) <= set(OPS):
            raise BadRequest(f"bad filter for {key!r}: {value!r}")
        if key in MULTIPLIED and not all(isinstance(v, int | float) for v in value.values()):
            raise BadRequest(f"{key} must be a number of MB")
    order = doc.get("order", [])
    if not all(isinstance(o, list) and len(o) == 2 and o[1] in ("asc", "desc") for o in order):
        raise BadRequest(f"bad order {order!r}")
    if doc.get("type") not in ("on-demand", "bid", "reserved"):
        raise BadRequest(f"bad offer type {doc.get('type')!r}")


def _coerce(value: Any, like: Any) -> Any:
    """The query's value in the type of the offer's field."""
    if isinstance(value, list):
        return [_coerce(v, like) for v in value]
    if isinstance(like, bool):
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if isinstance(like, int | float):
        return float(value)
    return value


def matches(offer: dict[str, Any], doc: dict[str, Any]) -> bool:
    for key, ops in doc.items():
        if key in CONTROL_KEYS:
            continue
        have = offer.get(key)
        for op, want in ops.items():
            if have is None or not OPS[op](have, _coerce(want, have)):
                return False
    return True


def search(offers: list[dict[str, Any]], doc: dict[str, Any]) -> list[dict[str, Any]]:
    validate(doc)
    found = [dict(o) for o in offers if matches(o, doc)]
    for field, direction in reversed(doc.get("order", [])):
        found.sort(key=lambda o, f=field: o.get(f) or 0, reverse=direction == "desc")
    return found[: int(doc.get("limit") or 64)]
