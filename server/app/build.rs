// Link options for this package's binaries (`cli/build.rs` includes this file for `outboard`).
//
// Relative relocations packed (`-z pack-relative-relocs`, DT_RELR): a position-independent
// binary carries a relocation for every pointer in its data — ~1.1 MB of `.rela.dyn` in
// `outboard` — and the loader reads all of it at every start, the sandbox agent's two execs
// included. Packed, it is a few kilobytes. A binary linked so needs glibc 2.36 or later to
// start, so the option is given only when building for this machine and its glibc is 2.36 or
// later (`getconf GNU_LIBC_VERSION`); anywhere else the binaries link as before.
//
// Hot code together (`OUTBOARD_SYMBOL_ORDER=FILE`, which `scripts/build-dist.sh` sets): the
// functions a run touches, listed in FILE, are laid out first and side by side, so the pages a
// process maps are the ones it runs (see that script). The file names symbols of one build (one
// rustc, one Cargo.lock): names it lists that a build lacks are passed over.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=OUTBOARD_NO_RELR");
    println!("cargo:rerun-if-env-changed=OUTBOARD_SYMBOL_ORDER");
    symbol_order();
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let native = var("TARGET") == var("HOST");
    let linux_gnu = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if !native || !linux_gnu || std::env::var_os("OUTBOARD_NO_RELR").is_some() {
        return;
    }
    if glibc_version().is_some_and(|v| v >= (2, 36)) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Lays the functions named in `$OUTBOARD_SYMBOL_ORDER` out first, in its order. Only lld reads
/// such a file: rustc links x86_64 Linux with it unless told of another linker.
fn symbol_order() {
    let Some(file) = std::env::var_os("OUTBOARD_SYMBOL_ORDER").filter(|f| !f.is_empty()) else {
        return;
    };
    // The linker runs elsewhere: an absolute path.
    let Ok(path) = std::fs::canonicalize(&file) else {
        println!("cargo:warning=OUTBOARD_SYMBOL_ORDER: no such file: {}", file.to_string_lossy());
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let other_linker = std::env::var_os("RUSTC_LINKER").is_some()
        || var("CARGO_ENCODED_RUSTFLAGS").contains("link");
    if var("TARGET") != "x86_64-unknown-linux-gnu" || other_linker {
        println!(
            "cargo:warning=OUTBOARD_SYMBOL_ORDER is for rustc's own lld on x86_64 Linux: not used"
        );
        return;
    }
    println!("cargo:rerun-if-changed={}", path.display());
    println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", path.display());
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

/// This machine's glibc, `(major, minor)`.
fn glibc_version() -> Option<(u32, u32)> {
    let out = Command::new("getconf").arg("GNU_LIBC_VERSION").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    // "glibc 2.36"
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}
