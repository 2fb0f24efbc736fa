"""Unit tables.

Each linear dimension maps a unit symbol to the size of that unit in the
dimension's base unit: millimetres for length, grams for mass and seconds
for time. Exact integer factors are kept as integers.
"""

LENGTH = {
    "mm": 1,
    "cm": 10,
    "m": 1_000,
    "km": 1_000_000,
    "in": 25.4,
    "ft": 304.8,
    "yd": 914.4,
    "mi": 1_609_344,
}

MASS = {
    "mg": 0.001,
    "g": 1,
    "kg": 1_000,
    "t": 1_000_000,
    "oz": 28.349523125,
    "lb": 453.59237,
}

TIME = {
    "s": 1,
    "min": 60,
    "h": 3_600,
    "d": 86_400,
    "wk": 604_800,
}

DIMENSIONS = {"length": LENGTH, "mass": MASS, "time": TIME}

TEMPERATURE_UNITS = ("degC", "degF", "K")
