//! The saved fuzz inputs replayed on stable through the very target bodies the fuzzers run
//! (`fuzz/src/targets.rs`, included here): every crash, timeout and out-of-memory input a
//! fuzzer found (`tests/data/fuzz/crashes/TARGET/`), the first pass's reproducers
//! (`tests/data/fuzz/`), and our own files as the positive cases. Each must return without a
//! panic, within a time bound.

#[path = "../fuzz/src/targets.rs"]
#[allow(dead_code)]
mod targets;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Wall-clock bound for one input through one target. Every saved input is at most a few
/// hundred kB and the parsers are linear; the slowest (the 1.7 MB full v3 golden in a debug
/// build) takes well under this on a loaded machine, while a quadratic scan or a loop over a
/// claimed count would not finish in it.
const MAX_SECONDS_PER_INPUT: Duration = Duration::from_secs(10);

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn target(name: &str) -> targets::Target {
    targets::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no fuzz target {name}"))
}

/// Files directly in `dir` (none if it does not exist), sorted for a stable order.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Runs `f` on the bytes of `path`, with the time bound.
fn replay(name: &str, f: targets::Target, path: &Path) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = Instant::now();
    f(&data);
    let took = start.elapsed();
    assert!(
        took <= MAX_SECONDS_PER_INPUT,
        "{name} on {} took {took:?} (more than {MAX_SECONDS_PER_INPUT:?})",
        path.display()
    );
}

#[test]
fn every_saved_crash_replays_cleanly() {
    let crashes = repo("tests/data/fuzz/crashes");
    // Every folder there is a target's (a misnamed folder would silently replay nothing).
    for dir in std::fs::read_dir(&crashes).expect("tests/data/fuzz/crashes") {
        let dir = dir.expect("entry").path();
        if dir.is_dir() {
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            target(name);
        }
    }
    for (name, f) in targets::TARGETS {
        for path in files_in(&crashes.join(name)) {
            replay(name, *f, &path);
        }
    }
}

#[test]
fn first_pass_reproducers_replay_through_every_matching_target() {
    let files = files_in(&repo("tests/data/fuzz"));
    assert!(files.len() >= 7, "the first pass's reproducers are missing");
    for path in files {
        let names: &[&str] = match path.extension().and_then(|e| e.to_str()) {
            Some("json") => &["golden_parse"],
            _ => &["gguf_file", "gguf_model"],
        };
        for name in names {
            replay(name, target(name), &path);
        }
    }
}

#[test]
fn our_own_files_pass_through_their_targets() {
    let goldens = files_in(&repo("golden/reference"))
        .into_iter()
        .chain([repo("golden/ds41_tiny.json")])
        .filter(|p| p.extension().is_some_and(|e| e == "json"));
    for path in goldens {
        replay("golden_parse", target("golden_parse"), &path);
    }
    let maps: Vec<PathBuf> = files_in(&repo("src/import/maps"));
    assert!(!maps.is_empty(), "no shipped name maps");
    for path in maps {
        replay("name_map", target("name_map"), &path);
    }
}

/// The embedded WGSL through `shader_set`, each file behind the byte that picks it (as
/// `fuzz/seeds.sh` seeds them): each unedited file loads, and the target accepts it.
#[cfg(feature = "gpu")]
#[test]
fn the_embedded_shaders_pass_through_shader_set() {
    use golden_lens::gpu::exec::FAMILIES;
    let names: Vec<&str> = std::iter::once("common")
        .chain(FAMILIES.iter().map(|f| f.name))
        .collect();
    for (pick, name) in names.iter().enumerate() {
        let path = repo(&format!("shaders/{name}.wgsl"));
        let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let pick = u8::try_from(pick).expect("fewer than 256 files");
        let data: Vec<u8> = std::iter::once(pick).chain(text).collect();
        let start = Instant::now();
        let (set, family) = targets::shader_input_set(&data).expect("UTF-8");
        assert_eq!(set.file(family.name).map(|f| f.family), Some(family.name));
        if let Err(e) = set.validate_family(family) {
            panic!("the embedded {name}.wgsl is refused: {}", e.rendered());
        }
        targets::shader_set(&data);
        assert!(start.elapsed() <= MAX_SECONDS_PER_INPUT, "{name}");
    }
}

/// A broken edit reaches the check and is refused naming the edited file, and a prelude edit
/// is checked against the family the pick byte's high part names.
#[cfg(feature = "gpu")]
#[test]
fn a_broken_shader_input_is_refused_naming_its_file() {
    use golden_lens::gpu::exec::FAMILIES;
    let files = u8::try_from(FAMILIES.len() + 1).expect("fewer than 256 files");
    let (set, family) = targets::shader_input_set(b"\x01fn (").expect("UTF-8");
    assert_eq!(family.name, FAMILIES[0].name);
    let e = set.validate_family(family).expect_err("a syntax error");
    let (file, _, _) = e.location().expect("located");
    assert_eq!(file, format!("fuzz/{}.wgsl", FAMILIES[0].name));
    let pick = files * 2;
    let (set, family) = targets::shader_input_set(&[pick, b'}']).expect("UTF-8");
    assert_eq!(family.name, FAMILIES[2].name);
    let e = set.validate_family(family).expect_err("a broken prelude");
    assert!(
        e.rendered().contains("fuzz/common.wgsl"),
        "{}",
        e.rendered()
    );
    targets::shader_set(b"\x01fn (");
    assert!(
        targets::shader_input_set(b"\x01\xff").is_none(),
        "not UTF-8"
    );
}
