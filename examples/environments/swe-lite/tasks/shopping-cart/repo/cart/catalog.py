"""Products and the catalog they are looked up in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Product:
    """A product for sale; ``price`` is in cents."""

    sku: str
    name: str
    price: int

    def __post_init__(self) -> None:
        if self.price < 0:
            raise ValueError(f"negative price for {self.sku}")


class Catalog:
    """Products indexed by SKU."""

    def __init__(self, products=()):
        self._by_sku = {p.sku: p for p in products}

    def get(self, sku: str) -> Product:
        try:
            return self._by_sku[sku]
        except KeyError:
            raise KeyError(f"unknown product: {sku}") from None

    def __contains__(self, sku: object) -> bool:
        return sku in self._by_sku
