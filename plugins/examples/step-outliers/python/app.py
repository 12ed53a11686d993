"""step-outliers: a sonde plugin in Python (componentize-py) that flags a
training step running more than `factor` times its rank's rolling median.

For every timing named in `timings` (default "step" and "train_batch") it
keeps each (job, rank)'s last `window` step durations; a step longer than
`factor` x their median (once `min_steps` are known) becomes a `slow-step`
decision for "<job>/rank-<rank>" and bumps the counter
`step_outliers.slow_steps` of its job. `GET /slow` shows the slow steps and
each rank's median. The logic is in outliers.py; this file is the contract's
side: the hooks, the manifest, what goes to the host.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types

import outliers

# One instance, one call at a time: module state is the plugin's state.
state = outliers.Outliers(outliers.parse_settings(""))
# job -> the handle of its `step_outliers.slow_steps` series
handles = {}


def settings_or_err(text):
    try:
        return outliers.parse_settings(text)
    except ValueError as e:
        raise Err(str(e))


def rank_of(origin):
    return origin.rank if origin.rank >= 0 else max(origin.index, 0)


def attr(key, value):
    if isinstance(value, str):
        return types.Attribute(key, types.Value_Str(value))
    return types.Attribute(key, types.Value_Int(value))


def handle(job):
    h = handles.get(job)
    if h is None:
        h = host.declare_metric(types.MetricDesc(
            name="step_outliers.slow_steps",
            description="Steps that ran more than `factor` times their rank's rolling median",
            unit="{step}",
            kind=types.MetricKind.COUNTER,
            attributes=[attr("sonde.job", job)],
        ))
        handles[job] = h
    return h


class Hooks(exports.Hooks):
    def start(self, info: types.StartInfo) -> types.Manifest:
        global state
        state = outliers.Outliers(settings_or_err(info.settings))
        handles.clear()
        return types.Manifest(
            version="0.1.0",
            description="Flags training steps slower than factor x their rank's rolling median (Python)",
            samples=None,
            events=[types.EventKind.TIMINGS],
            tables=[],
            reads=[],
        )

    def configure(self, settings: str) -> None:
        state.reconfigure(settings_or_err(settings))

    def on_samples(self, batch: types.SampleBatch) -> None:
        pass

    def on_events(self, batch: types.EventBatch) -> None:
        t = batch.timings
        if t is None:
            return
        wanted = {i for i, n in enumerate(batch.names) if n in state.settings["timings"]}
        points = types.PointBatch(series=[], time=[], value=[])
        for i in range(len(t.origin)):
            if t.name[i] not in wanted:
                continue
            o = batch.origins[t.origin[i]]
            rank = rank_of(o)
            flag = state.step(o.job, rank, t.step[i], t.start[i], t.end[i])
            if flag is None:
                continue
            host.emit_decision(types.Decision(
                kind="slow-step",
                subject=f"{o.job}/rank-{rank}",
                reason=outliers.reason(flag),
                body=json.dumps(flag),
                attributes=[attr("sonde.job", o.job), attr("sonde.rank", rank)],
            ))
            points.series.append(handle(o.job))
            points.time.append(t.end[i])
            points.value.append(float(state.slow[o.job]))
        if points.series:
            host.emit_points(points)

    def on_timer(self, id: int) -> None:
        pass

    def on_request(self, request: types.HttpRequest) -> types.HttpResponse:
        if request.path != "/slow":
            return answer(404, {"error": f"no route {request.method} {request.path}; routes: GET /slow"})
        if request.method != "GET":
            return answer(405, {"error": f"{request.method} is not allowed on /slow"})
        return answer(200, state.view())

    def stop(self) -> None:
        pass


def answer(status, body):
    return types.HttpResponse(
        status=status,
        headers=[("content-type", "application/json")],
        body=json.dumps(body).encode(),
    )
