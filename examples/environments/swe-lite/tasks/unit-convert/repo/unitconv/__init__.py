"""Unit conversion for length, mass, time and temperature.

Example::

    from unitconv import convert

    convert(5, "mi", "km")
    convert(100, "degC", "degF")
"""

from .convert import UnitError, convert, dimension_of
from .units import DIMENSIONS, TEMPERATURE_UNITS

__all__ = ["DIMENSIONS", "TEMPERATURE_UNITS", "UnitError", "convert", "dimension_of"]
