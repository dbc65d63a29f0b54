//! Reading an agent's file and replacing it atomically.

use anyhow::{Context, bail};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Configuration files are small; `~/.claude.json` with a long history is
/// a few megabytes. Anything larger is not what we think it is.
const MAX_BYTES: u64 = 64 << 20;

/// An agent's file as found.
pub struct Current {
    /// Where to write: the file itself, or the target of the symlink the
    /// configured path is (a dotfiles manager's link stays a link).
    pub path: PathBuf,
    /// The text; empty for a file that does not exist yet.
    pub text: String,
    pub exists: bool,
    /// Permission bits of the existing file.
    pub mode: Option<u32>,
}

pub fn read(path: &Path) -> anyhow::Result<Current> {
    let path = match std::fs::canonicalize(path) {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path.to_path_buf(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Current {
                path,
                text: String::new(),
                exists: false,
                mode: None,
            });
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    if meta.len() > MAX_BYTES {
        bail!(
            "{} is {} bytes, more than a configuration file should be; refusing to touch it",
            path.display(),
            meta.len()
        );
    }
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("{} is not UTF-8 text ({e})", path.display()))?;
    Ok(Current {
        path,
        text,
        exists: true,
        mode: mode_of(&meta),
    })
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    Some(meta.permissions().mode() & 0o7777)
}

#[cfg(not(unix))]
fn mode_of(_meta: &std::fs::Metadata) -> Option<u32> {
    None
}

/// Replace `current.path` with `text` atomically: a temporary file in the
/// same directory, synced, then renamed over it. `mode` is applied to the
/// temporary file before any byte is written to it.
///
/// The file is read again just before the rename: if the agent rewrote it
/// in the meantime (Claude Code rewrites `~/.claude.json` often), nothing
/// is replaced, so none of its changes are lost.
pub fn replace(current: &Current, text: &str, mode: u32) -> anyhow::Result<()> {
    let path = &current.path;
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir.to_path_buf(),
        None => PathBuf::from("."),
    };
    if !dir.exists() {
        create_dir(&dir)?;
    }
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("the file has no name")?;
    let temp = dir.join(format!(
        ".{file_name}.ithaca-{}.tmp",
        uuid::Uuid::new_v4().simple()
    ));
    let result = write_temp(&temp, text, mode).and_then(|()| {
        let now = read(path)?;
        if now.exists != current.exists || now.text != current.text {
            bail!(
                "{} changed while ithaca connect was working; nothing was written, run it again",
                path.display()
            );
        }
        std::fs::rename(&temp, path)
            .with_context(|| format!("renaming {} over {}", temp.display(), path.display()))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

fn write_temp(temp: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    let mut file = options
        .open(temp)
        .with_context(|| format!("creating {}", temp.display()))?;
    // The mode given to open() is reduced by the umask; set it exactly.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the mode of {}", temp.display()))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", temp.display()))
}

/// A missing parent directory (an agent not started yet): private, since
/// it will hold configuration.
fn create_dir(dir: &Path) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_writes_keeps_mode_and_notices_a_concurrent_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("c.json");
        let current = read(&path).expect("read");
        assert!(!current.exists);
        replace(&current, "{}\n", 0o600).expect("write");
        let current = read(&path).expect("read");
        assert_eq!(current.text, "{}\n");
        #[cfg(unix)]
        assert_eq!(current.mode, Some(0o600));
        std::fs::write(&path, "{\"x\": 1}\n").expect("someone else writes");
        let err = replace(&current, "{\"y\": 2}\n", 0o600).expect_err("changed");
        assert!(err.to_string().contains("changed"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "{\"x\": 1}\n"
        );
        let leftovers = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .count();
        assert_eq!(leftovers, 1, "the temporary file is removed");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_file_is_written_through_its_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real.json");
        let link = dir.path().join("link.json");
        std::fs::write(&real, "{}").expect("write");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let current = read(&link).expect("read");
        replace(&current, "{\"a\": 1}", 0o644).expect("write");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("stat")
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&real).expect("read"), "{\"a\": 1}");
    }
}
