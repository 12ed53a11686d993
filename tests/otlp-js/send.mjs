// Sends one gauge point, one span and one log record to an OTLP/HTTP
// endpoint with the official OpenTelemetry JavaScript SDK. Its HTTP
// exporters encode OTLP as JSON, so this is a real OTLP/JSON sender for
// the end-to-end tests (tests/tests/otlp_json.rs).
//
// usage: node send.mjs http://127.0.0.1:4318 [job] [node]
import { metrics } from "@opentelemetry/api";
import { OTLPLogExporter } from "@opentelemetry/exporter-logs-otlp-http";
import { OTLPMetricExporter } from "@opentelemetry/exporter-metrics-otlp-http";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { LoggerProvider, SimpleLogRecordProcessor } from "@opentelemetry/sdk-logs";
import { MeterProvider, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics";
import { BasicTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";

const [base, job = "jsjob", node = "jsnode"] = process.argv.slice(2);
if (!base) {
  console.error("usage: node send.mjs OTLP_HTTP_BASE_URL [job] [node]");
  process.exit(2);
}
const resource = resourceFromAttributes({
  "service.name": job,
  "host.name": node,
  "sonde.rank": 1,
});

// A failed export must fail the run, not just log.
let failures = 0;
const checked = (exporter) => {
  const send = exporter.export.bind(exporter);
  exporter.export = (items, done) =>
    send(items, (result) => {
      if (result.code !== 0) {
        failures += 1;
        console.error("export failed:", result.error?.message ?? result);
      }
      done(result);
    });
  return exporter;
};

const reader = new PeriodicExportingMetricReader({
  exporter: checked(new OTLPMetricExporter({ url: `${base}/v1/metrics` })),
  exportIntervalMillis: 60_000,
});
const meters = new MeterProvider({ resource, readers: [reader] });
metrics.setGlobalMeterProvider(meters);
const loss = meters.getMeter("send.mjs").createGauge("train.loss", { unit: "1" });
loss.record(0.5, { phase: "eval" });

const tracer = new BasicTracerProvider({
  resource,
  spanProcessors: [new SimpleSpanProcessor(checked(new OTLPTraceExporter({ url: `${base}/v1/traces` })))],
});
const start = Date.now() - 50;
const span = tracer.getTracer("send.mjs").startSpan("forward", {
  startTime: start,
  attributes: { "sonde.batch_idx": 7 },
});
span.end(start + 40);

const logs = new LoggerProvider({
  resource,
  processors: [new SimpleLogRecordProcessor({ exporter: checked(new OTLPLogExporter({ url: `${base}/v1/logs` })) })],
});
logs.getLogger("send.mjs").emit({ eventName: "js.hello", body: "from the JS SDK", attributes: { k: "v" } });

await Promise.all([meters.forceFlush(), tracer.forceFlush(), logs.forceFlush()]);
await Promise.all([meters.shutdown(), tracer.shutdown(), logs.shutdown()]);
if (failures > 0) process.exit(1);
console.log("sent");
