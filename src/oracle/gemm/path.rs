//! Which GEMM microkernel runs: chosen at run time from the CPU's features, overridable by the
//! `GOLDEN_LENS_KERNELS` environment variable or [`set_kernel_path`] so tests can compare every
//! path on the same inputs. All paths give the same bits (see the module docs of `gemm`).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// The environment variable that picks a kernel path (`portable`, `avx2`, `avx512`, `neon` or
/// `auto`); read once, on the first GEMM.
pub const KERNEL_ENV: &str = "GOLDEN_LENS_KERNELS";

/// A family of microkernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// Plain Rust, any CPU: the definition the SIMD paths are tested against.
    Portable,
    /// x86-64 AVX2 + FMA: one 256-bit register holds an output's four f64 lanes.
    Avx2,
    /// x86-64 AVX-512F: one 512-bit register holds two outputs' four f64 lanes.
    Avx512,
    /// aarch64 NEON: two 128-bit registers hold an output's four f64 lanes.
    Neon,
}

/// Every path, portable first.
pub const ALL_PATHS: [KernelPath; 4] = [
    KernelPath::Portable,
    KernelPath::Avx2,
    KernelPath::Avx512,
    KernelPath::Neon,
];

/// A kernel path that cannot run here.
#[derive(Debug, thiserror::Error)]
#[error("kernel path `{}` is not supported on this CPU (supported: {})", .path.name(), supported_names())]
pub struct UnsupportedPath {
    pub path: KernelPath,
}

impl KernelPath {
    /// The name used by `GOLDEN_LENS_KERNELS` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Portable => "portable",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512 => "avx512",
            KernelPath::Neon => "neon",
        }
    }

    /// The path named `name` (as [`KernelPath::name`] spells it).
    pub fn parse(name: &str) -> Option<KernelPath> {
        ALL_PATHS.into_iter().find(|p| p.name() == name)
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            KernelPath::Portable => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "aarch64")]
            KernelPath::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)] // which arms exist depends on the target
            _ => false,
        }
    }
}

/// The paths this CPU supports, portable first.
pub fn supported_paths() -> Vec<KernelPath> {
    ALL_PATHS.into_iter().filter(|p| p.is_supported()).collect()
}

fn supported_names() -> String {
    supported_paths()
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fastest supported path.
pub fn best_path() -> KernelPath {
    [KernelPath::Avx512, KernelPath::Avx2, KernelPath::Neon]
        .into_iter()
        .find(|p| p.is_supported())
        .unwrap_or(KernelPath::Portable)
}

/// What `GOLDEN_LENS_KERNELS` asked for, resolved once: the path and, when the request could not
/// be honoured, why.
fn env_choice() -> &'static (KernelPath, Option<String>) {
    static CHOICE: OnceLock<(KernelPath, Option<String>)> = OnceLock::new();
    CHOICE.get_or_init(|| {
        let best = best_path();
        match std::env::var(KERNEL_ENV) {
            Err(_) => (best, None),
            Ok(v) if v.is_empty() || v == "auto" => (best, None),
            Ok(v) => match KernelPath::parse(&v) {
                Some(p) if p.is_supported() => (p, None),
                Some(p) => (
                    best,
                    Some(format!(
                        "{KERNEL_ENV}={v}: {}; using {}",
                        UnsupportedPath { path: p },
                        best.name()
                    )),
                ),
                None => (
                    best,
                    Some(format!(
                        "{KERNEL_ENV}={v}: unknown path (expected auto, portable, avx2, avx512 or neon); using {}",
                        best.name()
                    )),
                ),
            },
        }
    })
}

/// 0: no override; otherwise the index in [`ALL_PATHS`] plus one.
static OVERRIDE: AtomicU8 = AtomicU8::new(0);

/// Force a path for every later GEMM in this process (`None` goes back to the environment's or
/// the CPU's choice). Tests use it to run the same inputs through every path.
pub fn set_kernel_path(path: Option<KernelPath>) -> Result<(), UnsupportedPath> {
    let code = match path {
        None => 0,
        Some(p) if !p.is_supported() => return Err(UnsupportedPath { path: p }),
        Some(p) => ALL_PATHS
            .iter()
            .position(|&q| q == p)
            .map_or(0, |i| i as u8 + 1),
    };
    OVERRIDE.store(code, Ordering::Relaxed);
    Ok(())
}

/// The path GEMMs use now.
pub fn active_path() -> KernelPath {
    match OVERRIDE.load(Ordering::Relaxed) {
        0 => env_choice().0,
        c => ALL_PATHS[usize::from(c - 1)],
    }
}

/// One line for reports: the active path, the CPU's best, and any ignored request.
pub fn kernel_path_note() -> String {
    let mut s = format!(
        "kernels: {} (best on this CPU: {}; supported: {})",
        active_path().name(),
        best_path().name(),
        supported_names()
    );
    if let Some(why) = &env_choice().1 {
        s.push_str("; ");
        s.push_str(why);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_portable_is_always_there() {
        for p in ALL_PATHS {
            assert_eq!(KernelPath::parse(p.name()), Some(p));
        }
        assert_eq!(KernelPath::parse("sse9"), None);
        assert!(KernelPath::Portable.is_supported());
        assert!(supported_paths().contains(&best_path()));
    }

    #[test]
    fn an_unsupported_path_is_refused() {
        if let Some(p) = ALL_PATHS.into_iter().find(|p| !p.is_supported()) {
            let e = set_kernel_path(Some(p)).unwrap_err();
            assert!(e.to_string().contains(p.name()), "{e}");
        }
    }
}
