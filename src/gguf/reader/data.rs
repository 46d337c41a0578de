//! Tensor data: positioned reads outside the map, borrowed slices inside it, and dequantized
//! rows, row ranges and expert slabs.

use super::*;

impl GgufFile {
    /// Whether `t`'s data lies entirely inside the memory-mapped region.
    pub fn is_mapped(&self, t: &TensorInfo) -> bool {
        t.byte_range().is_some_and(|r| r.end <= self.mapped_len())
    }

    /// Reads `len` bytes at absolute `offset` with `read_exact_at`, never through the map (the
    /// path for engram rows, which must not be paged into the mapped region).
    pub fn pread(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        match self.read_unmapped(offset, len)? {
            Cow::Owned(v) => Ok(v),
            Cow::Borrowed(b) => Ok(b.to_vec()),
        }
    }

    fn read_unmapped(&self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        offset
            .checked_add(len)
            .filter(|&e| e <= self.file_len)
            .ok_or_else(|| GgufError::Truncated {
                path: self.path.clone(),
                offset,
                field: "data read".into(),
                needed: len,
                available: self.file_len.saturating_sub(offset),
            })?;
        let len_usize = usize::try_from(len).map_err(|_| GgufError::Truncated {
            path: self.path.clone(),
            offset,
            field: "data read (larger than the address space)".into(),
            needed: len,
            available: self.file_len - offset,
        })?;
        let mut buf = vec![0u8; len_usize];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|source| GgufError::Io {
                path: self.path.clone(),
                action: "read tensor data",
                source,
            })?;
        Ok(Cow::Owned(buf))
    }

    /// Reads `len` bytes at absolute `offset`: borrowed from the map when resident, otherwise
    /// read with `read_exact_at` into a buffer of exactly `len` bytes.
    pub fn read_bytes(&self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        if let (Some(end), Some(map)) = (offset.checked_add(len), &self.map) {
            if end <= map.len() as u64 {
                return Ok(Cow::Borrowed(&map[offset as usize..end as usize]));
            }
        }
        self.read_unmapped(offset, len)
    }

    /// The raw data bytes of tensor `name`.
    pub fn tensor_bytes(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let t = self.require_tensor(name)?;
        let n = self.known_size(t)?;
        self.read_bytes(t.offset, n)
    }

    fn known_size(&self, t: &TensorInfo) -> Result<u64> {
        t.n_bytes.ok_or_else(|| GgufError::NotDequantizable {
            path: self.path.clone(),
            tensor: t.name.clone(),
            ggml_type: t.ggml_type.name(),
        })
    }

    /// Dequantizes the whole tensor `name` to f32 (row-major in ggml order: ne0 fastest).
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let t = self.require_tensor(name)?;
        self.rows_f32(t, 0..t.n_rows())
    }

    /// Dequantizes rows `rows` (a row is ne0 values; rows count over ne1·ne2·ne3).
    pub fn tensor_rows_f32(&self, name: &str, rows: Range<u64>) -> Result<Vec<f32>> {
        let t = self.require_tensor(name)?;
        self.rows_f32(t, rows)
    }

    /// Dequantizes expert `expert` of a merged 3-D expert tensor `[ne0, ne1, n_experts]`:
    /// the contiguous slab of ne1 rows that belongs to that expert.
    pub fn expert_f32(&self, name: &str, expert: u64) -> Result<Vec<f32>> {
        let t = self.require_tensor(name)?;
        let rows = expert_rows(&self.path, t, expert)?;
        self.rows_f32(t, rows)
    }

    fn rows_f32(&self, t: &TensorInfo, rows: Range<u64>) -> Result<Vec<f32>> {
        let bad = |problem: String| GgufError::BadRequest {
            path: self.path.clone(),
            tensor: t.name.clone(),
            problem,
        };
        if rows.start > rows.end || rows.end > t.n_rows() {
            return Err(bad(format!(
                "rows {}..{} are outside 0..{}",
                rows.start,
                rows.end,
                t.n_rows()
            )));
        }
        if !t.ggml_type.is_dequantizable() {
            return Err(GgufError::NotDequantizable {
                path: self.path.clone(),
                tensor: t.name.clone(),
                ggml_type: t.ggml_type.name(),
            });
        }
        let row_bytes = t
            .row_bytes()
            .ok_or_else(|| bad("row size unknown".into()))?;
        let n_rows = rows.end - rows.start;
        let n_values = n_rows
            .checked_mul(t.row_len())
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| bad("too many values for this machine".into()))?;
        // Both products are bounded by the tensor's size, which was checked against the file.
        let start = t.offset + rows.start * row_bytes;
        let bytes = self.read_bytes(start, n_rows * row_bytes)?;
        let mut out = vec![0f32; n_values];
        quant::dequantize(t.ggml_type, &bytes, &mut out).map_err(|e| bad(e.to_string()))?;
        Ok(out)
    }
}

/// The row range of expert `expert` in a merged 3-D expert tensor.
pub(crate) fn expert_rows(path: &Path, t: &TensorInfo, expert: u64) -> Result<Range<u64>> {
    let bad = |problem: String| GgufError::BadRequest {
        path: path.to_path_buf(),
        tensor: t.name.clone(),
        problem,
    };
    if t.dims.len() != 3 {
        return Err(bad(format!(
            "expert slabs need a 3-D tensor [ne0, ne1, n_experts]; this one has dims {:?}",
            t.dims
        )));
    }
    let n_experts = t.dims[2];
    if expert >= n_experts {
        return Err(bad(format!(
            "expert {expert} is out of range: the tensor holds {n_experts} experts"
        )));
    }
    let rows_per_expert = t.dims[1];
    Ok(expert * rows_per_expert..(expert + 1) * rows_per_expert)
}
