//! `.npz` reader: a zip of `.npy` members, stored or deflated (ZIP64 included). Every size the
//! archive claims is bounded by bytes that really are in the file before anything is read: a
//! stored member's size must equal its compressed size, a deflated member may not claim more
//! than deflate can expand (`MAX_DEFLATE_RATIO`), and each member's `.npy` header must account
//! for exactly the member's bytes. Members are decompressed only when their values are read.

use super::error::ImportError;
use super::npy::{header_extent, parse_header, PREAMBLE_BYTES};
use super::tensor::{Bytes, DumpTensor};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Deflate's largest possible expansion (a 258-byte match per 2 bits of output, about 1032:1);
/// a member claiming more is lying about its size.
pub const MAX_DEFLATE_RATIO: u64 = 1032;

fn open_archive(path: &Path) -> Result<(zip::ZipArchive<File>, u64), ImportError> {
    let file = File::open(path).map_err(|e| ImportError::io(path, "open", e))?;
    let len = file
        .metadata()
        .map_err(|e| ImportError::io(path, "stat", e))?
        .len();
    let archive = zip::ZipArchive::new(file)
        .map_err(|e| ImportError::format(path, "zip archive", e.to_string()))?;
    Ok((archive, len))
}

/// Check a member's claimed sizes against the archive and return its uncompressed size.
fn member_size(
    path: &Path,
    member: &zip::read::ZipFile<'_, File>,
    archive_len: u64,
) -> Result<u64, ImportError> {
    let what = format!("member `{}`", member.name());
    let size = member.size();
    let packed = member.compressed_size();
    if packed > archive_len {
        return Err(ImportError::format(
            path,
            what,
            format!("claims {packed} compressed bytes in a {archive_len}-byte archive"),
        ));
    }
    match member.compression() {
        zip::CompressionMethod::Stored if size != packed => Err(ImportError::format(
            path,
            what,
            format!("stored member claims {size} bytes but holds {packed}"),
        )),
        zip::CompressionMethod::Stored => Ok(size),
        zip::CompressionMethod::Deflated => {
            if size > packed.saturating_mul(MAX_DEFLATE_RATIO).saturating_add(64) {
                return Err(ImportError::format(
                    path,
                    what,
                    format!("claims {size} bytes from {packed} deflated bytes, more than deflate can expand"),
                ));
            }
            Ok(size)
        }
        other => Err(ImportError::format(
            path,
            what,
            format!("compression {other:?} is not supported (expected stored or deflated)"),
        )),
    }
}

/// Bytes searched from the end for the end-of-central-directory record (its fixed 22 bytes
/// plus the longest comment).
const EOCD_SEARCH_BYTES: u64 = 22 + 65_535;

/// The entry count the central directory itself declares (the zip reader indexes members by
/// name and would silently collapse two members of one name).
fn declared_entries(path: &Path) -> Result<u64, ImportError> {
    use std::io::{Seek, SeekFrom};
    let bad = |msg: &str| ImportError::format(path, "zip archive", msg.to_string());
    let mut f = File::open(path).map_err(|e| ImportError::io(path, "open", e))?;
    let len = f
        .metadata()
        .map_err(|e| ImportError::io(path, "stat", e))?
        .len();
    let start = len.saturating_sub(EOCD_SEARCH_BYTES);
    f.seek(SeekFrom::Start(start))
        .map_err(|e| ImportError::io(path, "seek", e))?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail)
        .map_err(|e| ImportError::io(path, "read", e))?;
    let eocd = tail
        .windows(4)
        .rposition(|w| w == b"PK\x05\x06")
        .filter(|&at| at + 22 <= tail.len())
        .ok_or_else(|| bad("no end-of-central-directory record"))?;
    let total = u16::from_le_bytes([tail[eocd + 10], tail[eocd + 11]]);
    if total != u16::MAX {
        return Ok(u64::from(total));
    }
    // ZIP64: the locator just before the record points at the ZIP64 end record.
    let loc = eocd
        .checked_sub(20)
        .filter(|&l| &tail[l..l + 4] == b"PK\x06\x07")
        .ok_or_else(|| bad("ZIP64 entry count without a ZIP64 locator"))?;
    let mut off = [0u8; 8];
    off.copy_from_slice(&tail[loc + 8..loc + 16]);
    let rec = u64::from_le_bytes(off);
    if rec.checked_add(56).is_none_or(|e| e > len) {
        return Err(bad("the ZIP64 end record lies outside the file"));
    }
    f.seek(SeekFrom::Start(rec))
        .map_err(|e| ImportError::io(path, "seek", e))?;
    let mut r = [0u8; 56];
    f.read_exact(&mut r)
        .map_err(|e| ImportError::io(path, "read", e))?;
    if &r[..4] != b"PK\x06\x06" {
        return Err(bad("the ZIP64 locator points at no ZIP64 end record"));
    }
    off.copy_from_slice(&r[32..40]);
    Ok(u64::from_le_bytes(off))
}

/// Read the tensor index of an `.npz`: one tensor per `NAME.npy` member.
pub fn read(path: &Path) -> Result<Vec<DumpTensor>, ImportError> {
    let (mut archive, archive_len) = open_archive(path)?;
    let declared = declared_entries(path)?;
    if declared != archive.len() as u64 {
        return Err(ImportError::format(
            path,
            "zip archive",
            format!(
                "the central directory lists {declared} members but {} distinct names: a member name appears twice",
                archive.len()
            ),
        ));
    }
    let mut out: Vec<DumpTensor> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for index in 0..archive.len() {
        let mut member = archive
            .by_index(index)
            .map_err(|e| ImportError::format(path, format!("member {index}"), e.to_string()))?;
        if member.is_dir() {
            continue;
        }
        let member_name = member.name().to_string();
        let Some(tensor) = member_name.strip_suffix(".npy") else {
            return Err(ImportError::format(
                path,
                format!("member `{member_name}`"),
                "not a .npy member (an .npz holds only NAME.npy files)",
            ));
        };
        let tensor = tensor.to_string();
        if !names.insert(tensor.clone()) {
            return Err(ImportError::Duplicate {
                path: path.to_path_buf(),
                tensor,
            });
        }
        let size = member_size(path, &member, archive_len)?;
        let what = format!("member `{member_name}`");
        let mut head = vec![0u8; PREAMBLE_BYTES.min(size as usize)];
        member.read_exact(&mut head).map_err(|e| {
            ImportError::format(
                path,
                what.clone(),
                format!("cannot read the .npy preamble: {e}"),
            )
        })?;
        let extent = header_extent(path, &what, &head)?;
        if extent as u64 > size {
            return Err(ImportError::format(
                path,
                what,
                format!("the .npy header claims {extent} bytes of a {size}-byte member"),
            ));
        }
        let mut header = head;
        if extent > header.len() {
            let mut rest = vec![0u8; extent - header.len()];
            member.read_exact(&mut rest).map_err(|e| {
                ImportError::format(
                    path,
                    what.clone(),
                    format!("cannot read the .npy header: {e}"),
                )
            })?;
            header.extend_from_slice(&rest);
        }
        header.truncate(extent);
        let h = parse_header(path, &what, &header, size - extent as u64)?;
        let bytes = Bytes::ZipMember {
            archive: path.to_path_buf(),
            index,
            skip: extent as u64,
            len: h.data_len,
        };
        out.push(h.tensor(tensor, path, bytes));
    }
    Ok(out)
}

/// The data bytes of member `index` (after `skip` header bytes), exactly `len` of them.
pub(crate) fn read_member_data(
    path: &Path,
    index: usize,
    skip: u64,
    len: usize,
) -> Result<Vec<u8>, ImportError> {
    let (mut archive, archive_len) = open_archive(path)?;
    let mut member = archive
        .by_index(index)
        .map_err(|e| ImportError::format(path, format!("member {index}"), e.to_string()))?;
    let what = format!("member `{}`", member.name());
    // Re-check: the archive may have changed since it was indexed.
    let size = member_size(path, &member, archive_len)?;
    if skip.checked_add(len as u64) != Some(size) {
        return Err(ImportError::format(
            path,
            what,
            "changed since it was opened",
        ));
    }
    std::io::copy(&mut (&mut member).take(skip), &mut std::io::sink()).map_err(|e| {
        ImportError::format(path, what.clone(), format!("cannot skip the header: {e}"))
    })?;
    // Grow with the bytes that really arrive (bounded above by `len`), never by the claim.
    let mut data = Vec::new();
    (&mut member)
        .take(len as u64)
        .read_to_end(&mut data)
        .map_err(|e| ImportError::format(path, what.clone(), format!("cannot decompress: {e}")))?;
    if data.len() != len {
        return Err(ImportError::format(
            path,
            what,
            format!("truncated: {} of {len} data bytes", data.len()),
        ));
    }
    Ok(data)
}

/// Write `members` (name, `.npy` bytes) as an `.npz`, deflated or stored.
pub fn write(path: &Path, members: &[(String, Vec<u8>)], deflate: bool) -> Result<(), ImportError> {
    use std::io::Write;
    let file = File::create(path).map_err(|e| ImportError::io(path, "create", e))?;
    let mut zw = zip::ZipWriter::new(file);
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let opts = zip::write::SimpleFileOptions::default().compression_method(method);
    for (name, bytes) in members {
        zw.start_file(format!("{name}.npy"), opts)
            .map_err(|e| ImportError::format(path, format!("member `{name}`"), e.to_string()))?;
        zw.write_all(bytes)
            .map_err(|e| ImportError::io(path, "write", e))?;
    }
    zw.finish()
        .map_err(|e| ImportError::format(path, "zip archive", e.to_string()))?;
    Ok(())
}
