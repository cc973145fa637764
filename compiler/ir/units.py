"""Quantities as messages print them, each in the unit that keeps its figure readable. Standard library only."""

from __future__ import annotations


def power_text(watts: float) -> str:
    """Watts below a kilowatt, kilowatts above, so that a small budget never prints as ``0.0 kW``.

    >>> power_text(10), power_text(812.4), power_text(0.5), power_text(999.6), power_text(81_600)
    ('10 W', '812 W', '0.5 W', '1.0 kW', '81.6 kW')
    """
    if watts < 999.5:
        return f"{watts:.0f} W" if watts >= 10 else f"{watts:.2g} W"
    return f"{watts / 1e3:.1f} kW"
