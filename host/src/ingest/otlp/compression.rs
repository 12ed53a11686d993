//! Compressed OTLP/HTTP bodies: `Content-Encoding: gzip` (what the
//! OpenTelemetry Collector's and rotel's exporters send by default) and
//! `zstd`. gRPC requests are decompressed by tonic itself (`receiver.rs`
//! turns on gzip and zstd there, under the same size limit).
//!
//! A body is inflated into at most `ingest.max_body_bytes`: one that would
//! grow past it is refused with 413 before more is read, so a small zip bomb
//! costs the receiver no more memory than an honest request at the limit.

use std::io::Read;

use axum::body::Bytes;

/// Why a body could not be taken.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// An encoding this receiver does not read (415).
    Unsupported(String),
    /// Inflates past the limit (413).
    TooLarge { limit: usize },
    /// Not valid for its encoding (400).
    Corrupt(String),
}

/// The body as sent, decompressed per `encoding` (`None` or `identity`: as is).
pub fn decode(encoding: Option<&str>, body: Bytes, limit: usize) -> Result<Bytes, BodyError> {
    let enc = encoding.map(|e| e.trim().to_ascii_lowercase());
    match enc.as_deref() {
        None | Some("") | Some("identity") => Ok(body),
        Some("gzip" | "x-gzip") => inflate(flate2::read::GzDecoder::new(&body[..]), limit, "gzip"),
        Some("zstd") => match zstd::stream::read::Decoder::new(&body[..]) {
            Ok(d) => inflate(d, limit, "zstd"),
            Err(e) => Err(BodyError::Corrupt(format!("zstd: {e}"))),
        },
        Some(other) => Err(BodyError::Unsupported(format!(
            "content-encoding {other:?} is not supported: send gzip, zstd or an uncompressed body"
        ))),
    }
}

fn inflate(r: impl Read, limit: usize, what: &str) -> Result<Bytes, BodyError> {
    let mut out = Vec::new();
    // One byte past the limit tells "exactly at the limit" from "over it".
    match r.take(limit as u64 + 1).read_to_end(&mut out) {
        Ok(_) if out.len() > limit => Err(BodyError::TooLarge { limit }),
        Ok(_) => Ok(Bytes::from(out)),
        Err(e) => Err(BodyError::Corrupt(format!("{what}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Bytes {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        Bytes::from(e.finish().unwrap())
    }

    #[test]
    fn gzip_and_zstd_come_back_as_sent() {
        let data = b"the same bytes, compressed".repeat(100);
        assert_eq!(decode(Some("gzip"), gz(&data), 1 << 20).unwrap(), &data[..]);
        let z = Bytes::from(zstd::encode_all(&data[..], 3).unwrap());
        assert_eq!(decode(Some("zstd"), z, 1 << 20).unwrap(), &data[..]);
        assert_eq!(decode(None, Bytes::from_static(b"x"), 1).unwrap(), &b"x"[..]);
    }

    #[test]
    fn a_bomb_is_refused_at_the_limit_without_inflating_it() {
        // 64 MiB of zeros compresses to about 64 KiB.
        let bomb = gz(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 200_000);
        assert_eq!(
            decode(Some("gzip"), bomb, 8 << 20),
            Err(BodyError::TooLarge { limit: 8 << 20 })
        );
        let exact = gz(&vec![1u8; 1000]);
        assert!(decode(Some("gzip"), exact.clone(), 1000).is_ok());
        assert_eq!(
            decode(Some("gzip"), exact, 999),
            Err(BodyError::TooLarge { limit: 999 })
        );
    }

    #[test]
    fn unknown_or_broken_encodings_are_named() {
        assert!(matches!(decode(Some("br"), Bytes::new(), 10), Err(BodyError::Unsupported(m)) if m.contains("br")));
        assert!(matches!(
            decode(Some("gzip"), Bytes::from_static(b"not gzip"), 10),
            Err(BodyError::Corrupt(_))
        ));
    }
}
