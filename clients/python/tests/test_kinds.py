"""The other job kinds: serving rows, parameter-server clocks and events,
elastic reports — checked on what the SDK would export (in memory)."""

import unittest

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sonde import ps, serving
from sonde.agent import ProfilerAgent

ENV = {"SONDE_CLIENT_JOB": "kinds"}


def mem_agent(**kw):
    return ProfilerAgent(env=ENV, span_exporter=InMemorySpanExporter(), node="n", **kw)


class Serving(unittest.TestCase):
    def test_requests_and_actions_become_serving_spans(self):
        a = mem_agent(role="controller")
        mem = a._pipeline._span_override
        ctl = serving.Controller(agent=a)
        ctl.request(request_id=1, model_id=3, arrival_ns=100, departure_ns=250, result=serving.RESULT_OK, slo_factor=2.5)
        ctl.action(action_id=7, action_type=serving.INFER, model_id=3, sent_ns=110, result_received_ns=240, batch_size=4)
        a.end()
        spans = {s.name: s for s in mem.get_finished_spans()}
        req, act = spans["serving.request"], spans["serving.action"]
        self.assertEqual((req.start_time, req.end_time), (100, 250))
        # Rows of the clockwork plugin's tables, by column name.
        self.assertEqual(req.attributes["sonde.table"], "requests")
        self.assertEqual(req.attributes["request_id"], 1)
        self.assertEqual(req.attributes["slo_factor"], 2.5)
        self.assertEqual((req.attributes["arrival_ns"], req.attributes["departure_ns"]), (100, 250))
        self.assertEqual((act.start_time, act.end_time), (110, 240))
        self.assertEqual(act.attributes["sonde.table"], "actions")
        self.assertEqual(act.attributes["action_type"], 2)
        self.assertEqual(act.attributes["batch_size"], 4)
        self.assertEqual(act.attributes["result_received_ns"], 240)
        self.assertEqual(req.resource.attributes["sonde.role"], "controller")

    def test_unknown_or_missing_fields_are_refused(self):
        ctl = serving.Controller(agent=mem_agent())
        with self.assertRaisesRegex(ValueError, "unknown serving field"):
            ctl.request(request_id=1, model_id=1, arrival_ns=1, departure_ns=2, colour="red")
        with self.assertRaisesRegex(ValueError, "needs action_type"):
            ctl.action(action_id=1, model_id=1, sent_ns=1, result_received_ns=2)
        ctl.agent.end()


class Heartbeats(unittest.TestCase):
    def test_heartbeats_run_until_end(self):
        a = mem_agent()
        a.start_heartbeats(0.01)
        import time

        time.sleep(0.2)
        a.end()
        beats = [l for l in a._pipeline.log_memory.get_finished_logs() if l.log_record.event_name == "sonde.heartbeat"]
        self.assertGreaterEqual(len(beats), 3)
        with self.assertRaisesRegex(ValueError, "every_s"):
            a.start_heartbeats(0)


class ParamServer(unittest.TestCase):
    def test_checkpoints_recovery_and_clock(self):
        a = mem_agent(role="server")
        r = ps.Reporter(agent=a)
        r.heartbeat()
        with r.checkpoint(clock=5):
            pass
        r.recovery("restarted", "rolled back", time_ns=42, process="worker-1")
        r.clock(7)
        with self.assertRaisesRegex(ValueError, "unknown recovery stage"):
            r.recovery("exploded")
        a._pipeline._log_processor.force_flush()
        logs = [l.log_record for l in a._pipeline.log_memory.get_finished_logs()]
        names = [l.event_name for l in logs]
        self.assertEqual(names, ["sonde.heartbeat", "sonde.node_event", "sonde.node_event", "sonde.node_event"])
        kinds = [l.attributes.get("sonde.node_event.kind") for l in logs[1:]]
        self.assertEqual(kinds, ["checkpoint-begin", "checkpoint-end", "restarted"])
        self.assertEqual(logs[1].attributes["clock"], 5)
        self.assertEqual((logs[3].timestamp, logs[3].attributes["process"]), (42, "worker-1"))
        data = a._pipeline.metric_reader.get_metrics_data()
        points = [
            (m.name, dict(p.attributes), p.value)
            for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics for p in m.data.data_points
        ]
        self.assertIn(("sonde.progress", {"sonde.progress.name": "clock"}, 7), points)
        r.end()


if __name__ == "__main__":
    unittest.main()
