//! A job's profile as a pprof profile (`profile.proto`, gzip-compressed), for
//! `go tool pprof`, Pyroscope and anything else that reads it.
//!
//! Two sample types, both in nanoseconds: `work` (MPI work) and `stall` (MPI
//! stall); time outside MPI is not in it. One sample per bin: its locations
//! are the MPI function (leaf) and the call stack outward, its labels `rank`
//! and `thread`. A frame the host named `solve (stacks.c:52)` becomes function
//! `solve` in file `stacks.c` at line 52; an unnamed one (`app+0x12d0`) keeps
//! that text as its function name. The protobuf is written here by hand (a
//! few message kinds; no code generator in a wasm plugin's build).

use std::collections::HashMap;
use std::io::Write;

use crate::profile::{JobProfile, STALL, WORK};

/// Protobuf wire writing: varints and length-delimited fields.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn message(&mut self, field: u32, m: Pb) {
        self.bytes(field, &m.0);
    }
    fn packed(&mut self, field: u32, vs: &[u64]) {
        let mut p = Pb::default();
        for &v in vs {
            p.varint(v);
        }
        self.bytes(field, &p.0);
    }
}

/// The string table: index 0 is "".
struct Strings {
    index: HashMap<String, u64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            index: HashMap::from([(String::new(), 0)]),
            list: vec![String::new()],
        }
    }
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// `solve (stacks.c:52)` -> ("solve", "stacks.c", 52); otherwise the whole text, no file.
pub fn split_frame(frame: &str) -> (&str, &str, u64) {
    if let Some(inner) = frame.strip_suffix(')')
        && let Some((name, at)) = inner.rsplit_once(" (")
        && let Some((file, line)) = at.rsplit_once(':')
        && let Ok(line) = line.parse()
    {
        return (name, file, line);
    }
    (frame, "", 0)
}

/// The uncompressed `Profile` message.
pub fn encode(p: &JobProfile) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Pb::default();
    for (ty, unit) in [("work", "nanoseconds"), ("stall", "nanoseconds")] {
        let mut vt = Pb::default();
        vt.uint(1, strings.id(ty));
        vt.uint(2, strings.id(unit));
        out.message(1, vt);
    }
    // frame text -> location id (= function id)
    let mut locations: HashMap<String, u64> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let (rank_key, thread_key) = (strings.id("rank"), strings.id("thread"));
    for (k, &ns) in p.bins.iter().filter(|(k, _)| k.state == WORK || k.state == STALL) {
        let mut ids = Vec::new();
        // Leaf first: the MPI function, then the stack from the call inward-out.
        for f in std::iter::once(k.function.as_str()).chain(k.frames().rev()) {
            let next = locations.len() as u64 + 1;
            let id = *locations.entry(f.to_string()).or_insert_with(|| {
                order.push(f.to_string());
                next
            });
            ids.push(id);
        }
        let mut s = Pb::default();
        s.packed(1, &ids);
        let (work, stall) = if k.state == WORK { (ns, 0) } else { (0, ns) };
        s.packed(2, &[work, stall]);
        for (key, v) in [(rank_key, i64::from(k.rank) as u64), (thread_key, u64::from(k.thread))] {
            let mut l = Pb::default();
            l.uint(1, key);
            // num is an int64: a negative rank (unknown) as two's complement varint.
            l.key(3, 0);
            l.varint(v);
            s.message(3, l);
        }
        out.message(2, s);
    }
    for (i, f) in order.iter().enumerate() {
        let id = i as u64 + 1;
        let (name, file, line) = split_frame(f);
        let mut loc = Pb::default();
        loc.uint(1, id);
        let mut ln = Pb::default();
        ln.uint(1, id);
        ln.uint(2, line);
        loc.message(4, ln);
        out.message(4, loc);
        let mut func = Pb::default();
        func.uint(1, id);
        func.uint(2, strings.id(name));
        func.uint(3, strings.id(name));
        func.uint(4, strings.id(file));
        out.message(5, func);
    }
    let strings_list = std::mem::take(&mut strings.list);
    for s in &strings_list {
        out.bytes(6, s.as_bytes());
    }
    out.uint(9, p.first_ns);
    out.uint(10, p.last_ns.saturating_sub(p.first_ns));
    out.0
}

/// The profile gzip-compressed, as pprof files are.
pub fn gzip(p: &JobProfile) -> Vec<u8> {
    let raw = encode(p);
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&raw).expect("writing to memory");
    z.finish().expect("writing to memory")
}
