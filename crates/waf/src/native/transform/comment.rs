//! Comment removal for SQL, HTML and shell payloads: `removeComments`,
//! `replaceComments` and `removeCommentsChar`.

/// `/* */` and `<!-- -->` removed; `--` or `#` outside a comment ends the value there; a
/// comment still open at the end becomes one space. libmodsecurity 3.0.9 copies the byte
/// after a comment's close without looking at it (so `/*a*/#b` keeps `#b`), and where the
/// close ends the value that byte is the NUL terminating its copy, which is kept.
pub(super) fn remove_comments(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len();
    // The value with its C terminator, rewritten in place as the C loop does.
    out.extend_from_slice(input);
    out.push(0);
    let buf = out;
    let (mut i, mut j) = (0, 0);
    let mut in_comment = false;
    let starts = |buf: &[u8], i: usize, pat: &[u8]| i + pat.len() <= n && buf[i..].starts_with(pat);
    while i < n {
        if !in_comment {
            if starts(buf, i, b"/*") {
                in_comment = true;
                i += 2;
            } else if starts(buf, i, b"<!--") {
                in_comment = true;
                i += 4;
            } else if starts(buf, i, b"--") || buf[i] == b'#' {
                break;
            } else {
                buf[j] = buf[i];
                i += 1;
                j += 1;
            }
        } else {
            let close = if starts(buf, i, b"*/") {
                2
            } else if starts(buf, i, b"-->") {
                3
            } else {
                i += 1;
                continue;
            };
            in_comment = false;
            i += close;
            buf[j] = buf[i];
            i += 1;
            j += 1;
        }
    }
    if in_comment {
        buf[j] = b' ';
        j += 1;
    }
    buf.truncate(j);
}

/// Each `/* ... */` becomes one space, as does a comment still open at the end.
pub(super) fn replace_comments(input: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    let mut in_comment = false;
    while i < input.len() {
        let rest = &input[i..];
        if !in_comment && rest.starts_with(b"/*") {
            in_comment = true;
            i += 2;
        } else if in_comment && rest.starts_with(b"*/") {
            in_comment = false;
            out.push(b' ');
            i += 2;
        } else {
            if !in_comment {
                out.push(input[i]);
            }
            i += 1;
        }
    }
    if in_comment {
        out.push(b' ');
    }
}

/// The comment markers themselves removed (`/*`, `*/`, `<!--`, `-->`, `--`, `#`), what
/// they enclose kept.
pub(super) fn remove_comments_char(input: &[u8], out: &mut Vec<u8>) {
    const MARKERS: [&[u8]; 6] = [b"/*", b"*/", b"<!--", b"-->", b"--", b"#"];
    let mut i = 0;
    while i < input.len() {
        let rest = &input[i..];
        match MARKERS.iter().find(|m| rest.starts_with(m)) {
            Some(m) => i += m.len(),
            None => {
                out.push(input[i]);
                i += 1;
            }
        }
    }
}
