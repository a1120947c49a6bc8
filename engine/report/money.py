"""How swjob writes dollars, the same in the console and the CLI."""

from __future__ import annotations

import math


def money(dollars: float | None) -> str:
    """Cents, and a tenth of a cent below a dollar: a short run on a $0.22/h node costs
    fractions of a cent, and "$0.00" would hide that it bills at all."""
    if dollars is None:
        return "—"
    return f"${dollars:.2f}" if dollars >= 1 else f"${dollars:.3f}"


def cost_split(by_phase: dict[str, float], order: list[str]) -> str:
    """'provisioning $0.01 · setup $0.00 · run $0.12': phases in the order the run took them."""
    ranked = sorted(by_phase, key=lambda p: order.index(p) if p in order else len(order))
    return " · ".join(f"{phase} {_part(by_phase[phase])}" for phase in ranked)


def _part(dollars: float) -> str:
    """A part of a split: below a tenth of a cent, two significant digits ('$0.00042'),
    where money's '$0.000' made every part of a short run's split read the same."""
    if not 0 < dollars < 0.001:
        return money(dollars)
    return f"${dollars:.{1 - math.floor(math.log10(dollars))}f}"
