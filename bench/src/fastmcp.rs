//! The Python anchor: FastMCP under one uvicorn worker, installed into
//! `bench/.venv` from `bench/fastmcp/requirements.txt` on first use.

use crate::procs::Proc;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The venv's Python, creating the venv and installing the pinned
/// requirements when they are missing or changed.
pub fn ensure_venv(python: &str) -> anyhow::Result<PathBuf> {
    let venv = dir().join(".venv");
    let requirements = dir().join("fastmcp/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let marker = venv.join("ithaca-bench-requirements.txt");
    let bin = venv.join("bin/python");
    if bin.exists() && std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(bin);
    }
    eprintln!(
        "ithaca-bench: installing FastMCP into {} (once)",
        venv.display()
    );
    let status = Command::new(python)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .with_context(|| format!("running {python} -m venv"))?;
    if !status.success() {
        bail!("{python} -m venv {} failed", venv.display());
    }
    let status = Command::new(&bin)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(&requirements)
        .status()
        .context("running pip")?;
    if !status.success() {
        bail!("pip install -r {} failed", requirements.display());
    }
    std::fs::write(&marker, wanted)?;
    Ok(bin)
}

/// The installed FastMCP version.
pub fn version(python: &Path) -> String {
    Command::new(python)
        .args(["-c", "import fastmcp; print(fastmcp.__version__)"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Start the server; returns it and its `host:port`.
pub fn start(python: &Path, token: &str) -> anyhow::Result<(Proc, String)> {
    let mut cmd = Command::new(python);
    cmd.arg(dir().join("fastmcp/server.py"))
        .env("BENCH_TOKEN", token)
        .env("PYTHONUNBUFFERED", "1");
    let mut proc = Proc::spawn("fastmcp", cmd)?;
    let addr = proc.listening("fastmcp listening on")?;
    Ok((proc, addr))
}
