import unittest

from counts import Counts


class CountsTest(unittest.TestCase):
    def test_hello_reports_what_was_seen(self):
        c = Counts()
        c.saw_samples(ticks=2, series=4)
        c.saw_progress([("job-a", 10), ("job-b", 3), ("job-a", 11)])
        body = c.hello("{{name}}")
        self.assertEqual(body["sample_batches"], 1)
        self.assertEqual(body["samples"], 8)
        self.assertEqual(body["event_batches"], 1)
        self.assertEqual(body["progress_rows"], 3)
        self.assertEqual(body["latest_progress"], {"job-a": 11, "job-b": 3})


if __name__ == "__main__":
    unittest.main()
