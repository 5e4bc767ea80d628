//! Links the prebuilt libduckdb so the binary finds it at run time, and names the DuckLake and
//! postgres_scanner extensions.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let Some(dir) = std::env::var_os("DUCKDB_LIB_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    for (file, var) in [
        ("ducklake.duckdb_extension", "MESH_DUCKLAKE_EXTENSION"),
        (
            "postgres_scanner.duckdb_extension",
            "MESH_POSTGRES_EXTENSION",
        ),
    ] {
        let extension = dir.join(file);
        println!("cargo:rerun-if-changed={}", extension.display());
        if let Ok(extension) = extension.canonicalize() {
            println!("cargo:rustc-env={var}={}", extension.display());
        }
    }
    // A bundled build compiles DuckDB into the binary: nothing to link.
    if std::env::var_os("CARGO_FEATURE_BUNDLED").is_some() {
        return;
    }
    let lib = dir.join("libduckdb.so");
    println!("cargo:rerun-if-changed={}", lib.display());
    if !lib.exists() {
        panic!(
            "libduckdb not found at {}: run bin/test or bin/up (they fetch DuckDB 1.5.5), \
             set DUCKDB_LIB_DIR, or build with --features bundled",
            lib.display()
        );
    }
    // An absolute rpath: `mesh` and the test binaries load this library without LD_LIBRARY_PATH.
    let dir = dir.canonicalize().expect("DUCKDB_LIB_DIR resolves");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}
