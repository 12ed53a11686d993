"""Runs the client's unit tests (unittest, no network) against the tree's
source and ends with the closing line `./dev test` counts:
`test result: ok. N passed; M failed; ...`."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

result = unittest.TextTestRunner(verbosity=1).run(unittest.defaultTestLoader.discover(HERE))
failed = len(result.failures) + len(result.errors)
passed = result.testsRun - failed - len(result.skipped)
print(f"test result: {'ok' if failed == 0 else 'FAILED'}. {passed} passed; {failed} failed; python client unit tests")
sys.exit(0 if failed == 0 else 1)
