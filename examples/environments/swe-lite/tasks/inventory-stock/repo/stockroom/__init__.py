"""stockroom: track stock levels and reservations per SKU."""

from .errors import InsufficientStock, StockError, UnknownItem
from .inventory import Inventory
from .report import low_stock, stock_table

__all__ = [
    "Inventory",
    "InsufficientStock",
    "StockError",
    "UnknownItem",
    "low_stock",
    "stock_table",
]
