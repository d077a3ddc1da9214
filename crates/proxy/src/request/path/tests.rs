use super::*;

fn policy(merge_slashes: bool, escaped_slashes: EscapedSlashes) -> PathPolicy {
    PathPolicy {
        merge_slashes,
        escaped_slashes,
    }
}

fn norm(path: &str) -> Result<String, PathRefusal> {
    norm_with(path, &PathPolicy::default())
}

fn norm_with(path: &str, p: &PathPolicy) -> Result<String, PathRefusal> {
    normalize(path, p).map(|n| n.unwrap_or_else(|| path.to_owned()))
}

#[test]
fn a_normal_path_is_left_alone_without_allocating() {
    for p in [
        "/", "/admin/", "/a/b.c/d", "/a%20b", "/x/..y", "/x/.y/z.", "*",
    ] {
        // `%20` is a `%`, so it takes the slow path, but comes back unchanged: `None`.
        assert_eq!(normalize(p, &PathPolicy::default()), Ok(None), "{p}");
    }
}

#[test]
fn the_spellings_of_one_path_become_one() {
    for p in [
        "/admin/secret",
        "/admin/./secret",
        "/admin//secret",
        "//admin/secret",
        "/x/../admin/secret",
        "/admin/%73ecret",
        "/%61dmin/secret",
        "/admin/%2e/secret",
        "/admin/x/%2E%2E/secret",
        "/admin/x/.%2e/secret",
        "/./admin/secret",
        "/admin/./x/../secret",
    ] {
        assert_eq!(norm(p).as_deref(), Ok("/admin/secret"), "{p}");
    }
}

#[test]
fn dot_segments_at_the_end_name_a_directory() {
    assert_eq!(norm("/a/b/..").as_deref(), Ok("/a/"));
    assert_eq!(norm("/a/.").as_deref(), Ok("/a/"));
    assert_eq!(norm("/a/..").as_deref(), Ok("/"));
    assert_eq!(norm("/.").as_deref(), Ok("/"));
    assert_eq!(norm("/a/b/../").as_deref(), Ok("/a/"));
}

#[test]
fn climbing_above_the_root_is_refused() {
    for p in [
        "/..",
        "/../admin",
        "/a/../..",
        "/%2e%2e/x",
        "/a/%2E./../x",
        "/./../x",
    ] {
        assert_eq!(norm(p), Err(PathRefusal::AboveRoot), "{p}");
    }
}

#[test]
fn other_encodings_are_kept_upper_cased() {
    assert_eq!(norm("/a%2fb"), Err(PathRefusal::EscapedSlash));
    let keep = policy(true, EscapedSlashes::Keep);
    assert_eq!(norm_with("/a%2fb", &keep).as_deref(), Ok("/a%2Fb"));
    assert_eq!(norm("/a%3fb%c3%a9").as_deref(), Ok("/a%3Fb%C3%A9"));
    // A percent sign stays encoded: no double decoding of `%2561`.
    assert_eq!(norm("/%2561").as_deref(), Ok("/%2561"));
    assert_eq!(norm("/%7e%7Euser").as_deref(), Ok("/~~user"));
}

#[test]
fn broken_encodings_are_refused() {
    for p in ["/a%", "/a%4", "/a%zz", "/a%4g/b", "/%%41"] {
        assert_eq!(norm(p), Err(PathRefusal::BadEncoding), "{p}");
    }
}

#[test]
fn encoded_separators_follow_the_listener() {
    let reject = PathPolicy::default();
    let keep = policy(true, EscapedSlashes::Keep);
    let decode = policy(true, EscapedSlashes::Decode);
    for p in ["/admin%2Fsecret", "/admin%5csecret", "/admin%00"] {
        assert_eq!(norm_with(p, &reject), Err(PathRefusal::EscapedSlash), "{p}");
    }
    assert_eq!(
        norm_with("/x%2F..%2Fadmin", &keep).as_deref(),
        Ok("/x%2F..%2Fadmin")
    );
    assert_eq!(
        norm_with("/x%2F..%2Fadmin", &decode).as_deref(),
        Ok("/admin")
    );
    assert_eq!(
        norm_with("/admin%2F%2Fs", &decode).as_deref(),
        Ok("/admin/s")
    );
    assert_eq!(norm_with("/a%5Cb", &decode).as_deref(), Ok("/a\\b"));
    assert_eq!(norm_with("/a%00", &keep).as_deref(), Ok("/a%00"));
    assert_eq!(
        norm_with("/a%00", &decode),
        Err(PathRefusal::EscapedSlash),
        "a NUL is never decoded"
    );
}

#[test]
fn slashes_merge_only_when_asked() {
    let keep_slashes = policy(false, EscapedSlashes::Reject);
    assert_eq!(norm_with("/a//b", &keep_slashes).as_deref(), Ok("/a//b"));
    assert_eq!(norm_with("/a//.", &keep_slashes).as_deref(), Ok("/a//"));
    assert_eq!(norm_with("/a//..", &keep_slashes).as_deref(), Ok("/a/"));
    assert_eq!(norm("/a//b///").as_deref(), Ok("/a/b/"));
    assert_eq!(norm("//").as_deref(), Ok("/"));
}

#[test]
fn only_origin_form_is_accepted() {
    assert_eq!(norm("admin"), Err(PathRefusal::NotAbsolute));
    assert_eq!(norm(""), Err(PathRefusal::NotAbsolute));
}

/// Every spelling a small generator makes of every path of a small corpus, under every
/// policy, keeps the invariants the fuzz target checks (`check_invariants`).
#[test]
fn generated_spellings_keep_the_invariants() {
    let corpus = [
        "/",
        "/a",
        "/admin/",
        "/admin/secret",
        "/a/b/c/",
        "/a.b/..c/~d",
        "/%C3%A9t%C3%A9",
        "/a%2Fb",
        "/a%5Cb",
        "/x/%3F",
    ];
    let mut n = 0;
    for base in corpus {
        for seed in 0..64u8 {
            let bytes: Vec<u8> = (0..24u8)
                .map(|i| seed.wrapping_mul(31).wrapping_add(i.wrapping_mul(seed | 1)))
                .collect();
            check_invariants(base, &bytes);
            n += 1;
        }
    }
    assert_eq!(n, 640);
}
