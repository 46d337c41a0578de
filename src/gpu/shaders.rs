//! The WGSL the kernels run: the embedded set (`shaders/*.wgsl`, compiled in) or a directory a
//! kernel developer edits (`--shaders DIR`). Every kernel family found in the directory replaces
//! the embedded one and the rest fall back, each family remembering where it came from. A
//! family is accepted only when naga parses and validates it (prefixed by `common.wgsl`, as the
//! device compiles it) and its interface is what the Rust side dispatches: the same entry
//! points with the same workgroup sizes, the same bindings with the same access, and a uniform
//! struct of the same size. Errors name the file, line and column.

use super::exec::{Access, Family, FAMILIES};
use super::COMMON_WGSL;
use std::fmt;
use std::path::{Path, PathBuf};
use wgpu::naga;

/// The prelude every family is compiled with, by its file name.
pub const COMMON_FILE: &str = "common.wgsl";

/// Where one WGSL file came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShaderOrigin {
    /// Compiled into the binary from `shaders/`.
    Embedded,
    /// Read from a file (`--shaders DIR`).
    File(PathBuf),
}

impl fmt::Display for ShaderOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShaderOrigin::Embedded => f.write_str("embedded"),
            ShaderOrigin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One WGSL file of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShaderFile {
    /// The family name (`gemm`, `attn`, ...), or `common` for the prelude.
    pub family: &'static str,
    pub text: String,
    pub origin: ShaderOrigin,
}

impl ShaderFile {
    /// The name errors and provenance use: the path for a file, `shaders/NAME.wgsl` otherwise.
    pub fn display_name(&self) -> String {
        match &self.origin {
            ShaderOrigin::File(p) => p.display().to_string(),
            ShaderOrigin::Embedded => format!("shaders/{}.wgsl", self.family),
        }
    }

    /// The 1-based line of `fn entry(` in this file.
    pub fn entry_line(&self, entry: &str) -> Option<usize> {
        let pat = format!("fn {entry}(");
        self.text
            .lines()
            .position(|l| l.trim_start().starts_with(&pat))
            .map(|i| i + 1)
    }
}

/// What can be wrong with a shader directory or one of its files.
#[derive(Debug, thiserror::Error)]
pub enum ShaderError {
    /// A file or the directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// naga could not parse the WGSL.
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        file: String,
        line: u32,
        column: u32,
        message: String,
        /// The one-line form, then the file's offending line with a caret.
        rendered: String,
    },
    /// The WGSL parsed but does not validate.
    #[error("{file}:{line}:{column}: {message}")]
    Validate {
        file: String,
        line: u32,
        column: u32,
        message: String,
        rendered: String,
    },
    /// The WGSL is valid but no longer fits what the Rust side dispatches.
    #[error("{file}: {message}")]
    Interface { file: String, message: String },
}

impl ShaderError {
    /// naga's rendering with the offending line where there is one, else the one-line form.
    pub fn rendered(&self) -> String {
        match self {
            ShaderError::Parse { rendered, .. } | ShaderError::Validate { rendered, .. } => {
                rendered.clone()
            }
            e => e.to_string(),
        }
    }

    /// `(file, line, column)` of a parse or validation error.
    pub fn location(&self) -> Option<(&str, u32, u32)> {
        match self {
            ShaderError::Parse {
                file, line, column, ..
            }
            | ShaderError::Validate {
                file, line, column, ..
            } => Some((file, *line, *column)),
            _ => None,
        }
    }
}

/// Where an entry point is and how wide its workgroups are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    pub entry: String,
    pub workgroup_size: [u32; 3],
    /// The file's display name ([`ShaderFile::display_name`]).
    pub file: String,
    pub line: Option<usize>,
}

/// The interface of one family as naga sees it, for the checks against the embedded one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interface {
    /// `(entry, workgroup size)` in declaration order.
    entries: Vec<(String, [u32; 3])>,
    /// `(binding, access)` of every group-0 binding, sorted.
    bindings: Vec<(u32, Access)>,
    /// Bytes of the binding-0 uniform struct.
    uniform_bytes: u32,
}

/// A full set: the prelude and one file per kernel family, in [`FAMILIES`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShaderSet {
    pub common: ShaderFile,
    pub families: Vec<ShaderFile>,
    /// `.wgsl` files of the directory that name no kernel family (reported, not used).
    pub ignored: Vec<PathBuf>,
}

impl Default for ShaderSet {
    fn default() -> Self {
        ShaderSet::embedded()
    }
}

impl ShaderSet {
    /// The set compiled into the binary.
    pub fn embedded() -> ShaderSet {
        ShaderSet {
            common: ShaderFile {
                family: "common",
                text: COMMON_WGSL.to_string(),
                origin: ShaderOrigin::Embedded,
            },
            families: FAMILIES
                .iter()
                .map(|f| ShaderFile {
                    family: f.name,
                    text: f.source.to_string(),
                    origin: ShaderOrigin::Embedded,
                })
                .collect(),
            ignored: Vec::new(),
        }
    }

    /// The set of `dir`: `common.wgsl` and `NAME.wgsl` for each family found there replace the
    /// embedded ones; every family is then validated ([`ShaderSet::validate`]).
    pub fn from_dir(dir: &Path) -> Result<ShaderSet, ShaderError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ShaderError::Io { path, source }
        };
        let mut set = ShaderSet::embedded();
        let mut known: Vec<String> = FAMILIES
            .iter()
            .map(|f| format!("{}.wgsl", f.name))
            .collect();
        known.push(COMMON_FILE.to_string());
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let path = entry.map_err(io(dir))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".wgsl") && !known.iter().any(|k| k == name) {
                set.ignored.push(path.clone());
            }
        }
        set.ignored.sort();
        for file in std::iter::once(&mut set.common).chain(set.families.iter_mut()) {
            let path = dir.join(format!("{}.wgsl", file.family));
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    file.text = text;
                    file.origin = ShaderOrigin::File(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
        set.validate()?;
        Ok(set)
    }

    /// Write the embedded set into `dir` (created if needed), one file per family plus
    /// `common.wgsl`; returns the paths written.
    pub fn export(dir: &Path) -> Result<Vec<PathBuf>, ShaderError> {
        std::fs::create_dir_all(dir).map_err(|source| ShaderError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let set = ShaderSet::embedded();
        let mut written = Vec::new();
        for file in std::iter::once(&set.common).chain(set.families.iter()) {
            let path = dir.join(format!("{}.wgsl", file.family));
            std::fs::write(&path, &file.text).map_err(|source| ShaderError::Io {
                path: path.clone(),
                source,
            })?;
            written.push(path);
        }
        Ok(written)
    }

    /// The file of `family`.
    pub fn file(&self, family: &str) -> Option<&ShaderFile> {
        self.families.iter().find(|f| f.family == family)
    }

    /// What the device compiles for `family`: the prelude, a newline, the family's WGSL.
    pub fn full_source(&self, family: &str) -> Option<String> {
        self.file(family)
            .map(|f| format!("{}\n{}", self.common.text, f.text))
    }

    /// `(family, origin)` of every file, the prelude first.
    pub fn origins(&self) -> Vec<(&'static str, &ShaderOrigin)> {
        std::iter::once(&self.common)
            .chain(self.families.iter())
            .map(|f| (f.family, &f.origin))
            .collect()
    }

    /// The families whose compiled source differs between `self` and `other` (all of them when
    /// the prelude changed): the pipelines a reload must rebuild.
    pub fn changed_families(&self, other: &ShaderSet) -> Vec<&'static str> {
        let common_changed = self.common.text != other.common.text;
        self.families
            .iter()
            .filter(|f| common_changed || other.file(f.family).is_none_or(|o| o.text != f.text))
            .map(|f| f.family)
            .collect()
    }

    /// `(entry, workgroup size, line of the entry point)` of every entry point of `family`, as
    /// this set's WGSL declares them (for provenance).
    pub fn entry_infos(&self, family: &str) -> Result<Vec<EntryInfo>, ShaderError> {
        let file = self.file(family).ok_or_else(|| ShaderError::Interface {
            file: format!("{family}.wgsl"),
            message: "no such kernel family in the set".into(),
        })?;
        let module = self.module(file)?;
        Ok(module
            .entry_points
            .iter()
            .map(|e| EntryInfo {
                entry: e.name.clone(),
                workgroup_size: e.workgroup_size,
                file: file.display_name(),
                line: file.entry_line(&e.name),
            })
            .collect())
    }

    /// Parse, validate and interface-check every family; the first error wins.
    pub fn validate(&self) -> Result<(), ShaderError> {
        for fam in FAMILIES {
            self.validate_family(fam)?;
        }
        Ok(())
    }

    /// Parse, validate and interface-check one family; returns its entry point count.
    pub fn validate_family(&self, fam: &Family) -> Result<usize, ShaderError> {
        let file = self.file(fam.name).ok_or_else(|| ShaderError::Interface {
            file: format!("{}.wgsl", fam.name),
            message: "no such kernel family in the set".into(),
        })?;
        let module = self.module(file)?;
        let got = interface(&module);
        let want = embedded_interface(fam)?;
        let name = file.display_name();
        let bad = |message: String| ShaderError::Interface {
            file: name.clone(),
            message,
        };
        for (entry, size) in &want.entries {
            match got.entries.iter().find(|(e, _)| e == entry) {
                None => {
                    return Err(bad(format!(
                        "entry point `{entry}` is missing (the Rust side dispatches it)"
                    )))
                }
                Some((_, s)) if s != size => {
                    return Err(bad(format!(
                        "entry point `{entry}` has @workgroup_size{s:?}, the Rust side's \
                         dispatch math assumes {size:?}"
                    )))
                }
                Some(_) => {}
            }
        }
        if got.bindings != want.bindings {
            return Err(bad(format!(
                "bindings {} differ from what the Rust side binds: {}",
                show_bindings(&got.bindings),
                show_bindings(&want.bindings)
            )));
        }
        if got.uniform_bytes != want.uniform_bytes {
            return Err(bad(format!(
                "the uniform at @binding(0) is {} bytes, the Rust side writes {}",
                got.uniform_bytes, want.uniform_bytes
            )));
        }
        Ok(module.entry_points.len())
    }

    /// The naga module of `file` (with the prelude), or its parse/validation error located in
    /// the file it comes from.
    fn module(&self, file: &ShaderFile) -> Result<naga::Module, ShaderError> {
        let full = format!("{}\n{}", self.common.text, file.text);
        let prefix_lines = self.common.text.matches('\n').count() as u32 + 1;
        let locate = |loc: Option<naga::SourceLocation>| -> (String, u32, u32) {
            match loc {
                Some(l) if l.line_number > prefix_lines => (
                    file.display_name(),
                    l.line_number - prefix_lines,
                    l.line_position,
                ),
                Some(l) => (self.common.display_name(), l.line_number, l.line_position),
                None => (file.display_name(), 1, 1),
            }
        };
        // naga renders against the concatenated source, whose line numbers are not the file's:
        // the rendering shows the file's own line instead.
        let snippet = |f: &str, line: u32, column: u32| {
            let text = if f == file.display_name() {
                &file.text
            } else {
                &self.common.text
            };
            source_snippet(text, line, column)
        };
        let module = naga::front::wgsl::parse_str(&full).map_err(|e| {
            let (f, line, column) = locate(e.location(&full));
            let message = e.message().to_string();
            ShaderError::Parse {
                rendered: format!(
                    "{f}:{line}:{column}: {message}\n{}",
                    snippet(&f, line, column)
                ),
                file: f,
                line,
                column,
                message,
            }
        })?;
        let mut v = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::default(),
        );
        v.validate(&module).map_err(|e| {
            let (f, line, column) = locate(e.location(&full));
            let message = e.as_inner().to_string();
            ShaderError::Validate {
                rendered: format!(
                    "{f}:{line}:{column}: {message}\n{}",
                    snippet(&f, line, column)
                ),
                file: f,
                line,
                column,
                message,
            }
        })?;
        Ok(module)
    }
}

/// Line `line` (1-based) of `text` and a caret under column `column`, for an error message.
fn source_snippet(text: &str, line: u32, column: u32) -> String {
    let Some(src) = text.lines().nth(line.saturating_sub(1) as usize) else {
        return String::new();
    };
    let gutter = line.to_string();
    let pad = " ".repeat(gutter.len());
    // Columns count characters; tabs keep their width in the caret line.
    let lead: String = src
        .chars()
        .take(column.saturating_sub(1) as usize)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("{pad} |\n{gutter} | {src}\n{pad} | {lead}^")
}

fn show_bindings(b: &[(u32, Access)]) -> String {
    let parts: Vec<String> = b.iter().map(|(i, a)| format!("{i}:{a:?}")).collect();
    format!("[{}]", parts.join(", "))
}

/// The interface of the embedded family (what the Rust side was written against).
fn embedded_interface(fam: &Family) -> Result<Interface, ShaderError> {
    let set = ShaderSet::embedded();
    let file = set.file(fam.name).ok_or_else(|| ShaderError::Interface {
        file: format!("{}.wgsl", fam.name),
        message: "not embedded".into(),
    })?;
    let module = set.module(file)?;
    let mut i = interface(&module);
    // The Rust side's binding table is the authority on access; the embedded WGSL agrees with
    // it (tested), so an edit is compared with the table.
    i.bindings = fam
        .bindings
        .iter()
        .enumerate()
        .map(|(n, a)| (n as u32, *a))
        .collect();
    Ok(i)
}

fn interface(module: &naga::Module) -> Interface {
    let entries = module
        .entry_points
        .iter()
        .map(|e| (e.name.clone(), e.workgroup_size))
        .collect();
    let mut bindings = Vec::new();
    let mut uniform_bytes = 0;
    for (_, g) in module.global_variables.iter() {
        let Some(b) = &g.binding else { continue };
        // Another group is never bound: report it as an impossible binding index.
        let index = if b.group == 0 { b.binding } else { u32::MAX };
        let access = match g.space {
            naga::AddressSpace::Uniform => {
                uniform_bytes = module.types[g.ty].inner.size(module.to_ctx());
                Access::Uniform
            }
            naga::AddressSpace::Storage { access }
                if access.contains(naga::StorageAccess::STORE) =>
            {
                Access::ReadWrite
            }
            _ => Access::Read,
        };
        bindings.push((index, access));
    }
    bindings.sort_by_key(|(i, _)| *i);
    Interface {
        entries,
        bindings,
        uniform_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_set_validates_and_agrees_with_the_binding_tables() {
        let set = ShaderSet::embedded();
        set.validate().expect("embedded shaders validate");
        for fam in FAMILIES {
            let file = set.file(fam.name).expect("family");
            let module = set.module(file).expect("module");
            let got = interface(&module);
            let table: Vec<(u32, Access)> = fam
                .bindings
                .iter()
                .enumerate()
                .map(|(n, a)| (n as u32, *a))
                .collect();
            assert_eq!(got.bindings, table, "{}", fam.name);
            for entry in fam.entries {
                assert!(file.entry_line(entry).is_some(), "{}::{entry}", fam.name);
            }
        }
    }

    fn edited(family: &str, edit: impl Fn(&str) -> String) -> ShaderSet {
        let mut set = ShaderSet::embedded();
        let f = set
            .families
            .iter_mut()
            .find(|f| f.family == family)
            .expect("family");
        f.text = edit(&f.text);
        f.origin = ShaderOrigin::File(PathBuf::from(format!("/tmp/x/{family}.wgsl")));
        set
    }

    #[test]
    fn a_syntax_error_is_located_in_its_own_file() {
        let set = edited("rope", |t| t.replacen("fn rope(", "fn rope((", 1));
        let line = ShaderSet::embedded()
            .file("rope")
            .and_then(|f| f.entry_line("rope"))
            .expect("line") as u32;
        let e = set.validate().expect_err("syntax error");
        let (file, l, _) = e.location().expect("located");
        assert_eq!(file, "/tmp/x/rope.wgsl");
        assert_eq!(l, line, "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("/tmp/x/rope.wgsl:{line}:")),
            "{e}"
        );
        // The rendering quotes the file's own line, not the concatenated source's.
        let shown = e.rendered();
        assert!(shown.starts_with(&e.to_string()), "{shown}");
        assert!(
            shown.contains(&format!("{line} | fn rope((")),
            "the edited line is quoted: {shown}"
        );
    }

    #[test]
    fn interface_edits_are_refused_with_what_the_rust_side_expects() {
        let renamed = edited("rope", |t| t.replace("fn rope(", "fn rope2("));
        let e = renamed.validate().expect_err("renamed entry");
        assert!(
            e.to_string().contains("entry point `rope` is missing"),
            "{e}"
        );
        let resized = edited("rope", |t| {
            t.replacen("@workgroup_size(64)", "@workgroup_size(32)", 1)
        });
        let e = resized.validate().expect_err("workgroup size");
        assert!(e.to_string().contains("@workgroup_size[32, 1, 1]"), "{e}");
        let rw = edited("gemm", |t| {
            t.replacen("var<storage, read> ", "var<storage, read_write> ", 1)
        });
        let e = rw.validate().expect_err("access");
        assert!(e.to_string().contains("bindings"), "{e}");
    }

    #[test]
    fn a_directory_overrides_only_the_families_it_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = ShaderSet::export(dir.path()).expect("export");
        assert_eq!(written.len(), FAMILIES.len() + 1);
        for p in &written[1..] {
            if !p.ends_with("gemm.wgsl") {
                std::fs::remove_file(p).expect("rm");
            }
        }
        std::fs::write(dir.path().join("notes.wgsl"), "// not a family").expect("write");
        let set = ShaderSet::from_dir(dir.path()).expect("loads");
        let from_file: Vec<&str> = set
            .origins()
            .into_iter()
            .filter(|(_, o)| matches!(o, ShaderOrigin::File(_)))
            .map(|(f, _)| f)
            .collect();
        assert_eq!(from_file, vec!["common", "gemm"]);
        assert_eq!(set.ignored, vec![dir.path().join("notes.wgsl")]);
        assert!(set.changed_families(&ShaderSet::embedded()).is_empty());
    }
}
