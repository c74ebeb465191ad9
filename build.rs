//! Links `ocx-cgi`, the program Fossil starts for every request of the
//! page, as one static file (HISTORY 480): the dynamic loader's work at
//! each start (finding, mapping and relocating the C library and the
//! unwinder) was a third of what OCX added to a page. Only that program is
//! linked so; `ocx` stays as it is.
//!
//! Rust links a program statically only when the whole build is told to
//! (`-C target-feature=+crt-static`), which would take `ocx` and the
//! build's own macros with it. So the libraries Rust names for this one
//! program (`-lc`, `-lgcc_s` and the rest) are answered from a directory
//! of its own, where each is a linker script naming the C library's and
//! the compiler's static archives, and the program is linked as a static
//! position-independent executable. Where those archives are missing (or
//! the target is not GNU/Linux), nothing is changed and the program is
//! linked as any other.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a build script is its own program: it reads Cargo's environment, asks the C compiler, and speaks to Cargo on its output

use std::path::{Path, PathBuf};

/// The libraries Rust's standard library names on GNU/Linux.
const NAMED: [&str; 7] = ["gcc_s", "util", "rt", "pthread", "m", "dl", "c"];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CC");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    let Some(archives) = ["libc.a", "libgcc_eh.a", "libgcc.a"]
        .iter()
        .map(|a| archive(a))
        .collect::<Option<Vec<PathBuf>>>()
    else {
        println!(
            "cargo::warning=the C library's static archives were not found: ocx-cgi is linked dynamically"
        );
        return;
    };
    let dir = Path::new(&var("OUT_DIR")).join("static");
    let script = format!(
        "GROUP ( {} )\n",
        archives
            .iter()
            .map(|a| a.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        NAMED
            .iter()
            .try_for_each(|n| std::fs::write(dir.join(format!("lib{n}.a")), &script))
    });
    if written.is_err() {
        println!(
            "cargo::warning=could not write the static link's scripts: ocx-cgi is linked dynamically"
        );
        return;
    }
    println!("cargo::rustc-link-arg-bin=ocx-cgi=-L{}", dir.display());
    println!("cargo::rustc-link-arg-bin=ocx-cgi=-static-pie");
}

/// Where the C compiler finds `name`, when it does.
fn archive(name: &str) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(cc)
        .arg(format!("-print-file-name={name}"))
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_absolute() && path.is_file())
        .then(|| path.canonicalize().unwrap_or(path))
}
