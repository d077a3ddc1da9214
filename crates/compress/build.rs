//! Bindings to ISA-L's igzip compressor (Debian's libisal-dev, installed by scripts/deps),
//! generated from the system header so that the `isal_zstream` layout is the library's own.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let header = [
        "/usr/include/isa-l/igzip_lib.h",
        "/usr/local/include/isa-l/igzip_lib.h",
    ]
    .into_iter()
    .find(|h| std::path::Path::new(h).exists())
    .unwrap_or_else(|| {
        panic!(
            "ISA-L's igzip_lib.h was not found: install it with `sudo apt-get install libisal-dev` \
                 (scripts/deps does this)"
        )
    });
    println!("cargo:rustc-link-lib=isal");
    let bindings = bindgen::Builder::default()
        .header(header)
        .allowlist_function("isal_deflate_init")
        .allowlist_function("isal_deflate_reset")
        .allowlist_function("isal_deflate")
        .allowlist_function("isal_deflate_set_dict")
        .allowlist_type("isal_zstream")
        .allowlist_var("ISAL_DEF_LVL[0-3]_DEFAULT")
        .allowlist_var("FULL_FLUSH")
        .allowlist_var("COMP_OK")
        .allowlist_var("IGZIP_DEFLATE")
        .allowlist_var("ZSTATE_.*")
        .layout_tests(false)
        .generate()
        .expect("generating ISA-L bindings");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("isal.rs"))
        .expect("writing ISA-L bindings");
}
