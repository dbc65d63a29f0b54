//! Compiles `proto/ithaca/**` with protox (pure Rust, no `protoc`) and
//! generates prost messages and tonic clients and servers. The full descriptor
//! set, imports and source info included, is written next to the generated
//! code so the crate can embed it for reflection.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "ithaca/mcp/v1/options.proto",
    "ithaca/auth/v1/auth.proto",
    "ithaca/session/v1/session.proto",
    "ithaca/skills/v1/skills.proto",
    "ithaca/broker/v1/alerts.proto",
    "ithaca/broker/v1/catalogs.proto",
    "ithaca/broker/v1/filters.proto",
    "ithaca/broker/v1/broker.proto",
    "ithaca/approvals/v1/approvals.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", root.join("ithaca").display());

    let mut compiler = protox::Compiler::new([root.clone()])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(PROTOS)?;
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
