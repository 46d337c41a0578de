//! The header parse: magic, version, counts bounded by the file, metadata, tensor infos
//! validated against the data section (sizes, alignment, bounds, overlaps).

use super::*;

/// What the header parse produces.
pub(super) struct Header {
    pub(super) version: u32,
    pub(super) alignment: u64,
    pub(super) header_len: u64,
    pub(super) data_offset: u64,
    pub(super) metadata: Vec<MetaEntry>,
    pub(super) tensors: Vec<TensorInfo>,
}

/// Bytes to map: the header plus every tensor that is not an engram table.
pub(super) fn resident_len(h: &Header, file_len: u64) -> u64 {
    let tensors_end = h
        .tensors
        .iter()
        .filter(|t| !is_engram_table(&t.name))
        .filter_map(|t| t.byte_range().map(|r| r.end))
        .max()
        .unwrap_or(0);
    tensors_end.max(h.header_len).min(file_len)
}

pub(super) fn parse_header(file: &File, path: &Path, file_len: u64) -> Result<Header> {
    let mut cur = FileCursor::new(file, path, file_len);
    let src: &mut dyn Source = &mut cur;

    let magic: [u8; 4] = if file_len < 4 {
        let n = file_len as usize;
        let found = src.take(file_len, &|| "magic".into())?.to_vec();
        if found.as_slice() != &GGUF_MAGIC[..n] {
            return Err(GgufError::BadMagic {
                path: path.to_path_buf(),
                found,
            });
        }
        return Err(src.truncated(4, &|| "magic".into()));
    } else {
        read_array(src, &|| "magic".into())?
    };
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic {
            path: path.to_path_buf(),
            found: magic.to_vec(),
        });
    }
    let version = read_u32(src, &|| "version".into())?;
    if version != 2 && version != 3 {
        let hint = if version == 1 {
            " (GGUF v1 used 32-bit counts and is not supported)"
        } else if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            " (this looks like a big-endian GGUF, which is not supported)"
        } else {
            ""
        };
        return Err(GgufError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            hint,
        });
    }
    let tensor_count_offset = src.pos();
    let tensor_count = read_u64(src, &|| "tensor count".into())?;
    let kv_count_offset = src.pos();
    let kv_count = read_u64(src, &|| "metadata key/value count".into())?;
    let remaining = src.remaining();
    let max_tensors = remaining / MIN_TENSOR_INFO_BYTES;
    if tensor_count > max_tensors {
        return Err(GgufError::CountTooLarge {
            path: path.to_path_buf(),
            offset: tensor_count_offset,
            field: "tensor count".into(),
            count: tensor_count,
            remaining,
            max_count: max_tensors,
        });
    }
    let after_tensors = remaining - tensor_count * MIN_TENSOR_INFO_BYTES;
    let max_kv = after_tensors / MIN_KV_BYTES;
    if kv_count > max_kv {
        return Err(GgufError::CountTooLarge {
            path: path.to_path_buf(),
            offset: kv_count_offset,
            field: "metadata key/value count".into(),
            count: kv_count,
            remaining: after_tensors,
            max_count: max_kv,
        });
    }

    // Metadata, in file order.
    let mut metadata = Vec::with_capacity(kv_count as usize);
    let mut seen_keys: HashMap<String, u64> = HashMap::with_capacity(kv_count as usize);
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..kv_count {
        let offset = src.pos();
        let key = read_string(src, &|| format!("metadata key #{i}"))?;
        let field = || format!("metadata value {key:?}");
        let vtype = read_value_type(src, &field)?;
        let value = read_value(src, vtype, 0, &field)?;
        if seen_keys.insert(key.clone(), offset).is_some() {
            return Err(GgufError::DuplicateKey {
                path: path.to_path_buf(),
                offset,
                key,
            });
        }
        if key == "general.alignment" {
            alignment = match value {
                MetaValue::U32(a) if a > 0 && a.is_power_of_two() => a.into(),
                MetaValue::U32(a) => {
                    return Err(GgufError::BadAlignment {
                        path: path.to_path_buf(),
                        offset,
                        found: a.to_string(),
                    })
                }
                ref other => {
                    return Err(GgufError::BadAlignment {
                        path: path.to_path_buf(),
                        offset,
                        found: format!("a value of type {}", other.type_description()),
                    })
                }
            };
        }
        metadata.push(MetaEntry { key, value, offset });
    }

    // Tensor infos.
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(tensor_count as usize);
    let mut seen_names: HashMap<String, usize> = HashMap::with_capacity(tensor_count as usize);
    for i in 0..tensor_count {
        let info_offset = src.pos();
        let name = read_string(src, &|| format!("tensor #{i} name"))?;
        let bad = |problem: String| GgufError::BadTensorInfo {
            path: path.to_path_buf(),
            offset: info_offset,
            tensor: name.clone(),
            problem,
        };
        if name.len() >= MAX_TENSOR_NAME_BYTES {
            return Err(bad(format!(
                "name is {} bytes long; ggml allows at most {}",
                name.len(),
                MAX_TENSOR_NAME_BYTES - 1
            )));
        }
        let n_dims = read_u32(src, &|| format!("tensor {name:?} n_dims"))?;
        if n_dims as usize > MAX_DIMS {
            return Err(bad(format!(
                "{n_dims} dimensions; ggml allows at most {MAX_DIMS}"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            let ne = read_u64(src, &|| format!("tensor {name:?} dim {d}"))?;
            if ne > i64::MAX as u64 {
                return Err(bad(format!(
                    "dim {d} is {ne}; ggml dims are signed 64-bit (at most {})",
                    i64::MAX
                )));
            }
            dims.push(ne);
        }
        let type_id = read_u32(src, &|| format!("tensor {name:?} type"))?;
        let ggml_type = GgmlType::from_id(type_id);
        let relative_offset = read_u64(src, &|| format!("tensor {name:?} offset"))?;

        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(format!("dims {dims:?}: element count overflows 63 bits")))?;
        let n_bytes = match ggml_type.block_layout() {
            None => None,
            Some((block_values, block_bytes)) => {
                let ne0 = dims.first().copied().unwrap_or(1);
                if ne0 % block_values as u64 != 0 {
                    return Err(bad(format!(
                        "row length ne0 = {ne0} is not a multiple of the {ggml_type} block size {block_values}"
                    )));
                }
                let n = (n_elements / block_values as u64)
                    .checked_mul(block_bytes as u64)
                    .ok_or_else(|| bad(format!("dims {dims:?}: byte size overflows")))?;
                Some(n)
            }
        };
        if seen_names.insert(name.clone(), tensors.len()).is_some() {
            return Err(GgufError::DuplicateTensor {
                path: path.to_path_buf(),
                name,
                context: format!("; second info at offset {info_offset}"),
            });
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            relative_offset,
            offset: 0,
            n_elements,
            n_bytes,
            info_offset,
        });
    }
    let header_len = src.pos();
    let data_offset = align_up(header_len, alignment).ok_or_else(|| GgufError::Truncated {
        path: path.to_path_buf(),
        offset: header_len,
        field: "data section start (alignment overflows)".into(),
        needed: alignment,
        available: 0,
    })?;

    // Place every tensor and check it against the file.
    for t in &mut tensors {
        if t.relative_offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
                relative_offset: t.relative_offset,
                alignment,
            });
        }
        let start = data_offset.checked_add(t.relative_offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes.unwrap_or(0)));
        match (start, end) {
            (Some(start), Some(end)) if end <= file_len => t.offset = start,
            _ => {
                return Err(GgufError::TensorPastEnd {
                    path: path.to_path_buf(),
                    tensor: t.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len,
                })
            }
        }
    }
    check_overlaps(path, &tensors)?;

    Ok(Header {
        version,
        alignment,
        header_len,
        data_offset,
        metadata,
        tensors,
    })
}

/// Rounds `x` up to a multiple of the power of two `alignment`.
pub(crate) fn align_up(x: u64, alignment: u64) -> Option<u64> {
    x.checked_add(alignment - 1).map(|v| v & !(alignment - 1))
}

/// No two tensors may share a byte. Tensors of unknown size count as empty extents, which
/// still catches one starting inside another.
fn check_overlaps(path: &Path, tensors: &[TensorInfo]) -> Result<()> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    // Larger extents first at equal starts, so an empty or unknown-size tensor that starts
    // where a non-empty one starts is caught.
    order.sort_by_key(|t| (t.offset, std::cmp::Reverse(t.n_bytes.unwrap_or(0))));
    let mut widest: Option<&TensorInfo> = None;
    for t in order {
        if let Some(w) = widest {
            let w_end = w.offset + w.n_bytes.unwrap_or(0);
            if t.offset < w_end {
                return Err(GgufError::TensorOverlap {
                    path: path.to_path_buf(),
                    tensor: t.name.clone(),
                    start: t.offset,
                    end: t.offset + t.n_bytes.unwrap_or(0),
                    other: w.name.clone(),
                    other_start: w.offset,
                    other_end: w_end,
                });
            }
        }
        let t_end = t.offset + t.n_bytes.unwrap_or(0);
        if widest.is_none_or(|w| t_end > w.offset + w.n_bytes.unwrap_or(0)) {
            widest = Some(t);
        }
    }
    Ok(())
}
