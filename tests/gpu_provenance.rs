//! Kernel provenance on the wgpu path: for every `--inject` kind the worst element of the
//! injected capture is traced to the kernel, workgroup and invocation that wrote it, and that
//! location is checked against where the injection is known to act (computed here from the
//! capture's layout and the kernel's indexing, independently of the write maps). The device-lost
//! kind ends the run instead (tests/gpu_backends.rs).
#![cfg(feature = "gpu")]

use golden_lens::golden::Golden;
use golden_lens::gpu::provenance::{Invocation, Writer};
use golden_lens::gpu::{test_context, GpuBackend, GpuOptions, Injection};
use golden_lens::model::{Backend, Capture, CaptureValues, FillerSource, Step, WeightSource};
use golden_lens::session;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

fn golden() -> Golden {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/reference/ds41_tiny_golden.v3.json"
    ));
    Golden::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The first regime's captures on the GPU with `inject`, and the backend (for provenance).
fn first_regime(
    test: &str,
    g: &Golden,
    inject: Option<&str>,
) -> Option<(HashMap<String, Capture>, GpuBackend)> {
    let ctx = test_context(test)?;
    let (cfg, tables) = session::model_of(g).expect("config");
    let weights: Arc<dyn WeightSource> = Arc::new(FillerSource::new("v3", &g.weights_meta));
    let opts = GpuOptions {
        reference_ties: true,
        inject: inject.map(|i| i.parse::<Injection>().expect("injection")),
        ..Default::default()
    };
    let mut gpu = GpuBackend::new(ctx, cfg, weights, tables, opts).expect("gpu backend");
    let (_, ids, sp) = session::regime_inputs(g)
        .expect("regimes")
        .into_iter()
        .next()
        .expect("a regime");
    gpu.begin(&ids, sp).expect("begin");
    let mut sink = Vec::new();
    for step in gpu.steps() {
        gpu.run(step, &mut sink).expect("step");
    }
    let caps = sink.into_iter().map(|c| (c.name.clone(), c)).collect();
    Some((caps, gpu))
}

/// The element where the injected run differs most from the clean one.
fn worst_element(clean: &Capture, bad: &Capture) -> usize {
    match (&clean.values, &bad.values) {
        (CaptureValues::F32(a), CaptureValues::F32(b)) => {
            let err = |i: usize| {
                let d = (a[i] - b[i]).abs();
                if d.is_nan() {
                    f32::INFINITY
                } else {
                    d
                }
            };
            (0..a.len())
                .max_by(|&i, &j| err(i).total_cmp(&err(j)))
                .expect("non-empty")
        }
        (CaptureValues::I64(a), CaptureValues::I64(b)) => (0..a.len())
            .find(|&i| a[i] != b[i])
            .expect("some index differs"),
        _ => panic!("{}: dtypes differ", clean.name),
    }
}

/// The worst element of `capture` under `inject`, its shape and the writers of that element.
fn trace(test: &str, inject: &str, capture: &str) -> Option<(usize, Vec<usize>, Vec<Writer>)> {
    let g = golden();
    let (clean, _) = first_regime(test, &g, None)?;
    let (bad, gpu) = first_regime(test, &g, Some(inject))?;
    let (c, b) = (&clean[capture], &bad[capture]);
    let i = worst_element(c, b);
    let prov = gpu.provenance(capture).expect("provenance recorded");
    assert!(
        !prov.dispatches().is_empty() || matches!(prov.writer_of(i), Some(Writer::Host { .. }))
    );
    let writers = prov.writers_of(i);
    eprintln!("{inject}: worst element {i} of {capture} {:?}", b.shape);
    for w in &writers {
        eprintln!("  written by {w}");
    }
    Some((i, b.shape.clone(), writers))
}

/// The kernel entry and invocation of a writer.
fn kernel(w: &Writer) -> (&'static str, &'static str, Option<Invocation>) {
    match w {
        Writer::Kernel {
            dispatch,
            invocation,
        } => (dispatch.family, dispatch.entry, *invocation),
        Writer::Host { what } => panic!("a host write ({what}), expected a kernel"),
    }
}

fn at(workgroup: [u32; 3], local: [u32; 3]) -> Option<Invocation> {
    Some(Invocation { workgroup, local })
}

#[test]
fn a_bitflip_is_traced_to_the_flip_and_then_to_the_kernel_that_produced_the_element() {
    let Some((i, _, w)) = trace("prov_bitflip", "bitflip@L1.attn_in", "L1.attn_in") else {
        return;
    };
    assert_eq!(i, 0, "the flip hits the capture's first element");
    assert_eq!(kernel(&w[0]), ("rows", "bitflip", at([0; 3], [0; 3])));
    // Underneath: the RMSNorm that wrote row 0, column 0 (workgroup per row, lane = column).
    assert_eq!(kernel(&w[1]), ("rows", "rmsnorm", at([0; 3], [0; 3])));
}

#[test]
fn a_dropped_workgroup_is_traced_to_the_lane_that_zeroed_the_element() {
    let Some((i, shape, w)) = trace("prov_dropped", "dropped-workgroup@L1.ffn_in", "L1.ffn_in")
    else {
        return;
    };
    assert!(
        i < 64,
        "the dropped workgroup covers the first 64 outputs, got {i}"
    );
    let lane = i as u32;
    assert_eq!(
        kernel(&w[0]),
        ("rows", "drop_first", at([0; 3], [lane, 0, 0]))
    );
    // The producer (RMSNorm of the ffn input, one workgroup per token row) wrote it first.
    let d = shape[2];
    assert_eq!(
        kernel(&w[1]),
        (
            "rows",
            "rmsnorm",
            at([(i / d) as u32, 0, 0], [(i % d % 64) as u32, 0, 0])
        )
    );
}

#[test]
fn a_window_off_by_one_is_traced_to_its_window_index_thread() {
    let Some((i, shape, w)) = trace(
        "prov_window",
        "window-off-by-one@L0.sa_topk_idxs",
        "L0.sa_topk_idxs",
    ) else {
        return;
    };
    let width = shape[2];
    let (t, c) = (i / width, i % width);
    assert_eq!(
        kernel(&w[0]),
        (
            "attn",
            "window_idx",
            at([(c / 64) as u32, t as u32, 0], [(c % 64) as u32, 0, 0])
        )
    );
}

#[test]
fn a_rope_sign_fault_is_traced_to_the_rotating_thread_of_its_pair() {
    let Some((i, shape, w)) = trace("prov_rope", "rope-sign@L2.sa_q", "L2.sa_q") else {
        return;
    };
    let g = golden();
    let (cfg, _) = session::model_of(&g).expect("config");
    let hd = shape[3];
    let (row, col) = (i / hd, i % hd);
    let start = hd - cfg.rope_head_dim;
    assert!(col >= start, "only the rotated tail changes (column {col})");
    let k = (col - start) / 2;
    assert_eq!(
        kernel(&w[0]),
        (
            "rope",
            "rope",
            at([(k / 64) as u32, row as u32, 0], [(k % 64) as u32, 0, 0])
        )
    );
}

#[test]
fn a_stale_buffer_is_traced_to_the_host_write_that_replaced_the_values() {
    let Some((_, _, w)) = trace("prov_stale", "stale-buffer@L1.attn_out", "L1.attn_out") else {
        return;
    };
    assert_eq!(
        w.first(),
        Some(&Writer::Host {
            what: "stale-buffer injection".into()
        })
    );
}

#[test]
fn every_capture_of_a_clean_run_names_the_dispatches_behind_it() {
    let g = golden();
    let Some((caps, gpu)) = first_regime("prov_clean", &g, None) else {
        return;
    };
    let mut with_kernel = 0;
    for name in caps.keys() {
        let p = gpu.provenance(name);
        if let Some(p) = p {
            let ds = p.dispatches();
            if let Some(d) = ds.last() {
                with_kernel += 1;
                assert!(d.line.is_some(), "{name}: {} has no entry line", d.kernel());
                assert!(
                    d.uniforms.contains("Params"),
                    "{name}: uniforms {}",
                    d.uniforms
                );
            }
        }
    }
    // Host-computed captures (ids, hashes) have none; every device capture has a kernel.
    assert!(
        with_kernel > caps.len() / 2,
        "{with_kernel} of {}",
        caps.len()
    );
    let sa_o = gpu.provenance("L0.sa_o").expect("sa_o");
    let w = sa_o.writer_of(0).expect("written");
    assert!(w.to_string().starts_with("`attn.wgsl:"), "{w}");
}

#[test]
fn the_first_step_using_a_kernel_is_where_a_reload_of_it_reruns_from() {
    let g = golden();
    let Some((caps, gpu)) = first_regime("prov_first_step", &g, None) else {
        return;
    };
    let steps = gpu.steps();
    // Every step's own kernels are first used at or before it, and each family's first step
    // dispatched it.
    for &s in &steps {
        let used = gpu.kernels_of(s);
        if used.is_empty() {
            continue;
        }
        let first = gpu.first_step_using(&used).expect("used somewhere");
        // Forward order, not `Step`'s derived order (which sorts every Engram(l) before
        // every Block(l), though Block(0) runs before Engram(1)).
        let at = |t: Step| {
            steps
                .iter()
                .position(|&u| u == t)
                .expect("a step of the forward")
        };
        assert!(at(first) <= at(s), "{s}: {used:?} first used at {first}");
        for fam in used {
            let f = gpu.first_step_using(&[fam]).expect("used");
            assert!(gpu.kernels_of(f).contains(&fam), "{fam} at {f}");
            assert!(
                steps
                    .iter()
                    .take_while(|&&t| t != f)
                    .all(|&t| !gpu.kernels_of(t).contains(&fam)),
                "{fam}: no step before {f} used it"
            );
        }
    }
    // The first capture the rope kernel writes is in the step its first use names.
    let rope = gpu.first_step_using(&["rope"]).expect("rope runs");
    assert_eq!(rope, Step::Block(0));
    assert!(caps.contains_key("L0.sa_q"));
    assert!(gpu.first_step_using(&["no_such_family"]).is_none());
}
