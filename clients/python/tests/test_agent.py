"""ProfilerAgent against the SDK's in-memory exporter: what spans leave, with
which attributes and resource, and what is counted when nothing can leave."""

import time
import unittest

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sonde
from sonde.agent import ProfilerAgent, Timing, job_url

ENV = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "SONDE_CLIENT_JOB": "unit"}


def agent(**kw):
    mem = InMemorySpanExporter()
    a = ProfilerAgent(env=ENV, span_exporter=mem, drain_interval_s=0.01, node="n1", **kw)
    return a, mem


class Spans(unittest.TestCase):
    def test_timings_leave_as_spans_with_their_batch_and_the_rank_in_the_resource(self):
        a, mem = agent()
        with a:
            a.update_batch_idx(4)
            t = Timing("backward").start()
            t.end()
            a.record_timing(t)
            with a.timing("forward"):
                pass
            a.record_timing(Timing("load", batch_idx=9).start().end())
        spans = {s.name: s for s in mem.get_finished_spans()}
        self.assertEqual(set(spans), {"backward", "forward", "load"})
        self.assertEqual(spans["backward"].attributes["sonde.batch_idx"], 4)
        self.assertEqual(spans["backward"].start_time, t.start_ns)
        self.assertEqual(spans["backward"].end_time, t.end_ns)
        self.assertEqual(spans["forward"].attributes["sonde.batch_idx"], 4)
        self.assertEqual(spans["load"].attributes["sonde.batch_idx"], 9, "a timing's own index wins")
        r = spans["forward"].resource.attributes
        self.assertEqual((r["sonde.job"], r["service.name"], r["host.name"]), ("unit", "unit", "n1"))
        self.assertEqual((r["sonde.rank"], r["sonde.local_rank"], r["sonde.world_size"]), (1, 1, 2))
        s = a.stats()
        self.assertEqual((s["recorded"], s["exported"], s["export_failed"], s["pending"]), (3, 3, 0, 0))

    def test_a_timing_before_any_batch_has_no_index(self):
        a, mem = agent()
        with a:
            a.record("setup", 1, 2)
        (span,) = mem.get_finished_spans()
        self.assertNotIn("sonde.batch_idx", span.attributes)

    def test_bad_input_is_refused_clearly(self):
        a, _ = agent()
        with self.assertRaisesRegex(ValueError, "not ended"):
            a.record_timing(Timing("x").start())
        with self.assertRaisesRegex(ValueError, ">= 0"):
            a.update_batch_idx(-1)
        with self.assertRaises(TypeError):
            a.update_batch_idx("3")
        with self.assertRaisesRegex(ValueError, "non-empty"):
            Timing("")
        a.end()

    def test_a_full_queue_drops_and_counts(self):
        a, mem = agent(queue_capacity=10)
        # Not started: nothing drains, so the queue fills.
        for i in range(25):
            a.record("t", i, i + 1)
        self.assertEqual(a.stats()["dropped_queue_full"], 15)
        a.end()
        self.assertEqual(len(mem.get_finished_spans()), 10)
        self.assertEqual(a.dropped(), 15)

    def test_sonde_down_costs_the_loop_little_and_is_counted(self):
        # Nothing listens on port 9: every export fails; the loop must not wait on it.
        a = ProfilerAgent(env=ENV, endpoint="http://127.0.0.1:9", export_timeout_s=0.5, drain_interval_s=0.01)
        a.start()
        t0 = time.perf_counter()
        for i in range(2000):
            a.update_batch_idx(i)
            a.record("step", i, i + 1)
        loop_s = time.perf_counter() - t0
        stats = a.end(timeout_s=5)
        self.assertLess(loop_s, 1.0, "the loop waited on the exporter")
        self.assertEqual(stats["exported"], 0)
        self.assertEqual(a.dropped(), 2000, stats)

    def test_disabled_agent_sends_nothing(self):
        a, mem = agent(enabled=False)
        with a:
            a.update_batch_idx(1)
            a.record("x", 1, 2)
        self.assertEqual(mem.get_finished_spans(), ())

    def test_end_is_idempotent(self):
        a, _ = agent()
        a.start()
        a.end()
        self.assertEqual(a.end()["pending"], 0)


class Links(unittest.TestCase):
    def test_the_dashboard_job_route(self):
        self.assertEqual(job_url("mnist 1", "http://h:7878/"), "http://h:7878/#/jobs/mnist%201")
        self.assertEqual(sonde.job_url("a/b", "http://h"), "http://h/#/jobs/a%2Fb")


if __name__ == "__main__":
    unittest.main()
