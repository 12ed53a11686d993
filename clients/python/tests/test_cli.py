"""`python -m sonde run`: the environment it gives the job, the link it prints."""

import os
import subprocess
import sys
import unittest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
# One write per rank (atomic on a pipe), so the ranks' lines never interleave.
SHOW = (
    "import os; e = os.environ; os.write(1, ' '.join([e['RANK'], e['WORLD_SIZE'], e['SONDE_CLIENT_JOB'],"
    " e['OTEL_EXPORTER_OTLP_ENDPOINT']]).encode() + b'\\n')"
)


def launch(*args):
    env = dict(os.environ, PYTHONPATH=SRC)
    env.pop("SONDE_CLIENT_JOB", None)
    return subprocess.run([sys.executable, "-m", "sonde", "run", *args], capture_output=True, text=True, env=env)


class Launcher(unittest.TestCase):
    def test_ranks_environment_and_link(self):
        # Nothing listens on port 9: the job runs anyway, with a warning.
        r = launch("--job", "mnist", "--ranks", "2", "--api", "http://127.0.0.1:9", "--endpoint", "http://127.0.0.1:4318",
                   "--", sys.executable, "-c", SHOW)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = sorted(r.stdout.split("\n")[:-1])
        self.assertEqual(lines, ["0 2 mnist http://127.0.0.1:4318", "1 2 mnist http://127.0.0.1:4318"])
        self.assertIn("http://127.0.0.1:9/#/jobs/mnist", r.stderr)
        self.assertIn("does not answer", r.stderr)

    def test_the_job_is_named_after_the_script_and_the_status_is_passed_on(self):
        r = launch("--api", "http://127.0.0.1:9", "--", sys.executable, "/nonexistent/train_big.py")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("/#/jobs/train_big", r.stderr)

    def test_no_command_is_a_usage_error(self):
        r = launch()
        self.assertEqual(r.returncode, 2)
        self.assertIn("no command", r.stderr)


if __name__ == "__main__":
    unittest.main()
