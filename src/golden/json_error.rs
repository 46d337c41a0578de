//! Parse-error messages of the golden loader: the position (line, column, byte), the JSON path
//! at that position, and a plain word on NaN, Infinity and truncation.

/// Longest JSON path quoted in a parse error (a deeply nested hostile file has a long one).
const MAX_PATH_CHARS: usize = 160;

pub(super) fn json_error(text: &str, err: &serde_json::Error) -> String {
    let line = err.line();
    let column = err.column();
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let byte = (line_start + column.saturating_sub(1)).min(text.len());
    let at = format!("line {line}, column {column} (byte {byte})");
    // serde_json's Display repeats the position; say it once.
    let full = err.to_string();
    let what = full
        .strip_suffix(&format!(" at line {line} column {column}"))
        .unwrap_or(&full)
        .to_string();
    let mut path = json_path_at(text, byte);
    if path.len() > MAX_PATH_CHARS {
        let cut = (0..=MAX_PATH_CHARS)
            .rev()
            .find(|&i| path.is_char_boundary(i))
            .unwrap_or(0);
        path.truncate(cut);
        path.push('…');
    }
    let inside = if path.is_empty() {
        String::new()
    } else {
        format!(", in {path}")
    };
    if let Some(literal) = non_finite_literal_near(text, byte) {
        return format!(
            "not valid JSON at {at}{inside}: `{literal}` is not a JSON number (Python's json writes \
             it for a non-finite float; a golden must hold finite numbers only)"
        );
    }
    match err.classify() {
        serde_json::error::Category::Eof => {
            format!("file is truncated: JSON ends early at {at}{inside}: {what}")
        }
        _ => format!("not valid JSON at {at}{inside}: {what}"),
    }
}

/// `NaN`, `Infinity` or `-Infinity` if one of them spans (or ends just before) byte `at`.
fn non_finite_literal_near(text: &str, at: usize) -> Option<&'static str> {
    let bytes = text.as_bytes();
    let lo = at.saturating_sub(10);
    for start in lo..=at.min(bytes.len()) {
        for literal in ["-Infinity", "Infinity", "NaN"] {
            let end = start + literal.len();
            if end <= bytes.len() && &bytes[start..end] == literal.as_bytes() && end + 1 >= at {
                return Some(literal);
            }
        }
    }
    None
}

/// The object keys / list indices that enclose byte `at`, as `a / b / c[3]`, from a light scan
/// that tracks only brackets, strings, commas and colons (it never fails).
fn json_path_at(text: &str, at: usize) -> String {
    enum Frame {
        Obj {
            key: Option<String>,
            expect_key: bool,
        },
        Arr {
            index: usize,
        },
    }
    let bytes = text.as_bytes();
    let end = at.min(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                if let Some(Frame::Obj {
                    key,
                    expect_key: expect_key @ true,
                }) = stack.last_mut()
                {
                    *key = Some(
                        String::from_utf8_lossy(&bytes[start..j.min(bytes.len())]).into_owned(),
                    );
                    *expect_key = false;
                }
                i = j + 1;
                continue;
            }
            b'{' => stack.push(Frame::Obj {
                key: None,
                expect_key: true,
            }),
            b'[' => stack.push(Frame::Arr { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Arr { index }) => *index += 1,
                Some(Frame::Obj { expect_key, .. }) => *expect_key = true,
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    let mut out = String::new();
    for frame in &stack {
        match frame {
            Frame::Obj { key: Some(key), .. } => {
                if !out.is_empty() {
                    out.push_str(" / ");
                }
                out.push_str(key);
            }
            Frame::Obj { key: None, .. } => {}
            Frame::Arr { index } => out.push_str(&format!("[{index}]")),
        }
    }
    out
}
