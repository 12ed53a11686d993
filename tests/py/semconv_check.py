"""Checks metric names, units and attribute keys against the OpenTelemetry
semantic conventions as the pinned `opentelemetry-semantic-conventions`
package carries them (its module constants are the oracle; `./dev setup`
pins the version).

usage: semconv_check.py < seen.json
seen.json: {"metrics": [{"name": ..., "unit": ..., "attributes": [keys...],
                         "values": {key: [values...]}}, ...],
            "resource": [keys...]}

A name or key is fine when the conventions define it and do not mark it
deprecated, or when it starts with `sonde.` (sonde's own). A defined metric
must carry the conventions' unit. An attribute whose values the conventions
enumerate (`cpu.mode`, `system.memory.state`, `hw.type`, ...: the package's
`<Key>Values` enums) must take one of those values, not a deprecated one;
`error.type` is exempt, as the conventions leave its values to each
instrumentation (their only member is the fallback `_OTHER`). Prints one line
per problem and exits 1 if there is any; prints the package version first.
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


# Attributes whose values are the instrumentation's own by the conventions.
OPEN_ENUMS = {"error.type"}


def enums():
    """{attribute key: {value: deprecated}} for every attribute the package
    enumerates: the constant `CPU_MODE = "cpu.mode"` has `CpuModeValues`."""
    found = {}
    for package in ("opentelemetry.semconv.attributes", "opentelemetry.semconv._incubating.attributes"):
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{package}.{info.name}")
            source = open(mod.__file__, encoding="utf-8").read()
            for attr, key in vars(mod).items():
                if not (attr.isupper() and isinstance(key, str)):
                    continue
                cls = getattr(mod, "".join(w.capitalize() for w in attr.split("_")) + "Values", None)
                if cls is None:
                    continue
                values = {}
                for member in cls:
                    # the member's docstring follows it in the source
                    at = source.find(f'    {member.name} = "{member.value}"', source.find(f"class {cls.__name__}("))
                    parts = source[at:].split('"""', 2) if at >= 0 else []
                    values[member.value] = len(parts) == 3 and parts[1].lstrip().startswith("Deprecated")
                found.setdefault(key, {}).update(values)
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
    enumerated = enums()
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
        for key, values in m.get("values", {}).items():
            if key in OPEN_ENUMS or key not in enumerated:
                continue
            for value in values:
                if value not in enumerated[key]:
                    known = ", ".join(sorted(v for v, dep in enumerated[key].items() if not dep))
                    problems.append(f"`{name}` {key}=`{value}`: not one of the conventions' values ({known})")
                elif enumerated[key][value]:
                    problems.append(f"`{name}` {key}=`{value}`: deprecated in the conventions")
    for key in seen.get("resource", []):
        check_key(key, "resource")
    for p in problems:
        print(p)
    checked = sorted({k for m in seen["metrics"] for k in m.get("values", {}) if k in enumerated and k not in OPEN_ENUMS})
    print(f"checked {len(seen['metrics'])} metrics and the values of {', '.join(checked) or 'no enumerated attribute'}, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
