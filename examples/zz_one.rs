fn main() {
    let r = kcap_watch::ship::redact::global();
    for k in [
        "password=hunter2",
        "DB_PASSWORD: s3cretValue9",
        "Authorization: Bearer abcdefghijklmnop",
        "the password is swordfish",
        "token: abc123xyz789",
        "api_key=AKIA1234",
        "--password hunter2",
        "user:pass@host",
        "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    ] {
        let line = serde_json::json!({ k: 1 }).to_string();
        println!("{} => {}", line, r.redact_text(&line));
    }
}
