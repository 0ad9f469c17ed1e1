//! SPDK's JSON-RPC envelope rules (lib/jsonrpc/jsonrpc_server.c), shared by every transport.
//!
//! * Top level: an object (one request), an array (batch) or anything else (`-32600`).
//! * Envelope: optional `jsonrpc` (must be `"2.0"`), `method` string, optional `params`
//!   (object, array or null ≡ absent), optional `id` (string, number or null); any other or
//!   duplicate member → `-32600`. As in SPDK, the id is echoed on an envelope error only when
//!   the failure is the type of `params`.
//! * Notifications (`id` absent or null) run, but only errors are answered.
//! * Responses are compact: `{"jsonrpc":"2.0","id":…,"result":…}` or
//!   `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}`, never `error.data`.
//! * Batches are processed element by element, in order; the answer is one array without the
//!   notifications' results, nothing if every element was a notification, and a single
//!   `-32600` object for an empty array.

use std::fmt::Write as _;

use jsonrpsee::ConnectionId;
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::RpcError;
use crate::table::MethodTable;

/// What to send back for one complete JSON value read from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Send this compact JSON text (the transport adds SPDK's `\n`).
    Send(String),
    /// Nothing to send (a notification or a batch of them).
    Nothing,
    /// Send this `-32700` error, then close the connection: a stream cannot resynchronise.
    Fatal(String),
}

/// A request envelope with every member kept raw (null included).
#[derive(Default)]
struct Envelope<'a> {
    jsonrpc: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
        let mut env = Envelope::default();
        while let Some(key) = map.next_key::<String>()? {
            let slot = match key.as_str() {
                "jsonrpc" => &mut env.jsonrpc,
                "method" => &mut env.method,
                "params" => &mut env.params,
                "id" => &mut env.id,
                _ => return Err(de::Error::custom("unknown member")),
            };
            if slot.is_some() {
                return Err(de::Error::custom("duplicate member"));
            }
            *slot = Some(map.next_value::<&'de RawValue>()?);
        }
        Ok(env)
    }
}

impl<'de> serde::Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(EnvelopeVisitor)
    }
}

/// A validated request.
struct Call<'a> {
    method: String,
    params: Option<&'a str>,
    /// The id as sent (`None` when absent); `Some("null")` is a notification too.
    id: Option<&'a str>,
}

impl Call<'_> {
    fn is_notification(&self) -> bool {
        matches!(self.id, None | Some("null"))
    }
}

fn first_byte(raw: &str) -> u8 {
    raw.as_bytes().first().copied().unwrap_or(b' ')
}

/// Apply SPDK's envelope checks, in SPDK's order. On failure returns the id to echo.
fn parse_call(raw: &RawValue) -> Result<Call<'_>, Option<&str>> {
    let env: Envelope<'_> = serde_json::from_str(raw.get()).map_err(|_| None)?;
    if let Some(v) = env.jsonrpc {
        if v.get() != "\"2.0\""
            && serde_json::from_str::<String>(v.get()).ok().as_deref() != Some("2.0")
        {
            return Err(None);
        }
    }
    let method = env
        .method
        .filter(|m| first_byte(m.get()) == b'"')
        .and_then(|m| serde_json::from_str::<String>(m.get()).ok())
        .ok_or(None)?;
    let id = match env.id {
        None => None,
        Some(id) => match first_byte(id.get()) {
            b'"' | b'-' | b'0'..=b'9' | b'n' => Some(id.get()),
            _ => return Err(None),
        },
    };
    let params = match env.params {
        None => None,
        Some(p) => match first_byte(p.get()) {
            b'n' => None,
            b'{' | b'[' => Some(p.get()),
            _ => return Err(id),
        },
    };
    Ok(Call { method, params, id })
}

/// Render a success response.
fn success(id: Option<&str>, result: &RawValue) -> String {
    let id = id.unwrap_or("null");
    let mut s = String::with_capacity(32 + id.len() + result.get().len());
    let _ = write!(
        s,
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{}}}",
        result.get()
    );
    s
}

/// Render an error response (`code` and `message` only).
pub(crate) fn error_response(id: Option<&str>, e: &RpcError) -> String {
    let id = id.unwrap_or("null");
    let message = serde_json::to_string(&e.message).unwrap_or_else(|_| "\"Error\"".to_string());
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{},\"message\":{message}}}}}",
        e.code
    )
}

impl MethodTable {
    /// Handle one complete JSON value (as delimited by the framing scanner) from connection
    /// `conn` and say what to send back.
    pub(crate) async fn handle_value(&self, bytes: &[u8], conn: ConnectionId) -> Reply {
        let Ok(text) = std::str::from_utf8(bytes) else {
            tracing::warn!("RPC request is not valid UTF-8");
            return Reply::Fatal(error_response(None, &RpcError::parse_error()));
        };
        let raw: &RawValue = match serde_json::from_str(text) {
            Ok(raw) => raw,
            Err(e) => {
                tracing::warn!(error = %e, "RPC request is not valid JSON");
                return Reply::Fatal(error_response(None, &RpcError::parse_error()));
            }
        };
        tracing::trace!(request = text, "RPC request");
        let reply = match first_byte(raw.get()) {
            b'{' => self.handle_single(raw, conn).await,
            b'[' => self.handle_batch(raw, conn).await,
            _ => {
                tracing::warn!("RPC request is neither an object nor an array");
                Some(error_response(None, &RpcError::invalid_request()))
            }
        };
        match reply {
            Some(s) => {
                tracing::trace!(response = s.as_str(), "RPC response");
                Reply::Send(s)
            }
            None => Reply::Nothing,
        }
    }

    async fn handle_batch(&self, raw: &RawValue, conn: ConnectionId) -> Option<String> {
        let Ok(elements) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
            return Some(error_response(None, &RpcError::invalid_request()));
        };
        if elements.is_empty() {
            return Some(error_response(None, &RpcError::invalid_request()));
        }
        // Every element runs (as in SPDK), but the answer is bounded like any response (SPDK:
        // 32 MiB): past that the collected answers are dropped and one error says so, so a
        // small request of many cheap calls cannot make the server hold gigabytes.
        let mut out = String::from("[");
        let mut any = false;
        let mut too_large = false;
        for element in elements {
            let Some(r) = self.handle_single(element, conn).await else {
                continue;
            };
            if too_large || out.len() + r.len() + 2 > crate::table::MAX_RESPONSE_SIZE {
                if !too_large {
                    tracing::warn!(
                        limit = crate::table::MAX_RESPONSE_SIZE,
                        "batch response too large; answering with an error"
                    );
                    out = String::new();
                }
                too_large = true;
                continue;
            }
            if any {
                out.push(',');
            }
            out.push_str(&r);
            any = true;
        }
        if too_large {
            return Some(error_response(
                None,
                &RpcError::internal(format!(
                    "Batch response too large (limit {} bytes)",
                    crate::table::MAX_RESPONSE_SIZE
                )),
            ));
        }
        if !any {
            return None;
        }
        out.push(']');
        Some(out)
    }

    async fn handle_single(&self, raw: &RawValue, conn: ConnectionId) -> Option<String> {
        let call = match parse_call(raw) {
            Ok(call) => call,
            Err(id) => {
                tracing::warn!(request = raw.get(), "invalid JSON-RPC request envelope");
                return Some(error_response(id, &RpcError::invalid_request()));
            }
        };
        let result = self.invoke(&call.method, call.params, conn).await;
        match result {
            Ok(r) if call.is_notification() => {
                tracing::debug!(method = call.method, "notification done");
                drop(r);
                None
            }
            Ok(r) => Some(success(call.id, &r)),
            Err(e) => {
                tracing::debug!(
                    method = call.method,
                    code = e.code,
                    message = e.message,
                    "RPC failed"
                );
                // For a notification the id is absent or null: the error goes out with null.
                Some(error_response(call.id, &e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(text: &str) -> Result<(String, Option<String>, Option<String>), Option<String>> {
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        parse_call(raw)
            .map(|c| {
                (
                    c.method,
                    c.params.map(str::to_string),
                    c.id.map(str::to_string),
                )
            })
            .map_err(|id| id.map(str::to_string))
    }

    #[test]
    fn envelope_rules() {
        assert_eq!(call(r#"{"method":"m"}"#), Ok(("m".into(), None, None)));
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","method":"m","params":{"a":1},"id":"x y"}"#),
            Ok((
                "m".into(),
                Some(r#"{"a":1}"#.into()),
                Some(r#""x y""#.into())
            ))
        );
        assert_eq!(
            call(r#"{"method":"m","params":null,"id":null}"#),
            Ok(("m".into(), None, Some("null".into())))
        );
        assert_eq!(
            call(r#"{"method":"m","params":[1],"id":-1.5}"#)
                .unwrap()
                .2
                .as_deref(),
            Some("-1.5")
        );
        assert_eq!(call(r#"{"method":"\u006d"}"#).unwrap().0, "m");
        // Failures, and which id SPDK echoes.
        assert_eq!(call(r#"{"jsonrpc":"1.0","method":"m","id":1}"#), Err(None));
        assert_eq!(call(r#"{"jsonrpc":2.0,"method":"m","id":1}"#), Err(None));
        assert_eq!(call(r#"{"jsonrpc":null,"method":"m","id":1}"#), Err(None));
        assert_eq!(call(r#"{"method":1,"id":1}"#), Err(None));
        assert_eq!(call(r#"{"id":1}"#), Err(None));
        assert_eq!(call(r#"{"method":"m","id":true}"#), Err(None));
        assert_eq!(call(r#"{"method":"m","id":{}}"#), Err(None));
        assert_eq!(call(r#"{"method":"m","id":1,"extra":0}"#), Err(None));
        assert_eq!(call(r#"{"method":"m","method":"n","id":1}"#), Err(None));
        assert_eq!(
            call(r#"{"method":"m","params":"s","id":7}"#),
            Err(Some("7".into()))
        );
        assert_eq!(call(r#"{"method":"m","params":1}"#), Err(None));
        assert_eq!(call("[1]"), Err(None));
    }

    #[test]
    fn response_rendering() {
        let r = RawValue::from_string("[1,2]".into()).unwrap();
        assert_eq!(
            success(Some("\"a\""), &r),
            r#"{"jsonrpc":"2.0","id":"a","result":[1,2]}"#
        );
        assert_eq!(
            error_response(None, &RpcError::invalid_params("quote \" here")),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"quote \" here"}}"#
        );
    }
}
