"""Checks metric names, units and attribute keys against the OpenTelemetry
semantic conventions as the pinned `opentelemetry-semantic-conventions`
package carries them (its module constants are the oracle; `./dev setup`
pins the version).

usage: semconv_check.py < seen.json
seen.json: {"metrics": [{"name": ..., "unit": ..., "attributes": [keys...]}, ...],
            "resource": [keys...]}

A name or key is fine when the conventions define it and do not mark it
deprecated, or when it starts with `sonde.` (sonde's own). A defined metric
must carry the conventions' unit. Prints one line per problem and exits 1 if
there is any; prints the package version first.
"""

import importlib
import json
import pkgutil
import sys
from importlib.metadata import version

import opentelemetry.semconv as semconv


def constants(kind):
    """{name: docstring-or-None} of every metric or attribute constant, stable
    and incubating; deprecated ones are marked in their docstrings."""
    found = {}
    for package in (f"opentelemetry.semconv.{kind}", f"opentelemetry.semconv._incubating.{kind}"):
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{package}.{info.name}")
            source = open(mod.__file__, encoding="utf-8").read()
            for attr, value in vars(mod).items():
                if attr.isupper() and isinstance(value, str):
                    # the docstring follows the constant in the source
                    at = source.find(f'{attr}: Final = "{value}"')
                    parts = source[at:].split('"""', 2) if at >= 0 else []
                    deprecated = len(parts) == 3 and parts[1].lstrip().startswith("Deprecated")
                    if value not in found or not deprecated:
                        found[value] = (mod, attr, deprecated)
    return found


class RecordingMeter:
    """Stands in for a Meter: the create_* helpers hand it their unit."""

    def __getattr__(self, name):
        def create(**kwargs):
            return kwargs

        return create


def expected_unit(mod, attr):
    create = getattr(mod, "create_" + attr.lower(), None)
    if create is None:
        return None
    try:
        return create(RecordingMeter()).get("unit")
    except TypeError:
        # observable instruments take callbacks too
        return create(RecordingMeter(), callbacks=[]).get("unit")


def main():
    seen = json.load(sys.stdin)
    metrics = constants("metrics")
    attributes = constants("attributes")
    problems = []
    print(f"opentelemetry-semantic-conventions {version('opentelemetry-semantic-conventions')}")

    def check_key(key, where):
        if key.startswith("sonde."):
            return
        if key not in attributes:
            problems.append(f"attribute `{key}` ({where}): not in the conventions and not `sonde.`")
        elif attributes[key][2]:
            problems.append(f"attribute `{key}` ({where}): deprecated in the conventions")

    for m in seen["metrics"]:
        name = m["name"]
        if not name.startswith("sonde."):
            if name not in metrics:
                problems.append(f"metric `{name}`: not in the conventions and not `sonde.`")
            else:
                mod, attr, deprecated = metrics[name]
                if deprecated:
                    problems.append(f"metric `{name}`: deprecated in the conventions")
                unit = expected_unit(mod, attr)
                if unit is not None and unit != m["unit"]:
                    problems.append(f"metric `{name}`: unit `{m['unit']}`, the conventions say `{unit}`")
        for key in m["attributes"]:
            check_key(key, name)
    for key in seen.get("resource", []):
        check_key(key, "resource")
    for p in problems:
        print(p)
    print(f"checked {len(seen['metrics'])} metrics, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
