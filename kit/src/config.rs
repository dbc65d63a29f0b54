//! Flags every service process takes, each with an environment fall-back.

use crate::principal::{InternalKey, WeakKey};
use crate::telemetry::LogFormat;
use std::path::{Path, PathBuf};

/// Options shared by every command that runs or calls a service.
#[derive(Clone, Debug, clap::Args)]
pub struct CommonArgs {
    /// Log line format.
    #[arg(long, env = "ITHACA_LOG_FORMAT", default_value = "text", global = true)]
    pub log_format: LogFormat,
    /// The internal key that signs principal assertions between services
    /// (at least 32 bytes). Every process of one deployment needs the same.
    #[arg(
        long,
        env = "ITHACA_INTERNAL_KEY",
        hide_env_values = true,
        global = true
    )]
    pub internal_key: Option<String>,
    /// A file holding the internal key, read when --internal-key is not given.
    #[arg(long, env = "ITHACA_INTERNAL_KEY_FILE", global = true)]
    pub internal_key_file: Option<PathBuf>,
}

/// The internal key could not be found or used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "no internal key: set ITHACA_INTERNAL_KEY or ITHACA_INTERNAL_KEY_FILE (ithaca up writes one to {0})"
    )]
    Missing(String),
    #[error("reading internal key file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Weak(#[from] WeakKey),
}

impl CommonArgs {
    /// The internal key from the flag, the key file, or `default_file`.
    pub fn internal_key(&self, default_file: &Path) -> Result<InternalKey, KeyError> {
        if let Some(key) = &self.internal_key {
            return Ok(InternalKey::new(key.trim().as_bytes().to_vec())?);
        }
        let path = self
            .internal_key_file
            .clone()
            .unwrap_or_else(|| default_file.to_path_buf());
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(InternalKey::new(text.trim().as_bytes().to_vec())?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(KeyError::Missing(path.display().to_string()))
            }
            Err(source) => Err(KeyError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }
}

/// Read the internal key at `path`, creating it with a fresh random key
/// (readable by the owner only) when it does not exist.
pub fn load_or_create_key_file(path: &Path) -> Result<InternalKey, KeyError> {
    if !path.exists() {
        let key = InternalKey::generate_hex();
        write_private(path, &key).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
    }
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.display().to_string(),
        source,
    })?;
    Ok(InternalKey::new(text.trim().as_bytes().to_vec())?)
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    use std::io::Write;
    let mut file = options.open(path)?;
    file.write_all(contents.as_bytes())?;
    file.write_all(b"\n")
}
