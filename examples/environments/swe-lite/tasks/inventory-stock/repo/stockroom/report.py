"""Reports over an :class:`~stockroom.Inventory`."""


def low_stock(inventory, threshold):
    """Return the SKUs whose *available* quantity is at or below ``threshold``."""
    return [sku for sku in inventory.skus() if inventory.available(sku) <= threshold]


def stock_table(inventory):
    """Return one text line per item: SKU, name, on hand, reserved, available."""
    lines = []
    for sku in inventory.skus():
        lines.append(
            f"{sku:<8} {inventory.name(sku):<20} {inventory.on_hand(sku):>5} "
            f"{inventory.reserved(sku):>5} {inventory.available(sku):>5}"
        )
    return lines
