"""{{name}}: a sonde plugin in Python (componentize-py).

It counts the sample batches and the progress events sonde hands it and
answers `GET /api/plugins/{{name}}/hello` with those counts as JSON. The hooks
are the `hooks` interface of `wit/sonde-plugin.wit`; the module `wit_world` is
generated from that file when the component is built.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types

from counts import Counts

# One instance per plugin, one call at a time: module state is the plugin's
# state. A trap re-creates the instance and calls `start` again.
counts = Counts()
name = "{{name}}"


class Hooks(exports.Hooks):
    def start(self, info: types.StartInfo) -> types.Manifest:
        global counts, name
        if info.settings.strip() not in ("", "{}"):
            raise Err("{{name}} takes no settings")
        counts, name = Counts(), info.name
        host.log(types.Severity.INFO, f"{name} started (contract {info.contract_version})")
        return types.Manifest(
            version="0.1.0",
            description="Counts samples and progress events; GET /hello shows them",
            samples=types.SampleRequest(period_ms=1000, deliver_every_ms=1000, metrics=["system.cpu."]),
            events=[types.EventKind.PROGRESS],
            tables=[],
            reads=[],
        )

    def configure(self, settings: str) -> None:
        if settings.strip() not in ("", "{}"):
            raise Err("{{name}} takes no settings")

    def on_samples(self, batch: types.SampleBatch) -> None:
        counts.saw_samples(len(batch.timestamps), len(batch.series))

    def on_events(self, batch: types.EventBatch) -> None:
        p = batch.progress
        if p is None:
            return
        counts.saw_progress([(batch.origins[o].job, v) for o, v in zip(p.origin, p.value)])

    def on_timer(self, id: int) -> None:
        pass

    def on_request(self, request: types.HttpRequest) -> types.HttpResponse:
        if request.path != "/hello":
            return answer(404, {"error": f"no route {request.method} {request.path}"})
        if request.method != "GET":
            return answer(405, {"error": f"{request.method} is not allowed on /hello"})
        return answer(200, counts.hello(name))

    def stop(self) -> None:
        pass


def answer(status, body):
    return types.HttpResponse(
        status=status,
        headers=[("content-type", "application/json")],
        body=json.dumps(body).encode(),
    )
