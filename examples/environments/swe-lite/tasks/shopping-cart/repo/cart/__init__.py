"""Shopping cart with a product catalog and percentage coupons.

Example::

    from cart import Cart, Product

    tea = Product("TEA-01", "Green tea", 450)
    c = Cart("alice")
    c.add(tea, quantity=2)
    c.total()   # 900 (cents)
"""

from .cart import Cart, LineItem
from .catalog import Catalog, Product

__all__ = ["Cart", "Catalog", "LineItem", "Product"]
