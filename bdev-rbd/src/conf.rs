//! librados configuration given over RPC: the `config` map of `bdev_rbd_create` and the
//! `config_param` map of `bdev_rbd_register_cluster`, kept in the order the client sent them
//! (librados applies them in that order).
//!
//! Secrets stay out of rtgt: an inline `key` is refused (a keyring file, `key_file` or the
//! `keyring` option, does the same job), so neither `bdev_get_bdevs`, `bdev_rbd_get_clusters_info`
//! nor save_config can ever show one.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::error::RbdError;

/// Ordered `option = value` pairs for `rados_conf_set`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfMap(pub Vec<(String, String)>);

impl ConfMap {
    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of an option (matched as librados matches names: `-`, ` ` and `_` are the
    /// same), the last one if given twice.
    pub fn get(&self, option: &str) -> Option<&str> {
        let want = normalize(option);
        self.0
            .iter()
            .rev()
            .find(|(k, _)| normalize(k) == want)
            .map(|(_, v)| v.as_str())
    }

    /// Checks what rtgt refuses: empty option names and inline secrets. `what` names the
    /// parameter in the message (`config`, `config_param`).
    pub fn validate(&self, what: &str) -> Result<(), RbdError> {
        for (k, v) in &self.0 {
            if k.trim().is_empty() {
                return Err(RbdError::invalid(format!(
                    "{what}: an option name is empty"
                )));
            }
            if normalize(k) == "rbd_skip_partial_discard" && !is_false(v) {
                return Err(RbdError::invalid(format!(
                    "{what}: rbd_skip_partial_discard must stay false: rtgt reports that \
                     deallocated blocks read back as zeroes"
                )));
            }
            if normalize(k) == "key" {
                return Err(RbdError::invalid(format!(
                    "{what}: an inline 'key' is not accepted (rtgt keeps secrets out of its RPC \
                     output and saved configuration); put the key in a keyring file and pass \
                     its path as key_file (bdev_rbd_register_cluster) or as the 'keyring' option"
                )));
            }
        }
        Ok(())
    }

    /// The pairs as a JSON object, in order.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (k, v) in &self.0 {
            m.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
        serde_json::Value::Object(m)
    }
}

fn is_false(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "false" | "0" | "no" | "off"
    )
}

/// librados option names treat `-`, ` ` and `_` alike.
pub(crate) fn normalize(option: &str) -> String {
    option
        .trim()
        .chars()
        .map(|c| if c == '-' || c == ' ' { '_' } else { c })
        .collect()
}

impl<'de> Deserialize<'de> for ConfMap {
    /// A JSON object of string values (SPDK's `bdev_rbd_decode_config`); `null` is an empty map.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ConfMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of string values")
            }
            fn visit_unit<E: de::Error>(self) -> Result<ConfMap, E> {
                Ok(ConfMap::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<ConfMap, E> {
                Ok(ConfMap::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<ConfMap, D::Error> {
                d.deserialize_any(V)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<ConfMap, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(ConfMap(out))
            }
        }
        d.deserialize_option(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_accepts_null() {
        let m: ConfMap = serde_json::from_str(
            r#"{"mon_host": "v2:127.0.0.1:3300", "rados_osd_op_timeout": "5"}"#,
        )
        .unwrap();
        assert_eq!(m.0[0].0, "mon_host");
        assert_eq!(m.0[1], ("rados_osd_op_timeout".into(), "5".into()));
        assert_eq!(m.get("rados-osd-op-timeout"), Some("5"));
        let m: ConfMap = serde_json::from_str("null").unwrap();
        assert!(m.is_empty());
    }

    #[test]
    fn refuses_non_strings_and_inline_keys() {
        assert!(serde_json::from_str::<ConfMap>(r#"{"mon_host": 5}"#).is_err());
        assert!(serde_json::from_str::<ConfMap>(r#"["mon_host"]"#).is_err());
        let m: ConfMap = serde_json::from_str(r#"{"mon_host": "a", " key ": "AQD..."}"#).unwrap();
        let e = m.validate("config").unwrap_err();
        assert_eq!(e.code(), Some(libc::EINVAL));
        assert!(e.to_string().contains("key_file"), "{e}");
        let m: ConfMap = serde_json::from_str(r#"{"keyring": "/etc/ceph/k"}"#).unwrap();
        m.validate("config").unwrap();
        let m = ConfMap(vec![("rbd-skip-partial-discard".into(), "true".into())]);
        assert!(m.validate("config_param").is_err());
        let m = ConfMap(vec![("rbd_skip_partial_discard".into(), "false".into())]);
        m.validate("config_param").unwrap();
        let m: ConfMap = serde_json::from_str(r#"{"": "x"}"#).unwrap();
        assert!(m.validate("config").is_err());
    }

    #[test]
    fn json_round_trip() {
        let m = ConfMap(vec![("b".into(), "1".into()), ("a".into(), "2".into())]);
        let back: ConfMap = serde_json::from_value(m.to_json()).unwrap();
        assert_eq!(back, m);
    }
}
