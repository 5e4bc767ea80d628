//! Link settings of the root package. The integration tests and benchmarks drive decide
//! in-process, so they link the prebuilt libduckdb (through mesh-decide) and need to find it
//! at run time; the `mesh` binary links none of it. The `mesh` binary's relative relocations
//! are packed (RELR) where the C library reads them: a command starts sooner.

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    if packs_relocations() {
        // About 54,000 relocations the loader read as 1.3 MB of RELA entries become 14 KB:
        // `mesh --version` took about 0.5 ms less (docs/benchmarks.md). Still
        // position-independent.
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
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

/// Whether the binary is built for this machine's GNU C library, 2.36 or newer (the first to
/// read DT_RELR; its binutils write it): a binary with packed relocations does not start on
/// an older one.
fn packs_relocations() -> bool {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || var("HOST") != var("TARGET")
    {
        return false;
    }
    let Ok(out) = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
    else {
        return false;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&out.stdout);
    let mut version = text
        .trim()
        .trim_start_matches("glibc ")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (version.next().unwrap_or(0), version.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}
