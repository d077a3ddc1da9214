//! Builds libinjection (`libinjection/`, the copy libmodsecurity 3.0.9 bundles) for the
//! native engine's `@detectSQLi` and `@detectXSS`.
//!
//! Every external symbol is renamed with a `sluice_` prefix: libmodsecurity exports its own
//! copy under the library's names, and a definition in our binary would otherwise take the
//! place of libmodsecurity's (ELF interposition), so the differential tests would compare
//! the copy with itself.

/// libinjection's external functions (`nm` on the three objects).
const SYMBOLS: &[&str] = &[
    "libinjection_h5_init",
    "libinjection_h5_next",
    "libinjection_is_sqli",
    "libinjection_is_xss",
    "libinjection_sqli",
    "libinjection_sqli_blacklist",
    "libinjection_sqli_callback",
    "libinjection_sqli_check_fingerprint",
    "libinjection_sqli_fingerprint",
    "libinjection_sqli_fold",
    "libinjection_sqli_get_token",
    "libinjection_sqli_init",
    "libinjection_sqli_lookup_word",
    "libinjection_sqli_not_whitelist",
    "libinjection_sqli_reset",
    "libinjection_sqli_tokenize",
    "libinjection_version",
    "libinjection_xss",
];

fn main() {
    println!("cargo:rerun-if-changed=libinjection");
    let mut build = cc::Build::new();
    build
        .files([
            "libinjection/libinjection_html5.c",
            "libinjection/libinjection_sqli.c",
            "libinjection/libinjection_xss.c",
        ])
        .include("libinjection")
        .warnings(false);
    for symbol in SYMBOLS {
        build.define(symbol, format!("sluice_{symbol}").as_str());
    }
    build.compile("sluice_libinjection");
}
