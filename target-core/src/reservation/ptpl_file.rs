//! Reading and writing the `ptpl_file` (the only I/O of the reservation code).
//!
//! [`store`] replaces the file atomically: the contents go to a temporary file in the same
//! directory, which is fsynced and renamed over the old one, and the directory is fsynced so
//! that the rename itself survives a power loss. A crash at any point leaves either the old
//! or the new contents, never a torn file. These calls block: run them off the reactors.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::ptpl::{self, PtplError};
use super::state::Reservation;

/// Why a volume's reservation state could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file exists but could not be read.
    #[error("cannot read ptpl_file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The contents are not a state for this bdev.
    #[error("ptpl_file {path}: {source}")]
    Contents {
        /// The file.
        path: PathBuf,
        /// The error.
        source: PtplError,
    },
}

/// The reservation state of the bdev `bdev_uuid` at start-up: from `path` (a missing file is
/// an empty state with persistence off, as in SPDK).
pub fn load_state(path: &Path, bdev_uuid: &uuid::Uuid) -> Result<Reservation, LoadError> {
    let text = load(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    ptpl::decode(text.as_deref().unwrap_or(""), bdev_uuid, true).map_err(|source| {
        LoadError::Contents {
            path: path.to_owned(),
            source,
        }
    })
}

/// Writes `state` to `path` (after a change whose effects say `persist`).
pub fn save_state(path: &Path, state: &Reservation, bdev_uuid: &uuid::Uuid) -> io::Result<()> {
    store(path, &ptpl::encode(state, bdev_uuid))
}

/// The file's contents, or `None` if it does not exist (not an error: SPDK starts empty).
pub fn load(path: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "ptpl_file has no file name"))?;
    let mut tmp = name.to_os_string();
    tmp.push(".rtgt-tmp");
    Ok(path.with_file_name(tmp))
}

/// Replaces the file's contents atomically and durably (see the module documentation).
pub fn store(path: &Path, contents: &str) -> io::Result<()> {
    let tmp = temp_path(path)?;
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rtgt-ptpl-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn store_replaces_and_leaves_no_temp_file() {
        let d = scratch("store");
        let p = d.join("ns1.json");
        assert_eq!(load(&p).unwrap(), None);
        store(&p, "{\"a\":1}").unwrap();
        assert_eq!(load(&p).unwrap().as_deref(), Some("{\"a\":1}"));
        store(&p, "").unwrap();
        assert_eq!(load(&p).unwrap().as_deref(), Some(""));
        let names: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("ns1.json")]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn store_into_a_missing_directory_fails_cleanly() {
        let d = scratch("missing");
        let p = d.join("no/such/dir/ns1.json");
        assert!(store(&p, "x").is_err());
        assert!(load(&d.join("ns1.json")).unwrap().is_none());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn state_load_and_save() {
        use crate::reservation::{HostId, Initiator, PtplChange, RegisterAction, ResvType};
        let d = scratch("state");
        let p = d.join("ns.json");
        let bdev = uuid::Uuid::from_bytes([3; 16]);
        // No file: empty state that can persist.
        let mut s = load_state(&p, &bdev).unwrap();
        assert!(s.registrants().is_empty() && s.ptpl_capable() && !s.ptpl());
        let h = Initiator::Nvme(HostId([1; 16]));
        s.register(
            h,
            RegisterAction::Register { new_key: 5 },
            PtplChange::Set(true),
        )
        .unwrap();
        s.reserve(h, 5, ResvType::ExclusiveAccess).unwrap();
        save_state(&p, &s, &bdev).unwrap();
        let back = load_state(&p, &bdev).unwrap();
        assert!(back.is_holder(h) && back.ptpl());
        // Another bdev's file, and an unreadable path, are errors naming the file.
        let e = load_state(&p, &uuid::Uuid::from_bytes([4; 16])).unwrap_err();
        assert!(matches!(e, LoadError::Contents { .. }), "{e}");
        assert!(e.to_string().contains("ns.json"));
        assert!(matches!(load_state(&d, &bdev), Err(LoadError::Io { .. })));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn failed_rename_removes_the_temp_file() {
        // The target path is a directory: the rename fails after the temp file was written.
        let d = scratch("rename");
        let p = d.join("taken");
        fs::create_dir(&p).unwrap();
        fs::write(p.join("keep"), "x").unwrap();
        assert!(store(&p, "new").is_err());
        assert!(!d.join("taken.rtgt-tmp").exists(), "temp file left behind");
        assert!(p.join("keep").exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
