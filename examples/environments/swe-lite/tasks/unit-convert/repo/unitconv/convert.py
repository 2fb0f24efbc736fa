"""Conversion functions."""

from __future__ import annotations

from .units import DIMENSIONS, TEMPERATURE_UNITS


class UnitError(ValueError):
    """Raised for unknown units or conversions between different dimensions."""


def dimension_of(unit: str) -> str:
    """Return the dimension (``"length"``, ``"temperature"``, ...) of ``unit``."""
    if unit in TEMPERATURE_UNITS:
        return "temperature"
    for name, table in DIMENSIONS.items():
        if unit in table:
            return name
    raise UnitError(f"unknown unit: {unit!r}")


def _to_kelvin(value: float, unit: str) -> float:
    if unit == "K":
        return value
    if unit == "degC":
        return value + 273.15
    return (value - 32) * 5 / 9 + 273.15


def _from_kelvin(value: float, unit: str) -> float:
    if unit == "K":
        return value
    if unit == "degC":
        return value - 273.15
    return (value - 273.15) * 9 / 5 + 32


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """Convert ``value`` from ``from_unit`` to ``to_unit``.

    Both units must belong to the same dimension, otherwise :class:`UnitError`
    is raised. Temperatures are converted through kelvin; below absolute zero
    is an error.
    """
    source = dimension_of(from_unit)
    target = dimension_of(to_unit)
    if source != target:
        raise UnitError(f"cannot convert {source} ({from_unit}) to {target} ({to_unit})")
    if source == "temperature":
        kelvin = _to_kelvin(value, from_unit)
        if kelvin < 0:
            raise UnitError(f"{value} {from_unit} is below absolute zero")
        return _from_kelvin(kelvin, to_unit)
    table = DIMENSIONS[source]
    base = value * table[from_unit]
    return base // table[to_unit]
