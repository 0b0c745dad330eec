//! Provider credential formats (`spec/revision-3.md` S1.4): one rule per family of fixed-prefix
//! or vendor-named tokens.
//!
//! Placeholder with a few families so the engine builds and is tested; the full table (the
//! gitleaks v8.30 default families) replaces this file wholesale.

use std::ops::Range;

use regex::Regex;

/// One provider format. The engine runs [`ProviderRule::find`] on a decoded string only when
/// one of `keywords` occurs in it (ASCII case-insensitively).
pub(crate) struct ProviderRule {
    pub id: &'static str,
    /// The gitleaks rule id(s) this covers, comma separated.
    pub family: &'static str,
    /// Lowercase ASCII.
    pub keywords: &'static [&'static str],
    /// Regex crate syntax; the secret is the named group `s` if present, else the whole match.
    pub pattern: &'static str,
    pub min_entropy: Option<f32>,
    pub positive: &'static [&'static str],
    pub negative: &'static [&'static str],
}

pub(crate) static RULES: &[ProviderRule] = &[
    ProviderRule {
        id: "github-pat",
        family: "github-pat",
        keywords: &["ghp_"],
        pattern: r"ghp_[0-9A-Za-z]{36}",
        min_entropy: Some(3.0),
        positive: &["token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"],
        negative: &["ghp_short"],
    },
    ProviderRule {
        id: "openai-api-key",
        family: "openai-api-key",
        keywords: &["sk-"],
        pattern: r"(?:^|[^A-Za-z0-9])(?P<s>sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})",
        min_entropy: Some(3.0),
        positive: &["OPENAI sk-proj-Xk9vQ2mLp7Rt4Wz8Bn3Hj6Kd"],
        negative: &["task-notification-abcdefghijklmnopqrstu"],
    },
    ProviderRule {
        id: "aws-access-token",
        family: "aws-access-token",
        keywords: &["akia", "asia"],
        pattern: r"\b(?:AKIA|ASIA)[A-Z2-7]{16}\b",
        min_entropy: Some(3.0),
        positive: &["id AKIAZ5JX3YQ7MB2KLP4N"],
        negative: &["AKIAEXAMPLE"],
    },
    ProviderRule {
        id: "slack-bot-token",
        family: "slack-bot-token",
        keywords: &["xoxb-"],
        pattern: r"xoxb-[0-9]{10,13}-[0-9]{10,13}-[A-Za-z0-9-]{20,}",
        min_entropy: None,
        positive: &["xoxb-1234567890123-1234567890123-aBcDeFgHiJkLmNoPqRsTuVwX"],
        negative: &["xoxb-12"],
    },
];

impl ProviderRule {
    pub(crate) fn compile(&self) -> Regex {
        // The table's patterns are constants that a test compiles one by one.
        Regex::new(self.pattern).expect("provider pattern is a valid regex")
    }

    /// Pushes the byte ranges of `text` to redact.
    pub(crate) fn find(&self, re: &Regex, text: &str, out: &mut Vec<Range<usize>>) {
        for caps in re.captures_iter(text) {
            let Some(m) = caps.name("s").or_else(|| caps.get(0)) else {
                continue;
            };
            if let Some(floor) = self.min_entropy
                && entropy(m.as_str()) < floor
            {
                continue;
            }
            out.push(m.range());
        }
    }
}

/// Shannon entropy in bits per byte.
fn entropy(s: &str) -> f32 {
    let mut counts = [0u32; 256];
    for &b in s.as_bytes() {
        counts[b as usize] += 1;
    }
    let n = s.len() as f32;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f32 / n;
            -p * p.log2()
        })
        .sum()
}
