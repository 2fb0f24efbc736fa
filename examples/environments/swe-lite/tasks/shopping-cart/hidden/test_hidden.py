import unittest

from cart import Cart, Catalog, LineItem, Product

TEA = Product("TEA-01", "Green tea", 450)
MUG = Product("MUG-02", "Mug", 1200)
PEN = Product("PEN-03", "Pen", 199)


class HiddenCartTest(unittest.TestCase):
    def test_carts_do_not_share_lines(self):
        a = Cart("a")
        b = Cart("b")
        a.add(MUG, 2)
        b.add(PEN)
        self.assertEqual([line.product.sku for line in a.lines], ["MUG-02"])
        self.assertEqual([line.product.sku for line in b.lines], ["PEN-03"])

    def test_fresh_cart_after_others_were_used(self):
        for name in ("x", "y", "z"):
            Cart(name).add(TEA, 3)
        fresh = Cart("w")
        self.assertEqual(fresh.subtotal(), 0)
        fresh.add(PEN)
        self.assertEqual(fresh.total(), 199)

    def test_quantity_of_new_cart_starts_at_zero(self):
        Cart("first").add(TEA)
        c = Cart("second")
        c.add(TEA)
        self.assertEqual(c.item_count(), 1)

    def test_saved_lines_are_used(self):
        c = Cart("eve", [LineItem(TEA, 2)])
        c.add(TEA)
        self.assertEqual(c.item_count(), 3)
        self.assertEqual(c.subtotal(), 1350)

    def test_remove_and_coupon_rounding(self):
        c = Cart("frank", [])
        c.add(PEN, 3)
        c.add(MUG)
        c.remove("PEN-03", 1)
        self.assertEqual(c.subtotal(), 1598)
        c.apply_coupon(10)
        self.assertEqual(c.discount(), 159)
        self.assertEqual(c.total(), 1439)
        c.remove("MUG-02")
        self.assertEqual(c.item_count(), 2)
        with self.assertRaises(KeyError):
            c.remove("MUG-02")

    def test_catalog_lookup(self):
        catalog = Catalog([TEA, MUG])
        self.assertIs(catalog.get("MUG-02"), MUG)
        self.assertNotIn("PEN-03", catalog)
        with self.assertRaises(KeyError):
            catalog.get("PEN-03")


if __name__ == "__main__":
    unittest.main()
