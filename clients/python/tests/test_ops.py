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


def fake_p2p(log):
    def send(tensor, dst, group=None, tag=0):
        log.append(("send", dst))

    def recv(tensor, src=None, group=None, tag=0):
        log.append(("recv", src))
        return src

    def isend(tensor, dst, group=None, tag=0):
        log.append(("isend", dst))
        return Work(log)

    def irecv(tensor, src=None, group=None, tag=0):
        log.append(("irecv", src))
        return Work(log)

    return types.SimpleNamespace(send=send, recv=recv, isend=isend, irecv=irecv, get_rank=lambda group=None: group["rank"])


class PointToPoint(unittest.TestCase):
    def test_sends_and_receives_are_pipeline_ops_of_their_micro_batch(self):
        a = mem_agent()
        mem = a._pipeline._span_override
        o = ops.Ops(a, dp=0, stage=1)
        a.update_batch_idx(2)
        log = []
        dist = fake_p2p(log)
        restore = ops.time_p2p(o, dist)
        with o.micro_batch(3):
            dist.recv("x", 0)
            work = dist.isend("g", 0)
        self.assertEqual(o.recorded, 1, "an isend lasts until its wait")
        work.wait()  # waited outside the micro-batch: still micro-batch 3's
        dist.send("y", 2)
        restore()
        self.assertEqual(dist.send.__name__, "send")
        self.assertFalse(getattr(dist.send, "_sonde_timed", False))
        a.end()
        rows = [s.attributes for s in mem.get_finished_spans() if s.name == "sonde.op"]
        self.assertEqual([(r["kind"], r["micro"], r["step"], r["stage"]) for r in rows],
                         [("pp_recv", 3, 2, 1), ("pp_send", 3, 2, 1), ("pp_send", -1, 2, 1)])
        with self.assertRaisesRegex(ValueError, "micro-batch is an integer >= 0"):
            with o.micro_batch(-2):
                pass


class Coordinates(unittest.TestCase):
    def test_from_the_environment_with_the_agents_rank_as_the_default_dp_rank(self):
        a = mem_agent()  # rank 3
        o = ops.Ops.from_env(a, env={"SONDE_CLIENT_PP_STAGE": "2"})
        self.assertEqual(o.coords, {"dp": 3, "stage": 2, "tp": 0})
        o = ops.Ops.from_env(a, env={"SONDE_CLIENT_DP_RANK": "1", "SONDE_CLIENT_TP_RANK": "4"})
        self.assertEqual(o.coords, {"dp": 1, "stage": 0, "tp": 4})
        with self.assertRaisesRegex(ValueError, "SONDE_CLIENT_PP_STAGE='x' is not an integer"):
            ops.Ops.from_env(a, env={"SONDE_CLIENT_PP_STAGE": "x"})
        a.end()

    def test_from_process_groups(self):
        a = mem_agent()
        dist = fake_p2p([])
        o = ops.Ops.from_groups(a, dp_group={"rank": 5}, pp_group={"rank": 1}, dist=dist)
        self.assertEqual(o.coords, {"dp": 5, "stage": 1, "tp": 0})
        a.end()


if __name__ == "__main__":
    unittest.main()
