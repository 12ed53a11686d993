//! The remote-write 1.0 wire format: a `prometheus.WriteRequest` protobuf,
//! snappy block-compressed (not the framed format).
//!
//! The messages are declared here by hand with prost's derive, field numbers
//! as in Prometheus' `prompb/remote.proto` and `prompb/types.proto`; only the
//! fields remote-write 1.0 needs for float samples are declared (exemplars,
//! histograms and metadata are left out, and a decoder skips them).

/// `prometheus.WriteRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`: one label set and its samples, oldest first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Sorted by name; `__name__` is one of them.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// Protobuf-encodes and snappy-compresses a request: the body of one POST.
pub fn encode(req: &WriteRequest) -> Vec<u8> {
    let raw = prost::Message::encode_to_vec(req);
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        // Only fails for inputs over ~4 GiB; a request is bounded by batch_max_samples.
        .expect("snappy: request too large")
}

/// The inverse of [`encode`] (for tests and tools).
pub fn decode(body: &[u8]) -> Result<WriteRequest, String> {
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| format!("snappy: {e}"))?;
    <WriteRequest as prost::Message>::decode(raw.as_slice()).map_err(|e| format!("protobuf: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(n: &str, v: &str) -> Label {
        Label {
            name: n.into(),
            value: v.into(),
        }
    }

    #[test]
    fn remote_write_wire_round_trips() {
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![label("__name__", "up"), label("job", "sonde")],
                samples: vec![
                    Sample {
                        value: 1.5,
                        timestamp: 1_700_000_000_123,
                    },
                    Sample {
                        value: f64::NEG_INFINITY,
                        timestamp: 1_700_000_000_223,
                    },
                ],
            }],
        };
        let body = encode(&req);
        assert_eq!(decode(&body).unwrap(), req);
        assert!(decode(b"not snappy at all").is_err());
    }

    #[test]
    fn remote_write_wire_matches_the_proto_field_numbers() {
        // Hand-encoded bytes of: timeseries { labels { name: "a" value: "b" } samples { value: 1.0 timestamp: 2 } }
        let raw: &[u8] = &[
            0x0a, 0x15, // field 1 (timeseries), 21 bytes
            0x0a, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, b'b', // labels: name=1, value=2
            0x12, 0x0b, 0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x10, 0x02, // samples: double=1, int64=2
        ];
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![label("a", "b")],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 2,
                }],
            }],
        };
        assert_eq!(prost::Message::encode_to_vec(&req), raw);
    }
}
