//! Build script: the Windows executable's main thread gets a 16 MiB stack (the linker's default
//! is 1 or 2 MiB). The redactor's walk of the deepest line a rollout may hold (JSON 128 deep in
//! strings twelve deep) needs up to 2 MiB in a release build and 4 MiB in a debug one, and
//! overflowed the default at every restart (docs/capture.md). Linux and macOS give a main
//! thread 8 MiB.

fn main() {
    const STACK: u32 = 16 << 20;
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "windows" {
        if env == "msvc" {
            println!("cargo:rustc-link-arg-bins=/STACK:{STACK}");
        } else {
            println!("cargo:rustc-link-arg-bins=-Wl,--stack,{STACK}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
