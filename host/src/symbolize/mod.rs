//! symbolize/: addresses in a process's modules into function names, with
//! inlined frames and file:line where the module has DWARF, read with the
//! `addr2line` crate over `gimli` and `object` (the versions wasmtime already
//! builds). Used by the MPI probe's ingest (`ingest/json/stacks.rs`): the
//! probe sends raw return addresses and its module map, sonde names them.
//!
//! One [`Symbolizer`] per host. Modules are read once and cached by GNU
//! build-id (by path when a module has none); names are cached per address.
//! What a module cannot tell is said in the name instead of failing:
//!
//! | the module | a frame reads |
//! |---|---|
//! | with DWARF (`-g`) | `solve (stacks.c:52)`, one frame per inlined call |
//! | symbol table only (no `-g`) | `solve` |
//! | stripped (dynamic symbols only) | the exported function, else `stacks+0x12d0` |
//! | file missing, unreadable, or rebuilt (build-id differs) | `stacks+0x12d0` |
//!
//! `module+0xOFF` is the return address relative to the module's load bias,
//! the address `addr2line -e module` takes.

use std::collections::HashMap;
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use parking_lot::Mutex;

// Borrowed slices of module files kept for the life of the process (see
// `MAX_DWARF_FILES`): the reader type gimli already builds for wasmtime, so
// symbolizing adds no second build of gimli with other features.
type Reader = gimli::EndianSlice<'static, gimli::RunTimeEndian>;

/// Modules kept at once; the oldest is forgotten past it.
const MAX_MODULES: usize = 256;
/// Named addresses kept per module.
const MAX_NAMES: usize = 200_000;
/// Module files with DWARF held in memory for good (their DWARF is read
/// lazily, straight from the file's bytes). Past this, modules are named from
/// their symbol tables only.
const MAX_DWARF_FILES: usize = 64;
static DWARF_FILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A loaded module as the process reported it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Module {
    pub path: String,
    /// GNU build-id in hex; empty when the module has none.
    pub build_id: String,
    /// Load bias: a runtime address minus this is the module's own address.
    pub base: u64,
}

impl Module {
    fn key(&self) -> String {
        if self.build_id.is_empty() {
            format!("path:{}", self.path)
        } else {
            self.build_id.clone()
        }
    }

    /// `stacks` for `/work/target/mpi/stacks`.
    pub fn short_name(&self) -> &str {
        self.path
            .rsplit('/')
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.path)
    }
}

/// What was read from a module's file.
struct Symbols {
    dwarf: Option<addr2line::Context<Reader>>,
    /// Function symbols (start, end, name), sorted by start.
    functions: Vec<(u64, u64, String)>,
}

struct Entry {
    /// None: the file could not be used (missing, not ELF, another build).
    symbols: Option<Symbols>,
    /// Why not, for the log and the status.
    problem: Option<String>,
    names: HashMap<u64, Arc<[String]>>,
    last_used: u64,
}

#[derive(Default)]
pub struct Symbolizer {
    modules: Mutex<HashMap<String, Arc<Mutex<Entry>>>>,
    clock: std::sync::atomic::AtomicU64,
}

impl Symbolizer {
    /// The frames at return address `addr` of `module`, innermost first (an
    /// inlined call gives several). Reads the module on first use (slow for
    /// big modules: call it off the async workers).
    pub fn frames(&self, module: &Module, addr: u64) -> Arc<[String]> {
        let entry = self.entry(module);
        let mut e = entry.lock();
        if let Some(n) = e.names.get(&addr) {
            return n.clone();
        }
        // A return address is the instruction after the call: look up the call itself.
        let rel = addr.wrapping_sub(module.base);
        let names: Arc<[String]> = match &e.symbols {
            Some(s) => s.lookup(rel.saturating_sub(1)),
            None => Vec::new().into(),
        };
        let names = if names.is_empty() {
            vec![format!("{}+0x{rel:x}", module.short_name())].into()
        } else {
            names
        };
        if e.names.len() < MAX_NAMES {
            e.names.insert(addr, names.clone());
        }
        names
    }

    /// Why a module gives addresses only, if it does (`None` once it is read fine).
    pub fn problem(&self, module: &Module) -> Option<String> {
        self.entry(module).lock().problem.clone()
    }

    fn entry(&self, module: &Module) -> Arc<Mutex<Entry>> {
        let now = self.clock.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = module.key();
        if let Some(e) = self.modules.lock().get(&key) {
            e.lock().last_used = now;
            return e.clone();
        }
        // Read outside the map's lock: a big module takes a while.
        let (symbols, problem) = match Symbols::read(module) {
            Ok(s) => (Some(s), None),
            Err(why) => {
                tracing::info!(module = %module.path, "MPI probe stacks: {why}; its frames are named by address");
                (None, Some(why))
            }
        };
        let entry = Arc::new(Mutex::new(Entry {
            symbols,
            problem,
            names: HashMap::new(),
            last_used: now,
        }));
        let mut map = self.modules.lock();
        if map.len() >= MAX_MODULES
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| e.lock().last_used)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.entry(key).or_insert(entry).clone()
    }
}

impl Symbols {
    fn read(module: &Module) -> Result<Symbols, String> {
        if !module.path.starts_with('/') {
            return Err(format!("{:?} is not a file path", module.path));
        }
        let data = std::fs::read(&module.path).map_err(|e| format!("cannot read the module file: {e}"))?;
        let file = object::File::parse(&*data).map_err(|e| format!("not an object file: {e}"))?;
        if !module.build_id.is_empty() {
            let on_disk = file.build_id().ok().flatten().map(hex::encode).unwrap_or_default();
            if on_disk != module.build_id {
                return Err(format!(
                    "the file on disk is another build (build-id {on_disk:?}, the process ran {:?})",
                    module.build_id
                ));
            }
        }
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let dwarf = if file.section_by_name(".debug_info").is_some()
            && DWARF_FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < MAX_DWARF_FILES
        {
            let kept: &'static [u8] = Box::leak(data.clone().into_boxed_slice());
            let file = object::File::parse(kept).map_err(|e| format!("not an object file: {e}"))?;
            let sections = gimli::Dwarf::load(|id| -> Result<Reader, gimli::Error> {
                let bytes = file
                    .section_by_name(id.name())
                    .and_then(|s| s.data().ok())
                    .unwrap_or(&[]);
                Ok(Reader::new(bytes, endian))
            })
            .map_err(|e| format!("DWARF: {e}"))?;
            addr2line::Context::from_dwarf(sections).ok()
        } else {
            None
        };
        let mut functions: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok().filter(|n| !n.is_empty())?;
                Some((s.address(), s.address() + s.size().max(1), demangle(name)))
            })
            .collect();
        functions.sort();
        functions.dedup_by_key(|f| f.0);
        Ok(Symbols { dwarf, functions })
    }

    /// Frames at `probe` (a module address), innermost first; empty when unknown.
    fn lookup(&self, probe: u64) -> Arc<[String]> {
        let mut out = Vec::new();
        if let Some(ctx) = &self.dwarf
            && let Ok(mut frames) = ctx.find_frames(probe).skip_all_loads()
        {
            while let Ok(Some(f)) = frames.next() {
                let Some(name) = f.function.as_ref().and_then(|n| n.demangle().ok()) else {
                    continue;
                };
                let at = f.location.and_then(|l| Some((l.file?, l.line?)));
                out.push(match at {
                    Some((file, line)) => {
                        format!("{name} ({}:{line})", file.rsplit('/').next().unwrap_or(file))
                    }
                    None => name.into_owned(),
                });
            }
        }
        if out.is_empty() {
            let i = self.functions.partition_point(|f| f.0 <= probe);
            if let Some((_, end, name)) = i.checked_sub(1).map(|i| &self.functions[i])
                && probe < *end
            {
                out.push(name.clone());
            }
        }
        out.into()
    }
}

/// C++ and Rust names as people read them; C names as they are.
fn demangle(name: &str) -> String {
    addr2line::demangle(name, gimli::DW_LANG_C_plus_plus)
        .or_else(|| addr2line::demangle(name, gimli::DW_LANG_Rust))
        .unwrap_or_else(|| name.to_string())
}

#[cfg(test)]
mod tests;
