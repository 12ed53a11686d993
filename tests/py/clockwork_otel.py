"""A serving controller reporting finished requests and actions to sonde
through the Python client (`sonde.serving`, OTLP/HTTP through the official
OpenTelemetry SDK): each action a `serving.action` span (sent → result
received), each request a `serving.request` span (arrival → departure).

usage: clockwork_otel.py ENDPOINT ROWS.json
ROWS.json: {"requests": [...], "actions": [...]} in sonde's JSON ingest form.
"""

import json
import sys

import _client_path  # noqa: F401

from sonde.serving import Controller


def main():
    endpoint, rows_file = sys.argv[1], sys.argv[2]
    rows = json.load(open(rows_file))
    with Controller("clockwork-controller", endpoint=endpoint, protocol="http/protobuf") as ctl:
        for a in rows["actions"]:
            ctl.action(**a)
        for r in rows["requests"]:
            ctl.request(**r)
    print(json.dumps({"requests": len(rows["requests"]), "actions": len(rows["actions"])}))


if __name__ == "__main__":
    main()
