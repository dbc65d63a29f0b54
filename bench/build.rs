//! Compiles the probe backend's proto with protox against the project's protos.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", here.join("proto").display());
    let mut compiler = protox::Compiler::new([here.join("proto"), here.join("../proto")])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(["ithaca/bench/v1/bench.proto"])?;
    std::fs::write(
        out_dir.join("bench_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    tonic_prost_build::configure()
        .build_client(false)
        .extern_path(".ithaca.mcp.v1", "::ithaca_proto::mcp::v1")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
