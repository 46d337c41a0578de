//! `--inject KIND@CAPTURE`: perturb the kernel that produces one capture, on purpose, so the
//! comparison machinery can be shown to catch each kind of GPU bug and to name the injected
//! capture as the first failure.

use std::fmt;
use std::str::FromStr;

/// The kinds of fault the GPU path can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectionKind {
    /// Flip the top exponent bit of the capture's first element (a single corrupted word).
    BitFlip,
    /// The window index kernel reads one ring row too early (`L*.sa_topk_idxs` only).
    WindowOffByOne,
    /// The RoPE kernel rotates the queries the wrong way (`L*.sa_q` only).
    RopeSign,
    /// The producing kernel's first workgroup never writes: its 64 outputs stay zero.
    DroppedWorkgroup,
    /// The capture reads a buffer nobody refreshed: the previous regime's values (zeros in the
    /// first regime).
    StaleBuffer,
    /// The device is lost right after the producing kernel (as a driver reset or a removed GPU
    /// would): the GPU backend's run ends with [`crate::gpu::GpuError::DeviceLost`].
    DeviceLost,
}

impl InjectionKind {
    /// Every kind, with its CLI name.
    pub const ALL: [(InjectionKind, &'static str); 6] = [
        (InjectionKind::BitFlip, "bitflip"),
        (InjectionKind::WindowOffByOne, "window-off-by-one"),
        (InjectionKind::RopeSign, "rope-sign"),
        (InjectionKind::DroppedWorkgroup, "dropped-workgroup"),
        (InjectionKind::StaleBuffer, "stale-buffer"),
        (InjectionKind::DeviceLost, "device-lost"),
    ];

    /// The CLI name.
    pub fn label(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("?", |(_, n)| n)
    }
}

/// One injected fault: a kind and the capture whose producing kernel it perturbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    pub kind: InjectionKind,
    pub capture: String,
}

impl fmt::Display for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.kind.label(), self.capture)
    }
}

/// Why an `--inject` argument was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--inject {arg}: {msg}")]
pub struct InjectionParseError {
    pub arg: String,
    pub msg: String,
}

impl FromStr for Injection {
    type Err = InjectionParseError;

    fn from_str(arg: &str) -> Result<Injection, InjectionParseError> {
        let err = |msg: String| InjectionParseError {
            arg: arg.to_string(),
            msg,
        };
        let (kind, capture) = arg
            .split_once('@')
            .ok_or_else(|| err("expected KIND@CAPTURE".into()))?;
        let kind = InjectionKind::ALL
            .iter()
            .find(|(_, n)| *n == kind)
            .map(|(k, _)| *k)
            .ok_or_else(|| {
                let names: Vec<&str> = InjectionKind::ALL.iter().map(|(_, n)| *n).collect();
                err(format!(
                    "unknown kind `{kind}` (one of {})",
                    names.join(", ")
                ))
            })?;
        if capture.is_empty() {
            return Err(err("no capture name".into()));
        }
        let base = capture.rsplit('.').next().unwrap_or(capture);
        let layer_capture = capture.starts_with('L') && !capture.starts_with("shared.");
        match kind {
            InjectionKind::WindowOffByOne if !(layer_capture && base == "sa_topk_idxs") => {
                return Err(err(
                    "window-off-by-one perturbs the window index kernel: use L<l>.sa_topk_idxs"
                        .into(),
                ))
            }
            InjectionKind::RopeSign if !(layer_capture && base == "sa_q") => {
                return Err(err(
                    "rope-sign perturbs the query RoPE: use L<l>.sa_q".into()
                ))
            }
            _ => {}
        }
        Ok(Injection {
            kind,
            capture: capture.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_refuses_misplaced_ones() {
        for (k, n) in InjectionKind::ALL {
            let target = match k {
                InjectionKind::WindowOffByOne => "L0.sa_topk_idxs",
                InjectionKind::RopeSign => "L2.sa_q",
                _ => "L1.attn_in",
            };
            let inj: Injection = format!("{n}@{target}").parse().expect("parses");
            assert_eq!(inj.kind, k);
            assert_eq!(inj.to_string(), format!("{n}@{target}"));
        }
        assert!("rope-sign@L0.attn_in".parse::<Injection>().is_err());
        assert!("window-off-by-one@L0.sa_q".parse::<Injection>().is_err());
        assert!("melt@L0.sa_q".parse::<Injection>().is_err());
        assert!("bitflip".parse::<Injection>().is_err());
    }
}
