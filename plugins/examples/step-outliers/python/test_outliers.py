import unittest

import outliers

MS = 1_000_000


def run(o, job, rank, durations_ms, first_step=0):
    """Feeds steps back to back; returns the flags."""
    flags, t = [], 0
    for i, d in enumerate(durations_ms):
        f = o.step(job, rank, first_step + i, t, t + int(d * MS))
        t += int(d * MS)
        if f:
            flags.append(f)
    return flags


class OutliersTest(unittest.TestCase):
    def test_a_step_over_twice_the_median_is_flagged_once(self):
        o = outliers.Outliers(outliers.parse_settings('{"window": 10}'))
        flags = run(o, "train", 1, [100, 104, 98, 101, 99, 350, 102, 100])
        self.assertEqual(len(flags), 1)
        f = flags[0]
        self.assertEqual((f["job"], f["rank"], f["step"]), ("train", 1, 5))
        self.assertEqual(f["median_ns"], 100 * MS)
        self.assertAlmostEqual(f["ratio"], 3.5)
        self.assertEqual(f["window"], 5)
        self.assertIn("3.5x its rolling median of 100 ms", outliers.reason(f))
        self.assertEqual(o.view()["slow_per_job"], {"train": 1})

    def test_steps_just_under_the_factor_and_too_early_steps_are_not(self):
        o = outliers.Outliers(outliers.parse_settings(""))
        # The first min_steps (5) steps are never judged, however long.
        self.assertEqual(run(o, "train", 0, [100, 900, 100, 100, 100]), [])
        # 199 ms against a median of 100 ms is 1.99x.
        self.assertEqual(run(o, "train", 0, [100, 199, 100], first_step=5), [])

    def test_ranks_and_jobs_have_their_own_medians(self):
        o = outliers.Outliers(outliers.parse_settings('{"min_steps": 3}'))
        run(o, "a", 0, [100] * 5)
        run(o, "a", 1, [300] * 5)
        # 350 ms is slow for rank 0 and ordinary for rank 1.
        self.assertEqual(len(run(o, "a", 0, [350], first_step=5)), 1)
        self.assertEqual(run(o, "a", 1, [350], first_step=5), [])
        self.assertEqual(run(o, "b", 0, [350] * 4), [])

    def test_the_window_rolls(self):
        o = outliers.Outliers(outliers.parse_settings('{"window": 3, "min_steps": 3}'))
        run(o, "j", 0, [100, 100, 100, 300, 300, 300])
        self.assertEqual(outliers.median_ns(o.ranks[("j", 0)]), 300 * MS)
        self.assertEqual(run(o, "j", 0, [500], first_step=6), [], "500 < 2 x 300")

    def test_settings_errors_name_the_key_and_not_the_plugin(self):
        for text, want in [
            ('{"windw": 3}', "unknown setting `windw` (known: window, factor, min_steps, timings)"),
            ('{"window": 2}', "setting `window` must be an integer from 3 to 1000, got 2"),
            ('{"factor": 1}', "setting `factor` must be a number above 1, at most 100, got 1"),
            ('{"window": 4, "min_steps": 5}', "setting `min_steps` must be an integer from 1 to the window (4), got 5"),
            ('{"timings": []}', "setting `timings` must be a non-empty list of timing names, got []"),
            ("[1]", "settings must be a JSON object, got [1]"),
        ]:
            with self.assertRaises(ValueError) as e:
                outliers.parse_settings(text)
            self.assertEqual(str(e.exception), want)
            self.assertNotIn("outliers", str(e.exception))


if __name__ == "__main__":
    unittest.main()
