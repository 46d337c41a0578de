//! Kernel provenance: which dispatches wrote each element of a GPU capture. Every dispatch is
//! recorded with its kernel family, entry point, WGSL file and line, workgroup size, dispatch
//! size and uniform values, and with a [`WriteMap`]: the kernel's own dispatch math from an
//! output element to the invocation that writes it. The executor keeps, per device buffer, the
//! writes since the regime began (kernels, copies from other buffers, host uploads); a capture
//! takes a snapshot of them at capture time, so "`L3.sa_o` [0, 5, 17] is off" becomes "written
//! by `attn.wgsl:95 sparse_attn` workgroup (1, 0, 0), invocation (23, 0, 0)".

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

/// Largest number of workgroups along x of a flat dispatch before it folds into y (the
/// kernels index `gid.x + gid.y · 65535 · 64`).
const FLAT_FOLD: usize = 65535 * 64;

/// How the threads of one dispatch map onto the elements of the buffer it writes. Element `e`
/// of the buffer is `offset + row · ld + col` for the row-shaped maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMap {
    /// `gid = (col / cols_per_thread, row / rows_per_thread, 0)` for `row < rows`,
    /// `col < width` (elementwise and row kernels: one thread per output, per 2 RoPE values,
    /// per 4 GEMM rows, per candidate block).
    Grid {
        offset: usize,
        ld: usize,
        width: usize,
        rows: usize,
        cols_per_thread: usize,
        rows_per_thread: usize,
    },
    /// One thread per row: `gid = (row % period, 0, 0)` (hc mixes, MoE gate and routing).
    RowThreads {
        offset: usize,
        ld: usize,
        width: usize,
        rows: usize,
        period: usize,
    },
    /// One workgroup per row, its invocations strided along it: workgroup `(row, 0, 0)`,
    /// invocation `(col % workgroup size, 0, 0)` (RMSNorm, the engram gate, sparse attention
    /// per (token, head)).
    RowGroups {
        offset: usize,
        ld: usize,
        width: usize,
        rows: usize,
    },
    /// `gid.x + gid.y · 65535 · 64 = (e - offset) / per_thread` for `e - offset < len` (flat
    /// kernels; the quantiser's one thread per block).
    Flat {
        offset: usize,
        len: usize,
        per_thread: usize,
    },
    /// The tiled GEMM: `tile_m x tile_n` blocks of y per workgroup, thread `(tx, ty)` writing
    /// rows `ty + threads_y · a` and columns `tx + threads_x · b` of its block.
    Tiled {
        offset: usize,
        ld: usize,
        width: usize,
        rows: usize,
        tile_m: usize,
        tile_n: usize,
        threads_x: usize,
        threads_y: usize,
    },
    /// One invocation writes one element (the bit-flip injection).
    Single { element: usize },
    /// Several regions, each with its own map (the hc mixes: pre, post, comb).
    Regions(Vec<WriteMap>),
    /// Data-dependent destinations (ring slots, scatter rows, compacted top-k): the kernel is
    /// known, the invocation is not derived.
    Opaque,
}

/// The invocation that wrote an element, as far as the map says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invocation {
    pub workgroup: [u32; 3],
    pub local: [u32; 3],
}

impl fmt::Display for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c] = self.workgroup;
        let [x, y, z] = self.local;
        write!(f, "workgroup ({a}, {b}, {c}), invocation ({x}, {y}, {z})")
    }
}

fn u(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl WriteMap {
    /// Row `row < rows`, column `col < width` of element `e` under a row-shaped map.
    fn row_col(
        e: usize,
        offset: usize,
        ld: usize,
        width: usize,
        rows: usize,
    ) -> Option<(usize, usize)> {
        let rel = e.checked_sub(offset)?;
        let (row, col) = (rel / ld.max(1), rel % ld.max(1));
        (row < rows && col < width).then_some((row, col))
    }

    /// Whether this dispatch wrote element `e`, and by which invocation (`None` inside the
    /// covered range means an opaque map).
    pub fn locate(&self, e: usize, wg: [u32; 3]) -> Option<Option<Invocation>> {
        let split = |gid: [usize; 3]| {
            let w = wg.map(|v| v.max(1) as usize);
            Some(Some(Invocation {
                workgroup: [u(gid[0] / w[0]), u(gid[1] / w[1]), u(gid[2] / w[2])],
                local: [u(gid[0] % w[0]), u(gid[1] % w[1]), u(gid[2] % w[2])],
            }))
        };
        match self {
            WriteMap::Grid {
                offset,
                ld,
                width,
                rows,
                cols_per_thread,
                rows_per_thread,
            } => {
                let (row, col) = Self::row_col(e, *offset, *ld, *width, *rows)?;
                split([
                    col / cols_per_thread.max(&1),
                    row / rows_per_thread.max(&1),
                    0,
                ])
            }
            WriteMap::RowThreads {
                offset,
                ld,
                width,
                rows,
                period,
            } => {
                let (row, _) = Self::row_col(e, *offset, *ld, *width, *rows)?;
                split([row % period.max(&1), 0, 0])
            }
            WriteMap::RowGroups {
                offset,
                ld,
                width,
                rows,
            } => {
                let (row, col) = Self::row_col(e, *offset, *ld, *width, *rows)?;
                Some(Some(Invocation {
                    workgroup: [u(row), 0, 0],
                    local: [u(col % wg[0].max(1) as usize), 0, 0],
                }))
            }
            WriteMap::Flat {
                offset,
                len,
                per_thread,
            } => {
                let rel = e.checked_sub(*offset).filter(|r| r < len)?;
                let g = rel / per_thread.max(&1);
                split([g % FLAT_FOLD, g / FLAT_FOLD, 0])
            }
            WriteMap::Tiled {
                offset,
                ld,
                width,
                rows,
                tile_m,
                tile_n,
                threads_x,
                threads_y,
            } => {
                let (row, col) = Self::row_col(e, *offset, *ld, *width, *rows)?;
                let (tm, tn) = (*tile_m.max(&1), *tile_n.max(&1));
                Some(Some(Invocation {
                    workgroup: [u(col / tn), u(row / tm), 0],
                    local: [
                        u(col % tn % threads_x.max(&1)),
                        u(row % tm % threads_y.max(&1)),
                        0,
                    ],
                }))
            }
            WriteMap::Single { element } => (e == *element).then_some(Some(Invocation {
                workgroup: [0; 3],
                local: [0; 3],
            })),
            WriteMap::Regions(maps) => maps.iter().find_map(|m| m.locate(e, wg)),
            WriteMap::Opaque => Some(None),
        }
    }
}

/// One recorded dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// Dispatch number since the executor was made.
    pub seq: u64,
    pub family: &'static str,
    pub entry: &'static str,
    /// The WGSL file the family was compiled from (`shaders/attn.wgsl` or the `--shaders` path).
    pub file: String,
    /// 1-based line of the entry point in that file.
    pub line: Option<usize>,
    pub workgroup_size: [u32; 3],
    pub groups: [u32; 3],
    /// The uniform struct's values, as its `Debug` prints them.
    pub uniforms: String,
    /// Which of its output's elements it wrote, by which invocation.
    pub map: WriteMap,
}

impl Dispatch {
    /// `attn.wgsl:95 sparse_attn`.
    pub fn kernel(&self) -> String {
        let file = self.file.rsplit('/').next().unwrap_or(&self.file);
        match self.line {
            Some(l) => format!("{file}:{l} {}", self.entry),
            None => format!("{file} {}", self.entry),
        }
    }
}

/// One write into a device buffer.
#[derive(Debug, Clone)]
enum Write {
    Kernel(Arc<Dispatch>),
    /// `n` values copied from buffer `src` at `src_off` to `dst_off`.
    Copy {
        src: u64,
        src_off: usize,
        dst_off: usize,
        n: usize,
    },
    /// Values written from the host (`what`: the upload's label).
    Host {
        what: String,
        off: usize,
        n: usize,
    },
}

/// Writes kept per buffer (the newest; a buffer rewritten more often loses its oldest).
const WRITES_PER_BUFFER: usize = 64;
/// Copy chains followed back through other buffers.
const MAX_COPY_DEPTH: usize = 6;

/// The writes of every buffer since the last [`Ledger::clear`].
#[derive(Debug, Default)]
pub struct Ledger {
    writes: HashMap<u64, VecDeque<Write>>,
}

/// Who wrote one element of a capture.
#[derive(Debug, Clone, PartialEq)]
pub enum Writer {
    /// A kernel, with the invocation where its map derives it.
    Kernel {
        dispatch: Arc<Dispatch>,
        invocation: Option<Invocation>,
    },
    /// A host upload (an input, a seed, the stale-buffer injection).
    Host { what: String },
}

impl fmt::Display for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Writer::Kernel {
                dispatch,
                invocation: Some(i),
            } => write!(f, "`{}` {i}", dispatch.kernel()),
            Writer::Kernel {
                dispatch,
                invocation: None,
            } => write!(f, "`{}` (invocation not derived)", dispatch.kernel()),
            Writer::Host { what } => write!(f, "a host write ({what})"),
        }
    }
}

/// One piece of a capture's history: a write that covers capture elements `[lo, hi)`, where
/// capture element `i` is element `i + delta` of the written buffer.
#[derive(Debug, Clone)]
struct Segment {
    lo: usize,
    hi: usize,
    delta: isize,
    write: Write,
    /// For a copy: how many segments right before it are its source's history.
    src_len: usize,
}

/// The provenance of one capture, frozen at capture time.
#[derive(Debug, Clone, Default)]
pub struct CaptureProvenance {
    /// Oldest first.
    segments: Vec<Segment>,
}

impl CaptureProvenance {
    /// The dispatches that wrote some element of the capture, oldest first, each once.
    pub fn dispatches(&self) -> Vec<Arc<Dispatch>> {
        let mut out: Vec<Arc<Dispatch>> = Vec::new();
        for s in &self.segments {
            if let Write::Kernel(d) = &s.write {
                if !out.iter().any(|o| o.seq == d.seq) {
                    out.push(d.clone());
                }
            }
        }
        out
    }

    /// Every write that covers capture element `i`, the last one (the one whose value the
    /// capture holds) first: in-place kernels after their producer are all listed; a copy or a
    /// host upload replaced what came before it, so the walk stops there.
    pub fn writers_of(&self, i: usize) -> Vec<Writer> {
        let mut out = Vec::new();
        walk(&self.segments, i, &mut out);
        out
    }

    /// The write whose value capture element `i` holds.
    pub fn writer_of(&self, i: usize) -> Option<Writer> {
        self.writers_of(i).into_iter().next()
    }
}

/// [`CaptureProvenance::writers_of`] over `segs`, newest first; true when a write that
/// replaced the element's value ended the walk.
fn walk(segs: &[Segment], i: usize, out: &mut Vec<Writer>) -> bool {
    let mut idx = segs.len();
    while idx > 0 {
        idx -= 1;
        let s = &segs[idx];
        let covers = i >= s.lo && i < s.hi;
        let start = idx.saturating_sub(s.src_len);
        if let Write::Copy { .. } = s.write {
            if covers {
                walk(&segs[start..idx], i, out);
                return true;
            }
            idx = start;
            continue;
        }
        if !covers {
            continue;
        }
        let Some(e) = (i as isize)
            .checked_add(s.delta)
            .and_then(|e| usize::try_from(e).ok())
        else {
            continue;
        };
        match &s.write {
            Write::Kernel(d) => {
                if let Some(invocation) = d.map.locate(e, d.workgroup_size) {
                    out.push(Writer::Kernel {
                        dispatch: d.clone(),
                        invocation,
                    });
                }
            }
            Write::Host { what, .. } => {
                out.push(Writer::Host { what: what.clone() });
                return true;
            }
            Write::Copy { .. } => {}
        }
    }
    false
}

impl Ledger {
    /// Forget every write (a new regime).
    pub fn clear(&mut self) {
        self.writes.clear();
    }

    fn push(&mut self, buf: u64, w: Write) {
        let q = self.writes.entry(buf).or_default();
        if q.len() == WRITES_PER_BUFFER {
            q.pop_front();
        }
        q.push_back(w);
    }

    /// A dispatch wrote `buf`.
    pub fn kernel(&mut self, buf: u64, d: Arc<Dispatch>) {
        self.push(buf, Write::Kernel(d));
    }

    /// `n` values were copied from `src` at `src_off` into `dst` at `dst_off`.
    pub fn copy(&mut self, src: u64, src_off: usize, dst: u64, dst_off: usize, n: usize) {
        self.push(
            dst,
            Write::Copy {
                src,
                src_off,
                dst_off,
                n,
            },
        );
    }

    /// The host wrote `n` values of `buf` from `off`.
    pub fn host(&mut self, buf: u64, what: &str, off: usize, n: usize) {
        self.push(
            buf,
            Write::Host {
                what: what.to_string(),
                off,
                n,
            },
        );
    }

    /// The history of `n` values of `buf` from `off`, as it stands now.
    pub fn snapshot(&self, buf: u64, off: usize, n: usize) -> CaptureProvenance {
        let mut segments = Vec::new();
        self.collect(buf, 0, n, off as isize, 0, &mut segments);
        CaptureProvenance { segments }
    }

    /// Segments for capture elements `[lo, hi)`, element `i` being `i + delta` of `buf`,
    /// oldest first (a copy's source history precedes the copy's own position).
    fn collect(
        &self,
        buf: u64,
        lo: usize,
        hi: usize,
        delta: isize,
        depth: usize,
        out: &mut Vec<Segment>,
    ) {
        let Some(q) = self.writes.get(&buf) else {
            return;
        };
        for w in q {
            match w {
                Write::Kernel(_) => out.push(Segment {
                    lo,
                    hi,
                    delta,
                    write: w.clone(),
                    src_len: 0,
                }),
                Write::Host { off, n, .. } => {
                    let (a, b) = clip(lo, hi, delta, *off, *n);
                    if a < b {
                        out.push(Segment {
                            lo: a,
                            hi: b,
                            delta,
                            write: w.clone(),
                            src_len: 0,
                        });
                    }
                }
                Write::Copy {
                    src,
                    src_off,
                    dst_off,
                    n,
                } => {
                    let (a, b) = clip(lo, hi, delta, *dst_off, *n);
                    if a < b && depth < MAX_COPY_DEPTH {
                        // Capture element i is dst element i + delta, i.e. src element
                        // i + delta - dst_off + src_off.
                        let d = delta - *dst_off as isize + *src_off as isize;
                        // The copy replaced [a, b): its source's history goes right before it,
                        // and the walk stops at the copy.
                        let before = out.len();
                        self.collect(*src, a, b, d, depth + 1, out);
                        let src_len = out.len() - before;
                        out.push(Segment {
                            lo: a,
                            hi: b,
                            delta,
                            write: w.clone(),
                            src_len,
                        });
                    }
                }
            }
        }
    }
}

/// Capture elements of `[lo, hi)` (element i at buffer element i + delta) that fall in the
/// buffer range `[off, off + n)`.
fn clip(lo: usize, hi: usize, delta: isize, off: usize, n: usize) -> (usize, usize) {
    let a = (off as isize - delta).max(lo as isize).max(0) as usize;
    let b = ((off + n) as isize - delta).min(hi as isize).max(0) as usize;
    (a, b.max(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dispatch(seq: u64, entry: &'static str, map: WriteMap) -> Arc<Dispatch> {
        Arc::new(Dispatch {
            seq,
            family: "t",
            entry,
            file: "shaders/t.wgsl".into(),
            line: Some(3),
            workgroup_size: [64, 1, 1],
            groups: [1, 1, 1],
            uniforms: String::new(),
            map,
        })
    }

    #[test]
    fn grid_tiled_and_row_group_maps_invert_the_kernels_indexing() {
        let g = WriteMap::Grid {
            offset: 2,
            ld: 100,
            width: 90,
            rows: 3,
            cols_per_thread: 2,
            rows_per_thread: 1,
        };
        // Row 1, column 70 -> gid (35, 1): workgroup (0, 1), invocation 35.
        let inv = g.locate(2 + 170, [64, 1, 1]).flatten().expect("covered");
        assert_eq!((inv.workgroup, inv.local), ([0, 1, 0], [35, 0, 0]));
        assert_eq!(g.locate(2 + 195, [64, 1, 1]), None, "column 95 is outside");
        let t = WriteMap::Tiled {
            offset: 0,
            ld: 200,
            width: 200,
            rows: 40,
            tile_m: 16,
            tile_n: 64,
            threads_x: 16,
            threads_y: 4,
        };
        let inv = t
            .locate(17 * 200 + 130, [16, 4, 1])
            .flatten()
            .expect("covered");
        assert_eq!((inv.workgroup, inv.local), ([2, 1, 0], [2, 1, 0]));
        let r = WriteMap::RowGroups {
            offset: 0,
            ld: 10,
            width: 10,
            rows: 2,
        };
        let inv = r.locate(13, [64, 1, 1]).flatten().expect("covered");
        assert_eq!((inv.workgroup, inv.local), ([1, 0, 0], [3, 0, 0]));
    }

    #[test]
    fn the_last_write_wins_and_copies_are_followed_to_their_source() {
        let mut l = Ledger::default();
        let flat = |len| WriteMap::Flat {
            offset: 0,
            len,
            per_thread: 1,
        };
        l.kernel(1, dispatch(0, "produce", flat(100)));
        l.kernel(1, dispatch(1, "flip", WriteMap::Single { element: 7 }));
        l.host(2, "seed", 0, 10);
        l.copy(1, 5, 2, 4, 4); // buffer 2 [4, 8) <- buffer 1 [5, 9)
        let p = l.snapshot(2, 0, 10);
        // Capture element 6 is buffer 2 element 6 <- buffer 1 element 7: flipped, then produced.
        let w = p.writers_of(6);
        let names: Vec<String> = w.iter().map(|w| w.to_string()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names[0].contains("flip"), "{names:?}");
        assert!(names[1].contains("produce"), "{names:?}");
        // Element 1 was only seeded from the host.
        assert_eq!(
            p.writer_of(1),
            Some(Writer::Host {
                what: "seed".into()
            })
        );
        // Writes after the snapshot do not change it.
        l.kernel(2, dispatch(2, "later", flat(10)));
        assert!(p
            .writer_of(1)
            .is_some_and(|w| !w.to_string().contains("later")));
        assert_eq!(p.dispatches().len(), 2);
    }
}
