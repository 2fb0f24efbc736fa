"""The :class:`Inventory` class.

Each item has a quantity *on hand* (units physically in the warehouse) and
a quantity *reserved* for open orders.  The quantity *available* for new
orders is ``on_hand - reserved``.  The life cycle of an order is:

* :meth:`Inventory.reserve` when the order is placed;
* then either :meth:`Inventory.ship` when it leaves the warehouse, or
  :meth:`Inventory.release` when it is cancelled.
"""

from .errors import InsufficientStock, UnknownItem


def _positive(quantity):
    if not isinstance(quantity, int) or quantity <= 0:
        raise ValueError(f"quantity must be a positive int, got {quantity!r}")
    return quantity


class Inventory:
    """Stock levels for a set of items identified by SKU."""

    def __init__(self):
        self._items = {}

    def add_item(self, sku, name, on_hand=0):
        """Register a new item; raises ``ValueError`` if the SKU exists."""
        if sku in self._items:
            raise ValueError(f"SKU {sku!r} is already registered")
        self._items[sku] = {"name": name, "on_hand": on_hand, "reserved": 0}

    def _record(self, sku):
        try:
            return self._items[sku]
        except KeyError:
            raise UnknownItem(sku) from None

    def skus(self):
        """Return the registered SKUs in registration order."""
        return list(self._items)

    def name(self, sku):
        """Display name of the item."""
        return self._record(sku)["name"]

    def on_hand(self, sku):
        """Units physically in the warehouse."""
        return self._record(sku)["on_hand"]

    def reserved(self, sku):
        """Units set aside for open orders."""
        return self._record(sku)["reserved"]

    def available(self, sku):
        """Units that can still be promised to new orders."""
        record = self._record(sku)
        return record["on_hand"] - record["reserved"]

    def restock(self, sku, quantity):
        """Add ``quantity`` units received from a supplier."""
        self._record(sku)["on_hand"] += _positive(quantity)

    def reserve(self, sku, quantity):
        """Set ``quantity`` units aside for an order."""
        _positive(quantity)
        if quantity > self.available(sku):
            raise InsufficientStock(
                f"{sku}: {quantity} requested, {self.available(sku)} available"
            )
        self._record(sku)["reserved"] += quantity

    def release(self, sku, quantity):
        """Cancel a reservation of ``quantity`` units; they become available again."""
        _positive(quantity)
        record = self._record(sku)
        if quantity > record["reserved"]:
            raise InsufficientStock(f"{sku}: only {record['reserved']} reserved")
        record["reserved"] -= quantity

    def ship(self, sku, quantity):
        """Ship ``quantity`` reserved units: they leave the warehouse."""
        _positive(quantity)
        record = self._record(sku)
        if quantity > record["reserved"]:
            raise InsufficientStock(f"{sku}: only {record['reserved']} reserved")
        record["reserved"] -= quantity
        record["on_hand"] -= quantity
