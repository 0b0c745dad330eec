//! Precision on real credential-handling code (docs/behaviour.md T2.7-T2.9): public
//! files nobody on the project wrote (an AWS SDK's credential providers, a JOSE library, docker's
//! credential store, OAuth libraries in Go and Python, a cloud SDK's AWS credentials, a CI
//! action's git credential helper, Kubernetes manifests and a Helm template that reference
//! secrets, lockfiles, a React auth provider, a Terraform module with password variables) are
//! wrapped as tool output in the rollout lines Codex writes, and what the redactor changes in
//! them is counted. None of them holds a secret: every marker in what ships is a false
//! redaction, and the code that handles credentials reaches the server mangled.
//!
//! The files and where each comes from (repository, path, commit, licence) are in
//! `tests/fixtures/precision/SOURCES.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use kcap_watch::ship::redact::global;

const MARKER: &str = "[REDACTED]";

/// Every fixture file, with the secrets it holds (a documented example key would be one; each
/// file was chosen to hold none) and the false redactions known and left (each one below, with
/// why). A file with neither ships byte for byte; the others get exactly that many markers, so
/// a new false redaction, or one fixed, shows here.
///
/// Left, 4 in all:
/// - `auth0-context.tsx`: `subject_token: 'eyJhbGciOiJIUzI1NiIsInR5cCI6Ikp...'`, an example
///   token elided after 31 characters: that much of a real credential shown before `...` is
///   still most of it, so only elisions of 8 characters or fewer are placeholders.
/// - `credentials.py`: `ACCESS_KEY = 'AWSAccessKeyId'`, `SECRET_KEY = 'AWSSecretKey'`: names
///   written as one PascalCase word; a password of capitalised words (`MySecretKey`) has the
///   same shape, so only names with separators (`AWS_SECRET_ACCESS_KEY`) are taken as names.
/// - `configfile/file.go`: `"auth": base64-encoded-username-pat` in a comment, a description
///   standing in for a value; a passphrase of joined words has the same shape.
const EXPECTED: &[(&str, usize, usize)] = &[
    ("actions-checkout/src/git-auth-helper.ts", 0, 0),
    ("auth0-react/src/auth0-context.tsx", 0, 1),
    ("auth0-react/src/auth0-provider.tsx", 0, 0),
    ("botocore/botocore/credentials.py", 0, 2),
    ("docker-cli/cli/config/config.go", 0, 0),
    ("docker-cli/cli/config/configfile/file.go", 0, 1),
    ("docker-cli/cli/config/credentials/credentials.go", 0, 0),
    ("docker-cli/cli/config/credentials/file_store.go", 0, 0),
    ("docker-cli/cli/config/credentials/native_store.go", 0, 0),
    ("docker-cli/cli/config/types/authconfig.go", 0, 0),
    ("docker-cli/vendor.sum", 0, 0),
    (
        "google-auth-library-python/google/auth/_oauth2client.py",
        0,
        0,
    ),
    ("google-auth-library-python/google/auth/aws.py", 0, 0),
    (
        "google-auth-library-python/google/oauth2/credentials.py",
        0,
        0,
    ),
    (
        "grafana-helm-charts/charts/grafana/templates/_pod.tpl",
        0,
        0,
    ),
    ("jose/package-lock.json", 0, 0),
    ("jose/src/jwks/remote.ts", 0, 0),
    ("jose/src/key/generate_secret.ts", 0, 0),
    ("jose/src/lib/jwe_decrypt.ts", 0, 0),
    ("jose/src/lib/jws_verify.ts", 0, 0),
    ("jose/src/lib/jwt_claims_set.ts", 0, 0),
    ("jose/src/lib/key.ts", 0, 0),
    ("jose/src/lib/key_management.ts", 0, 0),
    ("jose/src/util/errors.ts", 0, 0),
    (
        "kubernetes-examples/AI/vllm-deployment/vllm-deployment.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/https-nginx/nginx-app.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/newrelic-infrastructure/newrelic-infra-daemonset.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/openshift-origin/openshift-controller.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/persistent-volume-provisioning/glusterfs/glusterfs-storageclass.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/persistent-volume-provisioning/quobyte/quobyte-storage-class.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/persistent-volume-provisioning/rbd/rbd-storage-class.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/volumes/azure_file/azure-pv.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/volumes/cephfs/cephfs-with-secret.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/volumes/iscsi/iscsi-chap.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/volumes/storageos/storageos-pv.yaml",
        0,
        0,
    ),
    (
        "kubernetes-examples/_archived/volumes/storageos/storageos-sc.yaml",
        0,
        0,
    ),
    ("oauth2/clientcredentials/clientcredentials.go", 0, 0),
    ("oauth2/google/default.go", 0, 0),
    ("oauth2/google/externalaccount/aws.go", 0, 0),
    ("oauth2/internal/token.go", 0, 0),
    ("oauth2/oauth2.go", 0, 0),
    ("oauth2/token.go", 0, 0),
    (
        "requests-oauthlib/requests_oauthlib/oauth2_session.py",
        0,
        0,
    ),
    ("ripgrep/Cargo.lock", 0, 0),
    ("rustls/src/crypto/hpke.rs", 0, 0),
    ("rustls/src/server/tls12.rs", 0, 0),
    ("rustls/src/tls12/mod.rs", 0, 0),
    ("rustls/src/tls13/key_schedule.rs", 0, 0),
    ("terraform-aws-rds/main.tf", 0, 0),
    ("terraform-aws-rds/variables.tf", 0, 0),
];

/// At most this many false redactions per 100 KB of fixture (docs/redaction.md, "Precision").
const PER_100_KB: usize = 1;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/precision")
}

/// The fixture files on disk, relative to [`root`] (the notes beside them left out).
fn files_on_disk() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "LICENSES") {
                    walk(&path, base, out);
                }
            } else if path.file_name().is_some_and(|n| n != "SOURCES.md") {
                let rel = path.strip_prefix(base).unwrap();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &root(), &mut out);
    out.sort();
    out
}

/// Where a file's text sits in a rollout line: the line, and the paths (object keys, from the
/// top) of the strings that hold the text once every nested JSON string is decoded.
struct Placement {
    name: &'static str,
    line: String,
    holders: Vec<&'static [&'static str]>,
}

/// The placements tool output has in real rollouts.
fn placements(text: &str) -> Vec<Placement> {
    let output = json!({"timestamp": "2026-07-28T16:14:05.115Z", "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "call_1", "output": text}});
    let exec = json!({"timestamp": "2026-07-28T16:14:05.120Z", "type": "event_msg",
        "payload": {"type": "exec_command_end", "call_id": "call_1", "stdout": text, "stderr": "",
            "aggregated_output": text, "exit_code": 0,
            "duration": {"secs": 0, "nanos": 41_062_458}, "formatted_output": text}});
    // The older shell tool: the output string is itself JSON holding the text.
    let wrapped =
        json!({"output": text, "metadata": {"exit_code": 0, "duration_seconds": 0.1}}).to_string();
    let wrapped = json!({"timestamp": "2026-07-28T16:14:05.125Z", "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "call_2", "output": wrapped}});
    vec![
        Placement {
            name: "function_call_output",
            line: output.to_string(),
            holders: vec![&["payload", "output"]],
        },
        Placement {
            name: "exec_command_end",
            line: exec.to_string(),
            holders: vec![
                &["payload", "stdout"],
                &["payload", "aggregated_output"],
                &["payload", "formatted_output"],
            ],
        },
        Placement {
            name: "function_call_output (JSON output)",
            line: wrapped.to_string(),
            holders: vec![&["payload", "output", "output"]],
        },
    ]
}

/// The string at `path` in `value`, decoding a string that is JSON when the path goes on.
fn string_at(value: &Value, path: &[&str]) -> Option<String> {
    let Some((first, rest)) = path.split_first() else {
        return value.as_str().map(str::to_owned);
    };
    match value.get(first)? {
        Value::String(s) if !rest.is_empty() => {
            string_at(&serde_json::from_str::<Value>(s).ok()?, rest)
        }
        v => string_at(v, rest),
    }
}

/// One false redaction: where in the original text a marker replaced something.
struct Found {
    line: usize,
    /// The text replaced.
    removed: String,
    /// ~60 characters each side of it, on one line.
    context: String,
}

/// Each marker in `shipped` that is not in `original`, located in `original`. A marker replaces
/// a span, and everything between markers ships as written: the pieces between the markers are
/// found in order in the original, and what lies between them is what was removed.
fn false_redactions(original: &str, shipped: &str) -> Result<Vec<Found>, String> {
    let mut found = Vec::new();
    let mut at = 0;
    let pieces: Vec<&str> = shipped.split(MARKER).collect();
    for (i, piece) in pieces.iter().enumerate() {
        // A marker the original held already is a piece boundary there too.
        let next = if i == 0 {
            if pieces.len() == 1 && piece != &original {
                return Err("shipped text differs without a marker".to_owned());
            }
            original
                .starts_with(piece)
                .then_some(0)
                .ok_or("shipped text does not start as the original")?
        } else if i == pieces.len() - 1 {
            (original.len() >= at + piece.len() && original.ends_with(piece))
                .then(|| original.len() - piece.len())
                .ok_or("shipped text does not end as the original")?
        } else {
            original[at..]
                .find(piece)
                .map(|o| at + o)
                .ok_or_else(|| format!("piece {i} of the shipped text not in the original"))?
        };
        if i > 0 {
            let removed = &original[at..next];
            if removed != MARKER {
                found.push(Found {
                    line: original[..at].matches('\n').count() + 1,
                    removed: removed.to_owned(),
                    context: context(original, at, next),
                });
            }
        }
        at = next + piece.len();
    }
    Ok(found)
}

/// `text[a..b]` shown as `…before⟦removed⟧after…`, about 60 characters each side, on one line.
fn context(text: &str, a: usize, b: usize) -> String {
    let mut s = a.saturating_sub(60);
    while !text.is_char_boundary(s) {
        s -= 1;
    }
    let mut e = (b + 60).min(text.len());
    while !text.is_char_boundary(e) {
        e += 1;
    }
    let one = |t: &str| t.replace('\n', "⏎");
    format!(
        "…{}⟦{}⟧{}…",
        one(&text[s..a]),
        one(&text[a..b]),
        one(&text[b..e])
    )
}

/// A file's false redactions in one placement, or why the shipped line could not be read.
fn judge(text: &str, placement: &Placement) -> Result<(bool, Vec<Found>), String> {
    let shipped = global().redact_line(placement.line.as_bytes());
    let unchanged = shipped == placement.line;
    let value: Value =
        serde_json::from_str(&shipped).map_err(|e| format!("invalid JSON shipped: {e}"))?;
    let mut all = Vec::new();
    for holder in &placement.holders {
        let held = string_at(&value, holder)
            .ok_or_else(|| format!("no string at {holder:?} in what shipped"))?;
        let found = false_redactions(text, &held)?;
        // The same text in several fields of one line: count it once, as the worst field.
        if found.len() > all.len() || all.is_empty() {
            all = found;
        }
    }
    Ok((unchanged, all))
}

#[test]
fn every_fixture_file_is_listed_with_its_expected_redactions() {
    let listed: Vec<String> = EXPECTED.iter().map(|(f, _, _)| (*f).to_owned()).collect();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "keep EXPECTED sorted");
    assert_eq!(files_on_disk(), listed, "files on disk and EXPECTED differ");
}

#[test]
fn real_credential_handling_code_ships_readable() {
    let mut total_bytes = 0;
    let mut failures = Vec::new();
    // Per placement, every file's false redactions.
    let mut per_placement: Vec<(&str, usize, String)> = Vec::new();
    let mut per_file = String::new();
    for &(file, secrets, known) in EXPECTED {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        total_bytes += text.len();
        let mut counts = Vec::new();
        for (i, placement) in placements(&text).iter().enumerate() {
            if per_placement.len() <= i {
                per_placement.push((placement.name, 0, String::new()));
            }
            match judge(&text, placement) {
                Err(e) => failures.push(format!("{file} ({}): {e}", placement.name)),
                Ok((unchanged, found)) => {
                    counts.push(found.len());
                    let slot = &mut per_placement[i];
                    // The expected redactions are the secrets: only those beyond are false.
                    let falses = found.len().saturating_sub(secrets);
                    if secrets + known == 0 && !unchanged {
                        failures.push(format!(
                            "{file} ({}): expected to ship byte for byte, {} markers",
                            placement.name,
                            found.len()
                        ));
                    } else if found.len() != secrets + known {
                        failures.push(format!(
                            "{file} ({}): {} markers, {secrets} secrets and {known} known false \
                             redactions expected (update EXPECTED if one was fixed)",
                            placement.name,
                            found.len()
                        ));
                    }
                    slot.1 += falses;
                    for f in &found {
                        let _ = writeln!(
                            slot.2,
                            "  {file}:{}: {:?}\n      {}",
                            f.line, f.removed, f.context
                        );
                    }
                }
            }
        }
        let _ = writeln!(
            per_file,
            "  {file}: {counts:?} (secrets {secrets}, known false {known})"
        );
    }
    let limit = total_bytes * PER_100_KB / 100_000;
    let mut report = format!(
        "{total_bytes} bytes of fixture: at most {limit} false redactions per placement\n\
         per file, markers in each placement:\n{per_file}"
    );
    for (name, count, list) in &per_placement {
        let _ = writeln!(report, "{name}: {count} false redactions\n{list}");
        if *count > limit {
            failures.push(format!("{name}: {count} false redactions (limit {limit})"));
        }
    }
    assert!(failures.is_empty(), "{}\n\n{report}", failures.join("\n"));
    println!("{report}");
}
