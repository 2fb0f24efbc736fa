"""The cart itself."""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Product


@dataclass
class LineItem:
    product: Product
    quantity: int

    @property
    def subtotal(self) -> int:
        return self.product.price * self.quantity


class Cart:
    """A customer's cart.

    ``lines`` may be given to start from previously saved line items.
    """

    def __init__(self, customer: str, lines=None):
        self.customer = customer
        self.lines = list(lines) if lines is not None else []
        self.coupon_percent = 0

    def _find(self, sku: str) -> LineItem | None:
        for line in self.lines:
            if line.product.sku == sku:
                return line
        return None

    def add(self, product: Product, quantity: int = 1) -> None:
        """Add ``quantity`` of ``product``; repeated adds increase the quantity."""
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        line = self._find(product.sku)
        if line is None:
            self.lines.append(LineItem(product, quantity))
        else:
            line.quantity += quantity

    def remove(self, sku: str, quantity: int | None = None) -> None:
        """Remove ``quantity`` of a product, or all of it when ``quantity`` is None."""
        line = self._find(sku)
        if line is None:
            raise KeyError(sku)
        if quantity is None or quantity >= line.quantity:
            self.lines.remove(line)
        else:
            line.quantity -= quantity

    def apply_coupon(self, percent: int) -> None:
        """Take ``percent`` off the subtotal (the discount is rounded down to a cent)."""
        if not 0 <= percent <= 100:
            raise ValueError("percent must be between 0 and 100")
        self.coupon_percent = percent

    def item_count(self) -> int:
        return sum(line.quantity for line in self.lines)

    def subtotal(self) -> int:
        return sum(line.subtotal for line in self.lines)

    def discount(self) -> int:
        return self.subtotal() * self.coupon_percent // 100

    def total(self) -> int:
        """Subtotal minus coupon discount, in cents."""
        return self.subtotal() - self.discount()
