//! The secret shapes several redaction suites place in text: kcap's credential header names
//! and the vendor token prefixes the redactor must catch, and where a shipped line's text can
//! hide one.

use serde_json::Value;

/// kcap's credential header names (`RedactionPatterns.cs`'s list plus R2.2's).
pub const HEADER_NAMES: &[&str] = &[
    "Authorization",
    "Proxy-Authorization",
    "Cookie",
    "Set-Cookie",
    "X-Api-Key",
    "X-Auth-Token",
    "X-Access-Token",
    "X-Amz-Security-Token",
    "X-Amz-Signature",
    "X-Goog-Api-Key",
    "Api-Key",
    "Private-Token",
    "Job-Token",
    "Deploy-Token",
    "X-Vault-Token",
    "X-Consul-Token",
    "X-Csrf-Token",
    "X-Xsrf-Token",
    "X-Hub-Signature",
    "X-Hub-Signature-256",
    "X-Slack-Signature",
    "Stripe-Signature",
    "X-Registry-Auth",
];

/// Vendor token prefixes: a prefix and 10 or more token characters is a secret wherever it
/// stands.
pub const VENDOR_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "ghr_",
    "github_pat_",
    "cfat_",
    "sk-",
    "sk-proj-",
    "sk-live_",
    "sk-test_",
    "sk_live_",
    "sk_test_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "pypi-",
    "npm_",
    "glpat-",
    "dckr_pat_",
    "dckr_oat_",
];

/// Every string in `value` (keys too), and every string inside strings that are JSON.
pub fn all_text(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
            if let Ok(inner) = serde_json::from_str::<Value>(s)
                && (inner.is_object() || inner.is_array())
            {
                all_text(&inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| all_text(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push_str(k);
                out.push('\n');
                all_text(v, out);
            }
        }
        _ => {}
    }
}
