"""The pause before linking again: 250 ms doubling to 30 s, with jitter."""

import unittest

from margin_connector.backoff import FIRST_PAUSE, MAX_PAUSE, backoff


class Backoff(unittest.TestCase):
    def test_pause_doubles_from_a_quarter_second_to_thirty_seconds(self):
        middle = lambda: 0.5  # noqa: E731 - no jitter at the midpoint
        self.assertEqual([backoff(n, middle) for n in range(4)], [0.25, 0.5, 1.0, 2.0])
        self.assertEqual(backoff(20, middle), MAX_PAUSE)
        self.assertEqual(FIRST_PAUSE, 0.25)

    def test_jitter_moves_the_pause_by_at_most_a_quarter(self):
        self.assertAlmostEqual(backoff(0, lambda: 0.0), 0.1875)
        self.assertAlmostEqual(backoff(0, lambda: 0.999999), 0.3125, places=4)
        self.assertLessEqual(backoff(30, lambda: 0.999999), MAX_PAUSE * 1.25)


if __name__ == "__main__":
    unittest.main()
