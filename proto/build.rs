//! Compiles `proto/ithaca/**` with protox (pure Rust, no `protoc`) and
//! generates prost messages and tonic clients and servers. The full descriptor
//! set, imports and source info included, is written next to the generated
//! code so the crate can embed it for reflection.
//!
//! Every `.proto` under `ithaca/` is compiled, found by walking the folder:
//! a new contract file needs no line here. Files are opened, and so stored
//! in the descriptor set, in path order, except that a package's namesake
//! file (`broker/v1/broker.proto`) leads its folder ([`order`]).
//!
//! Several checkouts (git
//! worktrees) may share one Cargo target directory, where this script's
//! binary and its output are shared too (Cargo's hash of a path package
//! does not include its path). So the script lists nothing of its own
//! checkout, and it reruns when Cargo is started from another folder
//! (`PWD`), not only when a file it watched changed: otherwise one
//! checkout would build against the code generated from another's protos.

use std::path::{Path, PathBuf};

/// Every `.proto` file under `dir`, relative to `root`, sorted.
fn protos(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            protos(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto")
            && let Ok(relative) = path.strip_prefix(root)
        {
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

/// Where a file goes among the others: by folder, the package's namesake
/// file (`ithaca/broker/v1/broker.proto`) first, then by name. The edge
/// lists tools and resources in descriptor order, so the services split
/// out of a package's first one (the broker's alerts and catalogs) come
/// after it, as their RPCs did when they were its own.
fn order(file: &str) -> (&str, bool, &str) {
    let (folder, name) = file.rsplit_once('/').unwrap_or(("", file));
    let package = folder.rsplit('/').nth(1).unwrap_or_default();
    let namesake = name.strip_suffix(".proto") == Some(package);
    (folder, !namesake, name)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", root.join("ithaca").display());
    println!("cargo:rerun-if-env-changed=PWD");
    let mut files = Vec::new();
    protos(&root, &root.join("ithaca"), &mut files)?;
    files.sort_by(|a, b| order(a).cmp(&order(b)));

    let mut compiler = protox::Compiler::new([root.clone()])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(&files)?;
    std::fs::write(
        out_dir.join("ithaca_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    // Well-known types map to prost-types (prost's default extern path), so
    // no module is generated for them; the generator still needs their
    // descriptors to resolve field types.
    let fds = compiler.file_descriptor_set();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
