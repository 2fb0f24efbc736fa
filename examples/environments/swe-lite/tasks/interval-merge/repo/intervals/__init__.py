"""intervals: closed numeric intervals and helpers to merge them."""

from .interval import Interval
from .merge import covered_length, gaps, merge

__all__ = ["Interval", "covered_length", "gaps", "merge"]
