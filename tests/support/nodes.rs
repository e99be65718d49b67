//! A Node object as the API server holds it, for the no-root tests
//! against the fake API server. Included with `#[path]`.

use serde_json::{json, Value};

/// Node `name`, labelled `role: <role>`, at InternalIP `ip`.
pub fn node(name: &str, role: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"role": role}},
           "status": {"addresses": [{"type": "InternalIP", "address": ip}]}})
}
