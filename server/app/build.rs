// Link options for this package's binaries (`cli/build.rs` includes this file for `outboard`).
//
// Relative relocations packed (`-z pack-relative-relocs`, DT_RELR): a position-independent
// binary carries a relocation for every pointer in its data — ~1.1 MB of `.rela.dyn` in
// `outboard` — and the loader reads all of it at every start, the sandbox agent's two execs
// included. Packed, it is a few kilobytes. A binary linked so needs glibc 2.36 or later to
// start, so the option is given only when building for this machine and its glibc is 2.36 or
// later (`getconf GNU_LIBC_VERSION`); anywhere else the binaries link as before.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=OUTBOARD_NO_RELR");
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
