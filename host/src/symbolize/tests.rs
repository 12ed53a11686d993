//! The symbolizer on a small C program compiled here (`cc -g`), as built, with
//! no debug info, stripped, rebuilt under a new build-id and deleted.

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSymbol};

use super::*;

const PROGRAM: &str = r#"
volatile int sink;
__attribute__((noinline)) void leaf(int n) { sink += n; }
static inline __attribute__((always_inline)) void helper(int n) { leaf(n); sink += 2; }
__attribute__((noinline)) void solve(int n) {
    helper(n);
    sink += 1;
}
int main(void) { solve(3); return 0; }
"#;

fn build(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join("prog.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc (gcc) is needed for this test");
    assert!(st.success());
    out
}

/// The module as the probe would report it at load bias 0, and the return
/// address of `solve`'s call of `leaf` (the instruction after the call).
fn module_and_return_address(path: &Path) -> (Module, u64) {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let build_id = file.build_id().unwrap().map(hex::encode).unwrap_or_default();
    let unstripped = std::fs::read(path.with_extension("full")).unwrap_or(data.clone());
    let full = object::File::parse(&*unstripped).unwrap();
    let solve = full.symbols().find(|s| s.name() == Ok("solve")).unwrap();
    // The return address: solve's first call instruction plus its 5 bytes.
    let code = full
        .section_data_by_address(solve.address(), solve.size())
        .expect("solve's code");
    let call = code.iter().position(|&b| b == 0xe8).expect("a call in solve") as u64;
    (
        Module {
            path: path.display().to_string(),
            build_id,
            base: 0,
        },
        solve.address() + call + 5,
    )
}

trait SectionData {
    fn section_data_by_address(&self, addr: u64, size: u64) -> Option<Vec<u8>>;
}

impl SectionData for object::File<'_> {
    fn section_data_by_address(&self, addr: u64, size: u64) -> Option<Vec<u8>> {
        use object::ObjectSection;
        let s = self
            .sections()
            .find(|s| s.address() <= addr && addr + size <= s.address() + s.size())?;
        let d = s.data().ok()?;
        let off = (addr - s.address()) as usize;
        Some(d[off..off + size as usize].to_vec())
    }
}

#[test]
fn dwarf_gives_inlined_frames_with_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build(tmp.path(), "prog", &["-O1", "-g"]);
    let (m, ret) = module_and_return_address(&exe);
    let frames = Symbolizer::default().frames(&m, ret);
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert!(frames[0].starts_with("helper (prog.c:"), "{frames:?}");
    assert!(frames[1].starts_with("solve (prog.c:6)"), "{frames:?}");
}

#[test]
fn without_debug_info_the_symbol_table_names_the_function() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build(tmp.path(), "prog", &["-O1"]);
    let (m, ret) = module_and_return_address(&exe);
    let s = Symbolizer::default();
    assert_eq!(&*s.frames(&m, ret), ["solve".to_string()]);
    assert_eq!(s.problem(&m), None);
}

#[test]
fn stripped_missing_or_rebuilt_modules_give_module_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build(tmp.path(), "prog", &["-O1", "-g"]);
    std::fs::copy(&exe, exe.with_extension("full")).unwrap();
    assert!(Command::new("strip").arg(&exe).status().unwrap().success());
    let (m, ret) = module_and_return_address(&exe);
    let s = Symbolizer::default();
    let want = [format!("prog+0x{ret:x}")];
    assert_eq!(&*s.frames(&m, ret), want, "stripped");

    // Another build at the same path: the process's build-id no longer matches.
    let other = Module {
        build_id: "00112233".into(),
        ..m.clone()
    };
    assert_eq!(&*s.frames(&other, ret), want, "rebuilt");
    assert!(s.problem(&other).unwrap().contains("another build"));

    // Gone: named by address, and said why.
    let gone = Module {
        path: tmp.path().join("gone").display().to_string(),
        build_id: "aa".into(),
        base: 0x1000,
    };
    assert_eq!(&*s.frames(&gone, 0x1010), ["gone+0x10".to_string()]);
    assert!(s.problem(&gone).unwrap().contains("cannot read"));
    // Not a file at all ([vdso]): the same.
    let vdso = Module {
        path: "linux-vdso.so.1".into(),
        build_id: String::new(),
        base: 0,
    };
    assert_eq!(&*s.frames(&vdso, 0x99), ["linux-vdso.so.1+0x99".to_string()]);
}
