"""The export helper: a child process (`python -m sonde._helper`) that turns
a training process's queued timings into SDK spans and exports them.

Why a process: turning a timing into a span and encoding it as OTLP costs
tens of microseconds of Python; on a thread of the training process that
time is taken under the training loop's GIL. The parent's drain thread only
pickles its queue in batches onto the helper's stdin (the write releases the
GIL); the helper runs the official SDK (batching processor, OTLP exporter on
its background thread) and, when told to end, flushes and answers its counts.

Protocol (pickles on stdin/stdout): the parent sends
`("config", {...})` once, then lists of items `(name, start, end, batch)`
(name None: a batch-index update), then `("end", timeout_s)`; the helper
answers `{"recorded", "exported", "export_failed"}` and exits. A helper that
cannot start or dies is seen by the parent as a broken pipe: everything it
would have sent is counted as dropped.
"""

from __future__ import annotations

import pickle
import sys

from ._otel import SpanWriter, pipeline_from

def main() -> int:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    kind, cfg = pickle.load(stdin)
    if kind != "config":
        return 2
    pipeline = pipeline_from(cfg)
    writer = SpanWriter(pipeline)
    timeout_s = 10.0
    while True:
        try:
            msg = pickle.load(stdin)
        except EOFError:  # the parent went away without saying end
            break
        if isinstance(msg, tuple) and msg and msg[0] == "end":
            timeout_s = float(msg[1])
            break
        writer.write(msg)
    pipeline.flush(timeout_s)
    pipeline.shutdown()
    c = pipeline.span_counts
    pickle.dump({"recorded": writer.recorded, "exported": c.exported, "export_failed": c.failed}, stdout)
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
