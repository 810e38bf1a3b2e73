"""(e) The prefetch pool."""

import time
import unittest

import _support
from idgen_client import Client, UnavailableError


class Prefetch(unittest.TestCase):
    def test_8_threads_x_2000_next_id_with_prefetch_1000(self):
        server = _support.Server(self)
        self.addCleanup(server.stop)
        with Client([server.addr], prefetch=1000, timeout=5.0) as client:
            start = time.monotonic()
            results = _support.run_threads(
                8, lambda i: [client.next_id() for _ in range(2000)], timeout=120
            )
            elapsed = time.monotonic() - start
            all_ids = [i for r in results for i in r]
            self.assertEqual(len(all_ids), 16000)
            self.assertEqual(len(set(all_ids)), 16000, "duplicate IDs")
            for r in results:  # one node: the pool is in issue order
                self.assertTrue(all(a < b for a, b in zip(r, r[1:])))
            stats = client.stats()
            self.assertEqual(stats["prefetch_served"], 16000)
            # Refills ask for up to 1000 IDs at a time: at least ~16 requests, far fewer
            # than the 16000 IDs they carried.
            self.assertLessEqual(stats["requests"], 16000 // 50, stats)
            self.assertGreaterEqual(stats["ids"], 16000)
            print(f"\n  16000 next_id() from 8 threads in {elapsed:.2f}s with "
                  f"{stats['requests']} wire requests")

    def test_pool_refills_in_the_background_below_low_water(self):
        server = _support.Server(self)
        self.addCleanup(server.stop)
        with Client([server.addr], prefetch=100, low_water=50) as client:
            first = client.next_id()
            ids = [first] + [client.next_id() for _ in range(60)]  # drops below 50
            for _ in range(200):  # wait (bounded) for the background refill
                if client.stats()["ids"] >= 100 + 61:
                    break
                time.sleep(0.01)
            self.assertGreaterEqual(client.stats()["prefetch_refills"], 2)
            self.assertEqual(len(set(ids)), 61)
            # Pooled IDs age: still they were issued moments ago here.
            self.assertLess(abs(client.decode(first).unix_ms - time.time() * 1000), 60000)

    def test_refill_failure_reaches_the_caller_in_bounded_time(self):
        dead = f"127.0.0.1:{_support.unused_port()}"
        with Client([dead], prefetch=10, connect_timeout=0.3, timeout=0.3) as client:
            start = time.monotonic()
            with self.assertRaises(UnavailableError):
                client.next_id()
            self.assertLess(time.monotonic() - start, 5.0)


if __name__ == "__main__":
    unittest.main()
