//! Synthesized real files with data: one layer of the antirez Q2 plan filled (its attention,
//! norms, router, shared expert and the first routed expert), read back through the GGUF weight
//! source at real dims. F32 and F16 tensors hold exactly the filler's values, Q8_0 ones are
//! within Q8_0's step, the filled routed expert carries data and the next one is a hole, and
//! the file costs on disk only what was written.

use golden_lens::gguf::synth::RealLayout;
use golden_lens::golden::StorageDtype;
use golden_lens::model::synth_fill::{write_filled_layout, FillPlan};
use golden_lens::model::{FillerSource, GgufSource, ModelConfig, WeightSource};
use std::os::unix::fs::MetadataExt;
use tempfile::TempDir;

/// Q8_0 keeps each value within half a step of its block's scale `amax/127`, plus the f16
/// rounding of that scale (relative 2^-11 of up to 127 steps): below 0.5/127 + 127·2^-11/127
/// of the block's largest magnitude.
const Q8_0_REL_ERR: f32 = 0.5 / 127.0 + 1.0 / 2048.0;

/// The source rounds dequantized values of bf16 parameters to bf16 (8 significant bits): half
/// an ulp is at most 2^-8 of the value.
const BF16_REL_ERR: f32 = 1.0 / 256.0;

/// f16 rounds to nearest with an 11-bit significand: half an ulp is 2^-11 of the value.
const F16_REL_ERR: f32 = 1.0 / 2048.0;

/// Below f16's smallest normal (2^-14) the step is 2^-24; half of it bounds the rounding.
const F16_SUBNORMAL_HALF_STEP: f32 = 1.0 / 33_554_432.0;

/// Allocated bytes beyond the written data: the header (tokenizer arrays) and filesystem
/// block rounding.
const DISK_OVERHEAD_BYTES: u64 = 64 << 20;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn one_filled_layer_reads_back_at_real_dims() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("q2-layer2.gguf");
    let plan = FillPlan {
        layers: 2..=2,
        experts: 1,
        globals: false,
    };
    let report = write_filled_layout(&path, RealLayout::AntirezQ2, &plan).expect("fill");
    assert_eq!(report.file_len, RealLayout::AntirezQ2.real_file_len());
    // Layer 2: 16 plain tensors, compressor and indexer (7), router + bias, shared expert (3),
    // three expert tensors; the vision bias stays a hole.
    assert_eq!(report.tensors_filled, 31, "{report:?}");
    assert_eq!(report.tensors_filled + report.tensors_left_as_holes, 1046);
    let disk = std::fs::metadata(&path).expect("stat").blocks() * 512;
    assert_eq!(disk, report.bytes_on_disk);
    assert!(disk >= report.bytes_written, "{report:?}");
    assert!(
        disk <= report.bytes_written + DISK_OVERHEAD_BYTES,
        "{report:?}"
    );

    let (source, model) = GgufSource::open(&path).expect("open");
    assert_eq!((model.cfg.dim, model.cfg.n_layers), (5120, 40));
    let filler = FillerSource::from_config("real dims", &ModelConfig::deepseek_v41_flash())
        .expect("real-dims parameter list");
    // F32 tensors (norm, router): the filler's bits.
    for name in ["layers.2.attn_norm.weight", "layers.2.ffn.gate.weight"] {
        let got = source.tensor(name).expect(name);
        let want = filler.tensor(name).expect(name);
        assert_eq!(bits(&got), bits(&want), "{name}");
    }
    // F16 tensors (hyper-connection fn, compressor): the filler's bits where the reference
    // stores bf16 (f16 holds every bf16 value of that range), else the f16 rounding.
    for name in ["layers.2.hc_attn_fn", "layers.2.attn.compressor.wkv.weight"] {
        let got = source.tensor(name).expect(name);
        let want = filler.tensor(name).expect(name);
        let meta = filler.meta_of(name).expect("meta");
        if meta.dtype == StorageDtype::Bf16 {
            assert_eq!(bits(&got), bits(&want), "{name}");
        } else {
            for (x, y) in got.iter().zip(want.iter()) {
                assert!(
                    (x - y).abs() <= F16_REL_ERR * y.abs() + F16_SUBNORMAL_HALF_STEP,
                    "{name}: {x} vs {y}"
                );
            }
        }
    }
    // Q8_0 (the q projection): within the step, block by block, then bf16-rounded.
    let name = "layers.2.attn.wq_a.weight";
    let got = source.tensor(name).expect(name);
    let want = filler.tensor(name).expect(name);
    for (b, (g, w)) in got.chunks(32).zip(want.chunks(32)).enumerate() {
        let amax = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (x, y) in g.iter().zip(w) {
            assert!(
                (x - y).abs() <= Q8_0_REL_ERR * amax + BF16_REL_ERR * x.abs(),
                "{name} block {b}: {x} vs {y} (amax {amax})"
            );
        }
    }
    // Routed expert 0 has data (IQ2_XXS gate, Q2_K down); expert 1 is a hole.
    for proj in ["w1", "w2", "w3"] {
        let e0 = source
            .tensor(&format!("layers.2.ffn.experts.0.{proj}.weight"))
            .expect("expert 0");
        assert!(e0.iter().any(|&v| v != 0.0), "expert 0 {proj} all zero");
        let e1 = source
            .tensor(&format!("layers.2.ffn.experts.1.{proj}.weight"))
            .expect("expert 1");
        assert!(e1.iter().all(|&v| v == 0.0), "expert 1 {proj} was filled");
    }
    // Other layers and the globals were left as holes.
    let other = source.tensor("layers.3.attn_norm.weight").expect("layer 3");
    assert!(other.iter().all(|&v| v == 0.0));
    let head_rows = source
        .rows("head.weight", &[0, 129_279])
        .expect("head rows");
    assert!(head_rows.iter().all(|&v| v == 0.0));
}

#[test]
fn fill_plans_outside_the_layout_are_refused() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("bad.gguf");
    for plan in [
        FillPlan {
            layers: 39..=40,
            experts: 0,
            globals: false,
        },
        FillPlan {
            layers: 0..=0,
            experts: 385,
            globals: false,
        },
    ] {
        let e = write_filled_layout(&path, RealLayout::AntirezQ4, &plan).unwrap_err();
        assert!(e.to_string().contains("--fill-"), "{e}");
        assert!(!path.exists());
    }
}
