//! The integration tests and benchmarks drive decide in-process, so they link the prebuilt
//! libduckdb (through mesh-decide) and need to find it at run time; the `mesh` binary links
//! none of it and gets nothing from here.

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let Some(dir) = std::env::var_os("DUCKDB_LIB_DIR") else {
        return;
    };
    // Absent (a `cargo install` of the command line, before bin/deps.sh): nothing to point at.
    let Ok(dir) = std::path::Path::new(&dir).canonicalize() else {
        return;
    };
    for kind in ["tests", "benches"] {
        println!("cargo:rustc-link-arg-{kind}=-Wl,-rpath,{}", dir.display());
    }
}
