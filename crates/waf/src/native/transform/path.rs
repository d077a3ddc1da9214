//! `normalizePath` and `normalizePathWin`: `.` and `..` segments resolved and repeated
//! slashes folded, by libmodsecurity 3.0.9's in-place algorithm (ModSecurity 2's), whose
//! corner cases (a relative path's leading `..`, a `..` that would climb above the root,
//! the trailing slash kept only where the value had one) decide what rules see.

/// `win`: backslashes count as slashes and are written as `/`.
pub(super) fn normalize_path(input: &[u8], win: bool, out: &mut Vec<u8>) {
    if input.is_empty() {
        return;
    }
    out.extend_from_slice(input);
    let buf = out;
    let is_slash = |b: u8| b == b'/' || (win && b == b'\\');
    let end = input.len() - 1;
    let relative = !is_slash(buf[0]);
    let trailing = is_slash(buf[end]);
    // `dst` may step below zero (the C pointer arithmetic does) before being clamped.
    let (mut src, mut dst): (usize, isize) = (0, 0);
    let mut hit_root = false;
    let mut done = false;
    let at = |buf: &[u8], d: isize| usize::try_from(d).ok().map(|d| buf[d]);
    while !done && src <= end && dst <= end as isize {
        if win {
            if buf[src] == b'\\' {
                buf[src] = b'/';
            }
            if src < end && buf[src + 1] == b'\\' {
                buf[src + 1] = b'/';
            }
        }
        let mut copy = true;
        // The C code's "normalize the path segment" block, left early by its gotos.
        'segment: {
            if src == end {
                done = true;
            } else if buf[src + 1] != b'/' {
                break 'segment;
            }
            if src != end && buf[src] == b'/' {
                break 'segment;
            }
            if buf[src] != b'.' {
                if dst > 0 {
                    hit_root = false;
                }
                break 'segment;
            }
            if dst > 0 && at(buf, dst - 1) == Some(b'.') {
                // A back-reference.
                if relative && (hit_root || dst - 2 <= 0) {
                    hit_root = true;
                    break 'segment;
                }
                dst -= 3;
                while dst > 0 && at(buf, dst) != Some(b'/') {
                    dst -= 1;
                }
                if dst <= 0 {
                    hit_root = true;
                    dst = 0;
                    if !relative && src == end {
                        dst += 1;
                    }
                }
                copy = !done;
                if copy {
                    src += 1;
                }
            } else if dst == 0 {
                copy = !done;
                if copy {
                    src += 1;
                }
            } else if at(buf, dst - 1) == Some(b'/') {
                copy = !done;
                if copy {
                    dst -= 1;
                    src += 1;
                }
            }
        }
        if copy {
            copy_byte(buf, win, relative, end, &mut src, &mut dst);
        }
    }
    let mut len = dst.max(0) as usize;
    if !trailing && len > 0 && buf[len - 1] == b'/' {
        len -= 1;
    }
    buf.truncate(len);
}

/// The C code's `copy:` label: repeated slashes skipped to the last, a relative path's
/// leading slash dropped, then one byte copied down.
fn copy_byte(
    buf: &mut [u8],
    win: bool,
    relative: bool,
    end: usize,
    src: &mut usize,
    dst: &mut isize,
) {
    if buf[*src] == b'/' {
        while *src < end && (buf[*src + 1] == b'/' || (win && buf[*src + 1] == b'\\')) {
            *src += 1;
        }
        if relative && *dst == 0 {
            *src += 1;
            return;
        }
    }
    buf[*dst as usize] = buf[*src];
    *dst += 1;
    *src += 1;
}
