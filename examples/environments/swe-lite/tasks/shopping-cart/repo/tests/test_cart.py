import unittest

from cart import Cart, LineItem, Product

TEA = Product("TEA-01", "Green tea", 450)
MUG = Product("MUG-02", "Mug", 1200)


class CartTest(unittest.TestCase):
    def test_total_of_restored_cart(self):
        c = Cart("alice", [LineItem(TEA, 2)])
        c.add(MUG)
        self.assertEqual(c.total(), 2100)
        self.assertEqual(c.item_count(), 3)

    def test_coupon(self):
        c = Cart("bob", [LineItem(MUG, 1)])
        c.apply_coupon(15)
        self.assertEqual(c.discount(), 180)
        self.assertEqual(c.total(), 1020)

    def test_new_cart_is_empty(self):
        first = Cart("carol")
        first.add(TEA)
        second = Cart("dave")
        self.assertEqual(second.item_count(), 0)
        self.assertEqual(second.total(), 0)


if __name__ == "__main__":
    unittest.main()
