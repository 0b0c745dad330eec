//! Unit tests of the redactor as a whole (behaviour kept from round 2, and revision 3).

use super::*;

fn redact(text: &str) -> String {
    global().redact_text(text).into_owned()
}

#[test]
fn moved_triggers_still_find_their_secrets() {
    for text in [
        "X-Api-Key: abcdefgh",
        "api.key=abcdefghij",
        "the API key is abcdefghijklmnop1234",
        r#"{"o":"https:\/\/u:pw@h\/"}"#,
        r#"x "AUTH\": \"abc\" y"#,
        "*:*:db:user:StarPass1",
    ] {
        assert_ne!(global().redact_text(text), text, "{text}");
    }
}

#[test]
fn a_decoded_message_is_redacted_then_truncated() {
    let message = "Done. I used the deploy key:\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----\nand GITHUB_TOKEN=ghp_aBcDeFgHiJ0123456789 to push.";
    let redacted = global().redact_text(message);
    assert_eq!(
        redacted,
        "Done. I used the deploy key:\n[REDACTED]\nand GITHUB_TOKEN=[REDACTED] to push."
    );
    assert_eq!(truncate_utf8(&redacted, 12), "Done. I used");
}

/// A run the rules found already is not read again as a run, but only where it is exactly
/// their span: an encoded secret inside a longer redacted value is a secret of its own, whose
/// copy glued to other characters elsewhere goes too. In a line, and as a tool's output.
#[test]
fn an_encoded_secret_inside_a_redacted_value_takes_its_copies() {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD
        .encode("export GITHUB_TOKEN=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789");
    let text = format!("password = \"a.{encoded}\"\nref zz{encoded} end");
    let want = "password = \"[REDACTED]\"\nref zz[REDACTED] end";
    assert_eq!(redact(&text), want);
    let line = serde_json::json!({"type": "function_call_output", "output": text}).to_string();
    let shipped = global().redact_json(&line).map(Cow::into_owned);
    let want = serde_json::json!({"type": "function_call_output", "output": want}).to_string();
    assert_eq!(shipped, Some(want));
}

#[test]
fn pem_block_inside_a_json_string() {
    let line = r#"{"output":"key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7v\nq3Zx\n-----END RSA PRIVATE KEY-----\ndone"}"#;
    assert_eq!(redact(line), r#"{"output":"key:\n[REDACTED]\ndone"}"#);
}

#[test]
fn pem_block_without_end_is_redacted_to_the_end_of_its_string() {
    let line = r#"{"output":"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk","n":1}"#;
    assert_eq!(redact(line), r#"{"output":"[REDACTED]","n":1}"#);
}

#[test]
fn pem_block_in_plain_text() {
    let text = "a\n-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\nb";
    assert_eq!(redact(text), "a\n[REDACTED]\nb");
}

#[test]
fn aws_key_ids() {
    assert_eq!(
        redact(r#"{"o":"id=AKIAIOSFODNN7EXAMPLE and ASIAY34FZKBOKMUTVV7A"}"#),
        r#"{"o":"id=[REDACTED] and [REDACTED]"}"#
    );
}

#[test]
fn vendor_tokens() {
    assert_eq!(
        redact(
            r#"{"o":"ghp_aBcDeFgHiJ0123456789 github_pat_11ABCDEFG0_abcdefghij glpat-xxxxxxxxxxyyyy npm_abcdefghij12 xoxb-1234567890-abc"}"#
        ),
        r#"{"o":"[REDACTED] [REDACTED] [REDACTED] [REDACTED] [REDACTED]"}"#
    );
    assert_eq!(
        redact("key sk-proj-abcdefghij12345 and sk_live_abcdefghij123"),
        "key [REDACTED] and [REDACTED]"
    );
    // Too short to be a token.
    assert_eq!(redact("ghp_short"), "ghp_short");
}

#[test]
fn sk_needs_a_word_boundary_which_a_json_escape_provides() {
    assert_eq!(redact("task-abcdefghijklmnop"), "task-abcdefghijklmnop");
    assert_eq!(
        redact(r#"{"o":"line\nsk-abcdefghijklmnop"}"#),
        r#"{"o":"line\n[REDACTED]"}"#
    );
}

#[test]
fn credential_header_values() {
    assert_eq!(
        redact(r#"{"o":"> Authorization: Bearer abc.def-123\r\n> Host: x\r\n"}"#),
        r#"{"o":"> Authorization: [REDACTED]\r\n> Host: x\r\n"}"#
    );
    assert_eq!(
        redact(r#"{"cmd":"curl -H 'X-Api-Key: abc123' -H \"Cookie: a=b; c=d\" u"}"#),
        r#"{"cmd":"curl -H 'X-Api-Key: [REDACTED]' -H \"Cookie: [REDACTED]\" u"}"#
    );
    assert_eq!(
        redact("Proxy-Authorization: Basic dXNlcjpwYXNz"),
        "Proxy-Authorization: [REDACTED]"
    );
}

#[test]
fn header_objects_in_json() {
    assert_eq!(
        redact(r#"{"headers":{"Authorization":"Bearer abc","Accept":"*/*"}}"#),
        r#"{"headers":{"Authorization":"[REDACTED]","Accept":"*/*"}}"#
    );
}

#[test]
fn url_query_secrets_and_userinfo_passwords() {
    assert_eq!(
        redact(r#"{"o":"GET https://api.x.io/v1?token=abc123&page=2&api_key=zzz"}"#),
        r#"{"o":"GET https://api.x.io/v1?token=[REDACTED]&page=2&api_key=[REDACTED]"}"#
    );
    assert_eq!(
        redact("https://s3.aws/b?X-Amz-Signature=deadbeef&sig=cafe"),
        "https://s3.aws/b?X-Amz-Signature=[REDACTED]&sig=[REDACTED]"
    );
    assert_eq!(
        redact(r#"{"o":"git clone https://alice:s3cr3tpw@git.example.com/r.git"}"#),
        r#"{"o":"git clone https://alice:[REDACTED]@git.example.com/r.git"}"#
    );
    assert_eq!(redact("http://host:8080/path"), "http://host:8080/path");
}

#[test]
fn json_key_rule_redacts_strings_only() {
    let line = r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":123,"output_tokens":45},"max_tokens":4096},"turn_id":"t1","api_key":"abc","db_password":"p","auth_token":null,"Secret":""}}"#;
    assert_eq!(
        redact(line),
        r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":123,"output_tokens":45},"max_tokens":4096},"turn_id":"t1","api_key":"[REDACTED]","db_password":"[REDACTED]","auth_token":null,"Secret":""}}"#
    );
}

#[test]
fn json_key_rule_replaces_escapes_whole() {
    assert_eq!(
        redact(r#"{"client_secret" : "a\"b\\c\u00e9"}"#),
        r#"{"client_secret" : "[REDACTED]"}"#
    );
}

#[test]
fn assignments_and_yaml_pairs() {
    assert_eq!(
        redact("export GITHUB_TOKEN=abcdefgh12 DB_PASSWORD='hunter2hunter2'"),
        "export GITHUB_TOKEN=[REDACTED] DB_PASSWORD='[REDACTED]'"
    );
    assert_eq!(
        redact(r#"{"o":"db:\n  db_password: hunter2hunter2\n  user: bob"}"#),
        r#"{"o":"db:\n  db_password: [REDACTED]\n  user: bob"}"#
    );
    // JSON written inside a string (tool arguments) is text.
    assert_eq!(
        redact(r#"{"arguments":"{\"aws_secret_access_key\":\"wJalrXUtnFEMI/K7MDENG\"}"}"#),
        r#"{"arguments":"{\"aws_secret_access_key\":\"[REDACTED]\"}"}"#
    );
    // The kcap CLI redacts `NAME=value` whatever the value's length; token counts and
    // code are not secrets.
    assert_eq!(redact("MY_TOKEN=abc"), "MY_TOKEN=[REDACTED]");
    assert_eq!(redact("MY_TOKEN=$OTHER"), "MY_TOKEN=$OTHER");
    assert_eq!(redact("input_tokens=1234 ok"), "input_tokens=1234 ok");
    assert_eq!(
        redact("let api_key = std::env::var(name)?;"),
        "let api_key = std::env::var(name)?;"
    );
    assert_eq!(
        redact(r#"{"o":"{\"input_tokens\": 123456789}"}"#),
        r#"{"o":"{\"input_tokens\": 123456789}"}"#
    );
}

#[test]
fn labelled_secrets() {
    assert_eq!(
        redact("use token abcdefghijklmnop1234 now"),
        "use token [REDACTED] now"
    );
    assert_eq!(
        redact("the secret is hunter2x and the password: pa55"),
        "the secret is [REDACTED] and the password: [REDACTED]"
    );
    assert_eq!(
        redact("Bearer eyJhbGciOiJIUzI1NiJ9.e30"),
        "Bearer [REDACTED]"
    );
    assert_eq!(redact("token validation"), "token validation");
    assert_eq!(
        redact("the password is incorrect."),
        "the password is incorrect."
    );
}

#[test]
fn connection_string_passwords() {
    // Revision 3 (S1.2): once `Password=` names a secret, `;` is part of the value as the
    // kcap CLI's `NAME=value` rule takes it, so the rest of the string goes with it.
    assert_eq!(
        redact(r#"{"o":"Server=x;User Id=u;Password=p4s;Pwd=q;"}"#),
        r#"{"o":"Server=x;User Id=u;Password=[REDACTED]"}"#
    );
    assert_eq!(
        redact(r#"{"o":"Server=x;Password=my secret pass;Database=y"}"#),
        r#"{"o":"Server=x;Password=[REDACTED];Database=y"}"#
    );
}

#[test]
fn the_key_rule_applies_only_to_json() {
    // No text rule matches a secret key's object, so only the structure can redact it,
    // and a cut-off line has none: shipping it unchanged is what the text rules say. A
    // quoted pair is text the kcap CLI's JSON key rule redacts anywhere. Short and long
    // lines take different paths.
    for filler in ["", &"x ".repeat(1024)] {
        assert_eq!(
            redact(&format!(r#"{{"api_key":{{"v":"abc"}},"o":"{filler}"}}"#)),
            format!(r#"{{"api_key":{{"v":"[REDACTED]"}},"o":"{filler}"}}"#)
        );
        let cut_off = format!(r#"{{"api_key":{{"v":"abc"}},"o":"{filler}"#);
        assert_eq!(redact(&cut_off), cut_off);
        let not_json = format!(r#"x "api_key":"abc" {filler}"#);
        assert_eq!(
            redact(&not_json),
            format!(r#"x "api_key":"[REDACTED]" {filler}"#)
        );
        // Outside JSON the text rules still see everything.
        assert_eq!(
            redact(&format!(
                r#"{filler} "token": "abcdefghijklmnop1234" {filler}"#
            )),
            format!(r#"{filler} "token": "[REDACTED]" {filler}"#)
        );
    }
}

#[test]
fn text_without_triggers_is_borrowed_untouched() {
    let line = r#"{"timestamp":"2026-07-28T16:14:05.115Z","type":"response_item","payload":{"type":"message","content":"hello"}}"#;
    assert!(matches!(global().redact_text(line), Cow::Borrowed(_)));
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    assert_eq!(
        global().redact_line(b"{\"o\":\"\xff token abcdefghijklmnop1234"),
        "{\"o\":\"\u{FFFD} token [REDACTED]"
    );
}

#[test]
fn truncation_respects_char_boundaries() {
    assert_eq!(truncate_utf8("héllo", 2), "h");
    assert_eq!(truncate_utf8("héllo", 3), "hé");
    assert_eq!(truncate_utf8("hi", 4096), "hi");
}

#[test]
fn every_rule_pattern_compiles_and_every_keyword_is_lowercase() {
    let r = Redactor::new();
    for i in 0..r.compiled.len() {
        let _ = r.regex(i as u16);
    }
    for rule in rules::RULES {
        for k in rule.keywords {
            assert_eq!(*k, k.to_ascii_lowercase(), "{}", rule.id);
        }
    }
    for rule in providers::RULES {
        for k in rule.keywords {
            assert_eq!(*k, k.to_ascii_lowercase(), "{}", rule.id);
        }
    }
}

#[test]
fn an_idle_redactor_has_compiled_nothing() {
    let r = Redactor::new();
    assert!(r.compiled.iter().all(|c| c.get().is_none()));
    assert_eq!(
        r.redact_text("   Compiling serde v1.0.219"),
        "   Compiling serde v1.0.219"
    );
    assert!(r.compiled.iter().all(|c| c.get().is_none()));
}

/// A secret-bearing span that overlaps an earlier `[REDACTED]` loses only the marker's part:
/// once dropped whole, which shipped the private key (found by `redact_v2_props`), and the
/// second pass redacted what the first had shipped.
#[test]
fn a_span_overlapping_an_earlier_marker_still_redacts_what_lies_beside_it() {
    let r = Redactor::new();
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEsecretbody\n-----END RSA PRIVATE KEY-----\n";
    let cases = [
        format!("token [REDACTED-----BEGIN PRIVATE KEY-----[REDACTED]{pem}"),
        format!(r#"{{"output":"token [REDACTED-----BEGIN PRIVATE KEY-----[REDACTED]{pem}"#),
    ];
    for input in cases {
        let once = r.redact_line(input.as_bytes());
        assert!(!once.contains("MIIEsecretbody"), "{input:?} -> {once:?}");
        assert_eq!(
            r.redact_line(once.as_bytes()),
            once,
            "redacting {input:?} twice"
        );
    }
}

proptest::proptest! {
    /// Reusing the raw text's keyword hits for a decoded string finds what scanning the decoded
    /// string again finds (the scan it saves runs at every level of JSON in JSON).
    #[test]
    fn hits_carried_through_decoding_equal_a_fresh_scan(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "pass", "passw", "token", "ghp_", "sk", "sk-", "task", "auth", "Author", "kind: ",
            r#"kind: \"secret\""#, r#"\""#, r"\n", r"\\", r"\t", r"\u00e9", r"\ud83d\ude00",
            "a", "Z", " ", "=", ":", "-", "_", r"\\n", r#"\\\""#, "\\", "xoxb-", "AKIA",
        ]), 0..40)
    ) {
        // One redactor for every case: building the keyword automaton is most of a case's cost.
        let r = global();
        let raw = pieces.concat();
        proptest::prop_assume!(!decode::hides_ascii(raw.as_bytes()));
        let decoded = decode::decode(&raw);
        let carried: Vec<(usize, u32)> = r
            .decoded_hits(&r.scan(&raw), 0..raw.len(), &decoded)
            .iter()
            .map(|h| (h.at(), h.keyword()))
            .collect();
        let fresh: Vec<(usize, u32)> =
            r.scan(&decoded.text).iter().map(|h| (h.at(), h.keyword())).collect();
        // Every hit of a fresh scan, and beyond them at most hits of the keywords holding an
        // escaped byte (`kind: "secret"`), which are searched for apart.
        for hit in &fresh {
            proptest::prop_assert!(carried.contains(hit), "{:?}: {:?} missing", raw, hit);
        }
        let escaped = &r.escaped.as_ref().expect("the table has escaped keywords").1;
        for hit in carried.iter().filter(|h| !fresh.contains(h)) {
            proptest::prop_assert!(escaped.contains(&hit.1), "{:?}: extra {:?}", raw, hit);
        }
    }
}

/// Where `password` starts the scan reports `passw` as well as `pass`, so the rules of the
/// keywords holding another (`passw`) run where the text spells them, and not for `passed`;
/// every occurrence an overlapping search finds is among the hits.
#[test]
fn keywords_holding_a_reported_one_are_found_exactly_where_they_occur() {
    let r = Redactor::new();
    let text = "the Password was passed to pass";
    let id = |w: &str| r.words.iter().position(|k| *k == w).expect("a keyword") as u32;
    let found: Vec<(usize, u32)> = r.scan(text).iter().map(|h| (h.at(), h.keyword())).collect();
    assert!(found.contains(&(4, id("passw"))), "{found:?}");
    assert!(
        !found.iter().any(|&(at, k)| at >= 13 && k == id("passw")),
        "{found:?}"
    );
    // Every keyword occurrence an overlapping search finds is among them.
    let lower = text.to_ascii_lowercase();
    for (k, word) in r.words.iter().enumerate() {
        for (at, _) in lower.match_indices(word) {
            assert!(found.contains(&(at, k as u32)), "{word} at {at}: {found:?}");
        }
    }
}

proptest::proptest! {
    /// The hits are every keyword occurrence an overlapping search finds, so no rule misses
    /// text that holds its keyword.
    #[test]
    fn occurrences_are_every_keyword_occurrence(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "pass", "PASSW", "ord", "token", "-token", "sk", "sk-", "ta", "auth", "or",
            "ghp_", "gh", "xox", "b-", "akia", "a3t", "q~", ":aa", "/bot", "secret", "s", "e",
            " ", "=", "_", "-", "private key", "-----end", "kind: ", "\"secret\"",
        ]), 0..40)
    ) {
        let r = global();
        let text = pieces.concat();
        let found: Vec<(usize, u32)> = r.scan(&text).iter().map(|h| (h.at(), h.keyword())).collect();
        let lower = text.to_ascii_lowercase();
        for (k, word) in r.words.iter().enumerate() {
            for at in 0..=lower.len().saturating_sub(word.len()) {
                if lower.as_bytes()[at..].starts_with(word.as_bytes()) {
                    proptest::prop_assert!(
                        found.contains(&(at, k as u32)),
                        "{:?}: {} at {} missing", text, word, at
                    );
                }
            }
        }
    }
}

/// Every keyword of both tables is found wherever it stands: first in the text, after a line
/// break (real or escaped in JSON, once or twice), after each separator a name or a token
/// follows, at the end of the text, and in upper or mixed case.
#[test]
fn every_keyword_is_found_in_every_placement() {
    let r = global();
    let befores = [
        "", "\n", "\\n", "\\\\n", " ", "=", ":", "\"", "\\\"", "'", "/", "_", "-", "(", ",", "x",
        "é",
    ];
    for (k, word) in r.words.iter().enumerate() {
        let upper = word.to_ascii_uppercase();
        let mixed: String = word
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        for spelled in [word.to_string(), upper, mixed] {
            for before in befores {
                for after in ["", " rest", "\\n"] {
                    let text = format!("{before}{spelled}{after}");
                    let at = before.len();
                    assert!(
                        r.scan(&text)
                            .iter()
                            .any(|h| h.at() == at && h.keyword() == k as u32),
                        "{word:?} in {text:?}"
                    );
                }
            }
        }
    }
}

proptest::proptest! {
    /// The walk's carrying of hits into a checked JSON string (one pass over its units, the
    /// escaped keywords looked for only around escapes) finds exactly the hits of the general
    /// carrying, in the same order, whatever text lies around the string.
    #[test]
    fn hits_carried_into_a_checked_string_equal_the_general_carrying(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "pass", "token", "ghp_", "sk-", "auth", "Author", "kind: ", "kind: \"secret\"",
            "\"", "\n", "\\", "\t", "é", "😀", "a", "Z", " ", "=", ":", "cookie", "xoxb-",
            "\u{1}", "kind: \"", "secret\"", "KIND: \"Secret\"", "kind: \"SECRET",
        ]), 0..40),
        before in proptest::sample::select(vec!["", "{\"k\":", "token ", "kind: "]),
    ) {
        let r = global();
        let string = pieces.concat();
        let quoted = serde_json::to_string(&string).unwrap();
        let text = format!("{before}{quoted}");
        proptest::prop_assume!(!decode::hides_ascii(text.as_bytes()));
        let content = before.len() + 1..text.len() - 1;
        let hits = r.scan(&text);
        let general = decode::decode(&text[content.clone()]);
        let checked = decode::decode_checked(&text[content.clone()]);
        proptest::prop_assert_eq!(&general.text, &checked.text);
        let want: Vec<(usize, u32)> = r
            .decoded_hits(&hits, content.clone(), &general)
            .iter()
            .map(|h| (h.at(), h.keyword()))
            .collect();
        let got: Vec<(usize, u32)> = r
            .string_hits(&hits, content, &checked)
            .iter()
            .map(|h| (h.at(), h.keyword()))
            .collect();
        proptest::prop_assert_eq!(got, want, "{:?}", text);
    }
}

/// [`ends_with_begin_marker`] as it was before it read the string's end first: the last
/// BEGIN marker searched for, then what follows it.
fn ends_with_begin_marker_by_search(raw: &[u8]) -> bool {
    let Some(begin) = memmem::rfind(raw, b"-----BEGIN") else {
        return false;
    };
    let rest = &raw[begin + b"-----BEGIN".len()..];
    let Some(key) = memmem::find(rest, b"PRIVATE KEY") else {
        return false;
    };
    let rest = &rest[key + b"PRIVATE KEY".len()..];
    let rest = rest.strip_prefix(b" BLOCK").unwrap_or(rest);
    let Some(rest) = rest.strip_prefix(b"-----") else {
        return false;
    };
    rest.iter()
        .all(|b| matches!(b, b' ' | b'\\' | b'n' | b'r' | b't'))
}

#[test]
fn a_begin_marker_is_found_at_the_end_only() {
    for (raw, want) in [
        (&br"-----BEGIN RSA PRIVATE KEY-----"[..], true),
        (br"x -----BEGIN PRIVATE KEY----- \n", true),
        (br"-----BEGIN OPENSSH PRIVATE KEY BLOCK-----\r\n", true),
        (br"-----BEGIN PRIVATE KEY-----MIIE", false),
        (br"-----BEGIN PUBLIC KEY-----", false),
        (b"", false),
    ] {
        assert_eq!(ends_with_begin_marker(raw), want, "{raw:?}");
    }
}

proptest::proptest! {
    #[test]
    fn the_end_first_marker_check_agrees_with_the_search(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "-----BEGIN", " RSA", " PRIVATE KEY", " BLOCK", "-----", "-", " ", "\\", "n", "r",
            "t", "\\n", "x", "END", "PRIVATE", "é",
        ]), 0..12),
    ) {
        let raw = pieces.concat();
        proptest::prop_assert_eq!(
            ends_with_begin_marker(raw.as_bytes()),
            ends_with_begin_marker_by_search(raw.as_bytes()),
            "{:?}", raw
        );
    }
}

#[test]
fn every_plain_word_starts_with_the_shared_head() {
    for w in PLAIN_WORDS {
        assert!(w.as_bytes().starts_with(PLAIN_HEAD), "{w}");
    }
}

/// [`is_plain_word`] as it was before it compared the shared head first.
fn is_plain_word_by_list(bytes: &[u8], at: usize) -> bool {
    PLAIN_WORDS.iter().any(|w| {
        let end = at + w.len();
        bytes
            .get(at..end)
            .is_some_and(|t| t.eq_ignore_ascii_case(w.as_bytes()))
            && bytes
                .get(end)
                .is_none_or(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))
    })
}

proptest::proptest! {
    #[test]
    fn the_plain_word_head_check_agrees_with_the_list(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "author", "Author", "AUTHORS", "authored", "authoring", "authority", "authorities",
            "auth", "autho", "s", "_", "x", " ", ":", "é", "token",
        ]), 0..8),
        at in 0usize..40,
    ) {
        let text = pieces.concat();
        let at = at.min(text.len());
        proptest::prop_assert_eq!(
            is_plain_word(text.as_bytes(), at),
            is_plain_word_by_list(text.as_bytes(), at),
            "{:?} at {}", text, at
        );
    }
}

/// A hit packs its start and its keyword into one word: every keyword's id fits, and a start
/// far past any line's end comes back whole.
#[test]
fn every_keyword_fits_a_hit() {
    let r = global();
    assert!(
        r.words.len() <= usize::from(u16::MAX) + 1,
        "{}",
        r.words.len()
    );
    for keyword in [0, (r.words.len() - 1) as u32] {
        for at in [0, 1, 4 << 20, (1 << 40) + 7] {
            let h = Hit::new(at, keyword);
            assert_eq!((h.at(), h.keyword()), (at, keyword));
        }
    }
}

/// A line's keywords open their rules once however often they occur on it, but an occurrence
/// inside a word skips the token rules, so it must not stand for one that starts a token.
#[test]
fn a_token_after_its_prefix_inside_a_word_on_the_same_line_is_found() {
    for token in [
        "shltm_Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0OQ2mLp7RzAb12",
        "NF-Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0OQ",
        "apify_api_dXB1vLsglgTexUYm3JTAx2BHTjVuDBbvPl8R",
    ] {
        let prefix = &token[..token.find(['_', '-']).map_or(0, |i| i + 1)];
        for text in [
            format!("see x{prefix}notes.md then {token}"),
            format!("{{\"output\":\"m{prefix} and {token}\"}}"),
        ] {
            let redacted = redact(&text);
            assert!(!redacted.contains(token), "{text} -> {redacted}");
        }
    }
}

/// A rule whose check needs a byte the keyword's line lacks is skipped on that line only: a
/// later line of the same text holding it is still read.
#[test]
fn a_rule_skipped_on_one_line_still_reads_the_next() {
    for text in [
        "token rotated\nAPI_TOKEN=Xk9vQ2mLp7RzT4wN6bQ1",
        "password changed today\npassword: Xk9vQ2mLp7RzT4wN\n",
        "the secret\n  if (\"Xk9vQ2mLp7RzT4wN6\" == secret) {",
    ] {
        let redacted = redact(text);
        assert!(
            !redacted.contains("Xk9vQ2mLp7Rz"),
            "{text:?} -> {redacted:?}"
        );
    }
}

/// A copy of a secret of letters alone is a whole word: the password `postgres` goes wherever
/// it stands alone (the user name equal to it too), and never out of `postgresql` or
/// `org.postgresql.Driver`. After a JSON escape's letter or a percent escape, it still stands
/// alone. A secret holding a digit or a symbol is no piece of a word: its copy goes glued to
/// another (`$USER$PASS` echoed).
#[test]
fn copies_of_a_secret_never_inside_a_longer_word() {
    assert_eq!(
        redact("DB_PASSWORD=Hunt3rPw9x\necho adminHunt3rPw9x"),
        "DB_PASSWORD=[REDACTED]\necho admin[REDACTED]"
    );
    assert_eq!(
        redact("url=postgresql://postgres:postgres@db:5432/app driver=org.postgresql.Driver"),
        "url=postgresql://[REDACTED]:[REDACTED]@db:5432/app driver=org.postgresql.Driver"
    );
    assert_eq!(
        redact(
            r#"{"output":"DB_PASSWORD=postgresadmin\npostgresadmin\npostgresadminxyz ok?pw%3Dpostgresadmin"}"#
        ),
        r#"{"output":"DB_PASSWORD=[REDACTED]\n[REDACTED]\npostgresadminxyz ok?pw%3D[REDACTED]"}"#
    );
}

/// A rule that reads past its keyword's line sees a window of the text: a word on the next
/// line that reaches past the window's edge (long, made of characters of several bytes, or
/// after many blanks) is never cut there, its start redacted and the rest shipped.
#[test]
fn printed_secret_is_never_cut_at_the_end_of_what_is_read() {
    let cases = [
        (String::new(), "Q7".repeat(6000)),
        (String::new(), "Hk3vQ9mLp7RzT4wN".repeat(600)),
        // 4096 characters or fewer, but more bytes than the window holds.
        (String::new(), "é7€".repeat(1200)),
        (String::new(), "€".repeat(4000)),
        // A short word after blanks that reach the window's edge.
        (" ".repeat(7000), "Hk3vQ9mLp7RzT4wN".repeat(200)),
        ("\t".repeat(8180), "Hk3vQ9mLp7RzT4wN".repeat(2)),
    ];
    for (blanks, word) in cases {
        let shipped = redact(&format!("$ pass show huge\n{blanks}{word}\n"));
        let line = shipped.lines().nth(1).unwrap_or_default();
        let value = line.trim_start_matches([' ', '\t']);
        assert!(
            value == word || value == REDACTED,
            "the word was cut: {}",
            value.chars().take(40).collect::<String>()
        );
    }
    // A word that fits is still taken, after a few blanks or none.
    for text in [
        "$ pass show db\n  Hunt3r!Pw9x\n",
        "$ pass show db\nHunt3r!Pw9x",
    ] {
        assert!(!redact(text).contains("Hunt3r"), "{text:?}");
    }
}

/// A rule that reads a set number of bytes past its keyword's line (a label, then the secret
/// on the next line) finds a value that goes on past them: the whole value is redacted, never
/// its start with the rest shipped.
#[test]
fn a_value_past_the_end_of_what_a_rule_reads_is_redacted_whole() {
    // A token that repeats nothing (a repeated one is found again by its copies).
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut state = 0x2545_f491_u32;
    let token: String = (0..700)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ALPHABET[(state >> 24) as usize % ALPHABET.len()] as char
        })
        .collect();
    let tail = &token[token.len() - 40..];
    for text in [
        format!("Generated password:\n{token}\n"),
        format!("Your API token (shown once):\n\n{token}"),
        format!("Generated password:\n{}{}\n", " ".repeat(200), &token[..80]),
        format!(
            "$ pass show db\n{}{}\n$ ls",
            " ".repeat(8150),
            &token[..100]
        ),
    ] {
        let shipped = redact(&text);
        assert!(
            !shipped.contains(tail) || shipped == text,
            "part of the value shipped: {}",
            shipped
                .replace('\n', "\\n")
                .chars()
                .take(120)
                .collect::<String>()
        );
    }
    let shipped = redact(&format!("Generated password:\n{token}\n"));
    assert!(!shipped.contains(tail), "{shipped}");
}

/// A command given more than one of its password flags has every one redacted: a rule that
/// names its command once took only the first (`ssh-keygen -P old -N new` shipped the new
/// passphrase), and a flag naming a file is not one of them.
#[test]
fn every_password_flag_of_one_command_is_redacted() {
    for (text, secrets) in [
        (
            "ssh-keygen -p -f id -P OldKgPass9 -N NewKgPass9",
            &["OldKgPass9", "NewKgPass9"][..],
        ),
        (
            "ldappasswd -x -D cn=admin -w LdapBind9 -a LdapOld9 -s LdapNew9 uid=bob",
            &["LdapBind9", "LdapOld9", "LdapNew9"],
        ),
        (
            "ldapmodify -D cn=admin -y /etc/ldap.secret -w LdapPw3 -f x.ldif",
            &["/etc/ldap.secret", "LdapPw3"],
        ),
        (
            "sqlcmd -S a -U sa -P SqlFirst9 -Q x; sqlcmd -S b -U sa -P SqlSecond9",
            &["SqlFirst9", "SqlSecond9"],
        ),
        (
            "redis-cli -a RedisOne9 -h a ping && redis-cli -h b -a RedisTwo9 ping",
            &["RedisOne9", "RedisTwo9"],
        ),
    ] {
        let shipped = redact(text);
        for secret in secrets {
            assert!(!shipped.contains(secret), "{secret} shipped: {shipped}");
        }
    }
    // The other tools' `-a` and `-s` stay, and code that a rule's pattern starts with is no
    // command to read again (`auth=('u',` then the rest of the line).
    let text = "ldapsearch -x -W -s sub -a always -b dc=example,dc=org";
    assert_eq!(redact(text), text);
    let shipped = redact("requests.get(url, auth=('alice', 'PyAuthPw9Z'))");
    assert_eq!(shipped, "requests.get(url, auth=('alice', '[REDACTED]'))");
}

/// A command's quoted value ends at its closing quote: reading the rest of the line for more
/// flags starts after it, never taking it for the opening quote of another value (which took
/// `-AsPlainText -Force` and the rest of the line with it).
#[test]
fn flags_after_a_quoted_value_are_left_as_written() {
    for (text, want) in [
        (
            "$pw = ConvertTo-SecureString 'Ps9xQz7Lm2' -AsPlainText -Force",
            "$pw = ConvertTo-SecureString '[REDACTED]' -AsPlainText -Force",
        ),
        (
            "New-Object PSCredential('bob', (ConvertTo-SecureString \"Ps9xQz7Lm2\" -AsPlainText -Force))",
            "New-Object PSCredential('bob', (ConvertTo-SecureString \"[REDACTED]\" -AsPlainText -Force))",
        ),
        (
            "ssh-keygen -p -f id -P 'OldKgPass9' -N \"NewKgPass9\" -q",
            "ssh-keygen -p -f id -P '[REDACTED]' -N \"[REDACTED]\" -q",
        ),
        (
            "redis-cli -a 'RedisOne9' -h a ping",
            "redis-cli -a '[REDACTED]' -h a ping",
        ),
    ] {
        assert_eq!(redact(text), want);
    }
}

/// The bytes `counter` (a test-only count kept by the redactor) grows by while `text` is
/// redacted, and what is shipped.
fn counted(
    counter: &'static std::thread::LocalKey<std::cell::Cell<usize>>,
    text: &str,
) -> (usize, String) {
    counter.with(|n| n.set(0));
    let shipped = redact(text);
    (counter.with(std::cell::Cell::get), shipped)
}

/// A line made of commands, each given its password flags, has the rest of it read again
/// (for a command's later flags) within twice its length: the first version searched the line
/// to its end for each command, 4 MiB of `redis-cli -a …` took 4.4 s where it took 0.09 s.
#[test]
fn a_line_of_commands_is_read_again_within_twice_its_length() {
    for unit in [
        "redis-cli -a RedisPw9 ",
        "ssh-keygen -P OldPw9Zq -N NewPw9Zq ",
        "ldappasswd -w B9x -a O9x -s N9x ",
        "sqlcmd -P Sq9x -P Sq8x -P Sq7x ",
    ] {
        for text in [
            unit.repeat((256 << 10) / unit.len()),
            // A command, then one value longer than what is read at once.
            format!(
                "{}{}",
                unit.repeat(300),
                "redis-cli -a ".to_owned() + &"Q7".repeat(20_000)
            ),
        ] {
            let (read, shipped) = counted(&rules::MORE_FLAGS_READ, &text);
            assert!(
                read <= 2 * text.len() + (16 << 10),
                "{read} bytes read again for a text of {} ({unit:?})",
                text.len()
            );
            assert!(!shipped.contains("Pw9"), "{unit:?}");
        }
    }
}

/// Literals joined in the view that reads a token split over them (`'sk_live_' + "…"`) take
/// the token and leave the rest of the line: joined, a literal opened by `'` and closed by `"`
/// was never closed, and a name's rule took the rest of the line. A format string beside its
/// argument (`printf '%s\n' "…"`) is two arguments: only the password goes.
#[test]
fn literals_joined_across_quotes_leave_the_rest_of_the_line() {
    for (text, shipped) in [
        (
            "const token = 'sk_live_' + \"abcdefghijklmnopqrstuvwx\"; next()",
            "const token = '[REDACTED]\"; next()",
        ),
        (
            "token = 'xoxb-' \"1234567890-abcdefghijklmnopqrstuvwx\"; x = 1",
            "token = '[REDACTED]\"; x = 1",
        ),
        (
            "k = 'sk_live_' + \"abcdefghij\" + 'klmnopqrstuvwx'; y = 2",
            "k = '[REDACTED]'; y = 2",
        ),
        (
            "printf '%s\\n' \"St1nPiped8\" | helm registry login r.io -u app --password-stdin",
            "printf '%s\\n' \"[REDACTED]\" | helm registry login r.io -u app --password-stdin",
        ),
        (
            "printf '%s\\n' 'St1nPiped7' | docker login -u app --password-stdin",
            "printf '%s\\n' '[REDACTED]' | docker login -u app --password-stdin",
        ),
        (
            "printf '%s' 'Sud0Pw9Zq' | sudo -S apt-get update",
            "printf '%s' '[REDACTED]' | sudo -S apt-get update",
        ),
    ] {
        assert_eq!(redact(text), shipped, "{text}");
    }
}

/// A line made of joined literals is looked at around its joins within a few times its
/// length: the first version read the line back to its start at each join, and 4 MiB of
/// `'xoxb-' "12345" '678'` took 12.6 s where it took 0.09 s.
#[test]
fn a_line_of_joined_literals_is_read_in_time_linear_in_it() {
    for unit in [
        "'xoxb-' \"12345\" '678' ",
        "'sk_live_' + \"abcdefghij\" + ",
        "printf '%s\\n' \"Pw9Zq\" | docker login --password-stdin; ",
    ] {
        let text = unit.repeat((256 << 10) / unit.len());
        let (read, _) = counted(&decode::JOIN_BYTES_READ, &text);
        assert!(
            read <= 3 * text.len(),
            "{read} bytes looked at for a text of {} ({unit:?})",
            text.len()
        );
    }
}

/// Text of the shapes the name rules read, around every spelling of the names they know: a
/// name word with a prefix and a suffix, then anything that may follow a name in code, prose,
/// YAML or a table, then a value.
fn name_rule_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    use proptest::sample::select;
    const WORDS: &[&str] = &[
        "secret",
        "secrets",
        "Secret",
        "token",
        "tokens",
        "TOKEN",
        "password",
        "Password",
        "passwords",
        "passwd",
        "pwd",
        "pass",
        "passphrase",
        "api_key",
        "api-key",
        "api.key",
        "apikey",
        "api key",
        "API Key",
        "api_keys",
        "private_key",
        "private-key",
        "private.key",
        "privatekey",
        "private keys",
        "credential",
        "credentials",
        "access key",
        "access_key",
        "access-key",
        "accesskey",
        "app_key",
        "encryption.key",
        "master-key",
        "master.key",
        "signing-key",
        "signing.key",
        "account-key",
        "account.key",
        "client secret",
        "client_secret",
        "secret key",
        "secret_key",
        "secret-key",
        "secretkey",
        "auth",
        "auth_token",
        "auth-tokens",
        "bearer",
        "Bearer",
        "authorization",
        "Proxy-Authorization",
        "Cookie",
        "cookies",
        "set-cookie",
        "x-api-key",
        "X-Auth-Token",
        "x-mytoken",
        "x-foo-auth-key",
        "x-apisecret",
        "private-token",
        "x-hub-signature-256",
        "Ocp-Apim-Subscription-Key",
        "x-amz-security-token",
        "dd-api-key",
    ];
    const PREFIXES: &[&str] = &[
        "", "", "", "db_", "my", "x.", "API_", "client-", "input_", "usage.", "$", "\"", "'", "- ",
        "  ", "[\"", "self.", "\u{17f}", "é",
    ];
    const SUFFIXES: &[&str] = &[
        "", "", "", "s", "_id", "Name", ".rs", "_FILE", "2", "\"", "'", "\"]", "']", "é",
    ];
    const BETWEEN: &[&str] = &[
        "=",
        " = ",
        ":=",
        " := ",
        ": ",
        ":",
        ":  ",
        " : ",
        " is ",
        " was ",
        " is the ",
        " ",
        "\t",
        "  ",
        " == ",
        "!=",
        " === ",
        " !== ",
        "==",
        ":\n",
        ":\n  ",
        ": |\n  ",
        ":  # c\n",
        " +",
        "(",
        ")",
        ", ",
        ";",
        " -> ",
        "\n",
        "=>",
        " =\"",
        ":\"",
        "\" : \"",
        "\u{a0}",
        " is\t",
        " \u{17f} ",
        " waſ ",
        " != ",
        " !== ",
        "\"] != ",
        "{\"name\": \"",
        "\", \"value\": \"",
        "\"value\": \"",
        "\", \"name\": \"",
        "\"}",
        "\"",
    ];
    const VALUES: &[&str] = &[
        "hunter2",
        "schema",
        "Xk9vQ2mLp7RzAbCdEf12",
        "abcdefghijklmnop1234",
        "\"Xk9vQ2mLp7Rz\"",
        "'p@ss w0rd'",
        "\"\"",
        "42",
        "${VAR}",
        "os.getenv(\"X\")",
        "auth.Token(ctx)",
        "Zq8Wm3Np7Lk2Vb6Xc1Rt5Yy",
        "-",
        "|",
        "---------",
        "x",
        "\"a\" == token",
        // Either side of the 16 characters the labels ask for.
        "Xk9vQ2mLp7RzAbC",
        "Xk9vQ2mLp7RzAbCd",
        "\"Xk9vQ2mLp7RzAbCd\"",
        "Xk9v/Q2m+Lp7=RzAb",
    ];
    let piece = prop_oneof![
        4 => (select(PREFIXES), select(WORDS), select(SUFFIXES))
            .prop_map(|(p, w, s)| format!("{p}{w}{s}")),
        4 => select(BETWEEN).prop_map(str::to_owned),
        3 => select(VALUES).prop_map(str::to_owned),
        2 => "[A-Za-z0-9_./+=~@!-]{1,24}",
    ];
    let name = (select(PREFIXES), select(WORDS), select(SUFFIXES))
        .prop_map(|(p, w, s)| format!("{p}{w}{s}"));
    let pieces = proptest::collection::vec(piece, 1..10).prop_map(|pieces| pieces.concat());
    // A header as a name and value pair (`"name": "Cookie", "value": "…"`) in text that is not
    // JSON, either way round.
    let pair = (pieces.clone(), name, select(VALUES), any::<bool>()).prop_map(
        |(before, name, value, reversed)| {
            // Any space the pattern's `\s` reads, ASCII or not.
            let (sp, nb) = if value.len() % 2 == 0 {
                (" ", " ")
            } else {
                ("\u{a0}", "\n")
            };
            if reversed {
                format!("{before} {{\"value\":{sp}\"{value}\",{nb}\"NAME\"{nb}:{sp}\"{name}\"}}")
            } else {
                format!("{before} [{{\"name\"{sp}:{nb}\"{name}\", \"value\": \"{value}\"}}")
            }
        },
    );
    // A name, what follows it and a value: the shapes the sites read, without the chance of
    // the pieces lining up.
    let shaped = (
        pieces.clone(),
        select(WORDS),
        select(BETWEEN),
        select(VALUES),
    )
        .prop_map(|(before, name, between, value)| format!("{before} {name}{between}{value}"));
    prop_oneof![4 => pieces, 2 => shaped, 1 => pair]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
        std::env::var("KCAP_REDACT_PROPS_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(8192)
    ))]

    /// A rule is opened only by a keyword at its site: what it redacts is what it redacted
    /// when every occurrence opened it, in text and in a JSON string.
    #[test]
    fn sites_change_no_redaction(text in name_rule_text()) {
        static WITHOUT: std::sync::LazyLock<Redactor> =
            std::sync::LazyLock::new(|| Redactor::new().without_sites());
        let with = global();
        proptest::prop_assert_eq!(with.redact_text(&text), WITHOUT.redact_text(&text), "{:?}", text);
        let line = serde_json::json!({"type": "response_item", "payload": {"output": text}}).to_string();
        proptest::prop_assert_eq!(with.redact_line(line.as_bytes()), WITHOUT.redact_line(line.as_bytes()));
    }
}

/// `(?i)` reads the long s as an `s` and the Kelvin sign as a `k`, so a rule's pattern takes
/// `waſ` for `was`: whatever its site reads around a keyword must read them so too, or a
/// label such as `client secret waſ :` and its value on the next line is redacted or not
/// depending on which keyword opened the rule. Every example of every rule, with each `s` and
/// `k` in turn written as the character that folds to it.
#[test]
fn sites_read_the_letters_that_fold_to_s_and_k_as_the_patterns_do() {
    let with = global();
    let without = Redactor::new().without_sites();
    let examples = super::rules::RULES
        .iter()
        .flat_map(|r| r.positive.iter().chain(r.negative))
        .chain(
            super::providers::RULES
                .iter()
                .flat_map(|p| p.positive.iter().chain(p.negative)),
        );
    let mut variants = 0;
    for example in examples {
        for (at, c) in example.char_indices() {
            let folded = match c {
                's' | 'S' => '\u{17F}',
                'k' | 'K' => '\u{212A}',
                _ => continue,
            };
            let text = format!("{}{folded}{}", &example[..at], &example[at + 1..]);
            variants += 1;
            assert_eq!(
                with.redact_text(&text),
                without.redact_text(&text),
                "{text:?}"
            );
        }
    }
    assert!(variants > 1000, "only {variants} variants were read");
    // Labels the examples do not hold, with the folding letter where a site reads a word.
    for text in [
        "client secret waſ :\nXk9vQ2mLp7RzAbC",
        "client secret \u{212A}ey: Xk9vQ2mLp7RzAbCdEf12",
        "secret_\u{212A}ey iſ Xk9vQ2mLp7RzAbCdEf12",
        "the token waſ Xk9vQ2mLp7RzAbCdEf12",
    ] {
        assert_eq!(
            with.redact_text(text),
            without.redact_text(text),
            "{text:?}"
        );
    }
}

/// A name of thousands of bytes with a keyword every few of them (tool output of letters
/// without a blank, a minified identifier) is read once, not once for each keyword in it: read
/// at every occurrence, a 4 MiB line of them took minutes, and a watcher stopped shipping.
#[test]
fn a_long_name_full_of_keywords_is_read_once() {
    let redactor = global();
    // Every keyword the sites read a name around, repeated into one name; and tool output of
    // letters in a fixed stride, which holds keywords by chance.
    let stride: String = (0..6000u32)
        .map(|i| char::from(b'a' + ((i * 7 + 3) % 26) as u8))
        .collect();
    let texts = redactor
        .words
        .iter()
        .filter(|w| {
            w.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(&c))
        })
        .map(|w| format!("{w}_").repeat(4096 / (w.len() + 1) + 1))
        .chain([stride]);
    let mut checked = 0;
    for name in texts {
        for text in [
            name.clone(),
            format!("{name} = value"),
            serde_json::json!({"payload": {"output": name}}).to_string(),
        ] {
            rules::NAME_BYTES_READ.with(|n| n.set(0));
            redactor.redact_text(&text);
            let read = rules::NAME_BYTES_READ.with(std::cell::Cell::get);
            assert!(
                read <= 2 * text.len(),
                "{read} bytes of names read for a text of {}: {:.60}…",
                text.len(),
                text
            );
            checked += 1;
        }
    }
    assert!(checked > 300, "only {checked} texts");
}

/// A value that is a broken marker (`[REDACTED` glued to the quote after it) is no secret
/// whose copies go: taken as one, the next `[REDACTED` became a whole marker, and the second
/// pass read the header glued after it anew (found by the idempotence property).
#[test]
fn a_broken_marker_as_a_value_leaves_the_next_broken_marker_alone() {
    let text = "token =[REDACTED\"gpt-tokenizer\": \"^2.1.0\" DB_PASSWORD=p@ss;w0rd|x [REDACTEDCookie: sid=ab'cd; t=1\n";
    let once = redact(text);
    assert_eq!(redact(&once), once);
    assert!(once.contains("[REDACTEDCookie"), "{once}");
    assert!(!once.contains("p@ss"), "{once}");
    assert!(
        REDACTED.as_bytes().starts_with(MARKER_OPEN) && MARKER_OPEN.len() + 1 == REDACTED.len()
    );
}

/// A secret longer than the head its copies are looked for by: every copy goes whole, and a
/// copy of its head alone with other bytes after it goes as far as the secret would.
#[test]
fn copies_of_a_long_secret_go_whole() {
    let secret: String = (0..600u32)
        .map(|i| char::from(b"aZ3kQ9xM"[(i as usize * 5 + i as usize / 7) % 8]))
        .collect();
    let text = format!("export API_TOKEN={secret}\necho {secret} done\n");
    let out = redact(&text);
    assert!(!out.contains(&secret[..20]), "{out}");
    assert!(!out.contains(&secret[secret.len() - 20..]), "{out}");
    assert!(out.ends_with(" done\n"), "{out}");
    let json = serde_json::json!({"output": text}).to_string();
    let out = global().redact_line(json.as_bytes());
    assert!(!out.contains(&secret[secret.len() - 20..]), "{out}");
    // Letters alone: its copy stands alone as a whole (its head alone is glued to the rest).
    let mut x = 7u32;
    let letters: String = (0..300)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            char::from(
                b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[(x >> 16) as usize % 52],
            )
        })
        .collect();
    let mut spans: Vec<Range<usize>> = Vec::new();
    spans.push(0..300);
    let text = format!("{letters} and again: {letters}.");
    every_copy(&text, &mut spans, false);
    assert!(spans.contains(&(312..612)), "{spans:?}");
}

/// Two secrets starting alike (`Xk9v/Q2m+Lp7=` taken by one rule, `Xk9v/Q2m+Lp7=RzAb` by
/// another): a copy of the longer goes whole, not as far as the shorter (found by the sites
/// property: its tail shipped).
#[test]
fn a_copy_of_a_longer_secret_goes_whole_beside_a_shorter_one_alike() {
    let mut spans = vec![0..13, 35..52];
    let text = "Xk9v/Q2m+Lp7=RzAbaccess key bearer Xk9v/Q2m+Lp7=RzAb";
    every_copy(text, &mut spans, false);
    assert!(spans.contains(&(0..17)), "{spans:?}");
}

/// A value longer than the kilobyte a rule judges it by goes whole, unquoted to its blank,
/// quoted to its closing quote (past an escaped one).
#[test]
fn a_value_past_the_judged_kilobyte_goes_whole() {
    let mut x = 11u32;
    let mut random = |n: usize| -> String {
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                char::from(
                    b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
                        [(x >> 16) as usize % 57],
                )
            })
            .collect()
    };
    let long = random(3000);
    assert_eq!(
        redact(&format!("API_TOKEN={long} tail")),
        "API_TOKEN=[REDACTED] tail"
    );
    let (a, b) = (random(1500), random(600));
    let quoted = format!(r#"password="{a}\"{b}" tail"#);
    let out = redact(&quoted);
    assert!(!out.contains(&b[..20]) && out.ends_with("\" tail"), "{out}");
}

/// A Secret manifest written kind first, its data past the kilobyte after `kind: Secret`: every
/// data value goes (the rule reads the whole text, not a value after its match), and a second
/// pass changes nothing.
#[test]
fn a_secret_manifests_data_past_a_kilobyte_goes() {
    let cert = "TUlJQ2xqQ0NBWDRDQ1FEQU9KS1pCNmhSVkRBTkJna3Foa2lHOXcwQkFRc0ZBREFOTVFzd0NRWURWUVFHRXdKVlV6QWVGdzB5TURBeE1ERXdNREF3TURCYUZ3MHlNVEF4TURFd01EQXdNREJhTUEwPQ".repeat(20);
    let text = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\ndata:\n  ca.crt: {cert}\n  app.env: QXBwRW52RGF0YTk5\n"
    );
    let once = redact(&text);
    assert!(!once.contains("QXBwRW52RGF0YTk5"), "{once}");
    assert_eq!(redact(&once), once);
}

/// YAML tags before a value (`password: !!str !!str … X`) are skipped to the value, and a
/// line of 200,000 of them is read to its end (the value past the judged kilobyte is the
/// documented limit, docs/redaction.md).
#[test]
fn a_chain_of_yaml_tags_is_read_to_its_value() {
    let r = super::global();
    let text = format!("password: {}Xk9mW2xL8qP5", "!!str ".repeat(200_000));
    // Returning is the check: a call per tag would overflow the stack and abort the run.
    let _ = r.redact_text(&text);
    let short = r.redact_text("password: !!str !!str !!str Xk9mW2xL8qP5");
    assert!(!short.contains("Xk9mW2xL8qP5"), "{short}");
}

proptest::proptest! {
    /// JSON inside a JSON string, walked with the special bytes its decoding gave
    /// (`Decoded::specials`): tokenized as the search tokenizes it (the same tokens, or not
    /// JSON for both), and each of its strings decoded as the search decodes it (the same text,
    /// and the same map back to the raw content, decoded byte by byte).
    #[test]
    fn json_in_a_string_walked_by_its_escapes_reads_as_searched(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "{", "}", "[", "]", ",", ":", " ", "\n", "\t", "\"", "\"k\":", "\"v\"", "1", "true",
            "\"a\\\"b\"", "\"\\\\\"", "\"\\n\"", "\"\\u0041\\u00e9\"", "\"\\ud83d\\ude00\"", "é",
            "\"x\\/y\"", "\"\\u001b\"", "\\", "\"tab\\tend\"", "\"long run of text\"",
        ]), 0..30),
        wrap in proptest::bool::ANY,
    ) {
        // JSON holding the pieces as its strings (escaped as JSON escapes them), or the pieces
        // alone (JSON or not).
        let text = pieces.concat();
        let inner = if wrap {
            let mut object = serde_json::Map::new();
            object.insert("output".into(), text.clone().into());
            object.insert(text.clone(), serde_json::json!([text, 1, {"n": text}]));
            serde_json::to_string_pretty(&object).unwrap()
        } else {
            text
        };
        let raw = serde_json::to_string(&inner).unwrap();
        let content = &raw[1..raw.len() - 1];
        let decoded = decode::decode_checked(content);
        proptest::prop_assert_eq!(&decoded.text, &inner);
        let specials = decoded.specials();
        let want: Vec<usize> = inner
            .bytes()
            .enumerate()
            .filter(|&(_, b)| json::needs_escape(b))
            .map(|(i, _)| i)
            .collect();
        let got: Vec<usize> = specials.iter().map(|&p| p as usize).collect();
        proptest::prop_assert_eq!(got, want);
        let searched = json::parse(&inner);
        let known = json::parse_known(&inner, &specials);
        proptest::prop_assert_eq!(format!("{searched:?}"), format!("{known:?}"), "{:?}", inner);
        for tok in searched.unwrap_or_default() {
            let (json::Tok::Str(r) | json::Tok::Key(r)) = tok else {
                continue;
            };
            let a = decode::decode_checked(&inner[r.clone()]);
            let b = decode::decode_checked_known(&inner[r.clone()], &specials, r.start);
            proptest::prop_assert_eq!(&a.text, &b.text);
            proptest::prop_assert_eq!(a.may_hide(), b.may_hide());
            for at in 0..a.text.len() {
                proptest::prop_assert_eq!(a.to_raw(at..at + 1), b.to_raw(at..at + 1));
            }
        }
    }

    /// A line's strings decoded from the escapes its tokenizer listed
    /// (`json::parse_escapes`) decode as the search decodes them: the same tokens as the plain
    /// tokenizer (or not JSON for both), and for each string the same text, the same map back
    /// to the raw bytes and the same answer to whether decoding may hide something. A list
    /// missing an escape, or one place off, leaves that escape undecoded.
    #[test]
    fn a_lines_strings_decoded_from_listed_escapes_read_as_searched(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "{", "}", "[", "]", ",", ":", " ", "\"", "\"k\":", "\"v\"", "1", "null",
            "\"a\\\"b\"", "\"\\\\\"", "\"\\n\"", "\"\\u0041\\u00e9\"", "é", "\"x\\/y\"",
            "\"\\\\u0074\"", "\"\\\\\\/\"", "\\", "\"tab\\tend\"", "\"long run of text\"",
        ]), 0..30),
        wrap in proptest::bool::ANY,
    ) {
        // A line holding the pieces as an escaped string (JSON inside JSON, as a tool's output
        // is), or the pieces alone (JSON or not).
        let text = pieces.concat();
        let line = if wrap {
            serde_json::json!({"type": "function_call_output", "output": text, text.clone(): [1]})
                .to_string()
        } else {
            text
        };
        let searched = json::parse(&line);
        let listed = json::parse_escapes(&line);
        proptest::prop_assert_eq!(
            format!("{searched:?}"),
            format!("{:?}", listed.as_ref().map(|(toks, _)| toks)),
            "{:?}", line
        );
        let Some((toks, Some(escapes))) = listed else {
            return Ok(());
        };
        for tok in toks {
            let (json::Tok::Str(r) | json::Tok::Key(r)) = tok else {
                continue;
            };
            let a = decode::decode_checked(&line[r.clone()]);
            let b = decode::decode_checked_known(&line[r.clone()], &escapes, r.start);
            proptest::prop_assert_eq!(&a.text, &b.text, "{:?}", line);
            proptest::prop_assert_eq!(a.may_hide(), b.may_hide());
            for at in 0..a.text.len() {
                proptest::prop_assert_eq!(a.to_raw(at..at + 1), b.to_raw(at..at + 1));
            }
        }
    }
}

/// Rust's code under secret names ships as written: a `let` binding given code, a parameter's
/// or field's reference or array type, a `::` path, a field's type named after it or of
/// capitalised words under a name of several words, a snake_case variable holding a
/// credential's word, a macro's `$name`, a small hex number, a constant's name ending in a
/// number. Each was redacted, and every copy of it in the file with it (rustls' `OkmBlock,`
/// in every signature). What only looks like them still goes.
#[test]
fn rust_code_under_secret_names_ships_readable() {
    for text in [
        "fn f(secret: &[u8]) -> Vec<u8> {",
        "fn g(&self, secret: &OkmBlock, common: &mut CommonState) {",
        "    fn h(salt: Option<&[u8]>, secret: &'static str, key: &mut Buf) {}",
        "        let shared_secret = our_key_share",
        "        let secret = self",
        "        let traffic_secret = ks.derive_logged_secret(kind, hash, &log, &[0; 32]);",
        "        let password = url.password().and_then(|pass| {",
        "        let doing_client_auth = if full_handshake {",
        "let secret = [0x42u8; 32];",
        "            master_secret: [0u8; 48],",
        "    let zeros: SharedSecret = [0; SHARED_SECRET_LEN];",
        "type SharedSecret = [u8; SHARED_SECRET_LEN];",
        "    cookie_store: &dyn crate::cookie::CookieStore,",
        "            common.quic.hs_secrets = Some(quic::Secrets::new(",
        "            cookie: Some(PayloadU16::new(vec![0])),",
        "    secrets: ConnectionSecrets,",
        "    client_handshake_traffic_secret: OkmBlock,",
        "            client_handshake_traffic_secret: client_secret,",
        "            check_private_key_bytes: $check_private_key_bytes,",
        "    NoAuth = 0x00,",
        "            ClientApplicationTrafficSecret => \"CLIENT_TRAFFIC_SECRET_0\",",
    ] {
        assert_eq!(redact(text), text);
    }
    for (text, want) in [
        ("const token = Xk9vQ2mLp7Rz", "const token = [REDACTED]"),
        ("token = &Xk9vQ2mLp7Rz{", "token = [REDACTED]"),
        ("password: SuperSecret,", "password: [REDACTED]"),
        ("secret: SuperSecret,", "secret: [REDACTED]"),
        ("    db_password: Hunter2,", "    db_password: [REDACTED]"),
        ("secret_key = my_secret_value_2", "secret_key = [REDACTED]"),
        (
            "api_key = 0x3f9c2b7a1d8e4f6a0b5c9d2e7f1a3b8c",
            "api_key = [REDACTED]",
        ),
    ] {
        assert_eq!(redact(text), want, "{text:?}");
    }
}

/// A secret's name and a colon inside a sentence (a comment, an error message in a literal)
/// begin prose, not a setting: `# First pass: determine …`, `TypeError("pwd: expected bytes
/// …")`. Each took its next word, and every copy of that word in the file went with it. An
/// empty literal and a header's variable in a literal are no values either.
#[test]
fn prose_after_a_secret_name_and_its_colon_ships_readable() {
    for text in [
        "        # First pass: determine maximum length of long option names",
        "            raise TypeError(\"pwd: expected bytes, got %s\" % type(pwd).__name__)",
        "            username = password = ''",
        "            'Authorization': auth,",
    ] {
        assert_eq!(redact(text), text);
    }
}

/// A setting's unquoted value is its whole line (a YAML scalar of words: `password: correct
/// horse battery staple` shipped its last three words), up to a comment; a YAML anchor before
/// the value is no value (`password: &pw hunter22` shipped the password).
#[test]
fn a_settings_value_of_words_and_an_anchored_value_are_redacted_whole() {
    for (text, want) in [
        (
            "password: correct horse battery staple",
            "password: [REDACTED]",
        ),
        (
            "  - password: correct horse battery",
            "  - password: [REDACTED]",
        ),
        (
            "  password: hunter22 # the db one",
            "  password: [REDACTED] # the db one",
        ),
        ("password: &pw hunter22", "password: &pw [REDACTED]"),
        (
            "password: Hunter22, user: bob",
            "password: [REDACTED] user: bob",
        ),
        (
            "password: correct horse, battery staple",
            "password: [REDACTED]",
        ),
    ] {
        assert_eq!(redact(text), want, "{text:?}");
    }
}

/// Python's code under secret names ships as written: a call through a dotted path whatever
/// its arguments, one in parentheses, a small number, an object id, a name assigned in turn, a
/// setting's state, a keyword argument given its own name's variable.
#[test]
fn python_code_under_secret_names_ships_readable() {
    for text in [
        "            passwd = getpass.getpass(\"Enter password for %s in %s: \" % (realm, host))",
        "_token_pattern = re.compile(r\"\"\"",
        "        pwd = (self.password.encode('utf-8') if isinstance(self.password, str) else x)",
        "ERRORTOKEN = 58",
        "    SERVER_AUTH = '1.3.6.1.5.5.7.3.1'",
        "    userid = passwd = acct = ''",
        " 'MODULE_PWD_STATE': 'yes',",
        "        with self.open(member, pwd=pwd) as source:",
    ] {
        assert_eq!(redact(text), text);
    }
    // What only looks like them still goes.
    for (text, want) in [
        ("PIN_TOKEN = 4821", "PIN_TOKEN = [REDACTED]"),
        ("passwd = Hunter2x.value", "passwd = [REDACTED]"),
    ] {
        assert_eq!(redact(text), want, "{text:?}");
    }
}

/// A find that has the shape of code's words (`Section,`, `credHelpers`, `access_tokens`) is
/// judged where it was named: its copies elsewhere are the word in other sentences and code
/// (a docstring's `auth: Section,` took every `Section,` of a 60 KB file), not the secret
/// repeated. A key's and a password's copies still go (`copies_of_a_secret_*`).
#[test]
fn copies_of_a_find_shaped_like_code_words_stay() {
    let text = "  Attributes:\n    auth: Section, The section of auth.\n    billing: Section, The section of billing.\n";
    let out = redact(text);
    assert!(
        out.contains("billing: Section, The section of billing."),
        "{out}"
    );
    let text =
        "CREDENTIAL_HELPER_KEY = credHelpers\n    \"\"\"Adds Docker 'credHelpers' entry.\"\"\"";
    assert!(redact(text).contains("'credHelpers' entry"));
    // Values that say they are hidden, and the types docstrings name.
    for text in [
        "        v = '--- Token Redacted ---'",
        "    token_expiry_time: datetime, The time when the token expires.",
        "    credentials: google.auth.credentials.Credentials.",
        "    # token_usage=remote is to indicate that",
        "_ACCESS_TOKEN_TABLE = 'access_tokens'",
    ] {
        assert_eq!(redact(text), text);
    }
    assert_eq!(
        redact("DB_PASSWORD=Hunt3rPw9x\necho adminHunt3rPw9x"),
        "DB_PASSWORD=[REDACTED]\necho admin[REDACTED]"
    );
    // A key written in parts joined by `_` is no identifier: its copy goes.
    assert_eq!(
        redact("API_KEY=ab12_cd34_ef56_gh78\necho ab12_cd34_ef56_gh78"),
        "API_KEY=[REDACTED]\necho [REDACTED]"
    );
}

/// JavaScript's code under secret names ships as written: a member named by its last part
/// (`tokenData.cidr_whitelist`), a prompt asking for a password, `fetch`'s credentials mode,
/// a regular expression's literal, a comment before a value, a program that asks for one
/// (`GIT_ASKPASS`), an enum's small number.
#[test]
fn javascript_code_under_secret_names_ships_readable() {
    for text in [
        "      tokenData.cidr_whitelist = validCIDR",
        "const passwordPrompt = 'npm password: '",
        "  const password = await read.password('Password:', creds.password)",
        "    credentials: 'include',",
        "const invalidTokenRegex = /[^^_`a-zA-Z\\-0-9!#$%&'*+.|~]/",
        "const requestCredentials = /** @type {const} */ (['omit', 'same-origin', 'include'])",
        "    GIT_ASKPASS: 'echo',",
        "          Authorization: `Bearer ${process.env.ACTIONS_ID_TOKEN_REQUEST_TOKEN}`,",
        "    Socks5Auth[Socks5Auth[\"NoAuth\"] = 0] = \"NoAuth\";",
    ] {
        assert_eq!(redact(text), text);
    }
    // What only looks like them still goes: a member that is the secret's own, a password
    // ending in a colon's neighbour, a pass name with a separator.
    for (text, want) in [
        (
            "config.password = 'Hunt3rPw9x'",
            "config.password = '[REDACTED]'",
        ),
        (
            "secret.value = 'Xk9vQ2mLp7Rz'",
            "secret.value = '[REDACTED]'",
        ),
        ("secrets.db = 'Hunt3rPw9x'", "secrets.db = '[REDACTED]'"),
        ("DB_PASS: 'Hunt3rPw9x',", "DB_PASS: '[REDACTED]',"),
        (
            "  Authorization: `Bearer Xk9vQ2mLp7RzAbCd`,",
            "  Authorization: `[REDACTED]`,",
        ),
        (
            "const password = 'Hunt3r:Pw9x'",
            "const password = '[REDACTED]'",
        ),
    ] {
        assert_eq!(redact(text), want, "{text:?}");
    }
}

/// Object keys are remembered by their text ([`KeyMemo`]: a token count's keys come on every
/// line). A key read back from the memo is redacted as it was the first time: a pair in a key
/// loses its value, a key naming a secret takes its string, and a count's key ships. The memo
/// forgets all at once when full, and stays bounded.
#[test]
fn keys_read_back_from_the_memo_redact_as_the_first_time() {
    let r = Redactor::new();
    let line = r#"{"o":{"DB_PASSWORD=Xk9vQ2mLp7Rz":1,"api_token":"Hunt3rTok9Zq","input_tokens":5,"cached_input_tokens":3}}"#;
    let expected = r#"{"o":{"DB_PASSWORD=[REDACTED]":1,"api_token":"[REDACTED]","input_tokens":5,"cached_input_tokens":3}}"#;
    for round in 0..3 {
        assert_eq!(r.redact_line(line.as_bytes()), expected, "round {round}");
    }
    for i in 0..(KEY_MEMO_KEYS + 40) {
        let other = format!(r#"{{"token_{i}":"Zq8Wm3Np7Lk2Vb6X{i}"}}"#);
        assert_eq!(
            r.redact_line(other.as_bytes()),
            format!(r#"{{"token_{i}":"[REDACTED]"}}"#)
        );
    }
    assert!(r.key_memo.lock().unwrap().found.len() <= KEY_MEMO_KEYS);
    assert_eq!(
        r.redact_line(line.as_bytes()),
        expected,
        "after the memo filled"
    );
}

/// Objects as languages print them: the secret field's value goes, and the fields after it,
/// the separators and the closing bracket stay (Kotlin's data classes, Lombok's `toString`,
/// Java's maps; Rust's `{:?}` of an `Option`). A connection string keeps the blanks of its
/// values: its pairs end at `;`.
#[test]
fn printed_objects_keep_the_fields_after_a_secret() {
    for (text, want) in [
        (
            "User(name=bob, password=hunter2x, email=a@b.c)",
            "User(name=bob, password=[REDACTED], email=a@b.c)",
        ),
        (
            "{password=hunter2x, user=bob}",
            "{password=[REDACTED], user=bob}",
        ),
        (
            "DataSource(url=jdbc:postgresql://db/app, username=app, password=S3cretPw9, poolSize=10)",
            "DataSource(url=jdbc:postgresql://db/app, username=app, password=[REDACTED], poolSize=10)",
        ),
        (
            "ConnectionConfig{host='db', password='S3cretPw9', port=5432}",
            "ConnectionConfig{host='db', password='[REDACTED]', port=5432}",
        ),
        (
            "Config { password: Some(\"hunter2x\"), user: \"bob\" }",
            "Config { password: Some(\"[REDACTED]\"), user: \"bob\" }",
        ),
        (
            "Server=db;User Id=sa;Password=S3cret Pw9, x;Database=app",
            "Server=db;User Id=sa;Password=[REDACTED];Database=app",
        ),
    ] {
        assert_eq!(redact(text), want, "{text:?}");
    }
}

/// `echo 'user:pass' | chpasswd`: a password holding the other quote or a blank is taken to
/// the quote that closes the pair, not cut where its first odd character is.
#[test]
fn a_chpasswd_pair_is_taken_to_its_closing_quote() {
    for (text, want) in [
        (
            "echo 'deploy:Pa\"ss9 word' | chpasswd",
            "echo 'deploy:[REDACTED]' | chpasswd",
        ),
        (
            "echo \"deploy:Pa'ss9\" | sudo chpasswd",
            "echo \"deploy:[REDACTED]\" | sudo chpasswd",
        ),
        (
            "echo deploy:Chp4sswd | chpasswd",
            "echo deploy:[REDACTED] | chpasswd",
        ),
    ] {
        assert_eq!(redact(text), want, "{text:?}");
    }
}

/// A form's validation rule where a value would be is no password.
#[test]
fn a_validation_rule_is_no_password() {
    for text in [
        "    password: required,",
        "if (!ok) throw new Error(\"password: required\")",
        "  password: optional",
    ] {
        assert_eq!(redact(text), text);
    }
}

/// Redacting shortens a value; a rule whose phrase may run 40 bytes between its label and the
/// separator must not find, in the shorter text, a label it did not find before: redacting
/// twice is redacting once.
#[test]
fn a_redacted_value_inside_a_labels_phrase_does_not_open_it() {
    let text = "token \"eyJhbGciOiJIUzI1.eyJzdWIiOiIx.SflKxwRJSMeKKF2 \"gpt-tokenizer\": \"^2.1.0\" \"gpt-tokenizer\": \"^2.1.0\" ";
    let once = redact(text);
    assert!(!once.contains("eyJhbGciOiJIUzI1"), "{once}");
    assert_eq!(redact(&once), once);
    // The same with a word before the value inside the literal, as raw text and inside a
    // JSON string: the phrase the marker shortens reaches the pair after it on the first
    // pass's output, so the first pass redacts again until it settles.
    for text in [
        "token \"x eyJhbGciOiJIUzI1.eyJzdWIiOiIx.SflKxwRJSMeKKF2 \"gpt-tokenizer\": \"^2.1.0\" \"gpt-tokenizer\": \"^2.1.0\" ",
        r#"{"output":"token \"x eyJhbGciOiJIUzI1.eyJzdWIiOiIx.SflKxwRJSMeKKF2 \"gpt-tokenizer\": \"^2.1.0\" \"gpt-tokenizer\": \"^2.1.0\" "}"#,
        "api key 'x y sk-abcdefghij1234abcdefghij1234abcd 'z': Xk9vQ2mLp7RzAbCd9 'w': 7",
    ] {
        let once = redact(text);
        assert!(
            !once.contains("eyJhbGciOiJIUzI1") && !once.contains("sk-abc"),
            "{once}"
        );
        assert_eq!(redact(&once), once, "{text}");
    }
    // A marker further inside a quoted literal still labels the secret after it: text that
    // held the marker before must not ship what follows.
    let shipped = redact("token \"x [REDACTED] y\": Xk9vQ2mLp7RzAbCd");
    assert!(!shipped.contains("Xk9vQ2mLp7RzAbCd"), "{shipped}");
    // Text that already held the marker before it ships: the marker alone in the phrase's
    // quotes, or outside them, still labels the value after it (T2.1).
    for text in [
        "token \"[REDACTED]\": Xk9vQ2mLp7RzAbCd",
        "New personal access token (copy it now [REDACTED]): Pat9ZqXk9mW2xL8qP5vN3tY7",
    ] {
        let shipped = redact(text);
        assert!(
            !shipped.contains("Xk9vQ2mLp7RzAbCd") && !shipped.contains("Pat9ZqXk9"),
            "{shipped}"
        );
    }
}

/// A secret's key holding a value after a stray backslash (`\sk-`) is data, not a regular
/// expression: an escape alone is no pattern's group or class (the property test
/// `escapes_next_to_secrets_stay_valid` found it kept).
#[test]
fn a_keys_value_after_a_backslash_is_no_regular_expression() {
    let r = Redactor::new();
    for line in [r#"{"api_key":"\\sk-"}"#, r#"{"api_key":"\\sk-a1-b2"}"#] {
        let shipped = r.redact_line(line.as_bytes());
        assert_eq!(shipped, r#"{"api_key":"[REDACTED]"}"#, "{line}");
    }
    // A pattern's group or class still is one.
    let code = "jsonnet_token = r'[^\\W\\d]\\w*'";
    assert_eq!(r.redact_text(code), code);
}

/// A JSON array of a secret's name and its value (`["password", "…"]`, a request's
/// parameters as a list of pairs) ships without the value; a list of names does not lose
/// its second name (`"required": ["password", "username"]`).
#[test]
fn a_json_pair_of_a_secrets_name_and_its_value_loses_the_value() {
    for (text, secret) in [
        (r#"[["password", "Zq9vK2mLp7Rx4tW8"]]"#, "Zq9vK2mLp7Rx4tW8"),
        (
            r#"{"params": [["api_key", "Kq8vB2mLp7Rx4tW9"], ["q", "x"]]}"#,
            "Kq8vB2mLp7Rx4tW9",
        ),
    ] {
        let shipped = redact(text);
        assert!(!shipped.contains(secret), "{shipped}");
        assert!(shipped.contains("[REDACTED]"), "{shipped}");
    }
    for text in [
        r#"{"required": ["password", "username"]}"#,
        r#"{"required": ["password", "Email"]}"#,
        r#"["token", "Bearer"]"#,
        r#"["access_token", "refresh_token"]"#,
        r#"["the api_key field", "src/main.rs9"]"#,
    ] {
        assert_eq!(redact(text), text);
    }
}
