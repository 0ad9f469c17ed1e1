//! `rtgt serve --config FILE`: the configuration that survives restarts (targetcli's
//! saveconfig/restoreconfig, nvmetcli's restore). FILE is loaded at start if it exists, and
//! rewritten after every successful RPC that changed the configuration, **before the RPC's
//! answer is sent**: what a client saw acknowledged is on disk.
//!
//! FILE is never written in place. A new version goes to `FILE.tmp`, is flushed to disk, the
//! current FILE is hard-linked to `FILE.bak` (through `FILE.bak.tmp` and a rename, so FILE.bak
//! is always whole too), and `FILE.tmp` is renamed over FILE; then the directory is flushed.
//! A crash at any point leaves FILE either the old or the new version, both loadable.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rpc::methods::load::{self, ConfigFile};
use serde_json::Value;

/// The persisted configuration file.
pub struct ConfigStore {
    path: PathBuf,
    /// The text last written (or loaded): nothing is written when the new one is equal.
    last: Mutex<String>,
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The text rtgt writes for a `save_config` document: rpc.py's `json.dumps(indent=2)` and a
/// final newline.
pub fn render(doc: &Value) -> String {
    let mut text = serde_json::to_string_pretty(doc).unwrap_or_default();
    text.push('\n');
    text
}

impl ConfigStore {
    /// Opens `path`: its parsed content if it exists (`Err` naming the file and its backup
    /// if it cannot be read or parsed), `None` if it does not.
    pub fn open(path: &Path) -> Result<(ConfigStore, Option<ConfigFile>), String> {
        let (text, cfg) = match fs::read_to_string(path) {
            Ok(text) => {
                let cfg = load::parse(&text).map_err(|e| {
                    format!(
                        "--config {}: {e} (the previous version, if any, is {})",
                        path.display(),
                        with_suffix(path, ".bak").display()
                    )
                })?;
                (text, Some(cfg))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (String::new(), None),
            Err(e) => return Err(format!("--config {}: {e}", path.display())),
        };
        Ok((
            ConfigStore {
                path: path.to_owned(),
                last: Mutex::new(text),
            },
            cfg,
        ))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `doc` if it differs from what the file holds; `Ok(true)` when it wrote.
    pub fn store(&self, doc: &Value) -> io::Result<bool> {
        let text = render(doc);
        let mut last = self.last.lock();
        if *last == text {
            return Ok(false);
        }
        self.replace(&text)?;
        *last = text;
        Ok(true)
    }

    fn replace(&self, text: &str) -> io::Result<()> {
        let tmp = with_suffix(&self.path, ".tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        if self.path.exists() {
            let bak = with_suffix(&self.path, ".bak");
            let bak_tmp = with_suffix(&self.path, ".bak.tmp");
            let _ = fs::remove_file(&bak_tmp);
            fs::hard_link(&self.path, &bak_tmp)?;
            fs::rename(&bak_tmp, &bak)?;
        }
        fs::rename(&tmp, &self.path)?;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rtgt-store-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn doc(n: u32) -> Value {
        json!({"subsystems": [{"subsystem": "bdev", "config": [
            {"method": "bdev_malloc_create", "params": {"name": format!("M{n}"), "num_blocks": 8, "block_size": 512}}
        ]}]})
    }

    #[test]
    fn versions_replace_each_other_and_the_previous_one_is_kept() {
        let d = dir("versions");
        let path = d.join("rtgt.json");
        let (store, cfg) = ConfigStore::open(&path).unwrap();
        assert!(cfg.is_none());
        assert!(store.store(&doc(1)).unwrap());
        assert!(
            !store.store(&doc(1)).unwrap(),
            "an equal version is not rewritten"
        );
        assert!(!with_suffix(&path, ".bak").exists());
        assert!(store.store(&doc(2)).unwrap());
        assert_eq!(fs::read_to_string(&path).unwrap(), render(&doc(2)));
        assert_eq!(
            fs::read_to_string(with_suffix(&path, ".bak")).unwrap(),
            render(&doc(1))
        );
        assert!(!with_suffix(&path, ".tmp").exists());
        assert!(!with_suffix(&path, ".bak.tmp").exists());
        // Reopened: the content loads, and storing it again writes nothing.
        let (again, cfg) = ConfigStore::open(&path).unwrap();
        assert!(cfg.is_some());
        assert!(!again.store(&doc(2)).unwrap());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn leftovers_of_a_crash_do_not_matter_and_a_bad_file_is_refused() {
        let d = dir("crash");
        let path = d.join("rtgt.json");
        let (store, _) = ConfigStore::open(&path).unwrap();
        store.store(&doc(1)).unwrap();
        // A crash after writing FILE.tmp and the backup link, before the rename.
        fs::write(with_suffix(&path, ".tmp"), "{\"subsys").unwrap();
        fs::write(with_suffix(&path, ".bak.tmp"), "junk").unwrap();
        let (store, cfg) = ConfigStore::open(&path).unwrap();
        assert!(cfg.is_some());
        assert!(store.store(&doc(3)).unwrap());
        assert_eq!(fs::read_to_string(&path).unwrap(), render(&doc(3)));
        fs::write(&path, "{ not json").unwrap();
        let e = ConfigStore::open(&path).err().unwrap();
        assert!(e.contains("rtgt.json.bak"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
