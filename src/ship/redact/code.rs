//! Whether a value under a secret's name is code or the name of a thing, not a secret
//! (docs/behaviour.md T2.7, T2.8): credential-handling code ships readable.
//!
//! Code is recognised by its structure, not by a list: a call, a member path, a subscript or a
//! struct literal whose names are words a person wrote (`snake_case`, `camelCase`,
//! `PascalCase` with acronyms, `UPPER_SNAKE`), possibly left open at the end of the line (the
//! arguments follow on the next ones). A random run (`Xk9v`, `Q2mLp7`) is no such word, so a
//! secret written in the same places (`API_KEY=Xk9v(Q2mLp7)`) is still one.

use std::sync::LazyLock;

use regex::Regex;

/// A name a person wrote: `snake_case` (digits anywhere, as the call names revision 3 already
/// took), `camelCase`, `PascalCase` whose first word has two lowercase letters or more
/// (`SSOTokenProvider`, `FlattenedJWE`; not `Ab9`), or `UPPER_SNAKE`. Digits only close a word
/// (`Q7ubAo` is a random run).
pub(super) fn is_word(w: &str) -> bool {
    static WORD: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern; the unit tests run it.
        Regex::new(concat!(
            r"^(?:[a-z_$][a-z0-9_$]*",
            r"|_*[a-z]+(?:[A-Z]+[a-z]+)*[A-Z]*[0-9]*",
            // A lowercase word and its number before capitalised words (`asn1Encoding`,
            // `krb5Credentials`, `x509Credentials`).
            r"|[a-z]+[0-9]+(?:[A-Z][a-z]{2,}[0-9]*)+",
            r"|_*[A-Z]+[0-9]*(?:[A-Z][a-z]{2,}|[a-z]{2,})(?:[A-Z]+[a-z]+)*[A-Z]*[0-9]*",
            r"|_*[A-Z][A-Z0-9_]*)$"
        ))
        .expect("word pattern is a valid regex")
    });
    !w.is_empty()
        && w.len() <= 96
        && (WORD.is_match(w)
            // Words joined by `_` in any case (`WrapToken_v2`, `GSS_initSecContext`), one of
            // them three letters or more.
            || (w.contains('_')
                && w.split('_').all(|s| s.is_empty() || WORD.is_match(s))
                && w.split('_').any(|s| s.len() >= 3)))
}

/// An identifier of several words and no digit (`auth_token`, `tokenResponse`, `SharedJWE`):
/// what code names a variable or a type. A single word (`hunter`) or one with digits
/// (`Hunter2`) may be a password, and letters in random case (`aBcDeF`) a token: each word
/// here has two letters or more, and one has three lowercase ones in a row.
pub(super) fn is_compound_identifier(w: &str) -> bool {
    if !is_word(w) || w.bytes().any(|b| b.is_ascii_digit()) {
        return false;
    }
    let mut count = 0;
    // A one-letter prefix before two words or more (Node's `kEnumerableProperty`, a member's
    // `mRefreshToken`) counts as none.
    let prefixed = w.len() > 3
        && w.as_bytes()[0].is_ascii_lowercase()
        && w.as_bytes()[1].is_ascii_uppercase()
        && words(&w[1..]).count() >= 2;
    let rest = if prefixed { &w[1..] } else { w };
    let all_long = words(rest).all(|word| {
        count += 1;
        word.len() >= 2 && is_cased_like_a_word(word)
    });
    count >= 2
        && all_long
        && w.as_bytes()
            .windows(3)
            .any(|t| t.iter().all(u8::is_ascii_lowercase))
}

/// A word of a name as code writes one: lowercase (`token`), capitalized (`Or`, `Public`), in
/// capitals (`JWE`, `ID`, or plural: `IDs`), or an acronym before a word (`HTTPServer`, whose
/// word is three lowercase letters or more). Capitals then one or two lowercase letters (`AAAAa`, `VQpz`)
/// are a random run's, not a word's.
fn is_cased_like_a_word(word: &str) -> bool {
    let b = word.as_bytes();
    let capitals = b.iter().take_while(|c| c.is_ascii_uppercase()).count();
    let lower = b.len() - capitals;
    capitals <= 1 || lower == 0 || lower >= 3 || &b[capitals..] == b"s"
}

/// The words of a name: split where a letter or digit run stops (`_`, `-`, `.`, blanks) and
/// where a capital starts a word after a lowercase letter (`tokenResponse` → `token`,
/// `Response`; `SharedJWE` → `Shared`, `JWE`).
pub(super) fn words(name: &str) -> impl Iterator<Item = &str> {
    let b = name.as_bytes();
    let mut start = 0;
    (1..=b.len()).filter_map(move |i| {
        // Only at a character's first byte: a name may hold any character (`tokenKſ…`,
        // with the Kelvin sign that `(?i)` reads as `k`), and a word is sliced there.
        let boundary = i == b.len()
            || (name.is_char_boundary(i)
                && (!b[i].is_ascii_alphanumeric()
                    || (b[i].is_ascii_uppercase() && b[i - 1].is_ascii_lowercase())));
        if !boundary {
            return None;
        }
        let word = name[start..i].trim_matches(|c: char| !c.is_ascii_alphanumeric());
        start = i;
        (!word.is_empty()).then_some(word)
    })
}

/// The words of a name joined by `_`, `-` or `.` (one trailing separator allowed, as in a
/// prefix `docker-credential-`): each letters, then digits at most (`ec2`, `base64`). What
/// [`is_name_of_thing`] asks of them, read in one pass without collecting them (it runs on
/// every value a secret's name labels): how many, whether each has two characters or more,
/// and the last one; `None` unless there are two or more, each a word.
/// Read byte by byte: a word's characters and the separators are ASCII, so any other byte
/// ends the reading.
fn joined_words(v: &str) -> Option<(usize, bool, &str)> {
    let v = v.strip_suffix(['_', '-']).unwrap_or(v);
    let b = v.as_bytes();
    let (mut count, mut long, mut start) = (0, true, 0);
    let mut last = "";
    loop {
        // Letters, then digits, then a separator or the end.
        let letters = b[start..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic())
            .count();
        if letters == 0 {
            // A number ending a constant's name (`CLIENT_TRAFFIC_SECRET_0`) belongs to its
            // last word; in lowercase (`my_secret_value_2`) it is as likely a value's.
            let digits = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
            let constant = !b.iter().any(u8::is_ascii_lowercase);
            return (constant && count >= 2 && digits > 0 && start + digits == b.len())
                .then_some((count, long, last));
        }
        let digits = b[start + letters..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let end = start + letters + digits;
        count += 1;
        long &= end - start >= 2;
        last = &v[start..end];
        match b.get(end) {
            None => return (count >= 2).then_some((count, long, last)),
            Some(b'_' | b'-' | b'.') => start = end + 1,
            Some(_) => return None,
        }
    }
}

/// A value that names a thing rather than being a secret (T2.8): an environment variable or
/// constant (`AWS_SECRET_ACCESS_KEY`, two words or more in capitals), or a key or header of
/// three words or more that itself names a secret (`aws_secret_access_key`,
/// `x-amz-security-token`). A password of joined words is not one, whether it names no secret
/// (`correct-horse-battery`) or ends as a password does (`super_secret_password`,
/// `my-jwt-secret`).
pub(super) fn is_name_of_thing(value: &str) -> bool {
    let v = value.trim_end_matches([')', ',', ';']);
    if v.len() > 96 {
        return false;
    }
    let Some((count, long, last)) = joined_words(v) else {
        return false;
    };
    let upper = v.starts_with(|c: char| c.is_ascii_uppercase())
        && v.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && long;
    let password_word = ["password", "passwd", "pass", "pwd", "secret", "passphrase"]
        .iter()
        .any(|w| last.eq_ignore_ascii_case(w));
    upper || (count >= 3 && !password_word && crate::secret_names::name_is_secret(v))
}

/// One piece of a line of code.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tok<'a> {
    Ident(&'a str),
    /// A quoted literal, without its quotes.
    Str(&'a str),
    Num,
    Space,
    Punct(u8),
    /// A quote with no closing one on the line: one closing the string the code sits in.
    Quote,
    /// Anything else: never code.
    Other,
}

/// How much of a line is read as code: a value and its arguments fit, and a long line of
/// minified code, with a keyword every few bytes, is not read to its end from each one.
const MAX_CODE: usize = 512;

/// The tokens of `line`, up to its first line break (or [`MAX_CODE`] bytes, where an `Other`
/// ends them: what is cut off is not judged code).
fn tokenize(line: &str) -> Vec<Tok<'_>> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if i >= MAX_CODE {
            out.push(Tok::Other);
            break;
        }
        let c = b[i];
        let start = i;
        match c {
            b'\n' | b'\r' => break,
            b' ' | b'\t' => {
                while i < b.len() && matches!(b[i], b' ' | b'\t') {
                    i += 1;
                }
                out.push(Tok::Space);
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'_' | b'$' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'$')) {
                    i += 1;
                }
                out.push(Tok::Ident(&line[start..i]));
            }
            b'0'..=b'9' => {
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                    i += 1;
                }
                // `9Xk2`: a digit run that goes on as letters is no number.
                if i < b.len() && (b[i].is_ascii_alphabetic() || b[i] == b'_') {
                    out.push(Tok::Other);
                    i += 1;
                } else {
                    out.push(Tok::Num);
                }
            }
            b'"' | b'\'' | b'`' => {
                i += 1;
                while i < b.len() && b[i] != c && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if i < b.len() && b[i] == c {
                    out.push(Tok::Str(&line[start + 1..i]));
                    i += 1;
                } else {
                    out.push(Tok::Quote);
                    i = b.len();
                }
            }
            b'.' | b',' | b':' | b';' | b'=' | b'&' | b'*' | b'+' | b'-' | b'/' | b'<' | b'>'
            | b'!' | b'?' | b'|' | b'%' | b'(' | b')' | b'[' | b']' | b'{' | b'}' => {
                out.push(Tok::Punct(c));
                i += 1;
            }
            _ => {
                out.push(Tok::Other);
                // Whatever follows is not looked at once an `Other` is reached inside code.
                i += line[i..].chars().next().map_or(1, char::len_utf8);
            }
        }
    }
    out
}

/// What a bracketed group may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    /// A call's arguments or a subscript: words, numbers, any quoted literal (as revision 3
    /// took `os.getenv("X")`), operators and nested groups.
    Args,
    /// An object, array or struct literal with no call around it: its strings must be names
    /// (`['AWS_SECURITY_TOKEN', ...]`, `{'clientId': ...}`), or it would hide
    /// `{"password": "hunter2"}`.
    Literal,
}

/// The end of the group opened at `toks[open]`: `Some(index after its close)`, or
/// `Some(toks.len())` when the line ends right after its opening brackets (the rest is on the
/// next lines: `useCallback(`, `exchangeToken({`); `None` if it holds anything that is not code, or the line ends
/// inside it after something (`Q7ubAo(W4yuFcf && ./run`).
fn group(toks: &[Tok<'_>], open: usize, kind: Group) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    while i < toks.len() {
        match toks[i] {
            Tok::Punct(b'(' | b'[' | b'{') => depth += 1,
            Tok::Punct(b')' | b']' | b'}') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            Tok::Ident(w) if !is_word(w) => return None,
            // A bare word alone in a literal (`[ abc ]`) may be the secret itself; a key, a
            // value after its key, or a word starting a path or call is code.
            Tok::Ident(_) if kind == Group::Literal && !ident_in_literal_is_code(toks, i) => {
                return None;
            }
            Tok::Str(s) if kind == Group::Literal && !literal_string_is_code(toks, i, s) => {
                return None;
            }
            Tok::Other | Tok::Quote => return None,
            _ => {}
        }
        i += 1;
    }
    // Open at the end of the line: right after its brackets, or after an argument and what
    // continues the list on the next line (`new Definition('password', {`, `call(a,`).
    let last = toks[open + 1..].iter().rev().find(|t| **t != Tok::Space);
    (toks[open + 1..]
        .iter()
        .all(|t| matches!(t, Tok::Space | Tok::Punct(b'(' | b'[' | b'{')))
        || matches!(last, Some(Tok::Punct(b'(' | b'[' | b'{' | b','))))
    .then_some(toks.len())
}

fn ident_in_literal_is_code(toks: &[Tok<'_>], i: usize) -> bool {
    let next = toks[i + 1..].iter().find(|t| **t != Tok::Space);
    let prev = toks[..i].iter().rev().find(|t| **t != Tok::Space);
    // A variable of lowercase words joined by `_` (`[default_value]`) names what it holds.
    matches!(toks[i], Tok::Ident(w) if super::rules::is_snake_name(w))
        || matches!(next, Some(Tok::Punct(b':' | b'.' | b'(' | b'[')))
        || matches!(prev, Some(Tok::Punct(b':' | b'.')))
}

/// A string in a literal with no call around it: a name (`'AWS_SESSION_TOKEN'`), a key before
/// its colon (`'clientId':`), or the argument of a call or subscript inside the literal
/// (`token['clientId']`). Any other string may be the secret (`{"password": "hunter2"}`).
fn literal_string_is_code(toks: &[Tok<'_>], i: usize, s: &str) -> bool {
    let next = toks[i + 1..].iter().find(|t| **t != Tok::Space);
    let mut before = toks[..i].iter().rev().filter(|t| **t != Tok::Space);
    let opened_by_code = matches!(before.next(), Some(Tok::Punct(b'[' | b'(')))
        && matches!(before.next(), Some(Tok::Ident(_) | Tok::Punct(b']' | b')')));
    is_name_of_thing(s) || (is_word(s) && next == Some(&Tok::Punct(b':'))) || opened_by_code
}

/// Whether `rest`, the text from a value's first character, starts with code that covers the
/// whole value: a call, member path, subscript or struct literal (after `await`, `new`, `&`
/// ...), an arrow function, a bracket opened at the end of the line, an empty literal, or a
/// word compared with or combined by an operator.
pub(super) fn is_code_expression(rest: &str) -> bool {
    may_start_code(rest.as_bytes()) && code_expression(rest)
}

/// Whether `rest` may start what [`code_expression`] takes, read from its first word alone
/// (most values are not code, and tokenizing the rest of their line costs more than the
/// value): code starts with a bracket, `&`, `*` or `!`, or a keyword and a blank, or a name a
/// person wrote followed by what goes on a path, a call, a subscript, a literal or type
/// arguments, or by blanks and an operator. Any other start is no code there: a bare word with
/// no operator after it, or a run that is no word.
fn may_start_code(b: &[u8]) -> bool {
    let ident = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$');
    match b.first() {
        Some(b'(' | b'[' | b'{' | b'&' | b'*' | b'!') => true,
        Some(c) if c.is_ascii_alphabetic() || matches!(c, b'_' | b'$') => {
            let word = b.iter().take_while(|c| ident(c)).count();
            let w = &b[..word];
            let blank = |c: &&u8| **c == b' ' || **c == b'\t';
            match b.get(word) {
                Some(b' ' | b'\t') => {
                    let keyword = matches!(
                        w,
                        b"await" | b"new" | b"yield" | b"typeof" | b"void" | b"async"
                    );
                    let after = b[word..].iter().find(|c| !blank(c));
                    keyword
                        || (after.is_some_and(|c| b"=!<>?+-*/%".contains(c))
                            && std::str::from_utf8(w).is_ok_and(is_word))
                }
                Some(b'.' | b'?' | b':' | b'-' | b'(' | b'[' | b'{' | b'<') => {
                    std::str::from_utf8(w).is_ok_and(is_word)
                }
                Some(b'!') if matches!(b.get(word + 1), Some(b'(' | b'[' | b'{')) => {
                    std::str::from_utf8(w).is_ok_and(is_word)
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// [`is_code_expression`] from the tokens of the line.
fn code_expression(rest: &str) -> bool {
    let toks = tokenize(rest);
    let mut i = 0;
    // Keywords that start an expression.
    while let (Some(Tok::Ident(k)), Some(Tok::Space)) = (toks.get(i), toks.get(i + 1)) {
        if matches!(*k, "await" | "new" | "yield" | "typeof" | "void" | "async") {
            i += 2;
        } else {
            break;
        }
    }
    while matches!(toks.get(i), Some(Tok::Punct(b'&' | b'*' | b'!'))) {
        i += 1;
    }
    let end = match toks.get(i) {
        Some(Tok::Punct(b'(')) => {
            // A cast (`(X509Credentials)cd;`, `(XECPrivateKey) key;`): a type's name in
            // parentheses, then a variable or a path.
            if let (Some(Tok::Ident(t)), Some(Tok::Punct(b')'))) =
                (toks.get(i + 1), toks.get(i + 2))
                && is_type_name(t)
            {
                let j = i + 3 + usize::from(toks.get(i + 3) == Some(&Tok::Space));
                return matches!(toks.get(j), Some(Tok::Ident(w)) if is_word(w))
                    && path(&toks, j).is_some_and(|(end, _)| ends_value(&toks, end));
            }
            // A bracket left open at the end of the line, `()`, or the parameters of an arrow
            // function: `(options?: Opts) => Promise<void>`.
            let Some(close) = group(&toks, i, Group::Args) else {
                return false;
            };
            // Python's tuple of one name (`(COMMENT,)`).
            if let (Some(Tok::Ident(w)), Some(Tok::Punct(b',')), Some(Tok::Punct(b')'))) =
                (toks.get(i + 1), toks.get(i + 2), toks.get(i + 3))
                && is_word(w)
                && w.len() >= 2
            {
                return ends_value(&toks, i + 4);
            }
            // A condition or a computation in parentheses (`(storePassNew!=null) ? a : b`,
            // `((is.read()<<8) | is.read())`, `(keyLenBits + 7) >> 3`): code's operators
            // between its words, or after them.
            let computed = toks.get(close) == Some(&Tok::Space)
                && matches!(
                    toks.get(close + 1..close + 3),
                    Some([Tok::Punct(b'+' | b'-' | b'*' | b'/' | b'%'), Tok::Space])
                        | Some([Tok::Punct(b'>'), Tok::Punct(b'>')])
                        | Some([Tok::Punct(b'<'), Tok::Punct(b'<')])
                );
            if close > i + 2 && (compares(&toks[i + 1..close - 1]) || computed) {
                return ends_value(&toks, close);
            }
            if close == toks.len() {
                return rest_is_blank(&toks[i + 1..]);
            }
            if close > i + 2 {
                let j = close + usize::from(toks.get(close) == Some(&Tok::Space));
                let arrow = toks.get(j) == Some(&Tok::Punct(b'='))
                    && toks.get(j + 1) == Some(&Tok::Punct(b'>'));
                if !arrow {
                    return false;
                }
            }
            close
        }
        Some(Tok::Punct(b'[' | b'{')) => {
            let Some(close) = group(&toks, i, Group::Literal) else {
                return false;
            };
            close
        }
        // A one-letter name only as a module alias (`t.Any`): `x(S)` is a secret.
        Some(Tok::Ident(w))
            if is_word(w) && (w.len() >= 2 || toks.get(i + 1) == Some(&Tok::Punct(b'.'))) =>
        {
            let Some((end, structured)) = path(&toks, i) else {
                return false;
            };
            if !structured {
                return operator_follows(&toks, end);
            }
            end
        }
        _ => return false,
    };
    ends_value(&toks, end)
}

/// A member path with its calls, subscripts and struct literal from `toks[i]`, an identifier:
/// where it ends and whether it had any of those (a bare word is not code by itself).
fn path(toks: &[Tok<'_>], mut i: usize) -> Option<(usize, bool)> {
    let mut structured = false;
    i += 1;
    loop {
        match (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
            (Some(Tok::Punct(b'.')), Some(Tok::Ident(w)), _) => {
                if !is_word(w) {
                    return None;
                }
                structured = true;
                i += 2;
            }
            (Some(Tok::Punct(b'?')), Some(Tok::Punct(b'.')), Some(Tok::Ident(w)))
            | (Some(Tok::Punct(b':')), Some(Tok::Punct(b':')), Some(Tok::Ident(w)))
            | (Some(Tok::Punct(b'-')), Some(Tok::Punct(b'>')), Some(Tok::Ident(w))) => {
                if !is_word(w) {
                    return None;
                }
                structured = true;
                i += 3;
            }
            (Some(Tok::Punct(b'(' | b'[')), _, _) => {
                i = group(toks, i, Group::Args)?;
                structured = true;
            }
            // A Rust macro's invocation (`Token![=]`, `bracketed!(content in input)`).
            (Some(Tok::Punct(b'!')), Some(Tok::Punct(b'(' | b'[' | b'{')), _) => {
                i = group(toks, i + 1, Group::Args)?;
                structured = true;
            }
            // Rust's turbofish: `input.parse::<kw::bool>()`.
            (Some(Tok::Punct(b':')), Some(Tok::Punct(b':')), Some(Tok::Punct(b'<'))) => {
                i = generic(toks, i + 2)?;
                structured = true;
            }
            (Some(Tok::Punct(b'{')), _, _) => {
                i = group(toks, i, Group::Literal)?;
                structured = true;
            }
            (Some(Tok::Punct(b'<')), Some(Tok::Ident(_) | Tok::Punct(b'{' | b'(')), _) => {
                i = generic(toks, i)?;
                structured = true;
            }
            // Java's diamond: `new HashMap<>()`.
            (Some(Tok::Punct(b'<')), Some(Tok::Punct(b'>')), Some(Tok::Punct(b'('))) => {
                i += 2;
                structured = true;
            }
            _ => return Some((i, structured)),
        }
    }
}

/// The end of the type arguments opened at `toks[open]` (`React.Dispatch<React.SetStateAction<
/// boolean>>`, `Map<string, SecretValue>`, `Box<dyn Fn() -> String + Send>`,
/// `std::pair<int, std::string>`, `Array<{ id: string }>`), closed on the line: words, and the
/// punctuation of types (paths, function types' arrows, object types' members and braces).
fn generic(toks: &[Tok<'_>], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    while let Some(t) = toks.get(i) {
        match t {
            Tok::Punct(b'<') => depth += 1,
            Tok::Punct(b'>') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            // A function type's arrow (`-> String`, `=> void`) closes no argument list.
            Tok::Punct(b'-' | b'=') if toks.get(i + 1) == Some(&Tok::Punct(b'>')) => i += 1,
            // An associated type's binding: `AsyncAuthorizeRequest<B, ResponseBody = ResBody>`.
            Tok::Punct(b'=') => {}
            // Type parameters and short names a person wrote: `K`, `Fn`, `dyn`.
            Tok::Ident(w) if is_word(w) || w.len() <= 3 => {}
            Tok::Space
            | Tok::Punct(
                b',' | b'.' | b'[' | b']' | b'(' | b')' | b'|' | b'&' | b'?' | b':' | b'{' | b'}'
                | b';' | b'+',
            ) => {}
            _ => return None,
        }
        i += 1;
    }
    None
}

/// A type's name as code writes one: a capital first, then letters, digits and `_`, with
/// three lowercase letters in a row (`X509Credentials`, `ECPrivateKey`, `GSSCredentialImpl`).
fn is_type_name(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_uppercase())
        && t.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && t.as_bytes()
            .windows(3)
            .any(|w| w.iter().all(u8::is_ascii_lowercase))
}

/// Whether `toks` hold a comparison or a shift: `==`, `!=`, `<=`, `>=`, `<<`, `>>`.
fn compares(toks: &[Tok<'_>]) -> bool {
    toks.windows(2).any(|w| {
        matches!(
            w,
            [Tok::Punct(b'=' | b'!' | b'<' | b'>'), Tok::Punct(b'=')]
                | [Tok::Punct(b'<'), Tok::Punct(b'<')]
                | [Tok::Punct(b'>'), Tok::Punct(b'>')]
        )
    })
}

fn rest_is_blank(toks: &[Tok<'_>]) -> bool {
    toks.iter().all(|t| *t == Tok::Space)
}

/// After code, the value ends: the line does, a blank, or closing punctuation does.
fn ends_value(toks: &[Tok<'_>], mut i: usize) -> bool {
    while let Some(Tok::Punct(b',' | b';' | b')' | b']' | b'}' | b'!' | b'?' | b':')) = toks.get(i)
    {
        i += 1;
    }
    matches!(
        toks.get(i),
        None | Some(Tok::Space | Tok::Str(_) | Tok::Quote)
    )
}

/// A bare word compared with or combined by an operator: `usage === 'decrypt'`,
/// `expires * time.Second`. Not `&&` and `||`, which also join shell commands
/// (`TOKEN=word && deploy`).
fn operator_follows(toks: &[Tok<'_>], i: usize) -> bool {
    if toks.get(i) != Some(&Tok::Space) {
        return false;
    }
    let ops: Vec<u8> = toks[i + 1..]
        .iter()
        .map_while(|t| match t {
            Tok::Punct(c) if b"=!<>?+-*/%".contains(c) => Some(*c),
            _ => None,
        })
        .collect();
    let after = toks.get(i + 1 + ops.len());
    let known = matches!(
        ops.as_slice(),
        b"==="
            | b"!=="
            | b"=="
            | b"!="
            | b"<="
            | b">="
            | b"<"
            | b">"
            | b"?"
            | b"+"
            | b"-"
            | b"*"
            | b"/"
            | b"%"
            | b"??"
    );
    // `isValidation ?` ending the line: the conditional goes on on the next one.
    known && (after == Some(&Tok::Space) || (after.is_none() && ops.as_slice() == b"?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        for yes in [
            "token_loader",
            "getTokenSilently",
            "getIdTokenClaims",
            "SSOTokenProvider",
            "FlattenedJWE",
            "TokenSourceWithPKCE",
            "AWS_ACCESS_KEY_ID",
            "_DEFAULT_TIMEOUT",
            "Online",
        ] {
            assert!(is_word(yes), "{yes}");
        }
        for no in ["Xk9v", "Q2mLp7", "Ab9", "xK9v", "S9q", "Zq8"] {
            assert!(!is_word(no), "{no}");
        }
    }

    #[test]
    fn compound_identifiers() {
        for yes in [
            "auth_token",
            "tokenResponse",
            "SharedJWE",
            "getIdTokenClaims",
            "getHTTPServer",
            "secretARNs",
        ] {
            assert!(is_compound_identifier(yes), "{yes}");
        }
        // Capitals then one or two lowercase letters: a random run (a property test's
        // `api_key=aaaAAAAa,` shipped as a variable).
        for no in [
            "hunter",
            "Hunter2",
            "aBcDeF",
            "aAbBcC",
            "token",
            "Xk9vQ2",
            "aaaAAAAa",
            "xkcdVQpzLm",
        ] {
            assert!(!is_compound_identifier(no), "{no}");
        }
    }

    #[test]
    fn names_of_things() {
        for yes in [
            "AWS_SECRET_ACCESS_KEY",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "aws_secret_access_key",
            "x-amz-security-token",
            "X-aws-ec2-metadata-token",
            "external_token_value",
        ] {
            assert!(is_name_of_thing(yes), "{yes}");
        }
        for no in [
            "correct-horse-battery",
            "hunter2",
            "Xk9v_Q2mLp7",
            "p@ss;w0rd",
            "SuperSecret",
            "super_secret_password",
            "my-jwt-secret",
            "db-password",
        ] {
            assert!(!is_name_of_thing(no), "{no}");
        }
    }

    /// [`is_name_of_thing`] as it was first written: the words collected, then counted.
    fn name_of_thing_from_collected_words(value: &str) -> bool {
        let v = value.trim_end_matches([')', ',', ';']);
        if v.len() > 96 {
            return false;
        }
        let v2 = v.strip_suffix(['_', '-']).unwrap_or(v);
        let words: Vec<&str> = v2.split(['_', '-', '.']).collect();
        let word_ok = |w: &&str| {
            let letters = w.trim_end_matches(|c: char| c.is_ascii_digit());
            !letters.is_empty() && letters.bytes().all(|b| b.is_ascii_alphabetic())
        };
        if !(words.len() >= 2 && words.iter().all(word_ok)) {
            return false;
        }
        let upper = v.starts_with(|c: char| c.is_ascii_uppercase())
            && v.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && words.iter().all(|w| w.len() >= 2);
        let last = words
            .last()
            .map_or(String::new(), |w| w.to_ascii_lowercase());
        let password_word = matches!(
            last.as_str(),
            "password" | "passwd" | "pass" | "pwd" | "secret" | "passphrase"
        );
        upper || (words.len() >= 3 && !password_word && crate::secret_names::name_is_secret(v))
    }

    /// Text built from the pieces of code and of names.
    fn code_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy as _;
        let pieces = vec![
            "a", "Zq", "token", "Secret", "PASS", "aws", "X9", "9", "_", "$", "&", "*", "!", ".",
            ":", "::", "-", "->", "(", ")", "[", "]", "{", "}", "<", ">", " ", "\t", "\n", "\"",
            "'", "`", "?", "?.", ",", ";", "=", "===", "&&", "await ", "new ", "é", "\u{212a}",
            "getToken", "self", "x", " + ", " * ", " ?? ", "typeof ", "Xk9v", "void\t",
        ];
        let random = proptest::collection::vec(proptest::sample::select(pieces), 0..12)
            .prop_map(|p| p.concat());
        // A first word, what follows it, an operator or more code, and what ends it: the
        // shapes the first-word check reads.
        use proptest::sample::select;
        let words = vec!["usage", "x", "Xk9v", "await", "SSOTokenProvider", "ab9c"];
        let next = vec![" ", "\t", "", ".", "(", "::", ";", "<"];
        let ops = vec!["===", "*", "%", "/", "+", "??", "&&", "=", "b", "'a'"];
        let tails = vec![" ", " b", "b)", "", "\n"];
        let shaped = (select(words), select(next), select(ops), select(tails))
            .prop_map(|(a, b, c, d)| format!("{a}{b}{c}{d}"));
        proptest::prop_oneof![random, shaped]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// The first-word check turns away only what the tokens would, and the words of a
        /// name read in one pass say what the collected words said.
        #[test]
        fn one_pass_checks_agree_with_the_full_ones(v in code_text()) {
            proptest::prop_assert_eq!(is_code_expression(&v), code_expression(&v), "{:?}", v);
            proptest::prop_assert_eq!(
                is_name_of_thing(&v),
                name_of_thing_from_collected_words(&v),
                "{:?}",
                v
            );
        }
    }

    #[test]
    fn expressions() {
        for yes in [
            "await getAccessTokenSilently(options);",
            "await client.getTokenSilently(opts);",
            "useCallback(",
            "exchangeToken({",
            "namedtuple(\n    'ReadOnlyCredentials',",
            "self.environ.get(self._mapping['access_key'], '')",
            "fetcher(require_expiry=False)",
            "creds[self.ACCESS_KEY]",
            "JSONFileCache(get_login_token_cache_directory())",
            "SSOTokenLoader(cache=self._token_cache),",
            "output['accessToken'][",
            "credentials.DetectDefaultStore(configFile.CredentialsStore)",
            "encodeAuth(&authCopy)",
            "time.Now().Add(time.Duration(expires) * time.Second)",
            "&Token{",
            "&credentialspb.BasicAuth{",
            "{",
            "(",
            "{}",
            "['AWS_SECURITY_TOKEN', 'AWS_SESSION_TOKEN']",
            "(options?: RevokeRefreshTokenOptions) => Promise<void>;",
            "usage === 'decrypt' || usage === 'sign'",
            "RefreshTokenMode.Online`): revoking",
            "authhandler.TokenSourceWithPKCE(ctx, config, params.State, params.PKCE),",
            "computeTokenSource(\"\", params.EarlyTokenRefresh, params.Scopes...),",
            "await navigator.credentials.create({ publicKey: challenge.authn_params });",
            "React.Dispatch<React.SetStateAction<boolean>>;",
            "t.Optional[t.Dict[str, t.Any]] = None,",
            "Map<string, SecretValue>;",
            "aws4auth.Auth(creds.access_key, creds.secret_key, region, 'es')",
        ] {
            assert!(is_code_expression(yes), "{yes}");
        }
        for no in [
            "Xk9v(Q2mLp7)",
            "x(S)",
            "x(S9q)",
            "Ab9.Xk2",
            "Ab9c[Zq8]",
            "Xk9v.Q2mLp7Rz",
            "hunter2",
            "hunter && deploy",
            "{\"password\": \"hunter2\"}",
            "['hunter2']",
            "[ abcDef ]",
            "{ abcDef }",
            "(hunter2)",
            "aBcDeFgH more words",
            "Xk9v<Q2mLp7>",
            "Q7ubAo(W4yuFcf && ./run",
            "Qubao(Wyufcf && ./run",
            "{=Authorization: Bearer abc.def-123",
            "x.Xk9vQ2",
        ] {
            assert!(!is_code_expression(no), "{no}");
        }
    }
}
