"""Exceptions raised by :mod:`stockroom`."""


class StockError(Exception):
    """Base class for all stockroom errors."""


class UnknownItem(StockError, KeyError):
    """Raised when a SKU is not registered in the inventory."""


class InsufficientStock(StockError):
    """Raised when a request needs more units than are available."""
