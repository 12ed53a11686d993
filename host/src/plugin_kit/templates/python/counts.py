"""What {{name}} has seen, kept apart from the bindings so a plain
`python3 -m unittest` can test it without building the component."""


class Counts:
    def __init__(self):
        self.sample_batches = 0
        self.samples = 0
        self.event_batches = 0
        self.progress_rows = 0
        # job -> the latest progress value it reported
        self.latest_progress = {}

    def saw_samples(self, ticks, series):
        """One `on-samples` batch: `ticks` timestamps of `series` series."""
        self.sample_batches += 1
        self.samples += ticks * series

    def saw_progress(self, rows):
        """One `on-events` batch; `rows` is a list of (job, value)."""
        self.event_batches += 1
        for job, value in rows:
            self.progress_rows += 1
            self.latest_progress[job] = value

    def hello(self, plugin):
        """The body of `GET /hello`."""
        return {
            "plugin": plugin,
            "language": "python",
            "sample_batches": self.sample_batches,
            "samples": self.samples,
            "event_batches": self.event_batches,
            "progress_rows": self.progress_rows,
            "latest_progress": self.latest_progress,
        }
