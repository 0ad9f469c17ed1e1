//! The file keyring: `keyring_file_add_key` checks the file as SPDK does and remembers the
//! key, `keyring_file_remove_key` forgets it, `keyring_get_keys` lists keys, and `save_config`
//! re-creates them.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{TargetContext, add};
use crate::params::Decode;
use crate::{Methods, Params, RegisterError, RpcError, RpcResult, StateMask};

/// A key of the file keyring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyEntry {
    pub name: String,
    pub path: String,
}

#[derive(Deserialize)]
struct AddKey {
    name: String,
    path: String,
}

#[derive(Deserialize)]
struct KeyName {
    name: String,
}

pub(crate) fn register(m: &mut Methods<TargetContext>) -> Result<(), RegisterError> {
    add(
        m,
        "keyring_file_add_key",
        StateMask::RUNTIME,
        Decode::Strict,
        |a: AddKey, ctx: Arc<TargetContext>| async move {
            check_key_file(&a.path)?;
            let mut keys = ctx.keys.lock();
            if keys.iter().any(|k| k.name == a.name) {
                return Err(RpcError::errno(
                    libc::EEXIST,
                    format!("Key '{}' already exists", a.name),
                ));
            }
            tracing::info!("keyring: added key {} ({})", a.name, a.path);
            keys.push(KeyEntry {
                name: a.name,
                path: a.path,
            });
            Ok(true)
        },
    )?;
    add(
        m,
        "keyring_file_remove_key",
        StateMask::RUNTIME,
        Decode::Strict,
        |a: KeyName, ctx: Arc<TargetContext>| async move {
            // A key a host authenticates with stays: save_config would otherwise name a key
            // it no longer creates.
            if let Some((sub, host)) = ctx.target().subsystems().iter().find_map(|s| {
                s.with_config(|c| {
                    c.host_keys
                        .iter()
                        .find(|(_, k)| {
                            k.key_name == a.name || k.ctrlr_key_name.as_deref() == Some(&a.name)
                        })
                        .map(|(h, _)| (s.nqn().to_string(), h.clone()))
                })
            }) {
                return Err(RpcError::errno(
                    libc::EBUSY,
                    format!(
                        "Key '{}' is in use by host {host} of subsystem {sub}",
                        a.name
                    ),
                ));
            }
            let mut keys = ctx.keys.lock();
            let before = keys.len();
            keys.retain(|k| k.name != a.name);
            if keys.len() == before {
                return Err(RpcError::errno(
                    libc::ENODEV,
                    format!("Key '{}' does not exist", a.name),
                ));
            }
            Ok(true)
        },
    )?;
    super::add_sync(
        m,
        "keyring_get_keys",
        StateMask::RUNTIME,
        |p: Params<'_>, ctx: &TargetContext| {
            crate::params::no_params(&p, "keyring_get_keys requires no parameters")?;
            Ok(ctx
                .keys
                .lock()
                .iter()
                .map(|k| {
                    json!({"name": k.name, "module": "keyring_file", "removed": false,
                           "probed": false, "refcnt": 1, "path": k.path})
                })
                .collect::<Vec<_>>())
        },
    )?;
    Ok(())
}

/// SPDK's file keyring rules: an absolute path to a file only its owner can read.
fn check_key_file(path: &str) -> RpcResult<()> {
    if !path.starts_with('/') {
        return Err(RpcError::errno(
            libc::EINVAL,
            format!("Non-absolute key path '{path}' is not allowed"),
        ));
    }
    let meta = std::fs::metadata(path).map_err(|e| {
        RpcError::errno(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("Cannot stat key file '{path}': {e}"),
        )
    })?;
    if !meta.is_file() {
        return Err(RpcError::errno(
            libc::EINVAL,
            format!("Key path '{path}' is not a regular file"),
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(RpcError::errno(
            libc::EPERM,
            format!("Invalid permissions on key file '{path}': only the owner may access it"),
        ));
    }
    Ok(())
}

/// The `keyring` subsystem's configuration: one `keyring_file_add_key` per key.
pub(crate) fn keyring_config(ctx: &TargetContext) -> Vec<Value> {
    ctx.keys
        .lock()
        .iter()
        .map(|k| json!({"method": "keyring_file_add_key", "params": {"name": k.name, "path": k.path}}))
        .collect()
}

/// Reads the key `name` of the keyring as a DH-HMAC-CHAP secret (`DHHC-1:0X:<base64>:`, as
/// `nvme gen-dhchap-key` writes it). The error says what is wrong without the file's content.
pub(crate) fn read_dhchap_secret(
    ctx: &TargetContext,
    name: &str,
) -> Result<target_core::nvme::auth::DhchapSecret, String> {
    let path = ctx
        .keys
        .lock()
        .iter()
        .find(|k| k.name == name)
        .map(|k| k.path.clone())
        .ok_or_else(|| "no such key".to_string())?;
    check_key_file(&path).map_err(|e| e.message)?;
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read '{path}': {e}"))?,
    );
    target_core::nvme::auth::DhchapSecret::parse(text.trim()).map_err(|e| e.to_string())
}

/// Whether the keyring holds a key of this name.
pub(crate) fn key_exists(ctx: &TargetContext, name: &str) -> bool {
    ctx.keys.lock().iter().any(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_follow_spdk_rules() {
        assert_eq!(check_key_file("relative").unwrap_err().code, -libc::EINVAL);
        assert_eq!(
            check_key_file("/nonexistent/rtgt-key").unwrap_err().code,
            -libc::ENOENT
        );
        let dir = std::env::temp_dir().join(format!("rtgt-key-{}", std::process::id()));
        std::fs::write(&dir, "NVMeTLSkey-1:01:x:").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            check_key_file(dir.to_str().unwrap()).unwrap_err().code,
            -libc::EPERM
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(check_key_file(dir.to_str().unwrap()).is_ok());
        let _ = std::fs::remove_file(&dir);
    }
}
