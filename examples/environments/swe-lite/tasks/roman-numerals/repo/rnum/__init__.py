"""rnum: convert between integers and Roman numerals.

>>> from rnum import to_roman, from_roman
>>> to_roman(1994)
'MCMXCIV'
>>> from_roman("xlii")
42
"""

from .convert import MAX_VALUE, MIN_VALUE, from_roman, is_roman, to_roman
from .validate import RomanError

__all__ = [
    "MAX_VALUE",
    "MIN_VALUE",
    "RomanError",
    "from_roman",
    "is_roman",
    "to_roman",
]
