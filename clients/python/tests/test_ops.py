"""Operation rows (`sonde.ops`): the `ops` table's columns on what the SDK
would export (in memory), and torch.distributed's collectives timed through
a stand-in module with the same call shapes."""

import types
import unittest

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sonde import ops
from sonde.agent import ProfilerAgent


def mem_agent():
    return ProfilerAgent(env={"SONDE_CLIENT_JOB": "ops"}, span_exporter=InMemorySpanExporter(), node="n", rank=3)


class Work:
    def __init__(self, log):
        self.log = log

    def wait(self):
        self.log.append("waited")
        return True


def fake_dist(log):
    def all_reduce(tensor, op=None, group=None, async_op=False):
        log.append("all_reduce")
        return Work(log) if async_op else None

    return types.SimpleNamespace(all_reduce=all_reduce, barrier=lambda group=None: log.append("barrier"))


class Rows(unittest.TestCase):
    def test_an_operation_is_a_row_with_its_coordinates_and_the_current_step(self):
        a = mem_agent()
        mem = a._pipeline._span_override
        o = ops.Ops(a, dp=1, stage=2, tp=0)
        a.update_batch_idx(7)
        with o.op("forward", micro=3):
            pass
        o.record("pp_send", 100, 250, step=9)
        a.end()
        rows = [s.attributes for s in mem.get_finished_spans() if s.name == "sonde.op"]
        self.assertEqual(len(rows), 2)
        fwd, send = rows
        self.assertEqual(fwd["sonde.table"], "ops")
        self.assertEqual((fwd["step"], fwd["micro"], fwd["kind"]), (7, 3, "forward"))
        self.assertEqual((fwd["dp"], fwd["stage"], fwd["tp"]), (1, 2, 0))
        self.assertLessEqual(fwd["start_ns"], fwd["end_ns"])
        self.assertEqual((send["step"], send["micro"], send["start_ns"], send["end_ns"]), (9, -1, 100, 250))

    def test_what_cannot_be_a_row_is_refused_with_the_reason(self):
        a = mem_agent()
        o = ops.Ops(a)
        with self.assertRaisesRegex(ValueError, "unknown operation kind 'fwd'"):
            o.record("fwd", 1, 2, step=0)
        with self.assertRaisesRegex(ValueError, "needs its step"):
            o.record("forward", 1, 2)
        with self.assertRaisesRegex(ValueError, "ends before it starts"):
            o.record("forward", 5, 2, step=0)
        with self.assertRaisesRegex(ValueError, "dp must be an integer >= 0"):
            ops.Ops(a, dp=-1)
        a.end()


class Collectives(unittest.TestCase):
    def test_collectives_are_timed_sync_and_async_and_can_be_put_back(self):
        a = mem_agent()
        mem = a._pipeline._span_override
        o = ops.Ops(a, dp=1)
        a.update_batch_idx(4)
        log = []
        dist = fake_dist(log)
        original = dist.all_reduce
        restore = ops.time_collectives(o, dist)
        dist.all_reduce("t")
        work = dist.all_reduce("t", async_op=True)
        self.assertEqual(o.recorded, 1, "an async collective lasts until its wait")
        work.wait()
        dist.barrier()
        self.assertEqual(o.recorded, 3)
        self.assertEqual(log, ["all_reduce", "all_reduce", "waited", "barrier"])
        ops.time_collectives(o, dist)  # a second wrap does not time twice
        dist.all_reduce("t")
        self.assertEqual(o.recorded, 4)
        restore()
        self.assertIs(dist.all_reduce, original)
        a.end()
        kinds = [s.attributes["kind"] for s in mem.get_finished_spans() if s.name == "sonde.op"]
        self.assertEqual(kinds, ["dp_collective"] * 4)


if __name__ == "__main__":
    unittest.main()
