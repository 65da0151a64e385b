//! The Pi package's prebuilt addons, one platform package per target of `pi/package.json`'s
//! `napi.targets`, checked as files: no addon is trusted by eye.
//!
//! For each addon:
//! - the object format and the architecture (the ELF machine, the Mach-O CPU type, the PE
//!   machine) are the target's, and it is a shared library (a PE32+ file flagged DLL);
//! - it exports the N-API registration symbol, `napi_register_module_v1`;
//! - it links nothing beyond the platform's C library (glibc's libraries, musl's `libc.so`,
//!   macOS's `libSystem`, Windows' own DLLs: `KERNEL32`, `ntdll`, the Universal C Runtime's
//!   `api-ms-win-crt-*` and the like, never a MinGW runtime DLL such as `libgcc_s_seh-1` or
//!   `libwinpthread-1` that a Windows user lacks), and what it leaves undefined is the C
//!   library's or the N-API symbols Node provides (`napi_*`, `node_api_*`). A Windows addon
//!   imports nothing from `node.exe`: it looks the N-API functions up by name in the
//!   process that loads it (`GetProcAddress`), so it must import that and carry the names;
//!   an import from `node.exe` would have to be an N-API symbol;
//! - on Linux with glibc, no symbol version above the floor (`prebuilt.glibcFloor` in
//!   `pi/package.json`); on macOS, a minimum macOS no newer than `prebuilt.macosFloor`
//!   (11.0, Node 22's own floor);
//! - its platform package's package.json has the `os`, `cpu` and `libc` fields of what it
//!   carries, and the package's `optionalDependencies` name it at the same version.
//!
//! [`the_checks_pass_the_addon_built_here_and_name_each_rule_a_file_breaks`] runs in every
//! `cargo test`, on the addon the Pi tests build. The check of the packed packages needs
//! `npm run pack -- --all` (or `--target …`) first, which builds for other platforms: it is
//! `#[ignore]`d here and run by `.ci/run`, with `SESSION_STATE_PI_PACKED` naming the packed
//! directory and `SESSION_STATE_PI_PLATFORMS` the platforms it must hold (default: all).

use crate::common::pi_addon;
use goblin::elf::Elf;
use goblin::mach::MachO;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The object format a target's addon has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Linux: an ELF shared object of this machine (`e_machine`), with glibc or musl.
    Elf { machine: u16, musl: bool },
    /// macOS: a Mach-O dylib of this CPU type.
    MachO { cputype: u32 },
    /// Windows: a PE32+ DLL of this machine (the COFF header's `Machine`).
    Pe { machine: u16 },
}

/// One target of `napi.targets`: its triple, napi-rs's platform id, what Node reports there.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub triple: &'static str,
    pub id: &'static str,
    pub os: &'static str,
    pub cpu: &'static str,
    /// npm's `libc` field (`glibc`, `musl`), Linux only.
    pub libc: Option<&'static str>,
    pub format: Format,
}

const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const CPU_TYPE_X86_64: u32 = 0x0100_0007;
const CPU_TYPE_ARM64: u32 = 0x0100_000c;
const IMAGE_FILE_MACHINE_AMD64: u16 = 0x8664;
const IMAGE_FILE_MACHINE_ARM64: u16 = 0xaa64;
/// The COFF header's characteristics flag of a DLL.
const IMAGE_FILE_DLL: u16 = 0x2000;

/// Every target the package is prebuilt for (`pi/package.json`'s `napi.targets`).
pub const TARGETS: [Target; 8] = [
    Target {
        triple: "x86_64-unknown-linux-gnu",
        id: "linux-x64-gnu",
        os: "linux",
        cpu: "x64",
        libc: Some("glibc"),
        format: Format::Elf {
            machine: EM_X86_64,
            musl: false,
        },
    },
    Target {
        triple: "aarch64-unknown-linux-gnu",
        id: "linux-arm64-gnu",
        os: "linux",
        cpu: "arm64",
        libc: Some("glibc"),
        format: Format::Elf {
            machine: EM_AARCH64,
            musl: false,
        },
    },
    Target {
        triple: "x86_64-unknown-linux-musl",
        id: "linux-x64-musl",
        os: "linux",
        cpu: "x64",
        libc: Some("musl"),
        format: Format::Elf {
            machine: EM_X86_64,
            musl: true,
        },
    },
    Target {
        triple: "aarch64-unknown-linux-musl",
        id: "linux-arm64-musl",
        os: "linux",
        cpu: "arm64",
        libc: Some("musl"),
        format: Format::Elf {
            machine: EM_AARCH64,
            musl: true,
        },
    },
    Target {
        triple: "x86_64-apple-darwin",
        id: "darwin-x64",
        os: "darwin",
        cpu: "x64",
        libc: None,
        format: Format::MachO {
            cputype: CPU_TYPE_X86_64,
        },
    },
    Target {
        triple: "aarch64-apple-darwin",
        id: "darwin-arm64",
        os: "darwin",
        cpu: "arm64",
        libc: None,
        format: Format::MachO {
            cputype: CPU_TYPE_ARM64,
        },
    },
    Target {
        triple: "x86_64-pc-windows-gnu",
        id: "win32-x64-gnu",
        os: "win32",
        cpu: "x64",
        libc: None,
        format: Format::Pe {
            machine: IMAGE_FILE_MACHINE_AMD64,
        },
    },
    Target {
        triple: "aarch64-pc-windows-gnullvm",
        id: "win32-arm64-gnullvm",
        os: "win32",
        cpu: "arm64",
        libc: None,
        format: Format::Pe {
            machine: IMAGE_FILE_MACHINE_ARM64,
        },
    },
];

/// The target whose napi-rs platform id is `id`.
pub fn target(id: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.id == id)
        .unwrap_or_else(|| panic!("{id} is not one of the package's targets"))
}

/// The symbol Node looks up when it loads an addon (napi-rs exports it).
const REGISTER: &str = "napi_register_module_v1";

/// glibc's own shared libraries: what a glibc addon may link.
const GLIBC_LIBS: [&str; 8] = [
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libutil.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

/// musl's C library, by the names a link against it may record.
const MUSL_LIBS: [&str; 3] = ["libc.so", "libc.musl-x86_64.so.1", "libc.musl-aarch64.so.1"];

/// macOS's C library (the system library every program links).
const LIBSYSTEM: &str = "/usr/lib/libSystem.B.dylib";

/// Windows' own DLLs a Windows addon may import from (compared without case), besides the
/// API sets of [`WINDOWS_API_SETS`].
const WINDOWS_DLLS: [&str; 9] = [
    "kernel32.dll",
    "ntdll.dll",
    "advapi32.dll",
    "userenv.dll",
    "ws2_32.dll",
    "bcrypt.dll",
    "bcryptprimitives.dll",
    "shell32.dll",
    "ole32.dll",
];

/// Windows' API sets (`api-ms-win-core-synch-l1-2-0.dll`, the Universal C Runtime's
/// `api-ms-win-crt-*`), part of every Windows that Node 22 runs on.
const WINDOWS_API_SETS: [&str; 2] = ["api-ms-win-core-", "api-ms-win-crt-"];

/// The executable Node's N-API functions come from on Windows.
const NODE_EXE: &str = "node.exe";

/// Symbols Node itself provides to an addon.
fn is_node_api(name: &str) -> bool {
    name.starts_with("napi_") || name.starts_with("node_api_")
}

/// What a check found, for the report.
#[derive(Debug, Default)]
pub struct Found {
    pub libraries: Vec<String>,
    /// The highest `GLIBC_x.y` version the addon asks for (glibc targets).
    pub glibc: Option<Vec<u32>>,
    /// The minimum macOS version it was built for (macOS targets).
    pub min_macos: Option<String>,
    /// How many undefined symbols Node provides (N-API).
    pub node_api: usize,
}

/// `2.17` → `[2, 17]`.
pub fn version(text: &str) -> Option<Vec<u32>> {
    text.split('.').map(|p| p.parse().ok()).collect()
}

/// The oldest system an addon may ask for.
#[derive(Clone, Debug)]
pub struct Floors {
    /// glibc (`None`: not checked, for a build against this machine's glibc).
    pub glibc: Option<Vec<u32>>,
    /// macOS.
    pub macos: Vec<u32>,
}

/// Checks an addon's bytes against the rules of `target` (module docs). Returns what was
/// found, or every broken rule.
pub fn check_addon(bytes: &[u8], target: &Target, floors: &Floors) -> Result<Found, Vec<String>> {
    let (found, broken) = inspect(bytes, target, floors)?;
    if broken.is_empty() {
        Ok(found)
    } else {
        Err(broken)
    }
}

/// What [`check_addon`] found and every rule broken; `Err` when the file cannot be read
/// as the target's format at all.
pub fn inspect(
    bytes: &[u8],
    target: &Target,
    floors: &Floors,
) -> Result<(Found, Vec<String>), Vec<String>> {
    match target.format {
        Format::Elf { machine, musl } => check_elf(bytes, machine, musl, floors.glibc.as_deref()),
        Format::MachO { cputype } => check_macho(bytes, cputype, &floors.macos),
        Format::Pe { machine } => check_pe(bytes, machine),
    }
}

fn check_elf(
    bytes: &[u8],
    machine: u16,
    musl: bool,
    glibc_floor: Option<&[u32]>,
) -> Result<(Found, Vec<String>), Vec<String>> {
    let elf = Elf::parse(bytes).map_err(|e| vec![format!("not an ELF file: {e}")])?;
    let mut broken = Vec::new();
    let mut found = Found::default();
    if elf.header.e_machine != machine {
        broken.push(format!(
            "ELF machine {} ({}), the target's is {machine} ({})",
            elf.header.e_machine,
            goblin::elf::header::machine_to_str(elf.header.e_machine),
            goblin::elf::header::machine_to_str(machine)
        ));
    }
    if !elf.is_64 || !elf.little_endian {
        broken.push("not a 64-bit little-endian ELF file".to_owned());
    }
    if elf.header.e_type != goblin::elf::header::ET_DYN || elf.interpreter.is_some() {
        broken.push(format!(
            "not a shared library (ELF type {}, interpreter {:?})",
            elf.header.e_type, elf.interpreter
        ));
    }
    let name = |sym: &goblin::elf::Sym| elf.dynstrtab.get_at(sym.st_name).unwrap_or("");
    let exported = elf.dynsyms.iter().any(|s| {
        name(&s) == REGISTER
            && s.st_shndx != 0
            && s.is_function()
            && s.st_bind() == goblin::elf::sym::STB_GLOBAL
    });
    if !exported {
        broken.push(format!("{REGISTER} is not exported"));
    }
    let allowed: &[&str] = if musl { &MUSL_LIBS } else { &GLIBC_LIBS };
    for lib in &elf.libraries {
        found.libraries.push((*lib).to_owned());
        if !allowed.contains(lib) {
            broken.push(format!(
                "links {lib}, which is not the C library ({})",
                allowed.join(", ")
            ));
        }
    }
    // The versions each undefined symbol asks for: versym index → (library, version).
    let mut needed: BTreeMap<u16, (String, String)> = BTreeMap::new();
    if let Some(verneed) = &elf.verneed {
        for need in verneed.iter() {
            let file = elf.dynstrtab.get_at(need.vn_file).unwrap_or("?").to_owned();
            for aux in need.iter() {
                let v = elf.dynstrtab.get_at(aux.vna_name).unwrap_or("?").to_owned();
                needed.insert(aux.vna_other & 0x7fff, (file.clone(), v));
            }
        }
    }
    for (file, v) in needed.values() {
        if !allowed.contains(&file.as_str()) {
            broken.push(format!("asks {file} for version {v}"));
        }
        if let Some(rest) = v.strip_prefix("GLIBC_") {
            match version(rest) {
                Some(n) => {
                    if found.glibc.as_ref().is_none_or(|m| &n > m) {
                        found.glibc = Some(n.clone());
                    }
                    if let Some(floor) = glibc_floor
                        && n.as_slice() > floor
                    {
                        broken.push(format!(
                            "asks for {v}, above the glibc floor {}",
                            dotted(floor)
                        ));
                    }
                }
                None => broken.push(format!("asks for {v}, which is not a public glibc version")),
            }
        }
    }
    for (i, sym) in elf.dynsyms.iter().enumerate() {
        let n = name(&sym);
        if sym.st_shndx != 0 || n.is_empty() {
            continue;
        }
        if is_node_api(n) {
            found.node_api += 1;
            continue;
        }
        let weak = sym.st_bind() == goblin::elf::sym::STB_WEAK;
        let ver = elf
            .versym
            .as_ref()
            .and_then(|v| v.get_at(i))
            .map(|v| v.vs_val & 0x7fff)
            .filter(|v| *v >= 2);
        // musl has no symbol versions: its libc is the one library linked (checked above).
        if !musl && ver.is_none_or(|v| !needed.contains_key(&v)) && !weak {
            broken.push(format!(
                "leaves {n} undefined with no C library version, and it is not an N-API symbol"
            ));
        }
    }
    if found.node_api == 0 {
        broken.push("uses no N-API symbol (napi_*): not a Node addon".to_owned());
    }
    Ok((found, broken))
}

fn check_pe(bytes: &[u8], machine: u16) -> Result<(Found, Vec<String>), Vec<String>> {
    let pe = goblin::pe::PE::parse(bytes).map_err(|e| vec![format!("not a PE file: {e}")])?;
    let mut broken = Vec::new();
    let mut found = Found::default();
    let coff = &pe.header.coff_header;
    if coff.machine != machine {
        broken.push(format!(
            "PE machine {:#06x}, the target's is {machine:#06x}",
            coff.machine
        ));
    }
    if !pe.is_64 {
        broken.push("not a PE32+ (64-bit) file".to_owned());
    }
    if coff.characteristics & IMAGE_FILE_DLL == 0 || !pe.is_lib {
        broken.push(format!(
            "not a DLL (COFF characteristics {:#06x})",
            coff.characteristics
        ));
    }
    if !pe.exports.iter().any(|e| e.name == Some(REGISTER)) {
        broken.push(format!("{REGISTER} is not exported"));
    }
    for lib in &pe.libraries {
        found.libraries.push((*lib).to_owned());
        let lower = lib.to_ascii_lowercase();
        let system = WINDOWS_DLLS.contains(&lower.as_str())
            || WINDOWS_API_SETS.iter().any(|p| lower.starts_with(p));
        if !system && lower != NODE_EXE {
            broken.push(format!(
                "imports from {lib}, which is not a Windows system DLL nor {NODE_EXE}"
            ));
        }
    }
    for import in &pe.imports {
        if import.dll.eq_ignore_ascii_case(NODE_EXE) {
            if is_node_api(&import.name) {
                found.node_api += 1;
            } else {
                broken.push(format!(
                    "imports {} from {NODE_EXE}, which is not an N-API symbol",
                    import.name
                ));
            }
        }
    }
    if found.node_api == 0 {
        // Looked up in the loading process: GetProcAddress and the N-API names it is given.
        let lookup = pe.imports.iter().any(|i| i.name == "GetProcAddress");
        let names: BTreeSet<&[u8]> = bytes
            .split(|b| *b == 0)
            .filter(|s| {
                s.starts_with(b"napi_") && s.len() < 64 && s.iter().all(|b| b.is_ascii_graphic())
            })
            .collect();
        if lookup {
            found.node_api = names.len();
        }
        if !lookup || names.len() < 10 {
            broken.push(format!(
                "uses no N-API symbol: no napi_* import from {NODE_EXE}, and no lookup of them in \
                 the loading process (GetProcAddress imported: {lookup}, napi_* names: {})",
                names.len()
            ));
        }
    }
    Ok((found, broken))
}

fn check_macho(
    bytes: &[u8],
    cputype: u32,
    macos_floor: &[u32],
) -> Result<(Found, Vec<String>), Vec<String>> {
    let macho = MachO::parse(bytes, 0).map_err(|e| vec![format!("not a Mach-O file: {e}")])?;
    let mut broken = Vec::new();
    let mut found = Found::default();
    if macho.header.cputype != cputype {
        broken.push(format!(
            "Mach-O CPU type {:#x}, the target's is {cputype:#x}",
            macho.header.cputype
        ));
    }
    if macho.header.filetype != goblin::mach::header::MH_DYLIB {
        broken.push(format!(
            "not a dylib (Mach-O file type {})",
            macho.header.filetype
        ));
    }
    let exports = macho
        .exports()
        .map_err(|e| vec![format!("cannot read the exports: {e}")])?;
    if !exports.iter().any(|e| e.name == format!("_{REGISTER}")) {
        broken.push(format!("{REGISTER} is not exported"));
    }
    // `libs[0]` is the dylib itself.
    for lib in macho.libs.iter().skip(1) {
        found.libraries.push((*lib).to_owned());
        if *lib != LIBSYSTEM {
            broken.push(format!("links {lib}, which is not {LIBSYSTEM}"));
        }
    }
    for (n, ordinal) in macho_imports(bytes, &macho).map_err(|e| vec![e])? {
        let n = n.strip_prefix('_').unwrap_or(&n);
        if is_node_api(n) {
            found.node_api += 1;
            // Looked up at load time in the process that loads the addon (Node).
            if ordinal != FLAT_LOOKUP && ordinal != MAIN_EXECUTABLE {
                broken.push(format!(
                    "binds the N-API symbol {n} to library ordinal {ordinal}, not to the process that loads it"
                ));
            }
        } else if !(ordinal >= 1 && macho.libs.get(ordinal as usize) == Some(&LIBSYSTEM)) {
            broken.push(format!(
                "imports {n} from library ordinal {ordinal}, not from {LIBSYSTEM}, and it is not an N-API symbol"
            ));
        }
    }
    if found.node_api == 0 {
        broken.push("uses no N-API symbol (napi_*): not a Node addon".to_owned());
    }
    let min = macho.load_commands.iter().find_map(|c| match &c.command {
        goblin::mach::load_command::CommandVariant::BuildVersion(b) => Some(b.minos),
        goblin::mach::load_command::CommandVariant::VersionMinMacosx(v) => Some(v.version),
        _ => None,
    });
    match min {
        Some(v) => {
            let (major, minor) = (v >> 16, (v >> 8) & 0xff);
            found.min_macos = Some(format!("{major}.{minor}"));
            if [major, minor].as_slice() > macos_floor {
                broken.push(format!(
                    "needs macOS {major}.{minor}, newer than the floor {}",
                    dotted(macos_floor)
                ));
            }
        }
        None => broken.push("names no minimum macOS version".to_owned()),
    }
    Ok((found, broken))
}

/// dyld's special library ordinals: look the symbol up in every image loaded (what
/// `-undefined dynamic_lookup` asks for), or in the main executable.
const FLAT_LOOKUP: i32 = -2;
const MAIN_EXECUTABLE: i32 = -1;

/// Every symbol a Mach-O file imports, with the library ordinal dyld binds it with (an
/// index into the `LC_LOAD_DYLIB` list from 1, or a special ordinal), read from its bind
/// opcodes (`LC_DYLD_INFO`) or its chained fixups (`LC_DYLD_CHAINED_FIXUPS`).
fn macho_imports(bytes: &[u8], macho: &MachO) -> Result<Vec<(String, i32)>, String> {
    use goblin::mach::load_command::CommandVariant;
    let mut out = Vec::new();
    for c in &macho.load_commands {
        match &c.command {
            CommandVariant::DyldInfo(d) | CommandVariant::DyldInfoOnly(d) => {
                for (off, size) in [
                    (d.bind_off, d.bind_size),
                    (d.weak_bind_off, d.weak_bind_size),
                    (d.lazy_bind_off, d.lazy_bind_size),
                ] {
                    let area = bytes
                        .get(off as usize..(off as usize + size as usize))
                        .ok_or("bind opcodes beyond the end of the file")?;
                    bind_opcodes(area, &mut out)?;
                }
            }
            CommandVariant::DyldChainedFixups(l) => {
                let data = bytes
                    .get(l.dataoff as usize..(l.dataoff as usize + l.datasize as usize))
                    .ok_or("chained fixups beyond the end of the file")?;
                chained_imports(data, &mut out)?;
            }
            _ => {}
        }
    }
    Ok(out)
}

fn uleb(data: &[u8], at: &mut usize) -> Result<u64, String> {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let b = *data.get(*at).ok_or("a ULEB128 beyond the bind opcodes")?;
        *at += 1;
        v |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
}

/// Runs dyld's bind opcodes and records each bound symbol with its library ordinal.
fn bind_opcodes(data: &[u8], out: &mut Vec<(String, i32)>) -> Result<(), String> {
    let (mut at, mut ordinal, mut name) = (0, 0i32, String::new());
    while at < data.len() {
        let (op, imm) = (data[at] & 0xf0, data[at] & 0x0f);
        at += 1;
        match op {
            0x00 | 0x50 => {}                 // DONE (between lazy binds), SET_TYPE_IMM
            0x10 => ordinal = i32::from(imm), // SET_DYLIB_ORDINAL_IMM
            0x20 => ordinal = uleb(data, &mut at)? as i32, // SET_DYLIB_ORDINAL_ULEB
            // SET_DYLIB_SPECIAL_IMM: 0, or a negative ordinal (sign-extended nibble).
            0x30 => {
                ordinal = if imm == 0 {
                    0
                } else {
                    i32::from((imm | 0xf0) as i8)
                }
            }
            0x40 => {
                // SET_SYMBOL_TRAILING_FLAGS_IMM: the name follows, NUL-terminated.
                let end = data[at..]
                    .iter()
                    .position(|b| *b == 0)
                    .ok_or("a symbol name without its NUL")?;
                name = String::from_utf8_lossy(&data[at..at + end]).into_owned();
                at += end + 1;
            }
            0x60 | 0x70 | 0x80 => {
                // SET_ADDEND_SLEB, SET_SEGMENT_AND_OFFSET_ULEB, ADD_ADDR_ULEB: one number.
                uleb(data, &mut at)?;
            }
            0x90 | 0xb0 => out.push((name.clone(), ordinal)), // DO_BIND, DO_BIND_ADD_ADDR_IMM_SCALED
            0xa0 => {
                out.push((name.clone(), ordinal)); // DO_BIND_ADD_ADDR_ULEB
                uleb(data, &mut at)?;
            }
            0xc0 => {
                out.push((name.clone(), ordinal)); // DO_BIND_ULEB_TIMES_SKIPPING_ULEB
                uleb(data, &mut at)?;
                uleb(data, &mut at)?;
            }
            0xd0 => {
                // THREADED: SET_BIND_ORDINAL_TABLE_SIZE_ULEB (0) takes a number; APPLY (1) none.
                if imm == 0 {
                    uleb(data, &mut at)?;
                }
            }
            _ => return Err(format!("unknown bind opcode {op:#x}")),
        }
    }
    Ok(())
}

/// The imports table of `LC_DYLD_CHAINED_FIXUPS` (dyld's `dyld_chained_fixups_header`).
fn chained_imports(data: &[u8], out: &mut Vec<(String, i32)>) -> Result<(), String> {
    let word = |at: usize| -> Result<u32, String> {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .ok_or_else(|| "chained fixups cut short".to_owned())
    };
    let (imports, symbols, count, format) = (word(8)?, word(12)?, word(16)?, word(20)?);
    for i in 0..count as usize {
        let (ordinal, name_off) = match format {
            // DYLD_CHAINED_IMPORT and _ADDEND: lib_ordinal:8 (signed), weak:1, name:23.
            1 | 2 => {
                let v = word(imports as usize + i * if format == 1 { 4 } else { 8 })?;
                (i32::from((v & 0xff) as u8 as i8), (v >> 9) as usize)
            }
            // DYLD_CHAINED_IMPORT_ADDEND64: lib_ordinal:16 (signed), weak:1, reserved:15, name:32.
            3 => {
                let at = imports as usize + i * 16;
                let (lo, hi) = (word(at)?, word(at + 4)?);
                (i32::from((lo & 0xffff) as u16 as i16), hi as usize)
            }
            f => return Err(format!("unknown chained imports format {f}")),
        };
        let start = symbols as usize + name_off;
        let name = data
            .get(start..)
            .and_then(|b| b.split(|c| *c == 0).next())
            .ok_or("an import name beyond the chained fixups")?;
        out.push((String::from_utf8_lossy(name).into_owned(), ordinal));
    }
    Ok(())
}

/// `[2, 17]` → `2.17`.
fn dotted(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(".")
}

/// `pi/package.json`.
pub fn manifest() -> Value {
    let path = pi_addon::pkg().join("package.json");
    serde_json::from_slice(&fs::read(&path).expect("pi/package.json")).expect("JSON")
}

/// The floors `npm run pack` builds for (`prebuilt` in `pi/package.json`).
pub fn floors() -> Floors {
    let m = manifest();
    let get = |key: &str| -> Vec<u32> {
        let text = m["prebuilt"][key]
            .as_str()
            .unwrap_or_else(|| panic!("pi/package.json: prebuilt.{key}"));
        version(text).unwrap_or_else(|| panic!("prebuilt.{key} {text:?} is not a version"))
    };
    Floors {
        glibc: Some(get("glibcFloor")),
        macos: get("macosFloor"),
    }
}

#[test]
fn the_targets_here_are_the_packages_targets() {
    let m = manifest();
    let listed: BTreeSet<&str> = m["napi"]["targets"]
        .as_array()
        .expect("napi.targets")
        .iter()
        .map(|t| t.as_str().expect("a triple"))
        .collect();
    let here: BTreeSet<&str> = TARGETS.iter().map(|t| t.triple).collect();
    assert_eq!(listed, here, "pi/package.json's napi.targets");
    let f = floors();
    assert_eq!(f.glibc, Some(vec![2, 17]));
    // Node 22's own floor on macOS.
    assert_eq!(f.macos, [11, 0]);
}

/// The checks on the addon `cargo test` builds for this machine (a plain build, not the
/// packed one: its glibc versions are this machine's), and one broken file per rule.
#[cfg(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu"))]
#[test]
fn the_checks_pass_the_addon_built_here_and_name_each_rule_a_file_breaks() {
    let addon = fs::read(pi_addon::addon()).expect("the addon");
    let here = target("linux-x64-gnu");
    let unfloored = Floors {
        glibc: None,
        ..floors()
    };
    // This build is linked by the system's C compiler, which adds GCC's runtime library
    // (libgcc_s) for unwinding; `npm run pack` links with zig, which does not. That is the
    // one rule it breaks.
    let (found, broken) = inspect(&addon, here, &unfloored).expect("an ELF file");
    assert!(!broken.is_empty(), "{found:?}");
    assert!(
        broken.iter().all(|e| e.contains("libgcc_s.so.1")),
        "{broken:#?}"
    );
    assert!(
        found.libraries.contains(&"libc.so.6".to_owned()),
        "{found:?}"
    );
    assert!(found.node_api > 10, "{found:?}");
    assert!(found.glibc.is_some(), "{found:?}");

    // Another architecture: the machine is named.
    let err = check_addon(&addon, target("linux-arm64-gnu"), &unfloored).unwrap_err();
    assert!(err.iter().any(|e| e.contains("ELF machine 62")), "{err:#?}");
    // Another format.
    let err = check_addon(&addon, target("darwin-arm64"), &unfloored).unwrap_err();
    assert!(err[0].contains("not a Mach-O file"), "{err:#?}");
    let err = check_addon(&addon, target("win32-x64-gnu"), &unfloored).unwrap_err();
    assert!(err[0].contains("not a PE file"), "{err:#?}");
    // A floor below what it asks for (every x86-64 glibc symbol is 2.2.5 or newer).
    let low = Floors {
        glibc: Some(vec![2, 2]),
        ..floors()
    };
    let err = check_addon(&addon, here, &low).unwrap_err();
    assert!(
        err.iter()
            .filter(|e| !e.contains("libgcc_s"))
            .all(|e| e.contains("above the glibc floor 2.2")),
        "{err:#?}"
    );
    assert!(
        err.iter()
            .any(|e| e.contains("GLIBC_2.2.5, above the glibc floor 2.2")),
        "{err:#?}"
    );
    // musl's rules: glibc's libraries are not musl's C library.
    let err = check_addon(&addon, target("linux-x64-musl"), &unfloored).unwrap_err();
    assert!(
        err.iter().any(|e| e.contains("links libc.so.6")),
        "{err:#?}"
    );
    // A program, not an addon: no registration symbol, no N-API, and Rust's runtime
    // (libgcc_s) linked, which the addon must not need.
    let exe = fs::read(std::env::current_exe().expect("this test's binary")).expect("read");
    let err = check_addon(&exe, here, &unfloored).unwrap_err();
    for want in [
        "napi_register_module_v1 is not exported",
        "uses no N-API symbol",
        "links libgcc_s.so.1",
    ] {
        assert!(err.iter().any(|e| e.contains(want)), "{want}: {err:#?}");
    }
}

/// A tarball, extracted: its `package/` folder and its package.json.
struct Unpacked {
    _dir: tempfile::TempDir,
    root: PathBuf,
    manifest: Value,
}

fn unpack(tarball: &Path) -> Unpacked {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new("tar")
        .arg("-xzf")
        .arg(tarball)
        .arg("-C")
        .arg(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("tar: {e}"));
    assert!(
        out.status.success(),
        "tar -xzf {}: {}",
        tarball.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let root = dir.path().join("package");
    let manifest: Value =
        serde_json::from_slice(&fs::read(root.join("package.json")).expect("package.json"))
            .expect("JSON");
    Unpacked {
        _dir: dir,
        root,
        manifest,
    }
}

/// Every platform package `npm run pack` wrote: its manifest's fields and its addon pass the
/// checks. `SESSION_STATE_PI_PACKED`: the packed directory (with packed.json);
/// `SESSION_STATE_PI_PLATFORMS`: the platform ids it must hold, comma-separated (default:
/// every target).
#[test]
#[ignore = "needs `npm run pack -- --all` (cross builds) first; .ci/run runs it with SESSION_STATE_PI_PACKED"]
fn every_packed_platform_package_passes_the_artifact_checks() {
    let dir = PathBuf::from(std::env::var_os("SESSION_STATE_PI_PACKED").expect(
        "SESSION_STATE_PI_PACKED must name the directory `npm run pack -- --all` wrote (pi/packed)",
    ));
    let want: BTreeSet<String> = match std::env::var("SESSION_STATE_PI_PLATFORMS") {
        Ok(list) => list.split(',').map(|s| s.trim().to_owned()).collect(),
        Err(_) => TARGETS.iter().map(|t| t.id.to_owned()).collect(),
    };
    let packed: Vec<Value> =
        serde_json::from_slice(&fs::read(dir.join("packed.json")).expect("packed.json"))
            .expect("JSON");
    let main = manifest();
    let (name, version) = (
        main["name"].as_str().unwrap(),
        main["version"].as_str().unwrap(),
    );
    let floors = floors();

    let main_entry = packed
        .iter()
        .find(|p| p["name"] == name)
        .expect("packed.json lists the package");
    let main_unpacked = unpack(&dir.join(main_entry["file"].as_str().unwrap())).manifest;
    let optional = main_unpacked["optionalDependencies"]
        .as_object()
        .expect("the package names its platform packages");
    for t in &TARGETS {
        assert_eq!(
            optional.get(&format!("{name}-{}", t.id)),
            Some(&Value::from(version)),
            "optionalDependencies of {name}: {optional:?}"
        );
    }

    let mut seen = BTreeSet::new();
    let mut report = Vec::new();
    for p in &packed {
        let pname = p["name"].as_str().unwrap();
        let Some(id) = pname.strip_prefix(&format!("{name}-")) else {
            continue;
        };
        let t = target(id);
        let file = dir.join(p["file"].as_str().unwrap());
        let u = unpack(&file);
        let m = &u.manifest;
        assert_eq!(m["name"], pname);
        assert_eq!(m["version"], version, "{pname}");
        assert_eq!(m["os"], serde_json::json!([t.os]), "{pname}: os");
        assert_eq!(m["cpu"], serde_json::json!([t.cpu]), "{pname}: cpu");
        match t.libc {
            Some(libc) => assert_eq!(m["libc"], serde_json::json!([libc]), "{pname}: libc"),
            None => assert!(
                m.get("libc").is_none(),
                "{pname}: no libc field on {}",
                t.os
            ),
        }
        assert_eq!(
            m["main"],
            format!("session-state.{id}.node"),
            "{pname}: main"
        );
        let addon = u.root.join(format!("session-state.{id}.node"));
        let bytes =
            fs::read(&addon).unwrap_or_else(|e| panic!("{pname} carries {}: {e}", addon.display()));
        let found = check_addon(&bytes, t, &floors)
            .unwrap_or_else(|e| panic!("{pname} ({}): {e:#?}", t.triple));
        if let Format::Pe { .. } = t.format {
            assert_pe_rules_refuse_what_breaks_them(&bytes, t, &floors);
        }
        report.push(format!(
            "{id}: {} bytes packed, links {:?}, glibc {:?}, macOS {:?}, {} N-API symbols",
            p["size"], found.libraries, found.glibc, found.min_macos, found.node_api
        ));
        seen.insert(id.to_owned());
    }
    eprintln!("pi_platforms: checked\n  {}", report.join("\n  "));
    let missing: Vec<_> = want.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "{} holds no platform package for {missing:?} (it holds {seen:?})",
        dir.display()
    );
}

/// The first place `needle` occurs in `bytes`.
fn find(bytes: &[u8], needle: &[u8]) -> Option<usize> {
    bytes.windows(needle.len()).position(|w| w == needle)
}

/// Each PE rule refuses a file that breaks it: `addon` (which passes) with one thing
/// changed, another architecture's rules, and files of other formats.
fn assert_pe_rules_refuse_what_breaks_them(addon: &[u8], t: &Target, floors: &Floors) {
    let refused = |bytes: &[u8], target: &Target, want: &str| {
        let err = check_addon(bytes, target, floors)
            .expect_err(&format!("{want}: the checks pass a broken file"));
        assert!(err.iter().any(|e| e.contains(want)), "{want}: {err:#?}");
    };
    // Another machine.
    let other = TARGETS
        .iter()
        .find(|o| matches!(o.format, Format::Pe { .. }) && o.id != t.id)
        .expect("two Windows targets");
    refused(addon, other, "PE machine");
    // The DLL flag cleared (the COFF header follows "PE\0\0" at e_lfanew; characteristics
    // is its last field, at +18).
    let lfanew = u32::from_le_bytes(addon[0x3c..0x40].try_into().unwrap()) as usize;
    let mut exe = addon.to_vec();
    exe[lfanew + 4 + 18 + 1] &= !((IMAGE_FILE_DLL >> 8) as u8);
    refused(&exe, t, "not a DLL");
    // The registration symbol renamed in the export name table.
    let mut renamed = addon.to_vec();
    let at = find(&renamed, format!("{REGISTER}\0").as_bytes()).expect("the export's name");
    renamed[at] = b'x';
    refused(&renamed, t, &format!("{REGISTER} is not exported"));
    // A MinGW runtime DLL among the imports (a DLL name of the same length, renamed).
    let mut mingw = addon.to_vec();
    let at = find(&mingw, b"KERNEL32.dll\0").expect("KERNEL32.dll among the imports");
    mingw[at..at + 12].copy_from_slice(b"libgcc_s.dll");
    refused(
        &mingw,
        t,
        "imports from libgcc_s.dll, which is not a Windows system DLL",
    );
    // No N-API lookup: the names gone.
    let mut blind = addon.to_vec();
    let mut n = 0;
    while let Some(at) = find(&blind, b"\0napi_") {
        blind[at + 1] = b'N';
        n += 1;
    }
    assert!(n > 10, "{n} N-API names");
    refused(&blind, t, "uses no N-API symbol");
    // Other formats: a Linux shared object, and this test's own program.
    let exe = fs::read(std::env::current_exe().expect("this test's binary")).expect("read");
    refused(&exe, t, "not a PE file");
}
