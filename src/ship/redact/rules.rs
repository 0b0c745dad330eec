//! The core rule table (docs/behaviour.md S1.6): everything that is not a provider's token
//! format. Each rule has an id, the family it covers, its keywords (lowercase; the rule runs on
//! a decoded string only when one occurs in it), a pattern, and examples a test checks.
//!
//! Patterns run on decoded text, so they know nothing of JSON escapes. A rule that recognises
//! a secret by its name (assignment, header, flag, label) matches only the name and the first
//! character of the value: where the value ends and whether it is code are decided here, in
//! one place, as S1.2 says (up to whitespace, any quote, or the end; a quoted value up to its
//! closing quote).

use std::ops::Range;
use std::sync::LazyLock;

use regex::{Captures, Regex};

use crate::secret_names::{header_names, holds_name_word, name_words};
// `src/url_display.rs` asks for it here; the words of secret names live in [`super::names`].
pub(crate) use crate::secret_names::name_is_secret;

/// One core rule.
pub(crate) struct Rule {
    pub id: &'static str,
    pub family: &'static str,
    pub keywords: &'static [&'static str],
    pub pattern: &'static str,
    /// Matches may cross line breaks: run on the whole string, not only the lines holding a
    /// keyword.
    pub multiline: bool,
    /// How many bytes past the end of its keyword's line a one-line rule reads (a call's
    /// arguments on the lines after its `(`); 0 for most.
    pub reach: usize,
    /// Turns one match into the spans to redact.
    pub refine: Refine,
    /// A cheap test the text must pass before the pattern runs (a rule on the whole text whose
    /// keywords are common words).
    pub pre: Option<Pre>,
    pub positive: &'static [&'static str],
    pub negative: &'static [&'static str],
}

/// How a match becomes spans.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Refine {
    /// Group `s`, or the whole match.
    Group,
    /// `name = value`: the value from group `s`, any length.
    Assign,
    /// `name: value`: quoted any length, unquoted 4+ (password words) or 8+ characters.
    Colon,
    /// A command-line secret: the value from group `s` (opened by group `q` if quoted).
    Flag,
    /// A labelled secret (group `s`), unless code.
    Label,
    /// "the password is X", unless X is a word.
    Prose,
    /// A credential header's value from group `s`.
    Header,
    /// A URL query parameter whose name (group `n`) is a secret's.
    Query,
    /// Group `s` is base64 text: redacted if it decodes to a private key.
    PemBase64,
    /// `htpasswd -b [file] user password`.
    Htpasswd,
    /// `sqlplus user/password@db`: group `s` starts the password.
    Sqlplus,
    /// A token used as a URL's user name: group `s` if it looks like one.
    UrlToken,
    /// A configuration's property as two XML elements, its name (group `n`, in `<name>` or
    /// `<key>`) then its value (group `s`, in `<value>`), as Hadoop's, Hive's and Spring's
    /// files and .NET's `<entry>` write them: the value when the name is a secret's.
    NameValueElements,
    /// A name and a value whose extent the pattern knows (group `n`, the value from group `s`
    /// or `t`): a call without parentheses alone on its line, its literal in double or single
    /// quotes, each holding the other (`storePassword "…"`); a Go struct's field (`DBPassword:…`).
    /// The value when the name is a secret's, judged as an assignment's value.
    BareCall,
    /// An XML element named for a secret (group `n`): its text (group `s`), unless a
    /// reference (Maven's `${env.MAVEN_PASSWORD}`, `{{ password }}`), a stand-in or the
    /// element's own name (`<apiKey>API_KEY</apiKey>`).
    Element,
    /// A value after a label phrase (`label-phrase-value`): group `s` if it looks like a token
    /// and changes between digits, lower and upper case four times or more, as a generated
    /// secret does and a setting's word with a number in it (`bcrypt12rounds`) does not.
    LabelToken,
    /// A value named in prose (`token-for-is`): as [`Refine::LabelToken`], its changes counted
    /// between its letters and digits alone, so a dotted version (`v2.0.1-beta`) is not a
    /// token by its punctuation.
    ProseToken,
    /// A prefixed token: the whole match, unless its body (group `b`) is lowercase words
    /// joined by `_`, a name such as `npm_config_cache`.
    Token,
    /// A YAML key with a secret's name (group `n`) and no value on its line: the value on the
    /// next, deeper-indented line, or a block scalar's lines (group `b`: `|`, `>`, `>-`).
    YamlNextLine,
    /// A table row whose first cell (group `n`) names a secret: the next cell (from group
    /// `s`), if it is one word.
    TableRow,
    /// A table's header (group `h`) over a separator line (group `sep`): the cells of every
    /// column with a secret's name, in the rows below.
    TableColumn,
    /// The text is a Kubernetes `Secret` in YAML: every value under its `data:` and
    /// `stringData:` blocks.
    KubernetesSecret,
    /// A name ending in `_key` or `-key` (group `n`) given a value of a key's shape (group
    /// `s`, opened by the quote of group `q`).
    KeyNamed,
    /// Prose giving a password in quotes ("the password is 'x'"): the quoted text from group
    /// `s`, opened by the quote of group `q`, unless a stand-in or a word of the docs.
    QuotedProse,
    /// A name with a type annotation given a value (`api_key: str = "…"`): the name from
    /// group `n`, the value from group `s`, as an assignment's.
    Annotated,
    /// A secret's name compared with a literal (`password == "…"`): the literal from group
    /// `s`, opened by the quote of group `q`.
    Comparison,
    /// A pair of a secret's quoted name (group `n`) and a literal (group `s`) alone in
    /// brackets or parentheses (`('api_key', '…')`): the literal, unless it reads as a name.
    NamedPair,
    /// A network configuration's secret: group `s` (a device's typed password or secret,
    /// any value) or group `c` (an SNMP community, a pre-shared key: unless a reference).
    DeviceConfig,
    /// SQL's `INSERT INTO t (columns) VALUES (…), (…)`: in each row, the quoted literal at
    /// the place of every column with a secret's name (group `h`: the columns; group `v`:
    /// from the first row on).
    SqlInsert,
    /// `'password' => 'x'` (PHP, Ruby, Perl): the value of group `s`, read as an assignment's;
    /// after a bare name (group `o` empty) only a whole quoted literal, as JavaScript's
    /// `token => …` is a function.
    Arrow,
    /// `Header.Set("X-Api-Key", "x")`, `("api_key", "x")`, `getenv("SECRET_KEY", "x")`: the
    /// literal after a quoted secret's name and a comma (group `q` its quote), read as the
    /// name's value.
    NamedLiteral,
    /// The fallback of a secret-named environment variable, read as the name's value: a
    /// literal after the lookup (group `q` its quote: `process.env.API_KEY || '…'`,
    /// `os.getenv("DB_PASSWORD") or "…"`, `env::var("API_KEY").unwrap_or("…")`) or a shell
    /// default (group `s`: `${DB_PASSWORD:-…}`); group `n` the variable's name.
    Fallback,
    /// A name then its value at group `s`, read as an assignment's: the name `n` (a subscript's
    /// key, `$config['password'] = 'x'`; a C++ string constructed with a literal,
    /// `std::string password("x")`) or `c` (a C array's, `char password[] = "x"`).
    NameThenValue,
    /// A credential given to a call by its place (`NetworkCredential("u", "p")`,
    /// `getConnection(url, "u", "p")`): the match ends at the call's `(`.
    CallArgument,
    /// A value whose secret's name is a sibling's (`name: DB_PASSWORD` over `value: ...`,
    /// `key="ApiKey" value="..."`): the name from group `n`, the value from its first
    /// character or quote (group `s`), as a `name: value` pair's.
    Pair,
}

/// Keywords of the rules reading a tool's label naming a secret (`label-next-line`,
/// `label-phrase-value`): its words as a label writes them.
const LABEL_KEYWORDS: &[&str] = &[
    "passw",
    "passphrase",
    "token",
    "secret",
    "api key",
    "api_key",
    "access key",
    "access_key",
];

/// The words of a token's or key's label (`labelled-is`, `token-for-is`).
const TOKEN_LABEL_KEYWORDS: &[&str] = &[
    "token",
    "api key",
    "api_key",
    "api-key",
    "apikey",
    "access key",
    "access_key",
    "access-key",
    "accesskey",
    "secret",
    "bearer",
];

/// Keywords shared by the rules keyed on a secret's name.
const NAME_KEYWORDS: &[&str] = &[
    "secret",
    "token",
    "passw",
    "passphrase",
    "pwd",
    "pass",
    "api_key",
    "api-key",
    "api.key",
    "apikey",
    "private_key",
    "private-key",
    "private.key",
    "privatekey",
    "credential",
    "access_key",
    "access-key",
    "access.key",
    "accesskey",
    "app_key",
    "app-key",
    "app.key",
    "appkey",
    "encryption_key",
    "encryption-key",
    "encryption.key",
    "encryptionkey",
    "master_key",
    "master-key",
    "master.key",
    "masterkey",
    "signing_key",
    "signing-key",
    "signing.key",
    "signingkey",
    "account_key",
    "account-key",
    "account.key",
    "accountkey",
    "unseal_key",
    "unseal-key",
    "unseal.key",
    "unsealkey",
    "recovery_key",
    "recovery-key",
    "recovery.key",
    "recoverykey",
    "auth",
];

const HEADER_KEYWORDS: &[&str] = &[
    "authorization",
    "cookie",
    "x-api-key",
    "-token",
    "x-amz-",
    "api-key",
    "signature",
    "x-registry-auth",
    "x-auth-key",
    "x-functions-key",
    "dd-api-key",
    "dd-application-key",
    "-secret",
    "-password",
    "subscription-key",
    // The ends of `x-…` names (`x-mytoken`, `x-foo-auth-key`), so that every header name
    // holds a keyword: the rules are opened only at a header name's site.
    "token",
    "secret",
    "passw",
    "auth-key",
];

const fn rule(
    id: &'static str,
    family: &'static str,
    keywords: &'static [&'static str],
    pattern: &'static str,
    refine: Refine,
    positive: &'static [&'static str],
    negative: &'static [&'static str],
) -> Rule {
    Rule {
        id,
        family,
        keywords,
        pattern,
        multiline: false,
        reach: 0,
        refine,
        pre: None,
        positive,
        negative,
    }
}

const fn multiline(r: Rule) -> Rule {
    Rule {
        multiline: true,
        ..r
    }
}

/// A one-line rule that also reads up to `bytes` past its keyword's line.
const fn reaching(bytes: usize, r: Rule) -> Rule {
    Rule { reach: bytes, ..r }
}

/// A rule's cheap check ([`Rule::pre`]) with the bytes it cannot pass without.
///
/// Most windows a keyword opens are one line, and every rule of the keyword checks the same
/// line: a `memchr` each, ten and more for a line naming a token. The bytes a line holds are
/// read once into a set of bits instead ([`bytes_held`]), and a rule whose `needs` the line
/// does not meet is not run at all; where the check is those bytes alone (`exact`), it is not
/// called either. Test `checks_need_the_bytes_they_say`.
#[derive(Clone, Copy)]
pub(crate) struct Pre {
    pub check: fn(&str) -> bool,
    pub needs: Needs,
    /// The check passes exactly when `needs` are met.
    pub exact: bool,
}

/// Bytes a check needs: every one of `all` and, unless `any` is empty, one of `any`; as bits
/// of [`bytes_held`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Needs {
    all: u32,
    any: u32,
}

impl Needs {
    /// No needs: met by any text.
    pub(crate) const NONE: Needs = Needs { all: 0, any: 0 };

    const fn of(all: &[u8], any: &[u8]) -> Needs {
        Needs {
            all: bits(all),
            any: bits(any),
        }
    }

    /// Whether text holding the bytes `held` ([`bytes_held`]) meets these needs: its gate
    /// ([`Needs::gate`]) open for those bytes, as the redactor asks it.
    #[cfg(test)]
    pub(crate) fn met(self, held: u32) -> bool {
        gate_open(self.gate(0), held | GATE_ALWAYS)
    }

    /// These needs as one gate of `(all, any)` bits ([`gate_open`]), with `also` (bits of
    /// [`GATE_FLAGS`]) needed too.
    pub(crate) fn gate(self, also: u32) -> (u32, u32) {
        let any = if self.any == 0 { GATE_ALWAYS } else { self.any };
        (self.all | also, any)
    }
}

/// The bits of [`bytes_held`] above every needed byte's, that a gate ([`Needs::gate`]) may
/// need besides bytes: set by the caller for what holds at a keyword's occurrence.
pub(crate) const GATE_FLAGS: u32 = GATE_ALWAYS | GATE_NOT_IN_WORD;
/// Always set: a gate with no byte of which one is needed needs this one.
pub(crate) const GATE_ALWAYS: u32 = 1 << 31;
/// The occurrence does not continue a word.
pub(crate) const GATE_NOT_IN_WORD: u32 = 1 << 30;
const _: () = assert!(
    NEEDED.len() < 30,
    "the gate's flags lie above the needed bytes' bits"
);

/// Whether the gate `(all, any)` ([`Needs::gate`]) is open for `held`: the bytes a line holds
/// ([`bytes_held`]) with the flags of [`GATE_FLAGS`] that hold. Two tests and no branch: it
/// is asked for every rule of every keyword occurrence.
#[inline]
pub(crate) fn gate_open((all, any): (u32, u32), held: u32) -> bool {
    (held & all == all) & (held & any != 0)
}

/// The bytes some check needs, each with its bit in [`bytes_held`].
const NEEDED: &[u8] = b":=|-@\"'({]>?&\\,p \t";

/// Each byte's bit in [`bytes_held`] (0 for a byte no check needs).
const BIT: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < NEEDED.len() {
        t[NEEDED[i] as usize] = 1 << i;
        i += 1;
    }
    t
};

const fn bits(bytes: &[u8]) -> u32 {
    let mut m = 0;
    let mut i = 0;
    while i < bytes.len() {
        m |= BIT[bytes[i] as usize];
        i += 1;
    }
    m
}

/// Which of the bytes checks need ([`NEEDED`]) `b` holds, one bit each.
pub(crate) fn bytes_held(b: &[u8]) -> u32 {
    b.iter().fold(0, |m, &c| m | BIT[c as usize])
}

const fn pre(check: fn(&str) -> bool, all: &[u8], any: &[u8], exact: bool) -> Pre {
    Pre {
        check,
        needs: Needs::of(all, any),
        exact,
    }
}

const QUOTES: &[u8] = b"\"'";
const BLANKS: &[u8] = b" \t";
const HAS_ANNOTATION: Pre = pre(has_annotation, b":=", BLANKS, false);
const HAS_ARROW: Pre = pre(has_arrow, b"=>", b"", false);
const HAS_AT: Pre = pre(has_at, b"@", b"", true);
const HAS_BARE_COLON: Pre = pre(has_bare_colon, b":", b"", false);
const HAS_BARE_CALL: Pre = pre(has_bare_call, b"", QUOTES, false);
const HAS_EMPTY_PASSWORD: Pre = pre(has_empty_password, b":", b"", false);
const HAS_GLUED_FIELD: Pre = pre(has_glued_field, b":", b"", false);
const HAS_BRACKET_THEN_QUOTE: Pre = pre(has_bracket_then_quote, b"", QUOTES, false);
const HAS_CALL_GIVEN_A_STRING: Pre = pre(has_call_given_a_string, b"(,", QUOTES, false);
const HAS_SHELL_DEFAULT: Pre = pre(has_shell_default, b"{", b"", false);
const HAS_LABEL_SEPARATOR: Pre = pre(has_label_separator, b"", b":|", true);
const HAS_COLON: Pre = pre(has_colon, b":", b"", true);
const HAS_COMMA_AND_QUOTE: Pre = pre(has_comma_and_quote, b",", QUOTES, true);
const HAS_COMPARISON: Pre = pre(has_comparison, b"=", b"", false);
const HAS_DASH: Pre = pre(has_dash, b"-", b"", true);
const HAS_DASHES: Pre = pre(has_dashes, b"-", b"", false);
const HAS_EQUALS: Pre = pre(has_equals, b"=", b"", true);
const HAS_IS_OR_WAS: Pre = pre(has_is_or_was, b"", BLANKS, false);
const HAS_BLANK_TO: Pre = pre(has_blank_to, b"", BLANKS, false);
const HAS_LABEL_AND_VALUE: Pre = pre(has_label_and_value, b"", BLANKS, false);
const HAS_NETRC_PASSWORD: Pre = pre(has_netrc_password, b"p", BLANKS, false);
const HAS_OPEN_PAREN: Pre = pre(has_open_paren, b"(", b"", true);
const HAS_PAREN_AND_QUOTE: Pre = pre(has_paren_and_quote, b"(", QUOTES, true);
const HAS_QUERY: Pre = pre(has_query, b"=", b"?&\\", true);
const HAS_QUOTE: Pre = pre(has_quote, b"", QUOTES, true);
const HAS_RETURNED_LITERAL: Pre = pre(has_returned_literal, b"(", b"", false);
const HAS_SUBSCRIPT_ASSIGNMENT: Pre = pre(has_subscript_assignment, b"]=", b"", false);
const HAS_TOKEN_USER: Pre = pre(has_token_user, b":@", b"", false);
const HAS_TWO_BARS: Pre = pre(has_two_bars, b"|", b"", false);
const HAS_YAML_PAIR: Pre = pre(has_yaml_pair, b":", b"", false);

/// Every check, for the test that holds each to its needs.
#[cfg(test)]
const PRES: &[(&str, Pre)] = &[
    ("annotation", HAS_ANNOTATION),
    ("arrow", HAS_ARROW),
    ("at", HAS_AT),
    ("bare_colon", HAS_BARE_COLON),
    ("bare_call", HAS_BARE_CALL),
    ("empty_password", HAS_EMPTY_PASSWORD),
    ("glued_field", HAS_GLUED_FIELD),
    ("blank_to", HAS_BLANK_TO),
    ("bracket_then_quote", HAS_BRACKET_THEN_QUOTE),
    ("call_given_a_string", HAS_CALL_GIVEN_A_STRING),
    ("shell_default", HAS_SHELL_DEFAULT),
    ("label_separator", HAS_LABEL_SEPARATOR),
    ("colon", HAS_COLON),
    ("comma_and_quote", HAS_COMMA_AND_QUOTE),
    ("comparison", HAS_COMPARISON),
    ("dash", HAS_DASH),
    ("dashes", HAS_DASHES),
    ("equals", HAS_EQUALS),
    ("is_or_was", HAS_IS_OR_WAS),
    ("label_and_value", HAS_LABEL_AND_VALUE),
    ("netrc_password", HAS_NETRC_PASSWORD),
    ("open_paren", HAS_OPEN_PAREN),
    ("paren_and_quote", HAS_PAREN_AND_QUOTE),
    ("query", HAS_QUERY),
    ("quote", HAS_QUOTE),
    ("returned_literal", HAS_RETURNED_LITERAL),
    ("subscript_assignment", HAS_SUBSCRIPT_ASSIGNMENT),
    ("token_user", HAS_TOKEN_USER),
    ("two_bars", HAS_TWO_BARS),
    ("yaml_pair", HAS_YAML_PAIR),
];

const fn when(pre: Pre, r: Rule) -> Rule {
    Rule {
        pre: Some(pre),
        ..r
    }
}

/// Whether a keyword occurrence may be part of one of a rule's matches: what its pattern needs
/// around the name holding the keyword (`password` then `=`), read at the occurrence instead
/// of by searching the line.
///
/// A rule with a site is opened only by an occurrence that passes it, so a site must hold for
/// every match: each match holds an occurrence of one of the rule's keywords (the keywords
/// cover every spelling of its names) at which the site passes. Most lines a name word opens
/// hold it as a word of code or prose (`input_tokens + output_tokens`, `the token schema`):
/// the site says so at the word, where each rule's pattern searched the whole line for the
/// shape it never found. Test `sites_change_no_redaction` holds every site to the patterns.
pub(crate) type Site = fn(&Around<'_>) -> bool;

/// The rules read at their keywords' sites, by id.
pub(crate) static SITES: &[(&str, Site)] = &[
    ("assignment", site_assignment),
    ("colon-pair", site_colon),
    ("yaml-next-line", site_bare_colon),
    ("label-next-line", site_label_colon),
    ("secret-comparison", site_compared),
    ("secret-comparison-reversed", site_compared_to),
    ("labelled", site_labelled),
    ("labelled-is", site_labelled_is),
    ("token-for-is", site_for_or_of),
    ("header", site_header),
    ("header-pair-text", site_quoted),
    ("header-pair-text-reversed", site_quoted),
];

/// A keyword occurrence `b[start..end]` and the name holding it, `b[name.clone()]`: found once
/// for all the sites of its rules.
pub(crate) struct Around<'b> {
    b: &'b [u8],
    end: usize,
    name: Range<usize>,
}

impl<'b> Around<'b> {
    pub(crate) fn new(b: &'b [u8], start: usize, end: usize) -> Around<'b> {
        let name_start = start
            - b[..start]
                .iter()
                .rev()
                .take_while(|&&c| NAME_BYTE[c as usize])
                .count();
        let name_end = end
            + b[end..]
                .iter()
                .take_while(|&&c| NAME_BYTE[c as usize])
                .count();
        #[cfg(test)]
        NAME_BYTES_READ.with(|n| n.set(n.get() + (start - name_start) + (name_end - end)));
        Around {
            b,
            end,
            name: name_start..name_end,
        }
    }

    /// [`Around::new`] for the keyword at `start..end`, where `run` is the last name this
    /// text's keywords gave that is made of name bytes alone (empty at first): a keyword
    /// inside it has that name, which is not read again. A text whose one name runs for a
    /// megabyte with a keyword every few bytes (tool output of letters without a blank) read
    /// the whole name at every occurrence: quadratic, minutes for a 4 MiB line.
    pub(crate) fn within(
        b: &'b [u8],
        start: usize,
        end: usize,
        run: &mut Range<usize>,
    ) -> Around<'b> {
        if run.start <= start && end <= run.end {
            return Around {
                b,
                end,
                name: run.clone(),
            };
        }
        let around = Around::new(b, start, end);
        // The name is the whole run of name bytes around the keyword only where the keyword
        // is made of them too (`secret key` is not).
        if b[start..end].iter().all(|&c| NAME_BYTE[c as usize]) {
            *run = around.name.clone();
        }
        around
    }

    fn at(&self, i: usize) -> Option<u8> {
        self.b.get(i).copied()
    }
}

#[cfg(test)]
thread_local! {
    /// How many bytes [`more_flags`] has read again on this thread: the tests hold it to twice
    /// the text's length, so no line of commands has its rest read again for each command.
    pub(crate) static MORE_FLAGS_READ: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
thread_local! {
    /// How many bytes of names [`Around::new`] has read on this thread: the tests hold it to
    /// the text's length, so no text makes the name of each keyword be read again.
    pub(crate) static NAME_BYTES_READ: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The bytes of the names the name rules read (`[A-Za-z0-9_.-]`, which `(?i)` widens by two
/// letters outside ASCII), and every byte outside ASCII: what follows a pattern's name is ASCII
/// (a quote, a blank, `:`, `=`), so counting those bytes in never moves where a name ends.
/// Every pattern's name is a run of these bytes followed (and preceded) by a byte that is not
/// one, so the run around a keyword inside it is the name.
static NAME_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-') || b >= 0x80;
        c += 1;
    }
    t
};

fn skip_blanks(b: &[u8], at: usize) -> usize {
    at + b.get(at..).map_or(0, |rest| {
        rest.iter()
            .take_while(|&&c| c == b' ' || c == b'\t')
            .count()
    })
}

fn is_quote(c: Option<u8>) -> bool {
    matches!(c, Some(b'"' | b'\''))
}

/// `assignment`: the name, a quote or none, blanks, then `=` or `:=`.
fn site_assignment(a: &Around<'_>) -> bool {
    let mut at = a.name.end + usize::from(is_quote(a.at(a.name.end)));
    at = skip_blanks(a.b, at);
    // `:=`, and the defaults `?=`, `||=`, `??=`.
    match (a.at(at), a.at(at + 1)) {
        (Some(b':' | b'?'), Some(b'=')) => at += 1,
        (Some(b'|'), Some(b'|')) | (Some(b'?'), Some(b'?')) => at += 2,
        _ => {}
    }
    a.at(at) == Some(b'=')
}

/// `colon-pair`: the name, a quote or none, blanks, `:`, then blanks and more or a quote.
fn site_colon(a: &Around<'_>) -> bool {
    let at = a.name.end + usize::from(is_quote(a.at(a.name.end)));
    let colon = skip_blanks(a.b, at);
    if a.at(colon) != Some(b':') {
        return false;
    }
    let value = skip_blanks(a.b, colon + 1);
    (value > colon + 1 && a.at(value).is_some_and(|c| !c.is_ascii_whitespace()))
        || is_quote(a.at(colon + 1))
}

/// `yaml-next-line`: the name, blanks, then a colon with nothing after it on its line.
fn site_bare_colon(a: &Around<'_>) -> bool {
    let at = skip_blanks(a.b, a.name.end);
    a.at(at) == Some(b':') && bare_colon_at(a.b, at)
}

/// `label-next-line`: the name, blanks, `is` or `was`, a parenthesis (`(shown once)`), then
/// a colon with nothing after it on its line.
fn site_label_colon(a: &Around<'_>) -> bool {
    let mut at = skip_blanks(a.b, a.name.end);
    // `is` or `was` as `(?i)` reads them (`waſ` is a `was`).
    if let Some(len) = ["is", "was"]
        .into_iter()
        .find_map(|word| folded_prefix(&a.b[at..], word))
    {
        at = skip_blanks(a.b, at + len);
    }
    if a.at(at) == Some(b'(') {
        match a.b[at..].iter().position(|&c| c == b')' || c == b'\n') {
            Some(o) if a.b[at + o] == b')' => at = skip_blanks(a.b, at + o + 1),
            _ => return false,
        }
    }
    a.at(at) == Some(b':') && bare_colon_at(a.b, at)
}

/// `secret-comparison`: the name, closing quotes or brackets, blanks, then `==` or `!=`.
fn site_compared(a: &Around<'_>) -> bool {
    let mut at = a.name.end;
    while matches!(a.at(at), Some(b'"' | b'\'' | b']')) {
        at += 1;
    }
    at = skip_blanks(a.b, at);
    matches!(a.b.get(at..at + 2), Some(b"==" | b"!="))
}

/// `secret-comparison-reversed`: `==` or `!=`, blanks, then the name.
fn site_compared_to(a: &Around<'_>) -> bool {
    let mut at = a.name.start;
    while at > 0 && matches!(a.b[at - 1], b' ' | b'\t') {
        at -= 1;
    }
    at >= 2 && a.b[at - 1] == b'=' && matches!(a.b[at - 2], b'=' | b'!')
}

/// `token-for-is`: the keyword, blanks, then `for` or `of` and a blank (`token for the …`).
fn site_for_or_of(a: &Around<'_>) -> bool {
    let at = skip_blanks(a.b, a.end);
    let word = |w: &[u8]| {
        a.b.get(at..at + w.len())
            .is_some_and(|got| got.eq_ignore_ascii_case(w))
            && matches!(a.at(at + w.len()), Some(b' ' | b'\t'))
    };
    at > a.end && (word(b"for") || word(b"of"))
}

/// `header`: the name, a quote or none, blanks, `:`, blanks, then the value.
fn site_header(a: &Around<'_>) -> bool {
    let at = a.name.end + usize::from(is_quote(a.at(a.name.end)));
    let colon = skip_blanks(a.b, at);
    a.at(colon) == Some(b':')
        && a.at(skip_blanks(a.b, colon + 1))
            .is_some_and(|c| !c.is_ascii_whitespace())
}

/// `header-pair-text`: the name alone in its quotes, the value of a `"name"` key
/// (`"name": "Cookie"`).
fn site_quoted(a: &Around<'_>) -> bool {
    if !(a.name.start > 0 && a.b[a.name.start - 1] == b'"' && a.at(a.name.end) == Some(b'"')) {
        return false;
    }
    // Back over `\s*:\s*` to `"name"`, in any case (a byte outside ASCII may be part of a
    // space `\s` reads).
    let space = |c: u8| c.is_ascii_whitespace() || c == 0x0b || c >= 0x80;
    let mut at = a.name.start - 1;
    while at > 0 && space(a.b[at - 1]) {
        at -= 1;
    }
    if at == 0 || a.b[at - 1] != b':' {
        return false;
    }
    at -= 1;
    while at > 0 && space(a.b[at - 1]) {
        at -= 1;
    }
    at >= 6 && a.b[at - 6..at].eq_ignore_ascii_case(b"\"name\"")
}

/// Whether `b[at..]` holds a quote or none, then at least `min` bytes of `class`.
fn value_after(b: &[u8], at: usize, min: usize, class: fn(u8) -> bool) -> bool {
    let at = at + usize::from(is_quote(b.get(at).copied()));
    b.get(at..)
        .is_some_and(|rest| rest.iter().take(min).take_while(|&&c| class(c)).count() == min)
}

/// `labelled`: the name, blanks, then 16 bytes that are neither blank nor `"` (a `'` is one).
fn site_labelled(a: &Around<'_>) -> bool {
    let value = skip_blanks(a.b, a.name.end);
    value > a.name.end
        && a.b[value..]
            .iter()
            .take(16)
            .take_while(|&&c| !c.is_ascii_whitespace() && c != b'"')
            .count()
            == 16
}

/// `labelled-is`: the name (the keyword, or `secret` then `key`), then `:` or `=`, or blanks
/// and `is` or `was`, or blanks alone, then a quote or none and 16 bytes of a token.
fn site_labelled_is(a: &Around<'_>) -> bool {
    /// The value's bytes, and any outside ASCII (`(?i)` reads `ſ` and the Kelvin sign as
    /// letters).
    fn token(c: u8) -> bool {
        c.is_ascii_alphanumeric()
            || matches!(c, b'_' | b'-' | b'.' | b'/' | b'+' | b'=' | b'~')
            || c >= 0x80
    }
    let b = a.b;
    let after = |at: usize| -> bool {
        let blanks = skip_blanks(b, at);
        if matches!(b.get(blanks), Some(b':' | b'='))
            && value_after(b, skip_blanks(b, blanks + 1), 16, token)
        {
            return true;
        }
        if blanks == at {
            return false;
        }
        // After blanks the value may start with the `=` itself (`token =_A=…`), as the
        // pattern's second way reads it.
        if value_after(b, blanks, 16, token) {
            return true;
        }
        // `is` or `was` (or a word `(?i)` reads as one: `ſ` is an `s`), then blanks.
        let word = b[blanks..]
            .iter()
            .take(5)
            .take_while(|&&c| c.is_ascii_alphabetic() || c >= 0x80)
            .count();
        (2..=4).contains(&word)
            && matches!(b.get(blanks + word), Some(b' ' | b'\t'))
            && value_after(b, skip_blanks(b, blanks + word), 16, token)
    };
    // `secret key`, `secret_key`, `secretkey`: the name runs on past the keyword.
    // (`Key` with the Kelvin sign is a `key` to `(?i)`.)
    let key_at = |at: usize| Some(at + folded_prefix(b.get(at..)?, "key")?);
    let end = a.end;
    after(end)
        || key_at(end).is_some_and(after)
        || (matches!(b.get(end), Some(b' ' | b'_' | b'-')) && key_at(end + 1).is_some_and(after))
}

/// Whether YAML text may hold a key with nothing after its colon: a `:` followed by blanks
/// and the line's end, a block scalar's `|` or `>`, or a comment.
fn has_bare_colon(text: &str) -> bool {
    let b = text.as_bytes();
    super::runs::any_at(b, [b':'], |at| bare_colon_at(b, at))
}

/// Whether the colon at `b[at]` has nothing after it but blanks before the line's end, a
/// block scalar's `|` or `>`, or a comment.
fn bare_colon_at(b: &[u8], at: usize) -> bool {
    let rest = &b[at + 1..];
    let blanks = rest
        .iter()
        .take_while(|&&c| c == b' ' || c == b'\t')
        .count();
    matches!(
        rest.get(blanks),
        None | Some(b'\n' | b'\r' | b'|' | b'>' | b'#')
    )
}

/// Necessary characters, checked before a rule's regex runs on a window (most windows around a
/// keyword hold no match): each is a literal of the rule's pattern outside any optional part,
/// so a window without it cannot match. Punctuation only, which case-insensitive matching
/// leaves as it is.
fn has_equals(text: &str) -> bool {
    memchr::memchr(b'=', text.as_bytes()).is_some()
}

/// The first byte at or after `from` that is not a blank or a tab.
fn next_non_blank(b: &[u8], from: usize) -> Option<u8> {
    b.get(from..)?
        .iter()
        .copied()
        .find(|&c| c != b' ' && c != b'\t')
}

/// `arrow-pair`: a `=>`.
fn has_arrow(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b'>', b).any(|i| i > 0 && b[i - 1] == b'=')
}

/// `subscript-assignment`: a `]` then blanks and `=`.
fn has_subscript_assignment(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b']', b).any(|i| next_non_blank(b, i + 1) == Some(b'='))
}

/// `secret-comparison`: an `==` or `!=`.
fn has_comparison(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b'=', b).any(|i| b.get(i + 1) == Some(&b'=') || (i > 0 && b[i - 1] == b'!'))
}

/// `annotated-assignment`: a `:`, and after it a blank then `=`.
fn has_annotation(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr(b':', b).is_some_and(|colon| {
        memchr::memchr_iter(b'=', &b[colon..]).any(|i| matches!(b[colon + i - 1], b' ' | b'\t'))
    })
}

/// `credential-call`: a call's `(`.
/// `label-phrase-value`: the `:` or `|` between a label and its value.
fn has_label_separator(text: &str) -> bool {
    memchr::memchr2(b':', b'|', text.as_bytes()).is_some()
}

/// `shell-default-value`: a parameter expansion's opening, `${`.
fn has_shell_default(text: &str) -> bool {
    memchr::memmem::find(text.as_bytes(), b"${").is_some()
}

fn has_open_paren(text: &str) -> bool {
    memchr::memchr(b'(', text.as_bytes()).is_some()
}

fn has_colon(text: &str) -> bool {
    memchr::memchr(b':', text.as_bytes()).is_some()
}

fn has_at(text: &str) -> bool {
    memchr::memchr(b'@', text.as_bytes()).is_some()
}

fn has_dash(text: &str) -> bool {
    memchr::memchr(b'-', text.as_bytes()).is_some()
}

fn has_quote(text: &str) -> bool {
    memchr::memchr2(b'"', b'\'', text.as_bytes()).is_some()
}

/// `bare-call-literal`: a line that is a name, blanks, then a quote (`storePassword "…"`).
fn has_bare_call(text: &str) -> bool {
    text.lines().any(|line| {
        let b = line.trim_start().as_bytes();
        let name = b
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count();
        let rest = &b[name..];
        let blanks = rest
            .iter()
            .take_while(|c| matches!(c, b' ' | b'\t'))
            .count();
        name > 0 && blanks > 0 && matches!(rest.get(blanks), Some(b'"' | b'\''))
    })
}

/// `curl-user-token`: a `:` that ends a word (`-u sk_test_…: `), before a blank, a quote or
/// the end.
fn has_empty_password(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b':', b).any(|at| {
        at > 0
            && b[at - 1].is_ascii_alphanumeric()
            && b.get(at + 1)
                .is_none_or(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n' | b'"' | b'\''))
    })
}

/// `go-struct-field`: a `:` right after the end of a secret's word (`…ord`, `…swd`, `…pwd`,
/// `…ret`, `…ken`, `…key`, `…ial`, `…als`, `…ase`) and right before a value.
fn has_glued_field(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b':', b).any(|at| {
        at >= 3
            && b.get(at + 1).is_some_and(|c| {
                !matches!(
                    c,
                    b' ' | b'\t' | b'\r' | b'\n' | b'/' | b':' | b'-' | b'=' | b'?'
                )
            })
            && {
                let mut tail = [b[at - 3], b[at - 2], b[at - 1]];
                tail.make_ascii_lowercase();
                matches!(
                    &tail,
                    b"ord" | b"swd" | b"pwd" | b"ret" | b"ken" | b"key" | b"ial" | b"als" | b"ase"
                )
            }
    })
}

/// `url-query`: a `=` and what opens a parameter (`?`, `&`, or the `\` of `\u0026`).
fn has_query(text: &str) -> bool {
    has_equals(text) && memchr::memchr3(b'?', b'&', b'\\', text.as_bytes()).is_some()
}

/// `password-set-to`: `to` between blanks, in any case.
fn has_blank_to(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr2_iter(b' ', b'\t', b).any(|at| {
        b.get(at + 1..at + 4)
            .is_some_and(|w| w[..2].eq_ignore_ascii_case(b"to") && matches!(w[2], b' ' | b'\t'))
    })
}

/// `password-is`: `is` or `was` between blanks, in any case (`(?i)` also reads the long s as
/// an `s`).
fn has_is_or_was(text: &str) -> bool {
    let b = text.as_bytes();
    let blank = |c: Option<&u8>| matches!(c, Some(b' ' | b'\t'));
    // The length of an `s` at `at`, if one is there.
    let s_at = |at: usize| match b.get(at) {
        Some(b's' | b'S') => Some(1),
        Some(0xC5) if b.get(at + 1) == Some(&0xBF) => Some(2),
        _ => None,
    };
    memchr::memchr2_iter(b' ', b'\t', b).any(|at| {
        let word = match b.get(at + 1).map(|c| c | 0x20) {
            Some(b'i') => s_at(at + 2).map(|s| 1 + s),
            Some(b'w') if b.get(at + 2).map(|c| c | 0x20) == Some(b'a') => {
                s_at(at + 3).map(|s| 2 + s)
            }
            _ => None,
        };
        word.is_some_and(|w| blank(b.get(at + 1 + w)))
    })
}

/// `returned-literal`: `return`, blanks, then a quote.
fn has_returned_literal(text: &str) -> bool {
    let b = text.as_bytes();
    super::finders::RETURN
        .find_iter(b)
        .any(|at| matches!(next_non_blank(b, at + 6), Some(b'"' | b'\'' | b'`')))
}

/// `setter-literal`: `(` and the quote of the literal.
fn has_paren_and_quote(text: &str) -> bool {
    memchr::memchr(b'(', text.as_bytes()).is_some() && has_quote(text)
}

/// `python-auth-tuple`: the `,` between user and password and the password's quote.
fn has_comma_and_quote(text: &str) -> bool {
    memchr::memchr(b',', text.as_bytes()).is_some() && has_quote(text)
}

/// `constructor-literal`: a `(` or `{` with a quote right after it (blanks between).
fn has_bracket_then_quote(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr2_iter(b'(', b'{', b)
        .any(|at| matches!(next_non_blank(b, at + 1), Some(b'"' | b'\'')))
}

/// `name-literal-pair`: a `(` with a quote right after it (blanks between), then a `,`.
fn has_call_given_a_string(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b'(', b).any(|at| {
        matches!(next_non_blank(b, at + 1), Some(b'"' | b'\''))
            && memchr::memchr(b',', &b[at..]).is_some()
    })
}

/// `table-row-pair`: the two `|` around its name.
fn has_two_bars(text: &str) -> bool {
    memchr::memchr_iter(b'|', text.as_bytes()).nth(1).is_some()
}

/// `netrc`: `password` (lowercase: the pattern is case-sensitive) followed by a blank.
fn has_netrc_password(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b'p', b)
        .any(|at| b[at..].starts_with(b"password") && matches!(b.get(at + 8), Some(b' ' | b'\t')))
}

/// `url-token-user`: `://`, then 16 or more bytes that may be the user name's characters
/// (ASCII letters, digits, `_` and `-`, or any byte of a longer character: `(?i)` reads the
/// Kelvin sign and the long s as letters), then `@`.
fn has_token_user(text: &str) -> bool {
    let b = text.as_bytes();
    // From each `:` (a substring searcher built for each window costs more than the search).
    memchr::memchr_iter(b':', b).any(|at| {
        if !b[at..].starts_with(b"://") {
            return false;
        }
        let from = at + 3;
        let run = b[from..]
            .iter()
            .take_while(|&&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-') || c >= 0x80)
            .count();
        run >= 16 && b.get(from + run) == Some(&b'@')
    })
}

/// `labelled`: a run of blanks with what may end a keyword before it (the last three
/// characters of one of its forms, in any case, or a byte of a longer character: `(?i)`
/// reads the long s as an `s`) and 16 or more characters that are neither whitespace nor `"`
/// after it (counted in bytes, of which a character has one or more).
fn has_label_and_value(text: &str) -> bool {
    /// Three lowercase bytes as the low bytes of a word.
    const fn word(e: &[u8; 3]) -> u32 {
        e[0] as u32 | (e[1] as u32) << 8 | (e[2] as u32) << 16
    }
    const ENDINGS: [u32; 12] = [
        word(b"ret"),
        word(b"ets"),
        word(b"ken"),
        word(b"ens"),
        word(b"ord"),
        word(b"rds"),
        word(b"swd"),
        word(b"pwd"),
        word(b"key"),
        word(b"eys"),
        word(b"ial"),
        word(b"als"),
    ];
    /// The bytes an ending can end with, in either case.
    const LAST: [bool; 256] = {
        let mut t = [false; 256];
        let mut c = 0;
        while c < 256 {
            t[c] = c < 0x80 && matches!(c as u8 | 0x20, b't' | b's' | b'n' | b'd' | b'y' | b'l');
            c += 1;
        }
        t
    };
    let b = text.as_bytes();
    // Prose has a blank every few bytes, too many to search for one by one: the bytes are read
    // in turn, and a blank's three bytes before it compared as one word only after a byte
    // that can end an ending (`| 0x20` lowers a letter, and makes no other byte a lowercase
    // letter).
    (3..b.len()).any(|at| {
        if !matches!(b[at], b' ' | b'\t') {
            return false;
        }
        let (c0, c1, c2) = (b[at - 3], b[at - 2], b[at - 1]);
        let ends = (c0 | c1 | c2) >= 0x80
            || (LAST[c2 as usize] && ENDINGS.contains(&word(&[c0 | 0x20, c1 | 0x20, c2 | 0x20])));
        if !ends {
            return false;
        }
        let v = at
            + b[at..]
                .iter()
                .take_while(|&&c| c == b' ' || c == b'\t')
                .count();
        b[v..]
            .iter()
            .take_while(|&&c| c >= 0x80 || !(matches!(c, b'\t'..=b'\r' | b' ' | b'"')))
            .nth(15)
            .is_some()
    })
}

/// Whether text may hold a YAML `value:` key under a `name:` or `key:` one.
fn has_yaml_pair(text: &str) -> bool {
    let b = text.as_bytes();
    use super::finders::{KEY_KEY, NAME_KEY, VALUE_KEY};
    VALUE_KEY.find(b).is_some() && (NAME_KEY.find(b).is_some() || KEY_KEY.find(b).is_some())
}

/// Whether text may hold a table's separator line.
fn has_dashes(text: &str) -> bool {
    super::finders::THREE_DASHES.find(text.as_bytes()).is_some()
}

/// The core table. Order does not matter: every rule runs on the same text and the spans are
/// united.
/// The end of a variable's or an output's name that says it holds a secret (`DB_PASSWORD`,
/// `OPENAI_API_KEY`, `db_password`), as a regex: a name that goes on past it (`_FILE`,
/// `_COUNT`) names something else.
macro_rules! secret_name_end {
    () => {
        r"(?i:password|passwd|pwd|secret|token|api_?key|private_?key|access_?key|secret_?key|credentials?)\b"
    };
}

/// The calls of a test's equality assertion (rules `secret-assertion` and
/// `secret-assertion-reversed`), up to their first argument (after Go's `t,`).
macro_rules! assertion_call {
    () => {
        r#"(?:\b(?:assert_eq|assert_ne|debug_assert_eq)!|\b(?:assertEquals|assertEqual|assertNotEqual|assertSame|Equal|Equalf|EqualValues|equal|strictEqual|deepEqual|deepStrictEqual|assert_equal))\([ \t]*(?:t,[ \t]*)?"#
    };
}

/// An asserted expression (rules `secret-assertion*`, `secret-expectation`): an identifier
/// path (group `n`) with quoted subscripts, then a call without arguments.
macro_rules! asserted_expression {
    () => {
        r#"(?P<n>[A-Za-z_$][A-Za-z0-9_.$]*(?:\[["'][^"'\]\n]+["']\])*)(?:\(\))?"#
    };
}

pub(crate) static RULES: &[Rule] = &[
    // docs/behaviour.md T2.6: tables cloud CLIs and databases print. A row naming a secret
    // in its first cell (`aws ... --output table`)...
    when(
        HAS_TWO_BARS,
        rule(
            "table-row-pair",
            "cli-table",
            NAME_KEYWORDS,
            concat!(
                r"\|[ \t]*(?P<n>[A-Za-z][A-Za-z0-9_.-]{0,40}(?i:",
                name_words!(),
                r")[A-Za-z0-9_.-]{0,20})[ \t]*\|[ \t]*(?P<s>[^|\s])"
            ),
            Refine::TableRow,
            &["||  SecretAccessKey  |  wJalrXUtnFEMI9K7MDENGbPxRfiCY  ||"],
            &[
                "||  SecretAccessKey  |  [REDACTED]  ||",
                "| token | string | the API token |",
            ],
        ),
    ),
    // ...and a column named for one, under a header and its separator line (`az ... -o
    // table`, Markdown, psql).
    when(
        HAS_DASHES,
        multiline(rule(
            "table-column",
            "cli-table",
            &[
                "secret",
                "token",
                "passw",
                "pwd",
                "keyname",
                "apikey",
                "api_key",
                "accesskey",
                "access_key",
                "credential",
                "private_key",
                "privatekey",
            ],
            r"(?m)^(?P<h>[^\n]*[A-Za-z][^\n]*)\r?\n(?P<sep>[ \t|+:]*-{3,}[-| \t+:]*)\r?$",
            Refine::TableColumn,
            &[
                "KeyName    Permissions    Value\n---------  -------------  --------------------\nkey1       FULL           Zq8Wm3Np7Lk2Vb6Xc1Rt5",
                "+-------+-------------+\n| user  | password    |\n+-------+-------------+\n| admin | MyTbl9PwZq2 |\n+-------+-------------+",
            ],
            &[
                "KeyName    Permissions    Value\n---------  -------------  --------------------\nkey1       FULL           [REDACTED]",
            ],
        )),
    ),
    // A tool's label naming a secret, then the secret alone on the next line: `Generated
    // password:`, `Your new password is:`, `Your API token (shown once):`. Only a value of
    // two digits and four letters or more (as `url-token-user` reads one): code after a
    // colon (`if token:` then `pass`) is a word or holds a blank.
    when(
        HAS_BARE_COLON,
        reaching(
            256,
            rule(
                "label-next-line",
                "assignment",
                LABEL_KEYWORDS,
                r"(?i)(?:passw(?:or)?d|passphrase|token|secret|api[ _]key|access[ _]key)(?:[ \t]+(?:is|was))?(?:[ \t]+\([^)\n]{0,40}\))?[ \t]*:[ \t]*\r?\n(?:[ \t]*\r?\n)?[ \t]*(?P<s>[A-Za-z0-9+/=_.~!@#$%^&*-]{8,})[ \t]*(?:\r?\n|\z)",
                Refine::UrlToken,
                &[
                    "Generated password:\n  Gen3rated9Pw",
                    "Your new password is:\n  N3wPassw0rd9",
                    "Your API token (shown once):\nXk9mW2xL8qP5vN3tY7zB1cD4",
                ],
                &[
                    "if token:\n    print(token)",
                    "Your password is:\n  ********",
                    "def get_token(self):\n    return self._token",
                    "token:\n  [REDACTED]",
                ],
            ),
        ),
    ),
    // A tool's label phrase naming a secret, then `:` or a table's `|`, then the secret on the
    // same line: words, a quoted name, a parenthesis or dot leaders between the secret's word
    // and the separator (`Created token 'ci-deploy': …`, `New personal access token (copy it
    // now): …`, `The generated password is: …`, `Password . . . . : …`, `| password | … |`).
    // Only a value of two digits and four letters or more, as `label-next-line` reads one:
    // a count, a date, a word or a call stays.
    when(
        HAS_LABEL_SEPARATOR,
        rule(
            "label-phrase-value",
            "assignment",
            LABEL_KEYWORDS,
            r#"(?i)\b(?:passw(?:or)?d|passphrase|token|secret|api[ _]key|access[ _]key)\b[^\n:=|"'`(){}\[\]]{0,40}(?:(?:'[^'\n]{1,40}'|"[^"\n]{1,40}"|\([^)\n]{0,40}\))[^\n:=|]{0,20})?[:|][ \t]+["']?(?P<s>[A-Za-z0-9+/=_.~!@#$%^&*-]{8,})"#,
            Refine::LabelToken,
            &[
                "Created token 'ci-deploy': Rt5vX9mK2pQ7wL3zN8bH6cF1dS5",
                "New personal access token (copy it now): Pat9ZqXk9mW2xL8qP5vN3tY7",
                "The generated password is: Gen9ZqXk9mW2xL8",
                "Your new API key is ready: NewKey9ZqXk9mW2xL8qP5",
                "Secret access key | Hb8mQ2vX7tL9kR4wZ6nB3cF1dS5gA0eYuIoPqRsT",
                "| password | Tbl9ZqPw4Xk |",
                "  Password . . . . . . : DotLeader9Zq4",
            ],
            &[
                "Token limit exceeded: 4096",
                "Secret scanning: enabled",
                "Token refreshed at: 2024-05-01T12:00:00Z",
                "password_field: models.CharField(max_length=128)",
                "| token | description |",
                "Password requirements: at least twelve characters",
                "Password hashing: bcrypt12rounds",
                "token: ${{ secrets.GITHUB_TOKEN }}",
            ],
        ),
    ),
    // docs/behaviour.md T2.4: a YAML value on the line after its secret name, or a block
    // scalar (`password: |`).
    when(
        HAS_BARE_COLON,
        multiline(rule(
            "yaml-next-line",
            "assignment",
            NAME_KEYWORDS,
            concat!(
                r"(?m)^(?P<i>[ \t]*)(?:- )?(?P<n>[A-Za-z0-9_.-]*(?i:",
                name_words!(),
                r#")[A-Za-z0-9_.-]*)[ \t]*:[ \t]*(?P<b>[|>][-+0-9]*)?[ \t]*(?:#[^\n]*)?\r?\n"#
            ),
            Refine::YamlNextLine,
            &[
                "db:\n  password:\n    Hunt3rNextLine\n  user: app",
                "tls:\n  private_key: |\n    MIIEvQIBADANBgkqhkiG9w0BAQ\n    EFAASCBKcwggSjAgEAAoIBAQC7\n  port: 443",
                "unseal_keys_b64:\n- 0tZn+7QQCxphpHwTm7/dC3LpP5JGIbYl3PK8Sy81R+P2\n- Qk9zL2m8vR4tP1wX7nJ6hF3cB5gE0aZ2sY8uD4kM1qT\nunseal_threshold: 3",
                "api_tokens:\n  - \"Zq8Wm3Np7Lk2Vb6Xc1Rt5\"\n  - Hunt3rListTok9\n",
            ],
            &[
                "password:\n  min_length: 12\n  require_digits: true",
                "secrets:\n  - name: db\n    key: password",
                "tokens:\n  - ${TOKEN_A}\n  - <token>\n",
                "password_rules:\n  - min_length\n  - require_digits\n",
                "token_scopes:\n  - repo\n  - read:org\n",
                "credentials:\n  - /etc/app2/creds.json\n  - ~/.aws/credentials\n",
            ],
        )),
    ),
    // A secret's name given as a sibling's value (docs/redaction.md, "Names beside their
    // values"): a container's `env` list in YAML, `- name: DB_PASSWORD` over `value: ...`...
    when(
        HAS_YAML_PAIR,
        multiline(rule(
            "yaml-name-value",
            "assignment",
            &["value:"],
            concat!(
                r#"(?m)^[ \t]*(?:- )?(?:name|key):[ \t]*["']?(?P<n>[A-Za-z0-9_.-]*(?i:"#,
                name_words!(),
                r#")[A-Za-z0-9_.-]*)["']?[ \t]*\r?\n[ \t]*value:[ \t]*(?P<s>[^\s#])"#
            ),
            Refine::Pair,
            &[
                "env:\n  - name: DB_PASSWORD\n    value: Hunt3rPairPw\n  - name: LOG_LEVEL\n    value: debug",
                "- name: API_TOKEN\n  value: \"Zq8Wm3Np7Lk2Vb6Xc1Rt5\"",
            ],
            &[
                "- name: DB_PASSWORD\n  valueFrom:\n    secretKeyRef:\n      name: db\n      key: password",
                "- name: API_TOKEN\n  value: ${API_TOKEN}",
                "- name: LOG_LEVEL\n  value: debug",
            ],
        )),
    ),
    // ...and XML's `<add key="ApiKey" value="..."/>` (.NET), `<env name="DB_PASSWORD"
    // value="..."/>` (PHPUnit), `<property name="db.password" value="..."/>` (Ant, Spring).
    rule(
        "xml-name-value",
        "markup",
        &["value="],
        concat!(
            r#"\b(?i:key|name)[ \t]*=[ \t]*["'](?P<n>[A-Za-z0-9_.:-]*(?i:"#,
            name_words!(),
            r#")[A-Za-z0-9_.:-]*)["'][ \t]+(?i:value)=[ \t]*(?P<s>["'])"#
        ),
        Refine::Pair,
        &[
            "<add key=\"ApiKey\" value=\"Zq8Wm3Np7Lk2Vb6Xc1Rt5\" />",
            "<env name=\"DB_PASSWORD\" value=\"Php3UnitPw\"/>",
            "<property name=\"db.password\" value='AntPr0pPw'/>",
        ],
        &[
            "<add key=\"ApiKeyHeader\" value=\"X-Api-Key\" />",
            "<env name=\"DB_PASSWORD\" value=\"\"/>",
            "<add key=\"Theme\" value=\"dark\" />",
        ],
    ),
    // docs/behaviour.md T2.2: a Secret's data values are secrets whatever their names (base64
    // of anything, `stringData` plain), as `kubectl get secret -o yaml` prints them (keys in
    // order: `data` comes before `kind`).
    multiline(rule(
        "kubernetes-secret-data",
        "kubernetes",
        &["secret"],
        r#"(?m)^[ \t]*kind:[ \t]*["']?Secret["']?[ \t]*\r?$"#,
        Refine::KubernetesSecret,
        &["apiVersion: v1\ndata:\n  app.env: QXBwRW52RGF0YTk5\nkind: Secret\ntype: Opaque"],
        &["apiVersion: v1\ndata:\n  app.env: bG9nPWluZm8=\nkind: ConfigMap"],
    )),
    multiline(rule(
        "pem-private-key",
        "private-key",
        &["private key"],
        // The marker, its headers (`Proc-Type:`, `DEK-Info:`, `Version:`), then base64, or
        // `[REDACTED]` before more of it (text that already held the marker before the rest
        // of a key): code that names the marker (`"-----BEGIN PRIVATE KEY-----",
        // "-----END…"` in a parser, `"-----BEGIN PRIVATE KEY-----..."` in a comment) holds no
        // key, and a marker without one would take the rest of the text. A `[REDACTED]`
        // alone after it is no key either: a first pass leaves one there when a copy of
        // another secret follows the marker, and a second pass took the marker and all the
        // text after it (test `a_private_key_marker_before_a_redacted_copy_stays_on_a_second_pass`).
        // What follows the markers must be a line of base64 (to its end, a marker or the END
        // line): `setFirstTokenRec…: boolean` after a key redacted beside another marker is
        // code, whose first sixteen letters a second pass took for the key.
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[ \t\r\n]*(?:[A-Za-z-]+:[^\n]*\n[ \t\r\n]*)*(?:[A-Za-z0-9+/-]|(?:\[REDACTED\][ \t\r\n]*)+[A-Za-z0-9+/=]{16,}[ \t]*(?:\r?\n|\z|\[REDACTED\]|-----END))(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
        Refine::Group,
        &[
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx1y2z3\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F17\n\nMIIEowIBAAKCAQEAx1y2z3",
        ],
        &[
            "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIE\n-----END CERTIFICATE-----",
            "_PKCS1_MARKER = (\"-----BEGIN RSA PRIVATE KEY-----\", \"-----END RSA PRIVATE KEY-----\")",
            "# \"-----BEGIN PRIVATE KEY-----...\",\nkey = load(path)",
        ],
    )),
    rule(
        "pem-private-key-base64",
        "private-key",
        &["ls0tls1crudjti"],
        r"LS0tLS1CRUdJTi(?P<s>[A-Za-z0-9+/]*={0,2})",
        Refine::PemBase64,
        &["tls.key: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2UUlCQURBTkJn"],
        &["tls.crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUREekNDQWZl"],
    ),
    multiline(rule(
        "putty-private-key",
        "private-key",
        &["private-lines", "private-mac"],
        r"(?imR)Private-(?:Lines:[ \t]*[0-9]+[ \t]*\r?\n(?P<s>[A-Za-z0-9+/=]+$(?:\r?\n[A-Za-z0-9+/=]+$)*)|MAC:[ \t]*(?P<m>[0-9a-f]+))",
        Refine::Group,
        &[
            "Private-Lines: 2\nAAAAgQDG1x2y3z4w5v6u7t8s9r0q\nAAAAQQDxyzw8v7u6t5s4r3q2p1o0\nPrivate-MAC: 0a1b2c3d4e5f",
        ],
        &["Public-Lines: 2\nAAAAB3NzaC1yc2EAAAADAQABAAAAgQ"],
    )),
    rule(
        "kubeconfig-client-key-data",
        "private-key",
        &["client-key-data", "tls.key"],
        r#"(?i)(?:client-key-data|tls\.key)["']?[ \t]*[:=][ \t]*["']?(?P<s>[A-Za-z0-9+/=]{8,})"#,
        Refine::Group,
        &["    client-key-data: QmFzZTY0S2V5RGF0YUhlcmU="],
        &["    client-certificate-data: QmFzZTY0Q2VydERhdGE="],
    ),
    rule(
        "aws-key-id",
        "aws-access-token",
        &[
            "akia", "asia", "aroa", "aida", "aipa", "agpa", "anpa", "anva", "asca", "apka", "abia",
            "acca", "a3t",
        ],
        r"(?:AKIA|ASIA|AROA|AIDA|AIPA|AGPA|ANPA|ANVA|ASCA|APKA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16,128}",
        Refine::Group,
        &["aws_access_key_id AKIAIOSFODNN7EXAMPLE"],
        &["AKIA is a prefix", "ASIAN markets"],
    ),
    rule(
        "kcap-vendor-token",
        "github-pat,gitlab-pat,slack,pypi,npm,docker,cloudflare,stripe,gcp-api-key",
        &[
            "ghp_",
            "gho_",
            "ghs_",
            "ghu_",
            "ghr_",
            "github_pat_",
            "cfat_",
            "k_live_",
            "k_test_",
            "xox",
            "pypi-",
            "npm_",
            "glpat-",
            "dckr_",
            "aiza",
        ],
        r"(?:gh[pousr]_|github_pat_|cfat_|[sr]k_live_|[sr]k_test_|xox[abposr]-|pypi-|npm_|glpat-|dckr_pat_|dckr_oat_)(?P<b>[A-Za-z0-9_-]{10,})|AIza[A-Za-z0-9_-]{30,}",
        Refine::Token,
        &[
            "push with ghp_aBcDeFgHiJkLmNoP1234",
            "glpat-aBcDeFgHiJkLmNoP78",
        ],
        &["ghp_short", "npm_config_cache"],
    ),
    rule(
        "kcap-sk",
        "openai-api-key",
        &["sk-"],
        r"(?:^|[^A-Za-z0-9])(?P<s>sk-[A-Za-z0-9_-]{10,})",
        Refine::Group,
        &[
            "openai sk-aBcDeFgHiJkLmNoP9876",
            "key_sk-aBcDeFgHiJkLmNoP9876",
        ],
        &["task-abcdefghijklmnop", "disk-usage-report-2026"],
    ),
    rule(
        "jwt",
        "jwt",
        &["eyj"],
        r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        Refine::Group,
        &["id eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"],
        &["eyJhbGciOiJIUzI1NiJ9 alone"],
    ),
    rule(
        "slack-webhook",
        "slack-webhook-url",
        &["hooks.slack.com"],
        r"(?i)hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9_/-]+)",
        Refine::Group,
        &["https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/WhSlackSecret0123456789"],
        &["see hooks.slack.com docs"],
    ),
    rule(
        "discord-webhook",
        "discord-webhook",
        &["discord"],
        r"(?i)discord(?:app)?\.com/api/(?:v[0-9]+/)?webhooks/(?P<s>[A-Za-z0-9_/-]+)",
        Refine::Group,
        &["https://discord.com/api/webhooks/123456789012345678/WhDiscord-Secret_0123"],
        &["Discord and Slack notifications"],
    ),
    rule(
        "telegram-bot-url",
        "telegram-bot-api-token",
        &["telegram"],
        r"(?i)api\.telegram\.org/(?:file/)?bot(?P<s>[0-9]{5,}:[A-Za-z0-9_-]{20,})",
        Refine::Group,
        &["curl https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getMe"],
        &["https://api.telegram.org/bots/api"],
    ),
    when(
        HAS_COLON,
        rule(
            "header",
            "http-header",
            HEADER_KEYWORDS,
            concat!(
                r#"(?i)(?P<lq>["'])?(?:^|\b)(?P<n>"#,
                header_names!(),
                r#")(?P<cq>["'])?[ \t]*:[ \t]*(?P<s>\S)"#
            ),
            Refine::Header,
            &[
                "Authorization: Bearer abc.def-123",
                "X-Auth-Key: 0123456789abcdef",
                "DD-APPLICATION-KEY: aBcDeFgHiJ0123",
                "map[Cookie:[sid=GoCookie1] X-Api-Key:[GoKey2]]",
                "x-functions-key: FnKey123",
            ],
            &[
                "Authorization header missing: 401 Unauthorized",
                "authorization: string;",
                "fn parse_cookie_header(raw: &str) -> Vec<Cookie> {",
            ],
        ),
    ),
    multiline(rule(
        "header-pair-text",
        "http-header",
        HEADER_KEYWORDS,
        concat!(
            r#"(?i)"name"\s*:\s*"(?:"#,
            header_names!(),
            r#")"\s*,\s*"value"\s*:\s*"(?P<s>[^"]*)""#
        ),
        Refine::Group,
        &["[{\n  \"name\": \"Authorization\",\n  \"value\": \"Bearer HarTok1\"\n}"],
        &["[{\"name\": \"Accept\", \"value\": \"*/*\"}]"],
    )),
    multiline(rule(
        "header-pair-text-reversed",
        "http-header",
        HEADER_KEYWORDS,
        concat!(
            r#"(?i)"value"\s*:\s*"(?P<s>[^"]*)"\s*,\s*"name"\s*:\s*"(?:"#,
            header_names!(),
            r#")""#
        ),
        Refine::Group,
        &["{\"value\": \"sid=HarCookie4\", \"name\": \"Cookie\"}"],
        &["{\"value\": \"*/*\", \"name\": \"Accept\"}"],
    )),
    rule(
        "python-bytes-bearer",
        "http-header",
        &["bearer"],
        r#"(?i)b?["']bearer[ \t]+(?P<s>[^\s"']+)["']"#,
        Refine::Label,
        &["sent b'Bearer PyBytesTok2' upstream"],
        &[
            "the 'bearer' scheme",
            "fmt.Sprintf(\"Bearer %s\", tok)",
            "headers = {'Authorization': 'Bearer {}'.format(token)}",
        ],
    ),
    rule(
        "bearer",
        "http-header",
        &["bearer"],
        r"(?i)\bbearer[ \t]+(?P<s>[A-Za-z0-9_\-.~+/]{8,}=*)",
        Refine::Label,
        &["Bearer eyJhbGciOiJIUzI1NiJ9.e30"],
        &["a bearer token is sent"],
    ),
    when(
        HAS_QUERY,
        rule(
            "url-query",
            "url-query-secret",
            &[
                "token",
                "secret",
                "passw",
                "pass",
                "pwd",
                "key=",
                "sig",
                "auth",
                "credential",
                "sas=",
                "keyid=",
            ],
            r#"(?i)(?:[?&]|\\u0026)(?P<n>[A-Za-z0-9_.\-]+)=(?P<s>[^&#\s"]+)"#,
            Refine::Query,
            &[
                "GET https://x.io/cb?access_token=QkAccessTok1&page=2",
                "https://b.s3.amazonaws.com/k?X-Amz-Signature=QkAmzSig7",
                "https://x.io/?key=it'sMine",
            ],
            &["https://example.com/search?q=token+rotation&lang=en"],
        ),
    ),
    when(
        HAS_AT,
        rule(
            "url-userinfo",
            "url-password",
            &["://"],
            r#"(?i)\b[a-z][a-z0-9+.\-]*://[^\s/?#@"':]*:(?P<s>[^\s/"@]+)@"#,
            Refine::Group,
            &[
                "git clone https://deploy:UiHunter2Pass@git.example.com/r.git",
                "postgres://app:p#ss?w'rd@db:5432/app",
            ],
            &["http://localhost:8080/path"],
        ),
    ),
    when(
        HAS_TOKEN_USER,
        rule(
            "url-token-user",
            "git-remote-token",
            &["://"],
            r"(?i)\b(?:https?|git|ssh)://(?P<s>[A-Za-z0-9_\-]{16,})@",
            Refine::UrlToken,
            &["git remote add o https://ghx0123456789abcdefXYZ7@github.com/o/r.git"],
            &["https://gitlab-ci-token-user@gitlab.com/o/r.git"],
        ),
    ),
    when(
        HAS_EQUALS,
        rule(
            "connection-string",
            "connection-string",
            &[
                "password",
                "pwd",
                "accountkey",
                "sharedaccesskey",
                "sharedaccesssignature",
                "sharedsecret",
            ],
            r#"(?i)(?:^|[;\s"'{(])(?P<n>password|pwd|accountkey|sharedaccesskey|sharedaccesssignature|sharedsecret)[ \t]*=[ \t]*(?P<s>[^;\s"=>][^;\r\n"]*[^;\s"]|[^;\s"=>])"#,
            Refine::Label,
            &[
                "Server=db;User Id=app;Password=my secret pass;Database=x",
                "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=Zm9vYmFyYmF6cXV4==;EndpointSuffix=core.windows.net",
            ],
            &["Server=db;User Id=app;Database=x"],
        ),
    ),
    rule(
        "key-named-value",
        "generic-api-key",
        &[
            "_key", "-key", "key=", "key =", "key:", "key :", "key\":", "key':",
        ],
        r#"(?i)\b(?P<n>[a-z0-9]+(?:[_.-][a-z0-9]+)*[_-]key|(?-i:[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)*Key))\b["']?\]?[ \t]*(?:=|:=?)[ \t]*(?P<q>["']?)(?P<s>[A-Za-z0-9+/_=.-]{20,512})"#,
        Refine::KeyNamed,
        &[
            "paymongo_key = sk9Xq2Lm7Vb4Rt8Wz3Nc6Yp1Hd5Jf0Ga",
            "VOODOO_KEY=qPUKVel1ka4YalLPP0E533QvWeXSE3m0zd7UExTlRM8L9Z",
            "\"newscatcher-key\": \"0TmwjGlDiFJcHN_wODUUrEGBjC4Zh9xSnTQ2jiN83oU\"",
            "apiMaticKey := \"rc6iLoUEFGGAWNLsuBJnmsh4tZB-oCxcDUmc45HIPcuiQvfUEu\"",
            "settings['paymongo_key'] = \"2Tm6cdsRVBTL9hRCmR6MRDTpMLFS4I\"",
        ],
        &[
            "cache_key = \"user_profile_settings_cache\"",
            "public_key: MCowBQYDK2VwAyEAXk9vQ2mL8pR4tZ7wYb3nC6dF1gH5jK0sLa2qW4",
            "partition_key = tenant_id_and_created_at_day",
            "SORT_KEY=lastModifiedAtDescending",
            "object_key = uploads/2026/12/report-final.pdf",
            "const cacheKey = \"Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4\";",
            "MONKEY=Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
            "cache['cache_key'] = \"user_profile_settings_cache\"",
        ],
    ),
    when(
        HAS_ANNOTATION,
        rule(
            "annotated-assignment",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)(?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_.\-]*)[ \t]*:[ \t]*[A-Za-z_][A-Za-z0-9_.]*(?:\[[^\]\n]{0,64}\]|<[^>\n]{0,64}>)?[ \t]+=[ \t]*(?P<s>[^\s=>])"#
            ),
            Refine::Annotated,
            &[
                "    api_key: str = \"Xk9vQ2mL8pR4tZ7wYb3n\"",
                "const apiKey: string = 'Zq8Wm3Np7Lk2Vb6Xc1Rt5';",
                "    password: Final[str] = \"hunter2x\"",
            ],
            &[
                "    password: Optional[str] = None",
                "    token: SecretStr = SecretStr(\"\")",
                "const apiKey: string = process.env.API_KEY;",
                "if token: int == 3:",
            ],
        ),
    ),
    when(
        HAS_COMPARISON,
        rule(
            "secret-comparison",
            "code",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)(?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_]*)["'\]]*[ \t]*(?:===?|!==?)[ \t]*(?P<q>["'`])(?P<s>[^"'`\n])"#
            ),
            Refine::Comparison,
            &[
                "if password == \"Hunt3rPw9\" {",
                "if creds.Secret != \"open-sesame\" {",
                "if (req.headers['x-api-key'] !== 'K3yCompared9') return 401;",
            ],
            &[
                "if password == \"\" {",
                "if token != \"<token>\" {",
                "if tokenType == \"Bearer\" {",
                "if password == confirm {",
                "if token == \"return\" {",
                "if (token.value === '}') {",
            ],
        ),
    ),
    when(
        HAS_COMPARISON,
        rule(
            "secret-comparison-reversed",
            "code",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)(?P<q>["'`])(?P<s>[^"'`\n]+)["'`][ \t]*(?:===?|!==?)[ \t]*(?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_]*)"#
            ),
            Refine::Comparison,
            &[
                "if (\"Hunt3rPw9\" == password) {",
                "if ('K3yCompared9' !== my_private_key) return;",
            ],
            &[
                "if (\"\" == password) {",
                "if (\"}\" == token) {",
                "if ('<password>' === password) {",
            ],
        ),
    ),
    // A secret's name and its literal as a pair alone in brackets or parentheses: a
    // request's parameters or headers as a list of pairs (`params=[('api_key', '…')]`,
    // `[["X-Api-Key", "…"]]`), a tuple (`("password", "…")`). The pair must close after the
    // literal, so a list of names (`["username", "password", "email"]`) is no pair; a flag
    // and its value may stand anywhere in a command's list (`["login", "--token", "…", "-v"]`;
    // a literal starting with `-` is the next flag, not a value).
    when(
        HAS_COMMA_AND_QUOTE,
        rule(
            "named-pair",
            "generic-assignment",
            NAME_KEYWORDS,
            r#"(?:[\[(][ \t]*["'](?P<n>-{0,2}[A-Za-z][A-Za-z0-9_.\-]*)|["'](?P<f>--?[A-Za-z][A-Za-z0-9_.\-]*))["'][ \t]*,[ \t]*["'](?P<s>[^"'\n\\\-][^"'\n\\]*)["']"#,
            Refine::NamedPair,
            &[
                "params = [('api_key', 'PairKey9ZqXm4'), ('format', 'json')]",
                "data = [(\"password\", \"hunter2x\")]",
                "args = [\"--token\", \"PairTok9ZqXm4\"]",
                "cmd = [\"gh\", \"auth\", \"--password\", \"hunter2x\", \"-v\"]",
            ],
            &[
                "fields = [\"access_token\", \"refresh_token\"]",
                "choices = [(\"password\", \"Password\")]",
                "flags = (\"--token\", \"-t\")",
                "cols = [\"username\", \"password\", \"email\"]",
                "pair = (\"password\", \"<password>\")",
                "opts = (\"token\", \"API token\")",
                "cols = [\"id\", \"api_key\", \"Created9\", \"x\"]",
                "'CREATE': ('AUTH', 'SELECTED'),",
                "INSERT INTO users (name, email) VALUES ('password', 'Admin9@b.c');",
            ],
        ),
    ),
    // Java's and Kotlin's comparisons by method: `password.equals("…")`,
    // `"…".equals(apiKey)`, `token.equalsIgnoreCase("…")`: the literal a secret is compared
    // to is the secret, as with `==`.
    when(
        HAS_QUOTE,
        rule(
            "secret-equals",
            "code",
            NAME_KEYWORDS,
            r#"(?P<n>[A-Za-z0-9_]+)(?:\(\))?\.(?:equals|equalsIgnoreCase)\([ \t]*(?P<q>["'])(?P<s>[^"'\n])"#,
            Refine::Comparison,
            &[
                "if (password.equals(\"EqualsPw9Zq\")) {",
                "if (getApiKey().equalsIgnoreCase(\"EqKey9ZqXm\")) {",
            ],
            &[
                "if (password.equals(\"\")) {",
                "if (token.equals(confirm)) {",
            ],
        ),
    ),
    when(
        HAS_QUOTE,
        rule(
            "secret-equals-reversed",
            "code",
            NAME_KEYWORDS,
            r#"(?P<q>["'])(?P<s>[^"'\n]+)["']\.(?:equals|equalsIgnoreCase)\([ \t]*(?P<n>[A-Za-z0-9_.]+)[ \t]*\)"#,
            Refine::Comparison,
            &["if (\"RevEq9PwZq\".equals(password)) {"],
            &[
                "if (\"\".equals(password)) {",
                "if (\"Bearer\".equals(tokenType)) {",
                "byte[] b = \"RAW\".equals(masterSecret.getFormat())",
            ],
        ),
    ),
    // A test's assertion that a secret's expression equals a literal, either way round
    // (`assert_eq!(token, "…")`, `assertEquals("…", config.getApiKey())`,
    // `require.Equal(t, "…", cfg.Token)`), or an expectation's chain
    // (`expect(apiKey).toBe("…")`, `assertThat(props.getPassword()).isEqualTo("…")`): the
    // literal is the secret, as with `==`. The expression is any identifier path with
    // subscripts and a call without arguments; its last part must name a secret.
    when(
        HAS_PAREN_AND_QUOTE,
        rule(
            "secret-assertion",
            "code",
            NAME_KEYWORDS,
            concat!(
                assertion_call!(),
                asserted_expression!(),
                r#"[ \t]*,[ \t]*(?P<q>["'`])(?P<s>[^"'`\n])"#
            ),
            Refine::Comparison,
            &[
                "assert_eq!(token, \"AsrtTok9ZqXm4\");",
                "self.assertEqual(creds.secret, \"AsrtSec9ZqXm4\")",
                "assert.Equal(t, cfg.Password, \"hunter2x\")",
                "assert_eq!(cfg[\"api_key\"], \"AsrtKey9ZqXm4\");",
            ],
            &[
                "assert_eq!(token, \"fn\");",
                "assertEquals(token.getType(), \"IDENT9x\");",
                "assert_eq!(password, \"\");",
                "self.assertEqual(token_type, \"Bearer\")",
                "self.assertEqual(creds.consumer.secret, \"consumer.secret\")",
            ],
        ),
    ),
    when(
        HAS_PAREN_AND_QUOTE,
        rule(
            "secret-assertion-reversed",
            "code",
            NAME_KEYWORDS,
            concat!(
                assertion_call!(),
                r#"(?P<q>["'`])(?P<s>[^"'`\n]+)["'`][ \t]*,[ \t]*"#,
                asserted_expression!(),
                r#"[ \t]*[,)]"#
            ),
            Refine::Comparison,
            &[
                "assertEquals(\"AsrtKey9ZqXm4\", config.getApiKey());",
                "require.Equal(t, \"AsrtTok9ZqXm4\", cfg.Token)",
                "assert_eq!(\"hunter2x\", password);",
            ],
            &[
                "assertEquals(\"Bearer\", tokenType);",
                "assertEquals(\"password\", field.getName());",
                "assert_eq!(\"\", password);",
            ],
        ),
    ),
    when(
        HAS_PAREN_AND_QUOTE,
        rule(
            "secret-expectation",
            "code",
            NAME_KEYWORDS,
            concat!(
                r#"\b(?:expect|assertThat|assert_that)\([ \t]*"#,
                asserted_expression!(),
                r#"[ \t]*\)[ \t]*"#,
                r#"(?:\.(?:toBe|toEqual|toStrictEqual|isEqualTo|to\.equal|to\.eql|to\.eq|to\.be|should\.equal)\(|\.to[ \t]+eq(?:ual)?[ \t(])[ \t]*(?P<q>["'`])(?P<s>[^"'`\n])"#
            ),
            Refine::Comparison,
            &[
                "expect(apiKey).toBe(\"ExpKey9ZqXm4\");",
                "assertThat(props.getPassword()).isEqualTo(\"hunter2x\");",
                "expect(config.token).to.equal('ExpTok9ZqXm4');",
                "expect(user.password).to eq(\"hunter2x\")",
            ],
            &[
                "expect(tokenizer.decode(ids)).toBe(\"hello world\");",
                "expect(password).toBe(\"\");",
                "expect(token.kind).toBe(\"identifier\");",
                "expect(tokenType).toEqual(\"Bearer\");",
            ],
        ),
    ),
    when(
        HAS_ARROW,
        rule(
            "arrow-pair",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)(?P<o>["':]?)(?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_.\-]*)["']?[ \t]*=>[ \t]*(?P<s>[^\s=>])"#
            ),
            Refine::Arrow,
            &[
                "'password' => 'Hunt3rPw9',",
                ":secret_key => \"Xk9vQ2mLp7RzAb\",",
                "my %db = (password => 'Hunt3rPw9');",
            ],
            &[
                "'password' => env('DB_PASSWORD'),",
                "'password' => 'required|string|min:8|confirmed',",
                "tokens.map(token => token.trim())",
                "headers.map(token => \"Bearer \" + token)",
                ":password => params[:password]",
            ],
        ),
    ),
    when(
        HAS_SUBSCRIPT_ASSIGNMENT,
        rule(
            "subscript-assignment",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)(?:\[["':](?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_.\-]*)["']?\]|\b(?P<c>[A-Za-z0-9_]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_]*)\[[0-9]*\])[ \t]*=[ \t]*(?P<s>[^\s=])"#
            ),
            Refine::NameThenValue,
            &[
                "$config['password'] = 'Hunt3rPw9';",
                "os.environ[\"OPENAI_API_KEY\"] = \"Xk9vQ2mLp7RzAb12\"",
                "char password[] = \"Hunt3rPw9\";",
            ],
            &[
                "data[\"token\"] = token",
                "ssl[\"password\"] = ssl_key_password",
                "os.environ[\"API_KEY\"] = os.getenv(\"OTHER\")",
                "if row['password'] == hashed:",
            ],
        ),
    ),
    when(
        HAS_EQUALS,
        rule(
            "assignment",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)(?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_.\-]*)["']?[ \t]*(?::|\?|\|\||\?\?)?=[ \t]*(?P<s>[^\s=>])"#
            ),
            Refine::Assign,
            &[
                "export DB_PASSWORD=p@ss;w0rd|x",
                "APP_SECRET=x(S)",
                "DB_PASS=hunter22",
                "APP_KEY=base64:Zm9vYmFy",
                "ENCRYPTION_KEY=0123abcd",
                "_auth=dXNlcjpwYXNz",
                "SMTP_PASS='a b c'",
                "API_KEY=Xk9v(Q2mLp7)",
                "apiKey := \"Xk9vQ2mLp7Rz\"",
                "DB_PASSWORD:=Gn7uMakePw",
            ],
            &[
                "MY_TOKEN=$OTHER",
                "token, err := auth.Token(ctx)",
                "tokens := strings.Fields(line)",
                "TOKEN=${VAR}",
                "TOKEN=$(cat /run/secrets/t)",
                "remainingTokens = MAX - used",
                "api_key = load_key(path)",
                "token = os.getenv(\"X\")",
                "input_tokens=1234",
                "passenger=bob",
            ],
        ),
    ),
    when(
        HAS_COLON,
        rule(
            "colon-pair",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)(?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_.\-]*)["']?[ \t]*:(?:[ \t]+(?P<s>\S)|(?P<q>["']))"#
            ),
            Refine::Colon,
            &[
                "db_password: hunter2hunter2",
                "config: {\"api_key\": \"abc\"}",
                "pass: \"p w\"",
                "the password: pa55",
            ],
            &[
                "setFirstTokenReceived: boolean",
                "apiKey: profile.openai_api_key || \"\"",
                "test auth::tokens::refresh ... ok",
                "secret_scanning: on",
                "\"gpt-tokenizer\": \"^2.1.0\"",
            ],
        ),
    ),
    when(
        HAS_LABEL_AND_VALUE,
        rule(
            "labelled",
            "generic-label",
            &[
                "secret",
                "token",
                "passw",
                "pwd",
                "api_key",
                "api-key",
                "api.key",
                "apikey",
                "private",
                "credential",
                "access",
                "auth",
            ],
            r"(?i)\b(?:secrets?|tokens?|passwords?|passwd|pwd|api[-_.]?keys?|private[-_.]?keys?|credentials?|client[-_.]?secrets?|access[-_.]?keys?|auth[-_.]?tokens?)\b[ \t]+(?P<s>[^\s\x22=:][^\s\x22]{15,})",
            Refine::Label,
            &[
                "password p@ss!w0rd-Very-Long-1 for the db",
                "hcloud:token  9xKMAbcdefghij1234",
            ],
            &["token validation failed: expired"],
        ),
    ),
    rule(
        "labelled-is",
        "generic-label",
        TOKEN_LABEL_KEYWORDS,
        r#"(?i)(?:bearer|token|api[ _-]?key|access[ _-]?key|secret[ _-]?key|client[ _-]?secret)(?:[ \t]*[:=][ \t]*|[ \t]+(?:(?:is|was)[ \t]+)?)["']?(?P<s>[A-Za-z0-9_\-./+=~]{16,})"#,
        Refine::Label,
        &["the API key is abcdefghijklmnop1234"],
        &["The API key is read from the environment"],
    ),
    when(
        HAS_IS_OR_WAS,
        rule(
            "password-is",
            "generic-label",
            &["passw", "passphrase", "secret"],
            r#"(?i)(?:password|passwd|passphrase|secret)(?:[ \t]+(?:for|of)(?:[ \t]+[^\s.,;:"']+){1,3})?[ \t]+(?:is|was)[ \t]+["']?(?P<s>[^\s"',;]{6,})"#,
            Refine::Prose,
            &[
                "the secret is hunter2x",
                "The password for the admin account is ForAcct9ZqPw.",
            ],
            &[
                "the password is incorrect.",
                "The password for this account is stored in Vault.",
            ],
        ),
    ),
    // Prose naming what a token or key is for, then the value: "the token for the staging
    // API is …", "the API key of the billing service was …" (`labelled-is` reads the word
    // right before `is`). Only a value shaped as a generated one (two digits, four letters,
    // four changes between digits and cases), so "the token for this session is expired" and
    // a value's description stay; a sentence's closing period is not part of it.
    when(
        HAS_IS_OR_WAS,
        rule(
            "token-for-is",
            "generic-label",
            TOKEN_LABEL_KEYWORDS,
            r#"(?i)(?:token|api[ _-]?key|access[ _-]?key)[ \t]+(?:for|of)(?:[ \t]+[^\s.,;:"']+){1,3}[ \t]+(?:is|was)[ \t]+["'`]?(?P<s>[A-Za-z0-9_\-./+=~!@#$%^&*]{7,}[A-Za-z0-9_\-/+=~!@#$%^&*])"#,
            Refine::ProseToken,
            &[
                "the token for the staging API is Tk9aB3xY7qLm2PzQ",
                "The API key of the billing service was Bk7mQ2xLp9Wz.",
                "the token for the CI runner is Ci9!tK3@xQ7#",
            ],
            &[
                "the token for this session is expired",
                "The API key for the staging environment is stored in Vault.",
                "The access key for version 2 is v2.0.1-beta",
            ],
        ),
    ),
    // Prose telling a password it set: "I set the password to X", "changed the passphrase to
    // X" (a word of the docs stays: "reset the password to access it").
    when(
        HAS_BLANK_TO,
        rule(
            "password-set-to",
            "generic-label",
            &["passw", "passphrase"],
            r#"(?i)\b(?:set|changed?|reset|updated?)\b[^\n.]{0,30}?\b(?:password|passwd|passphrase)\b[ \t]+to[ \t]+(?P<s>[^\s"',;]{6,})"#,
            Refine::Prose,
            &[
                "I set the password to Xk9mW2xL8qP5 for the staging database.",
                "Changed the admin passphrase to Ph4sePass9 and restarted.",
            ],
            &["Reset the password to access the console."],
        ),
    ),
    when(
        HAS_QUOTE,
        rule(
            "password-is-quoted",
            "generic-label",
            &["passw", "passphrase"],
            // Also a log's or an error's "… with password 'X'" (`authentication failed for
            // user "app" with password "…"`, `connecting using password '…'`).
            r#"(?i)(?:\b(?:password|passwd|passphrase)\b(?:[ \t]+(?:for|of)[ \t]+(?:the[ \t]+)?(?:user|account|login)?[ \t]*["']?[^\s"']+["']?)?[ \t]+(?:is|was|will[ \t]+be|should[ \t]+be|to)|\b(?:with|using|via)[ \t]+(?:the[ \t]+)?(?:password|passwd|passphrase))[ \t]+(?P<q>["'])(?P<s>[^"'\n])"#,
            Refine::QuotedProse,
            &[
                "ensure the password is \"centipede\" and press On",
                "The default password for the user \"pyne-user\" is \"pyne\".",
                "2. Ensure the password for user 'postgres' is 'admin' or change .env file.",
                "set the password to 'correct horse'",
                "authentication failed for user \"app\" with password \"Err0rPw9x\"",
                "connecting to db using password 'Us1ngPw9x'",
            ],
            &[
                "log in with password \"<password>\"",
                "the password is \"required\" when a user is set",
                "the password is '<your password>'",
                "the password is \"optional\" for local runs",
            ],
        ),
    ),
    when(
        HAS_NETRC_PASSWORD,
        rule(
            "netrc",
            "netrc",
            &["password"],
            r"(?m)(?:^[ \t]*|\blogin[ \t]+\S+[ \t]+)password[ \t]+(?P<s>\S+)[ \t]*\r?$",
            Refine::Group,
            &["machine github.com login bob password NetrcOne9"],
            &["Password must be at least 12 characters long."],
        ),
    ),
    rule(
        "pgpass",
        "pgpass",
        &["5432:", "6432:", "5433:", "*:"],
        // The user is a name, not a number: `/etc/shadow`'s `root:*:20228:0:99999:7:::` has
        // the same colons.
        r#"(?m)(?:^|[\s"'=])[A-Za-z0-9_.\-*\[\]]+:(?:[0-9]{1,5}|\*):[^:\s"']+:[^:\s"']*[^:\s"'0-9][^:\s"']*:(?P<s>[^\s"']+)"#,
        Refine::Group,
        &[
            "db.internal:5432:appdb:app_user:PgPassSecret77",
            "*:*:*:postgres:PgStarSecret88",
        ],
        &[
            "12:30:45 INFO starting worker",
            "root:*:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::",
        ],
    ),
    // A command continued over lines (`curl -X POST \` then `-u admin:… \`): read up to
    // 1 KiB past the keyword's line.
    reaching(
        1024,
        rule(
            "curl-user",
            "command-line",
            &["curl"],
            r#"(?i)\bcurl\b(?:[^\n|;&\\]|\\[^\n]|\\\r?\n)*?[ \t](?:-u|-U|--user|--proxy-user)(?:[ \t]+|=|[ \t]*\\\r?\n[ \t]*)?(?:"[^"\n:]*"|'[^'\n:]*'|(?P<q>["']?)[^:\s"']*):(?P<q2>["']?)(?P<s>[^\s"'])"#,
            Refine::Flag,
            &[
                "curl -u admin:CurlUserPass1 https://api.example.com/v1",
                "curl -s --user \"bob:Curl Pass2\" https://x.io",
                "curl -X POST \\\n  -H 'Accept: */*' \\\n  -u admin:Curl9Pass \\\n  https://api.example.com",
                "curl --user kevin:'pRf7vG2h1L8nQkW9' -iX PATCH https://x.io",
                "curl -X POST --user \"{acd3c08b-74e8}\":\"{ZqL5kVrX1n8tA2}\" https://x.io",
                "curl -s --url \"imaps://mail.example.com\" --user\\\n  \"bob:Imap9Pass\"",
            ],
            &["curl -sS https://api.github.com/repos/rust-lang/rust"],
        ),
    ),
    // A token given as `curl`'s user name with no password (`curl -u sk_test_…: https://…`, as
    // Stripe's and others' docs write it).
    when(
        HAS_EMPTY_PASSWORD,
        rule(
            "curl-user-token",
            "command-line",
            &["curl"],
            r#"(?i)\bcurl\b[^\n|;&]*?[ \t](?:-u|--user)(?:[ \t]+|=)?["']?(?P<s>[A-Za-z0-9_\-]{16,}):["']?(?:[ \t\r\n]|$)"#,
            Refine::UrlToken,
            &[
                "curl https://api.stripe.com/v1/charges -u sk_test_4eC39HqLyjWDarjtT1zdp7dc: -d amount=2000",
            ],
            &["curl -u deploy_user_account: https://x.io"],
        ),
    ),
    rule(
        "mysql-p",
        "command-line",
        &["mysql", "mariadb"],
        r#"(?i)\b(?:mysql[a-z]*|mariadb[a-z-]*)\b[^\n|;&]*?[ \t]-p(?P<q>["']?)(?P<s>[^\s"'])"#,
        Refine::Flag,
        &["mysql -h db -u root -pMysqlSecret42 appdb"],
        &["mysql -u root -p appdb"],
    ),
    rule(
        "sshpass-p",
        "command-line",
        &["sshpass"],
        r#"\bsshpass\b[^\n|;&]*?[ \t]-p[ \t]*(?P<q>["']?)(?P<s>[^\s"'])"#,
        Refine::Flag,
        &["sshpass -p 'Sp4ss w0rd' ssh root@host"],
        &["sshpass -e ssh root@host"],
    ),
    rule(
        "login-p",
        "command-line",
        &["login"],
        r#"(?i)\b(?:docker|podman|nerdctl|buildah|az|oc|cf|oras|crane|regctl|helm[ \t]+registry)[ \t]+login\b[^\n|;&]*?[ \t](?:-p|--password)(?:[ \t]+|=)(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "docker login -u bob -p DockerPw1 ghcr.io",
            "az login -u a@b.c -p AzPw2",
            "oc login -u developer -p 0cL0ginPw9 https://api.crc.testing:6443",
            "cf login -a https://api.cf.example.com -u admin -p CfL0ginPw9",
        ],
        &["docker login ghcr.io --username bob --password-stdin < token.txt"],
    ),
    // A password given as a command's plain argument: Grafana's `admin
    // reset-admin-password NEW`, `openssl passwd [-6] [-salt S] PLAIN` (which prints the hash
    // of the plain text given), `mysqladmin … password NEW`; a registry's credentials as
    // `--creds user:pass` (skopeo, podman, buildah); and `echo 'user:pass' | chpasswd`.
    rule(
        "password-argument",
        "command-line",
        &["reset-admin-password", "openssl passwd", "mysqladmin"],
        r#"(?i)(?:\breset-admin-password(?:[ \t]+--[a-z-]+(?:[ \t=]+(?:"[^"\n]*"|'[^'\n]*'|[^\s"'-]\S*))?)*|\bopenssl[ \t]+passwd(?:[ \t]+-(?:1|5|6|apr1|aixmd5|crypt|quiet|table|reverse)|[ \t]+-salt[ \t]+\S+)*|\bmysqladmin\b[^\n|;&]*?[ \t]password)[ \t]+(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "grafana-cli admin reset-admin-password Gr4fanaNewPw9",
            "grafana cli --homepath \"/usr/share/grafana\" admin reset-admin-password Gr4fanaNewPw9",
            "openssl passwd -6 -salt xyz 0penSslPasswd9",
            "mysqladmin -u root password MysqlAdm1nPw9",
        ],
        &[
            "openssl passwd -6 -stdin < pw.txt",
            "mysqladmin -u root -p status",
            "grafana-cli admin reset-admin-password --help",
        ],
    ),
    rule(
        "creds-flag",
        "command-line",
        &["creds"],
        r#"(?i)(?:^|[ \t])--(?:src-|dest-)?creds(?:[ \t]+|=)(?P<q>["']?)[^:\s"']+:(?P<s>[^\s"'])"#,
        Refine::Flag,
        &["skopeo copy --src-creds robot:Sk0peoPw9 docker://a docker://b"],
        &["skopeo copy --src-no-creds docker://a docker://b"],
    ),
    rule(
        "chpasswd-pair",
        "command-line",
        &["chpasswd"],
        r#"\becho[ \t]+(?:-[a-z]+[ \t]+)*["']?[^:\s"']+:(?P<s>[^\s"'|][^|\n]*?)["']?[ \t]*\|[ \t]*(?:sudo[ \t]+)?chpasswd\b"#,
        Refine::Group,
        &[
            "echo 'deploy:Chp4sswdPw9' | sudo chpasswd",
            "echo 'deploy:Pa\"ss9 word' | chpasswd",
        ],
        &["echo 'deploy:x' > users.txt && chpasswd < users.txt"],
    ),
    // Redis's ACL: a password given to `ACL SETUSER` (`>p1pp0`), and a user's rule as `ACL
    // LIST` or a `users.acl` file prints it, its password (`>…`) or the password's SHA-256
    // (`#…`, unsalted: cracked offline).
    rule(
        "redis-acl-password",
        "command-line",
        &["setuser", " on >", " on #"],
        r#"(?i)(?:\bacl[ \t]+setuser[ \t]+\S+|(?:^|["'(\s])user[ \t]+\S+)(?:[ \t]+[^\s>#]\S*)*?[ \t]+[>#](?P<s>[^\s"'][^\s]{5,})"#,
        Refine::Group,
        &[
            "127.0.0.1:6379> ACL SETUSER alice on >R3disAclPw9 ~cached:* +get",
            "1) \"user default on #5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8 ~* &* +@all\"",
        ],
        &[
            "ACL SETUSER alice on nopass ~* +@all",
            "user alice on # a comment",
        ],
    ),
    rule(
        "redis-cli-a",
        "command-line",
        &["redis-cli"],
        r#"\bredis-cli\b[^\n|;&]*?[ \t](?:-a|--pass)[ \t]+(?P<q>["']?)(?P<s>[^\s"'])"#,
        Refine::Flag,
        &["redis-cli -h cache -a RedisPw9 ping"],
        &["redis-cli -h cache ping"],
    ),
    // Redis's password given to `AUTH` (at the `redis-cli` prompt, or as the command's
    // arguments; with a user name before it or not), and set in its configuration
    // (`requirepass`, `masterauth` at a line's start, `CONFIG SET requirepass …`; the
    // commented default `# requirepass foobared` stays).
    rule(
        "redis-auth",
        "command-line",
        &["> auth ", "redis-cli", "requirepass", "masterauth"],
        r#"(?im)(?:(?:>[ \t]*|\bredis-cli\b[^\n|;&]*?[ \t])auth[ \t]+(?:[A-Za-z0-9_.-]+[ \t]+)?|(?:^[ \t]*|\bconfig[ \t]+set[ \t]+)(?:requirepass|masterauth)[ \t]+)(?P<q>["']?)(?P<s>[^\s"'$-])"#,
        Refine::Flag,
        &[
            "127.0.0.1:6379> AUTH R3disAuthPw9",
            "127.0.0.1:6379> AUTH default R3disAuthPw8",
            "redis-cli -h cache AUTH R3disAuthPw7",
            "127.0.0.1:6379> CONFIG SET requirepass R3disReqPw9",
            "requirepass R3disConfPw9",
            "masterauth \"R3dis Master 9\"",
        ],
        &[
            "127.0.0.1:6379> AUTH",
            "redis-cli -h cache ping",
            "requirepass $REDIS_PASSWORD",
            "# requirepass foobared",
        ],
    ),
    when(
        HAS_DASH,
        rule(
            "password-flag",
            "command-line",
            // The name words the pattern requires, not `--`: most `--` in tool output are rules,
            // arrows and diff markers, and each would run this rule for nothing.
            &[
                "pass",
                "pwd",
                "token",
                "secret",
                "api-key",
                "apikey",
                "access-key",
                "account-key",
                "shared-key",
                "encryption-key",
                "master-key",
                "signing-key",
                "license-key",
            ],
            r#"(?i)(?:^|[\s"'])--?(?:[a-z0-9]+-)*(?:password|passwd|pass|pwd|token|secret|api-key|apikey|access-key|secret-key|auth-token|account-key|shared-key|encryption-key|master-key|signing-key|license-key)(?:[ \t]+|=)(?P<q>["']?)(?P<s>[^\s"'-])"#,
            Refine::Flag,
            &[
                "az storage blob list --account-name st --account-key Acc0untK3yValue99x==",
                "mysqladmin --password=abc status",
                "wget --http-password=WgPw1 https://x",
                "--password hi",
            ],
            &["docker login --password-stdin", "--token-file path"],
        ),
    ),
    rule(
        "openssl-pass",
        "command-line",
        &["pass:"],
        r#"(?i)-pass(?:out|in|word)?[ \t]+pass:(?P<s>[^\s"'])"#,
        Refine::Flag,
        &["openssl pkcs12 -export -passout pass:P12Secret -out a.p12"],
        &["openssl pkcs12 -passout env:P12PASS"],
    ),
    // Windows' `net use` mapping a share (docs/behaviour.md T2.5): its password is the word
    // after the share, before or after `/user:NAME` (`*` asks for it, and stays).
    rule(
        "net-use-password",
        "command-line",
        &["net use"],
        r#"(?i)\bnet[ \t]+use[ \t]+(?:[a-z]:[ \t]+)?\\\\\S+[ \t]+(?:/user:\S+[ \t]+)?(?P<q>["']?)(?P<s>[^\s"'/*])"#,
        Refine::Flag,
        &[
            r"net use Z: \\fs01\share NetUs3Pass /user:CORP\svc",
            r"net use \\fs01\ipc$ /user:admin NetUs3Pass",
            r#"NET USE \\10.0.0.5\c$ "Net Us3 Pass" /USER:admin"#,
        ],
        &[
            r"net use Z: \\fs01\share /user:CORP\svc",
            r"net use \\fs01\share * /user:admin",
            r"net use Z: \\fs01\share /persistent:yes",
            "net use",
        ],
    ),
    // Password flags of database, directory and key tools (docs/behaviour.md T2.5): each
    // tool's own flag, spelled as it is (`sqlcmd -P` is the password, `-p` prints statistics;
    // Sybase's `isql` and Mosquitto's clients take `-P` too).
    rule(
        "sqlcmd-p",
        "command-line",
        &["sqlcmd", "bcp", "osql", "isql", "mosquitto_"],
        r#"(?i:\b(?:sqlcmd|bcp|osql|isql|mosquitto_(?:pub|sub|rr))\b)[^\n|;&]*?[ \t]-P[ \t]*(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "sqlcmd -S db.internal -U sa -P 'Sq1Cmd!Pass' -Q \"select 1\"",
            "bcp dbo.t out t.dat -S db -U loader -PBcpSecret77 -c",
            "isql -U sa -P IsqlPw9Zq -S srv",
            "mosquitto_pub -h broker -u bob -P MqttPw9Zq -t t -m x",
        ],
        &["sqlcmd -S db.internal -E -Q \"select 1\" -p"],
    ),
    // Cassandra's `cqlsh` and Hive's `beeline` take the password as `-p` (beeline's `-p` comes
    // with `-n` or a JDBC URL; cqlsh's with `-u`).
    rule(
        "cqlsh-beeline-p",
        "command-line",
        &["cqlsh", "beeline"],
        r#"(?i:\b(?:cqlsh|beeline)\b)[^\n|;&]*?[ \t]-p[ \t]*(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "cqlsh -u cassandra -p CqlPw9Zq7 cass.internal",
            "beeline -u jdbc:hive2://h:10000 -n bob -p 'HivePw9Zq'",
        ],
        &[
            "cqlsh -u cassandra cass.internal 9042",
            "beeline -u jdbc:hive2://h:10000 -n bob -p",
        ],
    ),
    // FreeRDP's `/p:` and rdesktop's `-p` (not `-p -`, which reads it from standard input).
    rule(
        "rdp-password",
        "command-line",
        &["freerdp", "rdesktop"],
        r#"(?i:\b(?:[a-z0-9]*freerdp[0-9]*(?:\.exe)?[ \t][^\n|;&]*?[ \t]/p:|rdesktop\b[^\n|;&]*?[ \t]-p[ \t]*))(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "xfreerdp /u:bob /p:RdpPw9Zq7 /v:host",
            "wlfreerdp /v:host /u:CORP\\bob /p:'Rdp Pw9Zq'",
            "rdesktop -u bob -p RdesktopPw9 host",
        ],
        &["xfreerdp /u:bob /v:host", "rdesktop -u bob -p - host"],
    ),
    // Windows' scheduled tasks: the run-as user's password `/rp` and the remote system's `/p`.
    rule(
        "schtasks-password",
        "command-line",
        &["schtasks"],
        r#"(?i:\bschtasks(?:\.exe)?[ \t][^\n|;&]*?[ \t]/r?p[ \t]+)(?P<q>["']?)(?P<s>[^\s"'/*])"#,
        Refine::Flag,
        &[
            "schtasks /create /tn t /tr x.exe /ru bob /rp SchTaskPw9",
            "schtasks /query /s srv /u CORP\\bob /p \"Sch Pw9Zq\"",
        ],
        &[
            "schtasks /create /tn t /tr x.exe /ru SYSTEM /sc daily",
            "schtasks /create /tn t /tr x.exe /ru bob /rp *",
        ],
    ),
    // The value a secret store's command line stores (docs/behaviour.md T2.5): Azure Key
    // Vault's `secret set --value`, AWS Secrets Manager's `--secret-string`, a Systems Manager
    // parameter's `put-parameter --value`.
    rule(
        "secret-store-value",
        "command-line",
        &["keyvault", "secret-string", "put-parameter"],
        r#"(?i)(?:\bkeyvault[ \t]+secret[ \t]+set\b[^\n|;&]*?[ \t]--value|[ \t]--secret-string|\bput-parameter\b[^\n|;&]*?[ \t]--value)(?:[ \t]+|=)(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "az keyvault secret set --vault-name kv --name db --value KvSecret9Zq",
            "aws secretsmanager create-secret --name prod/db --secret-string 'SmPass9Zq!'",
            "aws secretsmanager put-secret-value --secret-id prod/db --secret-string=SmPut9Zq",
            "aws ssm put-parameter --name /app/db --type SecureString --value SsmPw9Zq",
        ],
        &[
            "az keyvault secret show --vault-name kv --name db --query value",
            "aws secretsmanager get-secret-value --secret-id prod/db --query SecretString",
            "aws ssm get-parameter --name /app/db --with-decryption",
            "aws secretsmanager create-secret --name prod/db --secret-string file://creds.json",
            "az keyvault secret set --vault-name kv --name db --value \"$DB_PASSWORD\"",
        ],
    ),
    // A browser test typing a literal into a password field (Selenium's `send_keys`,
    // Playwright's `fill`, Cypress's `type`): the field's locator names it, the literal is the
    // password (docs/behaviour.md T2.4, setter calls with a literal).
    rule(
        "password-field-typed",
        "code",
        &["send_keys", "sendkeys", ".fill(", ".type("],
        r#"(?i)(?:passw[^\n]{0,60}?\)[ \t]*\.(?:send_keys|sendKeys|fill|type)\([ \t]*|\.(?:fill|type)\([ \t]*["'][^"'\n]{0,60}?passw[^"'\n]{0,60}["'][ \t]*,[ \t]*)(?P<q>["'])(?P<s>[^"'\n])"#,
        Refine::Flag,
        &[
            "driver.find_element(By.ID, \"password\").send_keys(\"SelPw9Zq\")",
            "await page.getByLabel('Password').fill('PlayPw9Zq');",
            "await page.fill('#password', 'PlayFill9Zq');",
            "cy.get('input[name=password]').type('CyPw9Zq{enter}')",
        ],
        &[
            "await page.fill('#password', process.env.TEST_PASSWORD);",
            "driver.find_element(By.ID, \"password\").send_keys(Keys.RETURN)",
            "await page.fill('#email', 'someone@example.com');",
        ],
    ),
    // A token given to `vault login` as its argument (`vault login s.Xk9…`; `hvs.` tokens
    // are a provider rule's), and HTTPie's `--auth user:password`.
    rule(
        "vault-login-token",
        "command-line",
        &["vault"],
        r#"\bvault[ \t]+login[ \t]+(?:-\S+[ \t]+)*(?P<s>[A-Za-z0-9][A-Za-z0-9._-]{15,})(?:[ \t]|$)"#,
        Refine::Group,
        &[
            "vault login s.Xk9mW2xL8qP5vN3tY7zB1cD4",
            "vault login -no-print s.Xk9mW2xL8qP5vN3tY7zB1cD4",
        ],
        &[
            "vault login -method=github",
            "vault login -method=userpass username=admin",
        ],
    ),
    // A package manager's stored credential given as arguments: Poetry's and Composer's
    // `config http-basic.<repo> <user> <password>`, their tokens (`config pypi-token.pypi
    // <token>`, `config github-oauth.github.com <token>`, `gitlab-token.…`, `bearer.…`), and
    // `cargo login <token>`.
    rule(
        "package-manager-credential",
        "command-line",
        &[
            "http-basic.",
            "pypi-token.",
            "github-oauth.",
            "gitlab-token.",
            "bearer.",
            // Not `cargo` alone: `Cargo.lock` and `cargo build` are in most Rust output, and
            // each would open the rule (and read its line as live).
            "cargo login",
        ],
        r#"(?i)(?:\b(?:poetry|composer)[ \t]+config[ \t]+(?:-\S+[ \t]+)*(?:http-basic\.\S+[ \t]+[^\s"']+|(?:pypi-token|github-oauth|gitlab-token|gitlab-oauth|bearer)\.\S+)|\bcargo[ \t]+login(?:[ \t]+--registry[ \t=]+\S+)?)[ \t]+(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "poetry config http-basic.myrepo deploy P0etryRepoPw9",
            "composer config --global http-basic.repo.example.com deploy C0mposerPw9",
            "poetry config pypi-token.pypi pypi-AgEIcHlwaS5vcmcCJDk5",
            "composer config -g github-oauth.github.com 'ghx9Xk2Lp7RzAb12Cd34'",
            "cargo login cioXk9vQ2mLp7RzAb12Cd34Ef56Gh78Ij90",
        ],
        &[
            "poetry config http-basic.myrepo deploy",
            "poetry config --list",
            "cargo login",
            "cargo login --help",
        ],
    ),
    rule(
        "secret-id-uuid",
        "command-line",
        &["secret id"],
        r#"(?i)\bsecret id[ \t]*[:=][ \t]*["']?(?P<s>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"#,
        Refine::Group,
        &["Secret ID          = 1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e"],
        &["Accessor ID        = 1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e"],
    ),
    rule(
        "httpie-auth",
        "command-line",
        &["--auth", " -a "],
        r#"(?i)\bhttps?(?:[ \t][^\n|;&]*?)?[ \t](?:--auth|-a)(?:[ \t]+|=)(?P<q>["']?)[^:\s"']*:(?P<s>[^\s"'])"#,
        Refine::Flag,
        &[
            "http --auth admin:HttpiePw9Zq GET https://api.example.com",
            "http -a admin:HttpieShort9Zq https://api.example.com",
        ],
        &[
            "http --auth-type=bearer GET https://api.example.com",
            "ls -a ~/.config && http GET https://api.example.com",
        ],
    ),
    // A Wi-Fi network's passphrase given to NetworkManager (`nmcli dev wifi connect SSID
    // password …`, `wifi-sec.psk …`) or to `wpa_passphrase SSID …`.
    rule(
        "wifi-passphrase",
        "command-line",
        &["nmcli", "wpa_passphrase"],
        r#"(?i)\b(?:nmcli\b[^\n|;&]*?[ \t](?:password|(?:wifi-sec|802-11-wireless-security)\.psk)|wpa_passphrase[ \t]+(?:"[^"\n]*"|'[^'\n]*'|[^\s<>|]+))[ \t]+(?P<q>["']?)(?P<s>[^\s"'$<-])"#,
        Refine::Flag,
        &[
            "nmcli dev wifi connect HomeNet password WifiPw9Zq",
            "nmcli con modify office wifi-sec.psk 'Office Wifi 9'",
            "wpa_passphrase \"Home Net\" WpaPass9Zq >> /etc/wpa_supplicant.conf",
        ],
        &[
            "nmcli dev wifi connect HomeNet --ask",
            "nmcli con modify office wifi-sec.psk \"$WIFI_PSK\"",
            "wpa_passphrase HomeNet < psk.txt",
        ],
    ),
    // A remote's secret given to `rclone config create` (or `update`) as a key and its
    // value.
    rule(
        "rclone-config-secret",
        "command-line",
        &["rclone"],
        r#"(?i)\brclone[ \t]+config[ \t]+(?:create|update)\b[^\n|;&]*?[ \t](?:secret_access_key|pass|password|client_secret|token|account_key|key|sas_url)[ \t]+(?P<q>["']?)(?P<s>[^\s"'$-])"#,
        Refine::Flag,
        &[
            "rclone config create s3r s3 provider AWS access_key_id AKIDEXAMPLE secret_access_key Rc9SecretKey99x",
            "rclone config create box sftp host h user bob pass RcSftpPw9 --obscure",
        ],
        &[
            "rclone config create s3r s3 env_auth true",
            "rclone config create box sftp host h user bob key_file ~/.ssh/id",
        ],
    ),
    // Windows' `cmdkey /pass:` storing a credential.
    rule(
        "cmdkey-pass",
        "command-line",
        &["cmdkey"],
        r#"(?i)\bcmdkey\b[^\n|;&]*?[ \t]/pass:(?P<q>["']?)(?P<s>[^\s"'])"#,
        Refine::Flag,
        &[
            "cmdkey /add:fs01 /user:CORP\\svc /pass:CmdKey9Zq",
            "cmdkey /generic:TERMSRV/host /user:admin /pass:\"Cmd Key 9\"",
        ],
        &["cmdkey /add:fs01 /user:CORP\\svc /pass", "cmdkey /list"],
    ),
    rule(
        "ldap-w",
        "command-line",
        &["ldap"],
        // The bind password `-w` and the file holding it `-y`; `ldappasswd`'s old and new
        // passwords too (`-a`, `-s`), which other tools' `-a` (dereferencing) and `-s` (scope)
        // are not.
        r#"\b(?:ldappasswd\b[^\n|;&]*?[ \t]-[wysa]|ldap[a-z]*\b[^\n|;&]*?[ \t]-[wy])[ \t]*(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "ldapsearch -x -H ldap://dc1 -D cn=admin,dc=example,dc=org -w LdapPw1 -b dc=example,dc=org",
            "ldapmodify -D cn=admin -w 'Ldap Pw 2' -f change.ldif",
            "ldappasswd -x -D cn=admin -w LdapBind9 -a LdapOld9 -s LdapNew9 uid=bob",
            "ldapmodify -D cn=admin -y /etc/ldap.secret -w LdapPw3",
        ],
        &[
            "ldapsearch -x -D cn=admin,dc=example,dc=org -W -b dc=example,dc=org",
            "ldapsearch -x -W -s sub -a always -b dc=example,dc=org",
        ],
    ),
    // Archivers and GnuPG given their password on the command line: 7-Zip's and RAR's `-p`
    // glued to it (RAR's `-hp` also hides the names), zip's `-P` and `--password`, gpg's `--passphrase` (not `--passphrase-file`
    // or `--passphrase-fd`). Only these tools, and zip's flag in its case (`unzip -p` writes
    // to a pipe).
    rule(
        "archive-password-glued",
        "command-line",
        &["7z ", "7za ", "7zr ", "rar "],
        r#"(?i:\b(?:7z[ar]?|rar|unrar)\b)[^\n|;&]*?[ \t]-h?p(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "7z a -pSevenZipPw9Zq archive.7z dir",
            "rar a -p'Rar Pw 9' backup.rar docs",
            "rar a -hpRarHeadPw9 backup.rar docs",
        ],
        &["7z x -p archive.7z", "7z a -mx=9 archive.7z dir"],
    ),
    rule(
        "archive-password-flag",
        "command-line",
        &["zip ", "gpg ", "gpg2 "],
        r#"(?i:\b(?:(?:un)?zip|gpg2?)\b)[^\n|;&]*?[ \t](?:-P|--password|--passphrase)(?:[ \t]+|=)(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "zip -P ZipPw9Zq archive.zip file",
            "unzip -P 'Unzip Pw 9' archive.zip",
            "gpg --batch --passphrase GpgPass9Zq -d file.gpg",
            "gpg --pinentry-mode loopback --passphrase=GpgEq9Zq -c notes.txt",
        ],
        &[
            "unzip -p archive.zip notes.txt | less",
            "gpg --batch --passphrase-file pw.txt -d file.gpg",
            "gpg --passphrase-fd 0 -d file.gpg",
        ],
    ),
    rule(
        "keytool-pass",
        "command-line",
        &["storepass", "keypass"],
        r#"(?i)[ \t]-(?:src|dest|new)?(?:storepass|keypass|storepassword)[ \t]+(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "keytool -importkeystore -srckeystore a.p12 -srcstorepass Ks1Pass -destkeystore b.jks -deststorepass KsPw2dest",
            "jarsigner -keystore k.jks -storepass JsPass3 -keypass JsKey4 app.jar signer",
        ],
        &["keytool -list -keystore b.jks -storepass:env KS_PASS"],
    ),
    rule(
        "mongo-p",
        "command-line",
        &["mongo"],
        r#"(?i)\bmongo(?:sh|dump|restore|export|import|stat|top)?\b[^\n|;&]*?[ \t](?:-p|--password)(?:[ \t]+|=)(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &[
            "mongosh \"mongodb://db.internal:27017\" -u admin -p MongoPw1 --authenticationDatabase admin",
        ],
        &["mongosh \"mongodb://db.internal:27017\" -u admin -p"],
    ),
    rule(
        "twine-p",
        "command-line",
        &["twine"],
        r#"(?i)\btwine\b[^\n|;&]*?[ \t](?:-p|--password)(?:[ \t]+|=)(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &["twine upload -u __token__ -p TwineTok9Zq dist/*"],
        &["twine upload -u __token__ -p \"$PYPI_TOKEN\" dist/*"],
    ),
    rule(
        "openssl-k",
        "command-line",
        &["openssl"],
        r#"\bopenssl\b[^\n|;&]*?[ \t]-k[ \t]+(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &["openssl enc -aes-256-cbc -salt -k EncPass9 -in plain.txt -out secret.enc"],
        &["openssl enc -aes-256-cbc -kfile key.txt -in plain.txt"],
    ),
    rule(
        "vault-unseal",
        "command-line",
        &["unseal"],
        r#"\bvault[ \t]+operator[ \t]+unseal\b(?:[ \t]+-[a-z-]+(?:=\S*)?)*[ \t]+(?P<s>[A-Za-z0-9+/]{20,}={0,2})"#,
        Refine::Group,
        &["vault operator unseal 3wlrnPjY1qmF9n8l2bWmC3XcL8yS5b0hQ4uZ7t1pE+M="],
        &["vault operator unseal -status"],
    ),
    rule(
        "wireguard-key",
        "private-key",
        &["privatekey", "presharedkey"],
        r#"(?i)\b(?:PrivateKey|PresharedKey)[ \t]*=[ \t]*(?P<s>[A-Za-z0-9+/]{42,43}=)"#,
        Refine::Group,
        &[
            "[Interface]\nPrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\nAddress = 10.0.0.1/24",
            "PresharedKey = 4Pz0eiv1bQW2mN8xL7tR3yK9sC6vH0jD5gF1aU2eIoM=",
        ],
        &["PublicKey = xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="],
    ),
    // SQL that sets a password (T2.4): Oracle and MySQL `IDENTIFIED BY`, `PASSWORD '…'` in
    // `CREATE`/`ALTER USER`/`ROLE`, and `SET PASSWORD`.
    rule(
        "sql-identified-by",
        "sql",
        &["identified"],
        r#"(?i)\bIDENTIFIED[ \t]+(?:WITH[ \t]+[a-z_]+[ \t]+)?BY[ \t]+(?:PASSWORD[ \t]+)?(?P<q>['"])(?P<s>[^'"\n])"#,
        Refine::Flag,
        &[
            "CREATE USER app IDENTIFIED BY 'Ora!Secret1';",
            "ALTER USER 'app'@'%' IDENTIFIED WITH mysql_native_password BY 'MyNat1vePw';",
        ],
        &["-- the user is identified by their email address"],
    ),
    // SQL's `INSERT` naming its columns: the literal at a secret column's place in each row
    // (`INSERT INTO users (name, password) VALUES ('admin', '…')`).
    when(
        HAS_OPEN_PAREN,
        rule(
            "sql-insert-column",
            "sql",
            NAME_KEYWORDS,
            r#"(?i)\bINSERT[ \t]+(?:IGNORE[ \t]+)?INTO[ \t]+[A-Za-z0-9_."`\[\]]+[ \t]*\((?P<h>[^()\n]+)\)[ \t]*VALUES[ \t]*(?P<v>\()"#,
            Refine::SqlInsert,
            &[
                "INSERT INTO users (name, password) VALUES ('admin', 'Sup3rS3cret!x');",
                "cursor.execute(\"INSERT INTO accounts (id, email, api_token) VALUES (1, 'a@b.c', 'tok9fQ2mLp7RzAbCdXk')\")",
                "INSERT INTO `users` (`id`, `password`) VALUES (1, 'it''s9Secret'), (2, 'Second9Pw');",
                "INSERT INTO creds (user, secret) VALUES ('u', crypt('Crypt9Pw', gen_salt('bf')));",
            ],
            &[
                "INSERT INTO users (name, password) VALUES (?, ?);",
                "INSERT INTO users (name, password) VALUES ($1, $2)",
                "INSERT INTO tokens (id, token) VALUES (1, NULL);",
                "INSERT INTO users (name, email) VALUES ('password', 'a@b.c');",
            ],
        ),
    ),
    // A network device's configuration (Cisco's IOS and its kin): a password or secret given
    // with its type's digit (`username admin password 0 …`, `enable secret 5 $1$…`, a line's
    // `password 7 …`), whatever the type (7 is only obscured), and an SNMP community.
    rule(
        "device-config-secret",
        "network",
        &["password", "secret", "snmp-server"],
        r#"(?im)^[ \t]*(?:(?:enable|username[ \t]+\S+(?:[ \t]+privilege[ \t]+[0-9]+)?)[ \t]+)?(?:password|secret)[ \t]+[0-9][ \t]+(?P<s>\S+)|\bsnmp-server[ \t]+community[ \t]+(?P<c>[^\s]+)"#,
        Refine::DeviceConfig,
        &[
            "username admin privilege 15 password 0 Cisco9Zq8",
            " password 7 0822455D0A16",
            "enable password 0 En4ble9Zq",
            "snmp-server community S3cretComm9 RO",
        ],
        &[
            "snmp-server community ${SNMP_COMMUNITY} RO",
            "the password 3 times",
        ],
    ),
    // A pre-shared key: WPA's `psk="…"` (wpa_supplicant) or `psk=<64 hex>`, and an IPsec
    // secret (`: PSK "…"` in ipsec.secrets).
    rule(
        "pre-shared-key",
        "network",
        &["psk"],
        r#"(?im)(?:^[ \t]*psk[ \t]*=[ \t]*"?|:[ \t]*PSK[ \t]+")(?P<c>[^"\s]+)"#,
        Refine::DeviceConfig,
        &[
            "network={\n  ssid=\"home\"\n  psk=\"Wpa9Zq8Wm3Np7\"\n}",
            "  psk=2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f80910",
            "%any 203.0.113.5 : PSK \"IpsecPsk9Zq8\"",
        ],
        &["  key_mgmt=WPA-PSK", "  psk=$WIFI_PSK"],
    ),
    // Oracle writes the password unquoted; only in a statement that creates or alters a user.
    rule(
        "sql-identified-by-bare",
        "sql",
        &["identified"],
        r#"(?i)\b(?:CREATE|ALTER)[ \t]+USER\b[^\n;]*?\bIDENTIFIED[ \t]+BY[ \t]+(?P<s>[A-Za-z0-9_$#!@%^*+=.~-]+)"#,
        Refine::Group,
        &[
            "create user scott identified by tiger2024;",
            "ALTER USER hr IDENTIFIED BY Hr_Pw_2026 ACCOUNT UNLOCK",
        ],
        &[
            "-- the user is identified by their email address",
            "ALTER USER app IDENTIFIED EXTERNALLY",
        ],
    ),
    when(
        HAS_QUOTE,
        rule(
            "sql-password",
            "sql",
            &["password"],
            r#"(?i)\b(?:(?:CREATE|ALTER)[ \t]+(?:USER|ROLE|LOGIN)\b[^\n;]*?\bPASSWORD|SET[ \t]+PASSWORD\b[^\n;=]*=[ \t]*(?:PASSWORD[ \t]*\()?)[ \t]*(?P<q>['"])(?P<s>[^'"\n])"#,
            Refine::Flag,
            &[
                "CREATE ROLE reporter WITH LOGIN PASSWORD 'PgR0lePass';",
                "ALTER USER postgres WITH ENCRYPTED PASSWORD 'Pg$uperPw9';",
                "SET PASSWORD FOR 'app'@'localhost' = 'MySetPw7';",
            ],
            &["ALTER USER postgres WITH PASSWORD NULL;"],
        ),
    ),
    // A getter named after a secret that returns a literal (T2.4): `func getApiToken() string
    // { return "…" }`, `def get_password(self): return '…'`. The literal is the secret as an
    // assignment's would be (a variable, a call or a word returned stays).
    when(
        HAS_RETURNED_LITERAL,
        rule(
            "returned-literal",
            "code",
            &[
                "token",
                "secret",
                "passw",
                "apikey",
                "api_key",
                "access_key",
                "credential",
            ],
            r#"(?i)\b(?P<n>[A-Za-z_][A-Za-z0-9_]*?(?:token|secret|password|passwd|api_?key|access_?key|credentials?)s?)[ \t]*\([ \t]*(?:self|cls|this)?[ \t]*\)[^{:\n]{0,40}[{:][ \t]*return[ \t]+(?P<s>["'`])"#,
            Refine::Assign,
            &[
                r#"func getBetterStackToken() string{ return "ntJD0ER8QpuT0O1WqsclApO2" }"#,
                "def get_api_key(self): return 'Xk9vQ2mLp7RzAb12'",
                "getPassword() { return `Hunt3rPw9`; }",
            ],
            &[
                "func (c *Client) Token() string { return c.token }",
                "def get_token(self): return self._token",
                "getTokenType() { return \"Bearer\"; }",
                "getPassword() { return \"\"; }",
                "def secret_name(): return 'db-credentials'",
            ],
        ),
    ),
    // A setter or builder given a literal (T2.4): `setPassword("…")`, `.password("…")`,
    // `withSecret("…")`. A variable or a call is code and stays.
    when(
        HAS_PAREN_AND_QUOTE,
        rule(
            "setter-literal",
            "code",
            &["password", "secret", "token", "apikey", "api_key", "passwd"],
            r#"(?:\b(?:set|with)(?:Db|Client|Api|Access|Secret|Auth|Admin|Root|User)?(?:Password|Passwd|Secret|Token|ApiKey|AccessKey|SecretKey|Key)|\b(?:set|with)_(?:(?:db|client|api|access|secret|auth|admin|root|user|bearer)_)?(?:password|passwd|secret|token|api_key|access_key|secret_key|key)|\.(?:password|secret|token|apiKey|api_key|clientSecret|secretKey|accessKey))[ \t]*\([ \t]*(?P<q>["'])(?P<s>[^"'\n])"#,
            Refine::Flag,
            &[
                "ds.setPassword(\"DsS3cretPw\");",
                "let c = Client::builder().with_password(\"Xk9vQ2mLp7RzAbCd\");",
                "Client.builder().apiKey(\"ak_live_8f3k2m9d\").build()",
                "cfg.withSecret('W1thSecretVal')",
            ],
            &[
                "ds.setPassword(password);",
                "ds.setPassword(System.getenv(\"DB_PASSWORD\"));",
            ],
        ),
    ),
    // An XML element named for a secret (T2.4): Maven `settings.xml`, Jenkins credentials,
    // .NET config. Its attributes (`password="…"`) are assignments, caught as such.
    rule(
        "xml-element",
        "markup",
        &[
            "password>",
            "passwords>",
            "passwd>",
            "pwd>",
            "secret>",
            "secrets>",
            "key>",
            "token>",
            "tokens>",
            "passphrase>",
        ],
        r#"(?i)<(?:[a-z]+:)?(?P<n>[a-z0-9_.-]{0,64}?(?:password|passwd|pwd|passphrase|secret|api[-_]?key|access[-_]?key|secret[-_]?key|private[-_]?key|token)s?)>(?P<s>[^<\n]+)</"#,
        Refine::Element,
        &[
            "<server><id>nexus</id><username>deploy</username><password>MvnDeployPw1</password></server>",
            "<apiKey>k3y-9f8e7d6c5b4a</apiKey>",
            "<db_password>Xml9DbPw</db_password>",
            "<TRAVEL_API_KEY>Xk9vQ2mLp7RzAb12</TRAVEL_API_KEY>",
            "<pwd>Pwd9Elem</pwd>",
        ],
        &[
            "<passwordPolicy>strict</passwordPolicy>",
            "<max_tokens>4096</max_tokens>",
            "<primary_key>id</primary_key>",
            "<password>${env.MAVEN_PASSWORD}</password>",
            "<apiKey>API_KEY</apiKey>",
        ],
    ),
    // A secret handed to a command on its standard input or as a plain argument (T2.5):
    // PowerShell's `ConvertTo-SecureString 'X' -AsPlainText`, `echo X | docker login
    // --password-stdin`, `gh secret set NAME --body X`.
    rule(
        "powershell-secure-string",
        "command-line",
        &["convertto-securestring"],
        r#"(?i)\bConvertTo-SecureString(?:[ \t]+-[A-Za-z]+)*?[ \t]+(?:-String[ \t]+)?(?P<q>["'])(?P<s>[^"'\n])"#,
        Refine::Flag,
        &[
            "$pw = ConvertTo-SecureString 'Pw5h3llPlain' -AsPlainText -Force",
            "ConvertTo-SecureString -AsPlainText -Force -String \"Pw5h3llPlain2\"",
        ],
        &["$pw = ConvertTo-SecureString $env:DB_PASSWORD -AsPlainText -Force"],
    ),
    rule(
        "password-stdin",
        "command-line",
        // A login reading its password, or a secret store reading the value it stores
        // (`wrangler secret put NAME`, `gh secret set NAME`, `vercel env add NAME`, `docker
        // secret create NAME -`), from what is piped to it.
        &[
            "password-stdin",
            "with-token",
            "secret put",
            "secret set",
            "secrets set",
            "secret create",
            "env add",
        ],
        r#"\b(?:echo|printf)[ \t]+(?:-[ne]+[ \t]+|'%s[^'\n]*'[ \t]+|"%s[^"\n]*"[ \t]+)?(?P<q>["']?)(?P<s>[^\s"'|$])[^|\n]*\|[^\n;&|]*(?:--(?:password-stdin|with-token)|\b(?:secrets?[ \t]+(?:put|set|create)|env[ \t]+add)\b)"#,
        Refine::Flag,
        &[
            "echo 'St1nPiped9' | docker login -u app --password-stdin ghcr.io",
            "printf '%s' \"St1nPiped8\" | helm registry login r.io -u app --password-stdin",
            "printf '%s' 'Gh9PipedTok' | gh auth login --with-token",
            "echo 'WrKey9Zq7' | npx wrangler secret put API_KEY",
            "echo -n VcEnvKey9Zq | vercel env add API_KEY production",
            "printf '%s' 'DkSecret9Zq' | docker secret create db_password -",
        ],
        &[
            "echo $CR_PAT | docker login ghcr.io -u app --password-stdin",
            "echo \"$API_KEY\" | npx wrangler secret put API_KEY",
            "echo done | tee log; gh secret set X < file",
        ],
    ),
    rule(
        "net-user-password",
        "command-line",
        &["net user"],
        r#"(?i)\bnet[ \t]+user[ \t]+(?:"[^"\n]+"|[^\s"/]+)[ \t]+(?P<q>["']?)(?P<s>[^\s"'/*$%])"#,
        Refine::Flag,
        &["net user svc_backup N3tUs3rPw! /add /domain"],
        &[
            "net user svc_backup * /add",
            "net user svc_backup /delete",
            "net user %USERNAME% /domain",
        ],
    ),
    rule(
        "sudo-stdin",
        "command-line",
        &["sudo"],
        r#"\b(?:echo|printf)[ \t]+(?:-[ne]+[ \t]+|'%s[^'\n]*'[ \t]+|"%s[^"\n]*"[ \t]+)?(?P<q>["']?)(?P<s>[^\s"'|$%])[^|\n]*\|[ \t]*sudo[ \t]+(?:-[A-Za-z]+[ \t]+)*-[A-Za-z]*S\b"#,
        Refine::Flag,
        &[
            "echo 'Sud0Pw!' | sudo -S apt-get update",
            "printf '%s\\n' \"Sud0Pw!\" | sudo -k -S true",
            "echo Sud0Pw9 | sudo -kS systemctl restart app",
        ],
        &[
            "echo $SUDO_PASSWORD | sudo -S apt-get update",
            "echo 'deb http://x' | sudo tee /etc/apt/sources.list",
        ],
    ),
    when(
        HAS_OPEN_PAREN,
        reaching(
            1024,
            rule(
                "credential-call",
                "code",
                // The callees, not words they share with prose and file names (`credentials.rs`,
                // "Login Succeeded"): each keyword holds a callee's name or its `(`.
                &[
                    "networkcredential",
                    "passwordcredential",
                    "secretcredential",
                    "basicawscredentials",
                    "awsbasiccredentials",
                    "basicauth",
                    "basic_auth",
                    "digestauth",
                    "proxyauth",
                    "passwordauthentication",
                    "getconnection",
                    "mysqli",
                    "pdo(",
                    "pdo (",
                    "mysql_connect",
                    "ldap_bind",
                    "ftp_login",
                    "plainauth",
                    "directoryentry",
                    "login(",
                    "login (",
                    "jwt.sign",
                    "jwt.encode",
                    "jwt.verify",
                    "jwt.decode",
                    "hmac.new",
                    "createhmac",
                    "openssl::hmac",
                    ".auth(",
                ],
                r"(?i)(?:\bhmac\.new|\bcreateHmac|\bOpenSSL::HMAC\.(?:hex|base64)?digest|\.auth)[ \t]*\(|\b(?:jwt\.(?:sign|encode|verify|decode)|NetworkCredential|HTTP(?:Basic|Digest|Proxy)Auth|(?:set|with)?_?basic_?auth|UsernamePasswordCredentials?|PasswordAuthentication|PasswordCredential|BasicAWSCredentials|AwsBasicCredentials\.create|ClientSecretCredential|getConnection|mysqli_connect|mysqli|PDO|mysql_connect|ldap_bind|ftp_login|PlainAuth|DirectoryEntry|login)[ \t]*\(",
                Refine::CallArgument,
                &[
                    "var cred = new NetworkCredential(\"svc_backup\", \"N3tCr3dPw!\", \"CORP\");",
                    "c = DriverManager.getConnection(\"jdbc:mysql://db/app\", \"root\", \"R00tPw!z\");",
                    "$db = new mysqli(\"localhost\", \"app\", \"MyS9lPw\", \"db\");",
                    "$pdo = new PDO($dsn, 'app', 'PdoPw77x');",
                    "server.login(\"me@example.com\", \"SmtpPw44\")",
                    "auth := smtp.PlainAuth(\"\", \"me@example.com\", \"SmtpPl4in\", host)",
                    "client.basic_auth(\"user\", Some(\"Rust8Pw\"))",
                    "new PasswordAuthentication(\"user\", \"Jav4Pw\".toCharArray())",
                    "new UsernamePasswordCredentials(\"user\", \"Ap4chePw\")",
                    "jwt.sign({ sub: user.id }, 'JwtSignSecret9Zq', { expiresIn: '1h' })",
                    "token = jwt.encode(payload, \"PyJwtSecret9Zq\", algorithm=\"HS256\")",
                    "ClientSecretCredential(tenant, client_id, \"Az8Q~abcdefghijklmnop\")",
                    "Connection c = dataSource.getConnection(\"scott\", \"T1gerPw\");",
                    "New-Object DirectoryServices.DirectoryEntry(\"LDAP://dc1\", \"corp\\\\svc\", \"Dir3ntryPw\")",
                    "sig = hmac.new(b'HmacKey9Zq', msg, hashlib.sha256).hexdigest()",
                    "crypto.createHmac('sha256', 'NodeHmac9Zq').update(body)",
                    "OpenSSL::HMAC.hexdigest('SHA256', 'RbHmac9Zq', data)",
                    "mac := hmac.New(sha256.New, []byte(\"GoHmac9Zq\"))",
                    "await redis.auth('RedisAuth9Zq');",
                    "request.get(url).auth('me', 'SuperAgent9Zq')",
                ],
                &[
                    "cred = new NetworkCredential(user, password);",
                    "server.login(user, os.environ[\"SMTP_PASSWORD\"])",
                    "conn = DriverManager.getConnection(url, user, \"\");",
                    "login(\"admin\")",
                    "cred = new NetworkCredential(\"user\", \"<password>\");",
                    "req.SetBasicAuth(\"user\", \"${PASSWORD}\")",
                    "jwt.sign(payload, process.env.JWT_SECRET)",
                    "jwt.decode(token, options={\"verify_signature\": False})",
                    "server.login(\"me@example.com\", \"password\")",
                    "hmac.new(key, msg, 'sha256')",
                    "crypto.createHmac('sha256', secret).update(body)",
                    "mac := hmac.New(sha256.New, key)",
                    "firebase.auth().signInWithEmailAndPassword(email, password)",
                    "request.get(url).auth(user, pass)",
                ],
            ),
        ),
    ),
    // A command that prints a secret and nothing else (T2.5), its output on the next line of
    // the same text: a shell transcript, or a tool call's output holding its command. Read up
    // to 8 KiB past the command's line (an ECR login password is about 2 KiB); a value is at
    // most [`PRINTED_MAX`] bytes and ends inside what is read, never cut at its
    // edge with its rest shipped (test `printed_secret_is_never_cut_at_the_end_of_what_is_read`).
    // The bound is checked on the match, not written as `{6,4096}`: a counted repetition of a
    // Unicode class is compiled into that many copies of it, and this one pattern was 36 ms of
    // the 84 ms every rule takes to compile, paid by the first line that names such a command.
    reaching(
        PRINTED_REACH,
        rule(
            "printed-secret",
            "command-line",
            // Short keywords: each state they add is a row of the keyword automaton. (A token
            // printed by `gh auth token` or `vault print token` has its prefix, and
            // `kubectl create token`'s is a JWT: their own rules take them.)
            &[
                "ecr get",
                "auth:token",
                "gcloud auth",
                "op read",
                "op item get",
                "pass show",
                "security find",
                "versions access",
                "vault kv get",
                "vault read",
                "secret show",
                "get-secret-value",
                "get-parameter",
                "terraform output",
                "get secret",
                "openssl rand",
                "token_hex",
                "token_urlsafe",
                "pwgen",
                "wg gen",
                "echo",
                "printenv",
                "cat /run/secrets",
                "master.key",
            ],
            concat!(
                r#"\b(?:aws[ \t]+ecr[ \t]+get-login-password|heroku[ \t]+auth:token|gcloud[ \t]+auth[ \t]+(?:application-default[ \t]+)?print-(?:access|identity)-token|op[ \t]+read|pass[ \t]+show|security[ \t]+find-(?:generic|internet)-password\b[^\n]*?[ \t]-w"#,
                // Secret stores' CLIs asked for one value: 1Password's fields, Vault's
                // `-field`, Google's secret versions, Azure Key Vault's and AWS's values as
                // text.
                r#"|op[ \t]+item[ \t]+get\b[^\n]*?[ \t]--fields?\b|vault[ \t]+(?:kv[ \t]+get|read)\b[^\n]*?[ \t]-field[= ]"#,
                r#"|gcloud[ \t]+secrets[ \t]+versions[ \t]+access|az[ \t]+keyvault[ \t]+secret[ \t]+show\b[^\n]*?[ \t]--query[ \t]+["']?value\b"#,
                r#"|aws[ \t]+(?:secretsmanager[ \t]+get-secret-value\b[^\n]*?[ \t]--query[ \t]+["']?SecretString|ssm[ \t]+get-parameters?\b[^\n]*?[ \t]--query[ \t]+["']?Parameters?(?:\[0\])?\.Value)\b"#,
                // A Terraform output, a variable or a mounted secret file named for a secret,
                // printed alone: `terraform output -raw db_password`, `echo $DB_PASSWORD`,
                // `printenv GITHUB_TOKEN`, `cat /run/secrets/db_password`.
                r#"|terraform[ \t]+output[ \t]+(?:-(?:raw|json)[ \t]+)?[A-Za-z0-9_]*"#,
                secret_name_end!(),
                r#"|(?:echo[ \t]+["']?\$\{?|printenv[ \t]+)[A-Za-z0-9_]*"#,
                secret_name_end!(),
                // Rails' `config/master.key`, which decrypts its credentials file.
                r#"\}?["']?|cat[ \t]+[^\s]*/secrets/[^\s]+|cat[ \t]+(?:[^\s]*/)?master\.key"#,
                // A Kubernetes secret's value decoded: `kubectl get secret db -o
                // jsonpath='{.data.password}' | base64 -d`.
                r#"|kubectl[ \t]+get[ \t]+secrets?\b[^\n]*?\|[ \t]*base64[ \t]+(?:-d|--decode|-D)"#,
                // A secret generated for a setting (`openssl rand -hex 32`, Python's
                // `secrets.token_urlsafe(32)`, `pwgen -s 24 1`), printed before it is set.
                r#"|openssl[ \t]+rand\b|secrets\.token_(?:hex|urlsafe)\b|pwgen\b|wg[ \t]+gen(?:key|psk)\b"#,
                r#")\b[^\n]*\r?\n[ \t]*(?P<s>[^\s]{6,})[ \t]*\r?(?:\n|$)"#
            ),
            Refine::Group,
            &[
                "$ heroku auth:token\n 4f1e0c9a-7b2d-4e6f-8a0b-1c2d3e4f5a6b\n$ ",
                "$ pass show work/db\nHunt3r!Pw9x\n",
                "security find-generic-password -a me -s deploy -w\nK3ych@inPw77\n",
                "$ op read op://Private/db/password\nOnePw0rd#2024\n",
                "$ op item get \"DB\" --fields password --reveal\nOpItemPw9Zq\n",
                "$ vault kv get -field=password secret/db\nVaultField9Zq\n",
                "$ gcloud secrets versions access latest --secret=db\nGcloudSecret9Zq\n",
                "$ az keyvault secret show --vault-name kv --name db --query value -o tsv\nAzKvShow9Zq\n",
                "$ aws ssm get-parameter --name /prod/db --with-decryption --query Parameter.Value --output text\nSsmParam9Zq\n",
                "$ terraform output -raw db_password\nTfOutPw9Zq\n",
                "$ echo $DB_PASSWORD\nEchoedPw9Zq\n",
                "$ printenv OPENAI_API_KEY\nPrintEnvKey9Zq\n",
                "$ cat /run/secrets/db_password\nMountedPw9Zq\n",
                "$ kubectl get secret db -o jsonpath='{.data.password}' | base64 -d\nKubeDecoded9Zq\n",
                "$ openssl rand -hex 32\n9f2c4e6a8b0d1f3a5c7e9b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c3e5b7d9f2a\n",
                "$ wg genkey\nyAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\n",
                "$ cat config/master.key\n8f3a1c2e4b6d9f0a7c5e3b1d2f4a6c8e\n",
                "$ python3 -c 'import secrets; print(secrets.token_urlsafe(32))'\nQz8vW3kLm_9RtY-2nPb4XcJ7hFg5Ds1Ae6Zq0Ux4Iy\n",
            ],
            &[
                "$ pass show work/db\nError: work/db is not in the password store.\n",
                "$ gh auth token\nno oauth token found for github.com\n",
                "security find-generic-password -a me -s deploy\nkeychain: \"/Users/me/Library/Keychains/login.keychain-db\"\n",
                "$ vault kv get secret/db\n====== Metadata ======\n",
                "$ az keyvault secret show --vault-name kv --name db\n{\n",
                "$ terraform output -raw db_host\ndb.internal.example\n",
                "$ echo $DB_PASSWORD_FILE\n/run/secrets/db_password\n",
                "echo $TOKEN_COUNT\n42\n",
                "$ kubectl get secrets\nNAME   TYPE     DATA   AGE\n",
                "$ openssl rand -hex 32 > secret.key\n$ ls\n",
            ],
        ),
    ),
    // `redis-cli CONFIG GET requirepass` (or `masterauth`): the name, then its value on the next
    // line of the reply.
    multiline(rule(
        "redis-config-get",
        "command-line",
        &["requirepass", "masterauth"],
        r#"(?m)^[ \t]*1\)[ \t]+"(?:requirepass|masterauth)"[ \t]*\r?\n[ \t]*2\)[ \t]+"(?P<s>[^"\n]+)""#,
        Refine::Group,
        &["$ redis-cli CONFIG GET requirepass\n1) \"requirepass\"\n2) \"R3disCfgPw9\"\n"],
        &["$ redis-cli CONFIG GET requirepass\n1) \"requirepass\"\n2) \"\"\n"],
    )),
    // `<property><name>fs.s3a.secret.key</name><value>…</value></property>` (Hadoop, Hive,
    // Spark, Oozie), `<entry><key>password</key><value>…</value></entry>`: the name and the
    // value in elements of their own, on one line or the next.
    reaching(
        256,
        rule(
            "xml-name-value",
            "markup",
            &["</name>", "</key>"],
            r#"(?i)<(?:name|key)>[ \t]*(?P<n>[^<>\n]+?)[ \t]*</(?:name|key)>\s{0,64}<value>[ \t]*(?P<s>[^<\s][^<\n]*)</value>"#,
            Refine::NameValueElements,
            &[
                "<property><name>fs.s3a.secret.key</name><value>Xk9vQ2mLp7RzAb12Cd34Ef</value></property>",
                "<property>\n  <name>javax.jdo.option.ConnectionPassword</name>\n  <value>hive9Pw</value>\n</property>",
                "<entry>\n  <key>password</key>\n  <value>Entry9Pw</value>\n</entry>",
            ],
            &[
                "<property><name>fs.s3a.endpoint</name><value>s3.amazonaws.com</value></property>",
                "<property><name>fs.s3a.secret.key</name><value>${env.S3_SECRET}</value></property>",
                "<entry><key>username</key><value>username</value></entry>",
            ],
        ),
    ),
    // An element named for a secret by its `name` or `key` attribute, its text the value:
    // Android's `<string name="api_key">…</string>`, Java's properties in XML (`<entry
    // key="password">…</entry>`), .NET's settings (`<setting name="ApiKey"
    // …><value>…</value>`). A value of one word only: a label or a message a resource holds
    // (`<string name="prompt_password">Password</string>`, `…>This password is too
    // short<…`) stays, and so does a resource's reference (`@string/…`, `?attr/…`).
    when(
        HAS_QUOTE,
        rule(
            "xml-named-element",
            "markup",
            NAME_KEYWORDS,
            r#"(?i)<[A-Za-z][\w:.\-]*[^<>\n]*?[ \t](?:name|key)[ \t]*=[ \t]*["'](?P<n>[^"'<>\n]+)["'][^<>\n]*>[ \t]*(?:<value>[ \t]*)?(?P<s>[^<\s@?][^<\s]*)[ \t]*</"#,
            Refine::NameValueElements,
            &[
                "<string name=\"api_key\">Xk9vQ2mLp7RzAb12Cd34</string>",
                "<entry key=\"password\">EntryAttr9Pw</entry>",
                "<setting name=\"ApiKey\" serializeAs=\"String\"><value>SetVal9Key2x</value></setting>",
            ],
            &[
                "<string name=\"prompt_password\">Password</string>",
                "<string name=\"error_invalid_password\">This password is too short</string>",
                "<string name=\"api_key\">@string/default_key</string>",
                "<entry key=\"password\">${db.password}</entry>",
                "<string name=\"token_label\">Token</string>",
            ],
        ),
    ),
    multiline(rule(
        "jenkins-initial-password",
        "command-line",
        &["proceed to installation", "initialadminpassword"],
        // Each line may start with a compose service's `name  | `.
        r#"(?:(?i:password to proceed to installation):|initialAdminPassword[^\n]*)(?:[ \t]*\r?\n(?:[\w.-]+[ \t]*\|)?){1,2}[ \t]*(?P<s>[0-9a-f]{32})\b"#,
        Refine::Group,
        &[
            "Please use the following password to proceed to installation:\n\n4f1e0c9a7b2d4e6f8a0b1c2d3e4f5a6b\n\nThis may also be found at: /var/jenkins_home/secrets/initialAdminPassword",
            "$ docker exec jenkins cat /var/jenkins_home/secrets/initialAdminPassword\n9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a49",
        ],
        &[
            "This may also be found at: /var/jenkins_home/secrets/initialAdminPassword\n\n*************",
        ],
    )),
    rule(
        "secret-wrapper",
        "code",
        &[
            "secretstr",
            "secretstring",
            "secretbytes",
            "secretbox",
            "secret::new",
            "secret::from",
            "secret(",
            "zeroizing::new",
        ],
        r#"\b(?:SecretStr|SecretString|SecretBytes|SecretBox|Secret|Zeroizing)(?:::(?:new|from))?[ \t]*\([ \t]*(?:String::from\([ \t]*|[br])?(?P<q>["'])(?P<s>[^"'\n])"#,
        Refine::QuotedProse,
        &[
            "settings = Settings(api_key=SecretStr(\"hunter2\"))",
            "let pw = SecretString::from(\"s3same\".to_string());",
            "let key = Secret::new(String::from(\"opensesame\"));",
        ],
        &[
            "api_key: SecretStr = SecretStr(\"\")",
            "password = SecretStr(os.environ[\"DB_PASSWORD\"])",
            "let pw = SecretString::from(\"<password>\");",
        ],
    ),
    rule(
        "netrc-inline",
        "netrc",
        &["machine"],
        r#"\bmachine[ \t]+\S+[ \t]+login[ \t]+\S+[ \t]+password[ \t]+(?P<s>[^\s"'`]+)"#,
        Refine::Group,
        &["echo \"machine api.heroku.com login me@x.com password Her0kuPw9\" >> ~/.netrc"],
        &["machine api.heroku.com login me@x.com"],
    ),
    rule(
        "here-string-secret",
        "command-line",
        &["<<<"],
        r#"(?i)\b(?:env[ \t]+add|secrets?[ \t]+(?:set|add|create|put)|--with-token|--password-stdin|--token-stdin|login|passwd|pass[ \t]+(?:insert|add)|sudo[ \t]+(?:-[a-z]+[ \t]+)*-[a-z]*(?-i:S))\b[^\n|;&]*<<<[ \t]*(?P<q>["']?)(?P<s>[^\s"'$])"#,
        Refine::Flag,
        &[
            "vercel env add API_SECRET production <<< \"V3rcelS3cret9\"",
            "docker login -u bob --password-stdin <<< 'D0ckerHere9'",
            "sudo -S <<< 'SudoHere9Zq' apt-get update",
            "pass insert -m web/github <<< 'PassStore9Zq'",
            "passwd --stdin deploy <<< 'PasswdIn9Zq'",
        ],
        &[
            "vercel env add API_SECRET production <<< \"$API_SECRET\"",
            "sudo -s <<< 'ls -la /root'",
            "sudo -S <<< \"$SUDO_PASSWORD\" true",
            "pass show web/github <<< 'q'",
        ],
    ),
    rule(
        "rabbitmqctl-password",
        "command-line",
        &["rabbitmqctl"],
        r#"\brabbitmqctl\b[^\n|;&]*?\b(?:add_user|change_password)[ \t]+(?:"[^"\n]*"|'[^'\n]*'|\S+)[ \t]+(?P<q>["']?)(?P<s>[^\s"'$-])"#,
        Refine::Flag,
        &["rabbitmqctl add_user admin R4bbitPw9"],
        &[
            "rabbitmqctl add_user admin --pre-hashed-password",
            "rabbitmqctl list_users",
        ],
    ),
    rule(
        "minio-alias",
        "command-line",
        &["mc alias", "mc config host"],
        r#"\bmc[ \t]+(?:alias[ \t]+set|config[ \t]+host[ \t]+add)[ \t]+\S+[ \t]+\S+[ \t]+(?:"[^"\n]*"|'[^'\n]*'|\S+)[ \t]+(?P<q>["']?)(?P<s>[^\s"'$])"#,
        Refine::Flag,
        &["mc alias set minio http://m:9000 minioadmin M1n1oS3cretKey"],
        &["mc alias set minio http://m:9000 $MINIO_USER $MINIO_PASSWORD"],
    ),
    rule(
        "psexec-p",
        "command-line",
        &["psexec"],
        r#"(?i)\bpsexec(?:64)?(?:\.exe)?\b[^\n|;&]*?[ \t]-p[ \t]+(?P<q>["']?)(?P<s>[^\s"'])"#,
        Refine::Flag,
        &[r"PsExec.exe \\10.0.0.5 -u CORP\admin -p Ps3xecPw! cmd /c whoami"],
        &[r"psexec \\host -u admin -s cmd"],
    ),
    rule(
        "gh-secret-set",
        "command-line",
        &["secret set"],
        r#"\bgh[ \t]+secret[ \t]+set\b[^\n|;&]*?[ \t](?:--body|-b)(?:[ \t]+|=)(?P<q>["']?)(?P<s>[^\s"'$])"#,
        Refine::Flag,
        &["gh secret set API_TOKEN --body Gh5ecretB0dy -R o/r"],
        &[
            "gh secret set API_TOKEN --body \"$API_TOKEN\"",
            "gh secret set API_TOKEN < token.txt",
        ],
    ),
    rule(
        "ssh-keygen-n",
        "command-line",
        &["ssh-keygen"],
        r#"\bssh-keygen\b[^\n|;&]*?[ \t]-[NP][ \t]*(?P<q>["']?)(?P<s>[^\s"'])"#,
        Refine::Flag,
        &[
            "ssh-keygen -t ed25519 -N 'Kg pass' -f id",
            "ssh-keygen -p -f id -P OldKgPass9 -N NewKgPass9",
        ],
        &["ssh-keygen -t ed25519 -N '' -f id"],
    ),
    rule(
        "htpasswd-b",
        "command-line",
        &["htpasswd"],
        r"\bhtpasswd\b[^\n|;&]*",
        Refine::Htpasswd,
        &[
            "htpasswd -bc .htpasswd admin HtPw123",
            "htpasswd -nb admin HtPw456",
            "htpasswd -b f u Pw8 htpasswd -b f u Pw9",
        ],
        &["htpasswd -c .htpasswd admin"],
    ),
    rule(
        "sqlplus",
        "command-line",
        // Oracle's tools that take `user/password@db` as an argument: SQL*Plus, Data Pump,
        // SQL*Loader's `userid=`, RMAN's `target`, `catalog` and `auxiliary`, the Data Guard
        // broker. (`rman ` with its blank: the word alone is inside "performance".)
        &["sqlplus", "expdp", "impdp", "sqlldr", "rman ", "dgmgrl"],
        r#"(?i)\b(?:sqlplus|expdp|impdp|sqlldr|dgmgrl|rman[ \t]+(?:target|catalog|auxiliary))\b[ \t]+(?:-\S+[ \t]+)*["']?(?:userid=)?[A-Za-z0-9_$#.]+/(?P<s>"[^"\n]|[^\s@"'/])"#,
        Refine::Sqlplus,
        &[
            "sqlplus scott/Tiger123@orcl",
            "sqlplus scott/\"p@ss w0rd9\"@orcl",
            "expdp system/ExpDpPw9@orcl directory=d dumpfile=x.dmp",
            "sqlldr userid=scott/LdrPw9Zq control=x.ctl",
            "rman target sys/RmanPw9Zq@prod",
        ],
        &[
            "sqlplus / as sysdba",
            "rman target /",
            "expdp \"/ as sysdba\" directory=d",
        ],
    ),
    // Oracle's older export and import (`exp user/password@db`): their names are short
    // words, so only a password followed by its database (`exp x/y` is arithmetic).
    rule(
        "oracle-exp-imp",
        "command-line",
        &["exp ", "imp "],
        r#"(?i)\b(?:exp|imp)[ \t]+(?:-\S+[ \t]+)*(?:userid=)?[A-Za-z0-9_$#.]{2,}/(?P<s>[^\s@"'/][^\s@"'/]*@)"#,
        Refine::Sqlplus,
        &[
            "exp system/ExpSysPw9@db file=x.dmp",
            "imp userid=scott/ImpPw9Zq@orcl full=y",
        ],
        &["y = exp x/y", "imp a/b"],
    ),
    when(
        HAS_BRACKET_THEN_QUOTE,
        rule(
            "constructor-literal",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)\b(?:std::)?(?:w?string|qstring)[ \t]+(?P<n>[A-Za-z0-9_]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_]*)[ \t]*[({][ \t]*(?P<s>["'])"#
            ),
            Refine::NameThenValue,
            &[
                "std::string password(\"Hunt3rPw9\");",
                "const std::string api_key{\"Xk9vQ2mLp7RzAb12\"};",
            ],
            &["std::string password(\"\");", "std::string token(argv[1]);"],
        ),
    ),
    when(
        HAS_CALL_GIVEN_A_STRING,
        rule(
            "name-literal-pair",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)\b(?P<f>set|add|header|setheader|set_header|addheader|add_header|append|put|get|getenv|getproperty|setproperty|setrequestproperty|setdefault|insert|with_header|withheader|define|setenv|set_var|setenvironmentvariable|fetch|getordefault|env|config|setitem|putstring|putextra|setvalue|set_value)\([ \t]*["'](?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_.\-]*)["'][ \t]*,[ \t]*(?:default[ \t]*=[ \t]*)?(?P<q>["'])"#
            ),
            Refine::NamedLiteral,
            &[
                "req.Header.Set(\"X-Api-Key\", \"Xk9vQ2mLp7RzAb12Cd34\")",
                ".header(\"x-auth-token\", \"Xk9vQ2mLp7RzAb12Cd34\")",
                "SECRET_KEY = os.environ.get(\"SECRET_KEY\", \"django-insecure-8f3k2l9x\")",
                "props.setProperty(\"db.password\", \"Hunt3rPw9\");",
                "define( 'DB_PASSWORD', 'WpDbPw9Zq' );",
                "define('AUTH_KEY', 'Xk9m!W2xL8q#P5vN3t&Y7zB1cD4fG6hJ0kL2mN5');",
                "os.Setenv(\"API_TOKEN\", \"GoEnvTok9Zq\")",
                "std::env::set_var(\"API_KEY\", \"RsEnvKey9Zq\");",
                "Environment.SetEnvironmentVariable(\"DB_PASSWORD\", \"CsEnvPw9Zq\");",
                "[System.Environment]::SetEnvironmentVariable('API_TOKEN', 'PsEnvTok9Zq', 'User')",
                "setenv(\"API_KEY\", \"CEnvKey9Zq\", 1);",
                "token = ENV.fetch(\"API_TOKEN\", \"RbFetchTok9Zq\")",
                "String pw = System.getenv().getOrDefault(\"DB_PASSWORD\", \"JavaDefPw9Zq\");",
                "SECRET_KEY = config('SECRET_KEY', default='django-insecure-9Zq$k2m@q7v!p4l8')",
                "secret_key = env(\"SECRET_KEY\", default=\"EnvDefault9ZqXk9mW2\")",
                "localStorage.setItem(\"access_token\", \"eyQk9zL2m8vR4tP1wX7n\");",
                "prefs.edit().putString(\"api_token\", \"Zk82hQm4Lp0xWv7R3s\").apply();",
                "intent.putExtra(\"password\", \"Hunt3rPw9Zq\");",
            ],
            &[
                "token = request.headers.get(\"X-Api-Key\", \"\")",
                "parser.add_argument(\"--token\", \"-t\")",
                "t(\"password\", \"Password\")",
                "getattr(settings, \"SECRET_KEY\", None)",
                "define('DB_PASSWORD', getenv('DB_PASSWORD'));",
                "define('CACHE_KEY', 'user_profile_cache');",
                "define('WP_CACHE_KEY_SALT', 'example.com');",
                "os.Setenv(\"API_TOKEN\", token)",
                "list_display = (\"token\", \"user\", \"application\")",
                "if hint not in [\"access_token\", \"refresh_token\"]:",
                "DEBUG = config('DEBUG', default=False, cast=bool)",
                "API_TOKEN = env('API_TOKEN', default='')",
            ],
        ),
    ),
    // Android's Gradle build fields (`buildConfigField "String", "API_KEY", "\"…\""`): a
    // type, a name and a value that is a literal of Java source, quoted again.
    // Go's `%+v` of a struct or a map (`{DBPassword:hunter2 Port:5432}`, `map[token:…]`): a
    // field's name, a colon and its value with no blank between.
    when(
        HAS_GLUED_FIELD,
        rule(
            "go-struct-field",
            "generic-assignment",
            // The word glued to its colon: `token` alone (`input_tokens`) is in most lines that
            // name one, and each occurrence would read the rule's gate.
            &[
                "password:",
                "passwd:",
                "pwd:",
                "secret:",
                "token:",
                "key:",
                "credential:",
                "credentials:",
                "passphrase:",
            ],
            r#"(?:^|[{\[\s&])(?P<n>[A-Za-z0-9_]*(?i:password|passwd|pwd|secret|token|key|credentials?|passphrase)):(?P<s>[^\s{}\[\]"',:/?#$=+-][^\s}\]]{3,})"#,
            Refine::BareCall,
            &[
                "{DBPassword:G0StructPw9 Port:5432}",
                "map[api_token:Xk9vQ2mLp7Rz host:db]",
            ],
            &[
                "{Password:true Port:5432}",
                "password:null",
                "redis:6379 token:5",
                "https://token.example.com/path",
                "println!(\"STORE {server_name} {token:?}\");",
                "docker run --rm secretlint:smoke --version",
            ],
        ),
    ),
    // Groovy's and Ruby's calls without parentheses, one to a line, a secret's name given a
    // literal: Gradle's `signingConfigs { release { storePassword "…" } }`, Chef's and
    // Puppet's `password "…"`.
    when(
        HAS_BARE_CALL,
        rule(
            "bare-call-literal",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?im)^[ \t]*(?P<n>[A-Za-z0-9_]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_]*)[ \t]+(?:"(?P<s>[^"\n]+)"|'(?P<t>[^'\n]+)')[ \t]*,?\r?$"#
            ),
            Refine::BareCall,
            &[
                "signingConfigs {\n    release {\n        storePassword \"Gr00vyStorePw9\"\n        keyPassword \"Gr00vyKeyPw9\"\n    }\n}",
                "  password 'Ch3fUserPw9'",
                "        storePassword \"Gr00vy'Pw9\"",
            ],
            &[
                "        keyAlias \"release\"",
                "println \"password reset sent\"",
                "        storePassword \"${System.getenv('STORE_PW')}\"",
                "    storePassword \"\"",
            ],
        ),
    ),
    when(
        HAS_COMMA_AND_QUOTE,
        rule(
            "gradle-build-field",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)\b(?P<f>buildconfigfield|resvalue)[ \t]*\(?[ \t]*["'][A-Za-z.]+["'][ \t]*,[ \t]*["'](?P<n>[A-Za-z0-9_.\-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_.\-]*)["'][ \t]*,[ \t]*(?:"\\|')?(?P<q>["'])"#
            ),
            Refine::NamedLiteral,
            &[
                "buildConfigField \"String\", \"API_KEY\", \"\\\"951bc382db9cfee29c68634761dd6e19\\\"\"",
                "buildConfigField 'String' , 'API_KEY' , '\"951bc382db9cfee29c68634761dd6e19\"'",
                "buildConfigField(\"String\", \"CLIENT_SECRET\", \"\\\"Xk9vQ2mLp7RzAb12\\\"\")",
                "resValue \"string\", \"maps_api_key\", \"AIzaSyD3xK9mQ2vR7tP4wL8nJ6hF1cB5gE0aZ2s\"",
            ],
            &[
                "buildConfigField \"String\", \"API_KEY\", \"\\\"\\\"\"",
                "buildConfigField \"String\", \"API_KEY\", \"\\\"${apiKey}\\\"\"",
                "buildConfigField \"String\", \"API_KEY\", localProperties.getProperty(\"api.key\")",
                "buildConfigField \"boolean\", \"USE_TOKEN\", \"true\"",
            ],
        ),
    ),
    // The literal a secret-named environment variable falls back to when unset: the secret
    // itself, written into the code (`process.env.API_KEY || '…'`, Ruby's block of
    // `ENV.fetch("API_KEY") { '…' }` or `do '…' end`). Only after a lookup of
    // the environment (`env`, `getenv`, `environ`, PHP's `$_ENV` and `$_SERVER`, .NET's
    // `GetEnvironmentVariable`), and only for a name of a secret: `process.env.HOST ||
    // "localhost"` stays.
    when(
        HAS_QUOTE,
        rule(
            "env-fallback-literal",
            "generic-assignment",
            NAME_KEYWORDS,
            // Any variable's name: the name of a secret may be the one assigned instead
            // (`const password = process.env.PW || '…'`), which the refinement reads.
            r#"(?i)(?:\benv\b|getenv|environ|\$_env|\$_server|getenvironmentvariable)[^\n;=]{0,24}?\b(?P<n>[A-Za-z0-9_]+)\b["'\]\)]{0,3}[ \t]*(?:\|\||\?\?|\?:|\bor\b|\.unwrap_or(?:_else)?\([ \t]*(?:\|[^|\n]{0,8}\|[ \t]*)?|(?:\{|\bdo\b)[ \t]*(?:\|[^|\n]{0,16}\|[ \t]*)?)[ \t]*(?P<q>["'])"#,
            Refine::Fallback,
            &[
                "password = os.getenv(\"DB_PASSWORD\") or \"OrFallbk9Zq\"",
                "const password = process.env.PW || 'EnvAsgn9Zq';",
                "db_password = os.getenv(\"PGPASS\") or \"PyAsgnFb9Zq\"",
                "apiKey: process.env.KEY ?? \"ObjAsgn9ZqK\",",
                "$secret = $_ENV['APP_S'] ?? 'PhpAsgn9Zq';",
                "const apiKey = process.env.API_KEY || 'OrOrFb9ZqKey';",
                "$apiKey = $_ENV['API_KEY'] ?? 'PhpEnvFb9Zq';",
                "let key = std::env::var(\"API_KEY\").unwrap_or(\"RsUnwrapFb9Zq\".to_string());",
                "var s = Environment.GetEnvironmentVariable(\"CLIENT_SECRET\") ?? \"CsEnvFb9Zq\";",
                "password = ENV.fetch(\"DB_PASSWORD\") { \"RbFetchFb9Zq\" }",
                "api_key = ENV.fetch('API_KEY') { |name| 'RbBlockFb9Zq' }",
                "secret = ENV.fetch(\"SECRET\") do \"RbDoFb9Zq\" end",
            ],
            &[
                "host = process.env.HOST || \"localhost\"",
                "const key = process.env.API_KEY || '';",
                "secret = os.environ.get(\"SECRET\") or default_secret()",
                "token = process.env.TOKEN || '<your token>'",
                "const password = process.env.PW || '';",
                "const tokenUrl = process.env.TOKEN_URL || 'https://auth.example.com/token';",
                "password = os.getenv(\"PW\") or default_password()",
                "if (password == process.env.PW || 'x') {}",
                "const host = process.env.PW || 'localhost';",
                "host = ENV.fetch(\"HOST\") { \"localhost\" }",
                "token = ENV.fetch(\"TOKEN\") { raise \"TOKEN is not set\" }",
                "key = ENV.fetch(\"API_KEY\") { '' }",
            ],
        ),
    ),
    // A secret-named key's default where the key is looked up in a settings object (Ruby's
    // `config.fetch(:password) { '…' }`, `params.fetch(:api_key, '…')`,
    // `credentials.fetch(:secret_key_base) do '…' end`): the secret itself, written into the
    // code, as the environment's fallback above. A key given as a symbol has no quotes, which
    // the rule of a named literal (`fetch("api_key", '…')`) needs.
    when(
        HAS_QUOTE,
        rule(
            "fetch-default-literal",
            "generic-assignment",
            NAME_KEYWORDS,
            r#"(?i)\bfetch\([ \t]*(?::|["'])(?P<n>[A-Za-z0-9_]+)["']?[ \t]*(?:,[ \t]*|\)[ \t]*(?:\{|\bdo\b)[ \t]*(?:\|[^|\n]{0,16}\|[ \t]*)?)(?P<q>["'])"#,
            Refine::Fallback,
            &[
                "pw = config.fetch(:password) { \"RbSymFetch9Zq\" }",
                "key = params.fetch(:api_key, 'RbSymArg9Zq')",
                "base = Rails.application.credentials.fetch(:secret_key_base) do 'RbCredDo9Zq' end",
                "token = settings.fetch(:auth_token) { |k| \"RbSymBlk9Zq\" }",
            ],
            &[
                "pw = config.fetch(:password) { raise KeyError, \"password missing\" }",
                "host = config.fetch(:host) { \"localhost\" }",
                "token = settings.fetch(:token) { \"\" }",
                "pw = config.fetch(:password) { \"<password>\" }",
                "pw = config.fetch(:password, nil)",
            ],
        ),
    ),
    // A Terraform variable named for a secret, with its default written in the block
    // (`variable "db_password" { default = "…" }`, over lines): the secret itself, as a
    // `.tfvars` assignment would be. Read up to 512 bytes past the `variable` line. Its
    // keyword holds a quote, which a string of JSON inside JSON holds only escaped: such
    // keywords are looked for apart in every string with escapes, which cost the generated
    // rollout 2 % (docs/performance.md, "twentieth pass"); `variable` alone is in every
    // compiler's "unused variable" and made ordinary output walk lines it returned whole.
    reaching(
        512,
        rule(
            "terraform-variable-default",
            "generic-assignment",
            &["variable \""],
            concat!(
                r#"(?i)\bvariable[ \t]+"(?P<n>[A-Za-z0-9_-]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_-]*)"[ \t]*\{[^}]*?\bdefault[ \t]*=[ \t]*(?P<q>")"#
            ),
            Refine::Fallback,
            &[
                "variable \"db_password\" {\n  type    = string\n  default = \"TfDefPw9Zq\"\n}",
                "variable \"api_token\" { default = \"TfTok9ZqXk2\" }",
            ],
            &[
                "variable \"db_password\" {\n  type      = string\n  sensitive = true\n}",
                "variable \"db_password\" {\n  default = \"\"\n}",
                "variable \"auth_method\" {\n  default = \"oidc\"\n}",
                "variable \"region\" {\n  default = \"us-east-1\"\n}",
            ],
        ),
    ),
    // A shell's default for a secret-named variable (`${DB_PASSWORD:-…}`, `-`, `:=`, `=`),
    // as compose files and scripts write it.
    when(
        HAS_SHELL_DEFAULT,
        rule(
            "shell-default-value",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)\$\{(?P<n>[A-Za-z0-9_]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_]*):?[-=]["']?(?P<s>[^}\s"'$]+)["']?\}"#
            ),
            Refine::Fallback,
            &[
                "password: ${DB_PASSWORD:-ShDefault9Zq}",
                "POSTGRES_PASSWORD: ${POSTGRES_PASSWORD-ShDash9ZqPw}",
                r#"export API_TOKEN="${API_TOKEN:-"ShQuoted9ZqTk"}""#,
                "pw=${DB_PASSWORD:='ShSingle9ZqPw'}",
            ],
            &[
                "password: ${DB_PASSWORD:-}",
                "token: ${API_TOKEN:-$DEFAULT_TOKEN}",
                "echo ${TOKEN_FILE:-/run/secrets/token}",
            ],
        ),
    ),
    // Go's variable or constant declared with its type and given a string literal: `var
    // password string = "…"`, `const token string = "…"` (a name then `=` is `assignment`'s;
    // Go puts the type between); an identifier given
    // stays. Opened by `var ` itself: a name keyword opens dozens of rules on every line of
    // code.
    rule(
        "go-typed-var",
        "generic-assignment",
        &["var ", "const "],
        concat!(
            r#"(?i)\b(?:var|const)[ \t]+(?P<n>[A-Za-z0-9_]*(?:"#,
            name_words!(),
            r#")[A-Za-z0-9_]*)[ \t]+\*?(?:\[\])?[A-Za-z_][A-Za-z0-9_.]*[ \t]*=[ \t]*(?P<s>["`])"#
        ),
        Refine::NameThenValue,
        &[
            r#"var password string = "GoTyped9Pw2""#,
            r#"var apiKey string = "GoTypedKey9x""#,
            r#"const apiToken string = "GoConstTok9x""#,
        ],
        &[
            "var password string = os.Getenv(\"DB_PASSWORD\")",
            "var token string = cfg.Token",
            "var password string = defaultPassword",
        ],
    ),
    // A member of Go's `var (…)` or `const (…)` block, on a line of its own with its type and
    // a string literal (`\tapiKey string = "…"`): `go-typed-var` without its keyword, which
    // is lines above. Only at a line's start after an indent, as gofmt writes it.
    when(
        HAS_QUOTE,
        rule(
            "go-typed-block-member",
            "generic-assignment",
            NAME_KEYWORDS,
            r#"(?m)^[ \t]+(?P<n>[A-Za-z0-9_]+)[ \t]+\*?(?:\[\])?[A-Za-z_][A-Za-z0-9_.]*[ \t]*=[ \t]*(?P<s>["`])"#,
            Refine::NameThenValue,
            &["var (\n\tapiKey string = \"GoBlockKey9x\"\n)"],
            &[
                "var (\n\tapiKey string = os.Getenv(\"API_KEY\")\n)",
                "\tpassword string = \"\"",
            ],
        ),
    ),
    // R's assignment arrows (`api_key <- "…"`, `<<-` to an outer scope) and a name given
    // quoted in a call's arguments (`Sys.setenv("OPENAI_API_KEY" = "…")`,
    // `list("token" = "…")`): a secret's name given a string literal, judged as any
    // assignment's value.
    when(
        HAS_QUOTE,
        rule(
            "r-assignment",
            "generic-assignment",
            NAME_KEYWORDS,
            r#"(?:\b|[(,][ \t]*["'])(?P<n>[A-Za-z0-9_.]+)(?:[ \t]*<<?-|["'][ \t]*=)[ \t]*(?P<s>["'])"#,
            Refine::NameThenValue,
            &[
                "api_key <- \"RArrowKey9Zq\"",
                "db_password <<- 'RSuperPw9Zq'",
                "Sys.setenv(\"OPENAI_API_KEY\" = \"RSetenvKey9Zq\")",
                "cfg <- list(host = \"db\", \"password\" = \"RListPw9Zq\")",
            ],
            &[
                "token <- Sys.getenv(\"API_TOKEN\")",
                "password <- \"\"",
                "if (token_count < -1) stop(\"x\")",
                "api_key <- \"<your key>\"",
            ],
        ),
    ),
    // R's rightward assignment: the literal first (`"…" -> api_key`, `->>`), the name last
    // on its line or before `;`, `)` or a comment (a case clause's `"x" -> handle()` calls).
    when(
        HAS_QUOTE,
        rule(
            "r-right-assignment",
            "generic-assignment",
            NAME_KEYWORDS,
            r#"(?m)(?P<q>["'])(?P<s>[^"'\n]+)["'][ \t]*->>?[ \t]*(?P<n>[A-Za-z0-9_.]+)[ \t]*(?:$|[;)#])"#,
            Refine::Comparison,
            &[
                "\"RRightKey9Zq\" -> api_key",
                "'RSuperPw9Zq' ->> db_password  # global",
            ],
            &[
                "\"\" -> password",
                "\"password\" -> field_name",
                "\"login\" -> token_handler(x)",
                "\"<your key>\" -> api_key",
            ],
        ),
    ),
    // Spring's and Quarkus's property placeholders: `${NAME:default}`, the default after a
    // colon alone. Only a default starting with a letter: bash's substrings of a token
    // (`${API_TOKEN:0:8}`, `${TOKEN: -4}`) show its first or last characters.
    when(
        HAS_SHELL_DEFAULT,
        rule(
            "property-default-value",
            "generic-assignment",
            NAME_KEYWORDS,
            concat!(
                r#"(?i)\$\{(?P<n>[A-Za-z0-9_.]*(?:"#,
                name_words!(),
                r#")[A-Za-z0-9_.]*):(?P<s>[A-Za-z_][^}\s"'$]*)\}"#
            ),
            Refine::Fallback,
            &[
                "quarkus.datasource.password=${DB_PASS:QkDefault9Pw}",
                "spring.datasource.password: ${spring.db.password:SpDefault9Pw}",
            ],
            &[
                r#"echo "token ${API_TOKEN:0:8}…""#,
                "echo ${GITHUB_TOKEN: -4}",
                "password: ${DB_PASSWORD:-}",
                "client-secret: ${CLIENT_SECRET:${OTHER_SECRET}}",
            ],
        ),
    ),
    // A command that stores a setting, a secret or a key, given a secret's name and then its
    // value as the next argument: WP-CLI's `wp config set DB_PASSWORD …`, `netlify env:set`,
    // `fly secrets set NAME …`, `consul kv put secret/db/password …`, `etcdctl put
    // /app/db/password …`, csh's `setenv`, Windows' `setx`. A flag, a file (`@file`) or a
    // reference (`$X`, `%X%`) as the
    // value stays.
    rule(
        "cli-set-name-value",
        "command-line",
        // The commands, not the names: a name keyword opens dozens of rules on every line of
        // code, and this one on each cost ordinary tool output 3 %.
        &[
            "setenv",
            "setx ",
            "set -",
            "config set",
            "config put",
            "config:set",
            "env set",
            "env:set",
            "secret set",
            "secrets set",
            "secret put",
            "secrets put",
            "variables set",
            "vars set",
            "var set",
            "kv put",
            "kv set",
            "etcdctl put",
            "parameter set",
            "parameters set",
        ],
        concat!(
            r#"(?i)(?:\bsetenv|\bsetx|\bset(?:[ \t]+-[A-Za-z]+)+|\betcdctl[ \t]+put|\b(?:config|secrets?|env|variables|vars?|kv|parameters?)(?::|[ \t]+)(?:set|put))[ \t]+(?:[^\s/"'=]*/)*(?P<n>[A-Za-z0-9_.-]*(?:"#,
            name_words!(),
            r#")[A-Za-z0-9_]*)[ \t]+["']?(?P<s>[^\s"'$`@<(%-][^\s"'`]{5,})"#
        ),
        Refine::Fallback,
        &[
            "wp config set DB_PASSWORD 'WpCfgPass9x'",
            "netlify env:set API_TOKEN NtEnvTok9x2",
            "consul kv put secret/db/password CnKvPass9x",
            "etcdctl put /app/db/password EtPutPass9x",
            "setenv DB_PASSWORD CshPass9x2",
            "set -gx API_TOKEN FishTok9x2Q",
            "wp config set DB_PASSWORD 'Wp$$Dollar9x'",
            "setx API_KEY CmdSetxKey9Zq",
        ],
        &[
            "wp config set DB_PASSWORD --prompt",
            "consul kv put secret/db/password @password.txt",
            "fly secrets set API_TOKEN $API_TOKEN",
            "wp config set DB_HOST localhost",
            "vercel env add API_SECRET production",
            "set -euo pipefail",
            "set -gx API_TOKEN (cat ~/.token)",
            "set -l token_count (count $argv)",
            "setx API_KEY \"%NEW_KEY%\"",
        ],
    ),
    // A secret store's command given `NAME=VALUE` (`doppler secrets set STRIPE_KEY=…`,
    // `supabase secrets set OPENAI_KEY=…`, `infisical secrets set …`): what it stores is a
    // secret whatever its name. The first pair of the line; a reference (`$X`), a file
    // (`@file`) or a redirect as the value stays.
    rule(
        "secrets-set-pair",
        "command-line",
        &["secrets set", "secret set", "secrets put"],
        r#"\bsecrets?[ \t]+(?:set|put)\b(?:[ \t]+--?[A-Za-z][A-Za-z-]*(?:[ \t=][^\s=-][^\s=]*)?)*[ \t]+[A-Za-z_][A-Za-z0-9_.-]*=(?P<q>["']?)(?P<s>[^\s"'$`@<(%])"#,
        Refine::Flag,
        &[
            "doppler secrets set STRIPE_KEY=D0pplerKey9",
            "supabase secrets set OPENAI_KEY=Sup4baseKey9 --project-ref abc",
            "infisical secrets set --env prod SMTP_LOGIN='Inf1sicalPw9'",
        ],
        &[
            "supabase secrets set OPENAI_KEY=$OPENAI_KEY",
            "doppler secrets set --help",
            "supabase secrets set --env-file ./supabase/.env",
        ],
    ),
    // A literal given to Ansible Vault to encrypt (`ansible-vault encrypt_string '…' --name
    // 'db_password'`): the secret itself, before its encryption is printed.
    rule(
        "ansible-vault-string",
        "command-line",
        &["encrypt_string"],
        r#"\bencrypt_string(?:[ \t]+--?[A-Za-z-]+(?:[ \t]+|=)[^\s-][^\s]*)*[ \t]+(?P<q>["']?)(?P<s>[^\s"'|<-])"#,
        Refine::Flag,
        &["ansible-vault encrypt_string 'AvString9Pw' --name 'db_password'"],
        &[
            "ansible-vault encrypt_string --stdin-name 'db_password'",
            "ansible-vault encrypt_string --vault-id prod@prompt --stdin-name 'db_password'",
        ],
    ),
    // Samba's tools given `user%password` (`smbclient -U user%…`, `rpcclient`), and lftp's
    // `-u user,password`.
    rule(
        "samba-user-password",
        "command-line",
        &["smbclient", "rpcclient", "smbcacls", "smbget", "lftp"],
        r#"\b(?:(?:smbclient|rpcclient|smbcacls|smbget)\b[^\n|;&]*?[ \t](?:-U[ \t]*|--user(?:=|[ \t]+))["']?[^\s%"']+%|lftp\b[^\n|;&]*?[ \t]-u[ \t]+["']?[^\s,"']+,)(?P<s>[^\s"']+)"#,
        Refine::Group,
        &[
            "smbclient //srv/share -U user%SmbPass9x2",
            "lftp -u deploy,LftpPass9x2 ftp.example.com",
        ],
        &[
            "smbclient //srv/share -U user",
            "lftp -u deploy ftp.example.com",
        ],
    ),
    // macOS's keychain given the password on the command line (`security
    // add-generic-password … -w 'PW'`; `-w` last, with no value, prompts).
    rule(
        "keychain-password",
        "command-line",
        &["generic-password", "internet-password"],
        r#"(?i)\bsecurity[ \t]+(?:add|set)-(?:generic|internet)-password\b[^\n|;&]*?[ \t]-w[ \t]+(?P<q>["']?)(?P<s>[^\s"'-])"#,
        Refine::Flag,
        &["security add-generic-password -a bot -s deploy -w 'KcPass9x2Wd'"],
        &["security add-generic-password -a bot -s deploy -w"],
    ),
    when(
        HAS_COMMA_AND_QUOTE,
        rule(
            "python-auth-tuple",
            "command-line",
            &["auth"],
            r#"(?i)(?:\bauth[ \t]*=[ \t]*\(?|basicauth\(|digestauth\()[ \t]*(?:"[^"\n]*"|'[^'\n]*'|[A-Za-z_][A-Za-z0-9_.]*)[ \t]*,[ \t]*(?P<q>["'])(?P<s>[^"'\n])"#,
            Refine::Flag,
            &[
                "requests.get(url, auth=('u', 'PyPw1'))",
                "HTTPBasicAuth('u', \"PyPw2\")",
            ],
            &["requests.get(url, auth=auth)"],
        ),
    ),
];

const MARKER: &str = super::REDACTED;

/// Where an unquoted or quoted value starting at `start` ends (S1.2).
fn value_extent(text: &str, start: usize) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    let first = *bytes.get(start)?;
    if matches!(first, b'"' | b'\'' | b'`') {
        let from = start + 1;
        let end = closing_quote(bytes, from, first);
        return (end > from).then_some(from..end);
    }
    // A `'` inside an unquoted value is part of it, as the kcap CLI takes it; one closing the
    // value (`echo 'TOKEN=abc'`) is not.
    let mut end = bytes[start..]
        .iter()
        .position(|&b| b.is_ascii_whitespace() || matches!(b, b'"' | b'`'))
        .map_or(bytes.len(), |o| start + o);
    if bytes[start..end].iter().filter(|&&b| b == b'\'').count() == 1 && bytes[end - 1] == b'\'' {
        end -= 1;
    }
    // A `,` before an object's next printed field (`password=…, user=bob)`, as Kotlin's data
    // classes, Lombok's `toString` and Java's maps print them) separates the fields.
    if end > start + 1 && bytes[end - 1] == b',' && before_next_field(text, end - 1..end) < end {
        end -= 1;
    }
    (end > start).then_some(start..end)
}

/// The closing `quote` after `from` (skipping backslash-escaped ones), or the end of the line.
pub(crate) fn closing_quote(bytes: &[u8], from: usize, quote: u8) -> usize {
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' | b'\r' => return i,
            b if b == quote => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// `$VAR`, `${VAR}`, `$(cmd)`, `${{ secrets.X }}`: a reference to a secret, not one.
pub(crate) fn is_shell_reference(value: &str) -> bool {
    // `$$password`: a `$` escaped for Compose, Make or a template, then a reference.
    let value = value
        .strip_prefix("$$")
        .map_or(value, |v| &value[value.len() - v.len() - 1..]);
    let Some(rest) = value.strip_prefix('$') else {
        return (value.len() > 4 && value.starts_with("{{") && value.ends_with("}}"))
            || (value.len() > 2 && value.starts_with('%') && value.ends_with('%'));
    };
    rest.starts_with('(')
        || rest.starts_with('{')
        || (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}

/// Code: a call or member path whose arguments are lowercase names or quoted literals, running
/// from `rest`'s start to a blank, a quote or the end. A call's own name is lowercase; an
/// attribute path's segments may be of any case (the spec's revision 4 widened revision 3's
/// lowercase rule: credential-handling code must ship readable).
fn is_code(rest: &str) -> bool {
    // PHP's call of a global function (`\base64_encode(…)`).
    let rest = rest
        .strip_prefix('\\')
        .filter(|r| r.starts_with(|c: char| c.is_ascii_alphabetic()))
        .unwrap_or(rest);
    // PHP's request and environment arrays: `$_POST['password']`, `$_ENV['APP_SECRET']`.
    const SUPERGLOBALS: &[&str] = &[
        "$_GET[",
        "$_POST[",
        "$_REQUEST[",
        "$_SERVER[",
        "$_ENV[",
        "$_COOKIE[",
        "$_SESSION[",
        "$_FILES[",
    ];
    if SUPERGLOBALS.iter().any(|g| rest.starts_with(g)) {
        return true;
    }
    is_call_or_path(rest) || is_go_conversion(rest) || super::code::is_code_expression(rest)
}

/// Go's conversions and composite literals of a slice or map type: `[]byte(cfg.Secret)`,
/// `[]string{token}`, `map[string]string{}`. A literal of a key's shape they are given is
/// judged apart ([`key_literal_argument`]).
fn is_go_conversion(rest: &str) -> bool {
    let b = rest.as_bytes();
    let Some(start) = [&b"[]"[..], b"map["]
        .iter()
        .find(|p| b.starts_with(p))
        .map(|p| p.len())
    else {
        return false;
    };
    let ty = b[start..]
        .iter()
        .take_while(|&&c| {
            c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'*' | b'[' | b']')
        })
        .count();
    ty > 0 && matches!(b.get(start + ty), Some(b'(' | b'{'))
}

/// Whether `value` is `name` written in another case (`refresh_token` and `refreshToken`,
/// `CLIENT_SECRET` and `client-secret`): the letters and digits equal, ignoring case.
fn same_name(name: &str, value: &str) -> bool {
    let name = name.rsplit(['.', ':']).next().unwrap_or(name);
    // Separators aside, the two are as long: most values are not near the name's length.
    if value.is_empty() || value.len() > 64 || value.len().abs_diff(name.len()) > 8 {
        return false;
    }
    if !value
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
    {
        return false;
    }
    fn folded(s: &str) -> impl Iterator<Item = u8> + '_ {
        s.bytes()
            .filter(u8::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
    }
    folded(name).next().is_some() && folded(name).eq(folded(value))
}

/// `clientSecret: 'secret'`, `password = "password"`: the value one of the name's own words,
/// a test's or an example's stand-in.
fn names_word(name: &str, value: &str) -> bool {
    let value = value.trim_end_matches([',', ';', ')']);
    value.len() >= 3
        && value.bytes().all(|c| c.is_ascii_alphabetic())
        && super::code::words(name).any(|word| word.eq_ignore_ascii_case(value))
}

/// A variable of code given unquoted and ended by `;`, `,` or `)`: one or two lowercase
/// letters (`token = t;`), or a lowerCamelCase or snake_case name of two words or more
/// (`getSecret = secretOrPublicKey;`, `secret: secretOrPrivateKey,`). Under a password's name,
/// whose value may be words (`password = superSecret;`), three words or more, one of them a
/// credential's (`secretOrPublicKey`).
fn is_code_variable(name: &str, value: &str, unquoted: bool) -> bool {
    // Ended as an argument, a statement or a struct literal's last field (`{RefreshToken:
    // oldRefreshToken})`).
    let bare = value.trim_end_matches([',', ';', ')', '}']);
    if bare.is_empty() {
        return false;
    }
    // Unended, only a constant named as code names one (the last field of an object literal:
    // `withCredentials: kEnumerableProperty`). A variable named like its name, unended, is
    // code's only after `=` (see [`assign`]): `password: adminPassword` is YAML's literal.
    if bare.len() == value.len() {
        return unquoted && is_prefixed_constant(bare) && !is_password_name(name);
    }
    if bare.len() <= 2 {
        return bare.bytes().all(|c| c.is_ascii_lowercase());
    }
    if unquoted && (is_named_like(name, bare) || is_part_of_name(name, bare)) {
        return true;
    }
    if !bare.starts_with(|c: char| c.is_ascii_lowercase())
        || !super::code::is_compound_identifier(bare)
    {
        return false;
    }
    if !is_password_name(name) {
        // A variable's words are words of code: letters in random case that split into
        // words of a name's shape (`aaAaaaAA`, `qWfPxzLe`) hold none.
        return is_prefixed_constant(bare)
            || super::code::words(bare).any(|w| w.len() >= 3 && is_code_word(w));
    }
    const CREDENTIAL: &[&str] = &[
        "secret",
        "key",
        "token",
        "password",
        "credential",
        "credentials",
        "private",
        "public",
    ];
    let credential =
        super::code::words(bare).any(|w| CREDENTIAL.iter().any(|c| w.eq_ignore_ascii_case(c)));
    // snake_case of two words, one a credential's (`client_secret,` given to a field): a
    // password of words is written without the `_` code puts between them.
    (super::code::words(bare).count() >= 3 || (is_snake_identifier(bare) && bare.contains('_')))
        && credential
}

/// A variable whose name is part of the name it is given to (`lasttoken = token`,
/// `otokentype = tokentype`): lowercase letters, four or more, inside a longer name.
fn is_part_of_name(name: &str, value: &str) -> bool {
    // Code's names only: an environment's `ADMIN_PASSWORD=admin` or `POSTGRES_PASSWORD=postgres`
    // is a password, however weak, and so is a password's part of its own name.
    is_code_name(name)
        && !is_password_name(name)
        && value.len() >= 4
        && value.len() < name.len()
        && value.bytes().all(|c| c.is_ascii_lowercase())
        && name
            .as_bytes()
            .windows(value.len())
            .any(|w| w.eq_ignore_ascii_case(value.as_bytes()))
}

/// A name as code writes a variable's or a field's: a lowercase letter in it (an
/// environment's and a configuration's `ADMIN_PASSWORD` have none).
fn is_code_name(name: &str) -> bool {
    name.bytes().any(|c| c.is_ascii_lowercase())
}

/// A constant named as code names one: a one-letter prefix, then words of four letters or
/// more with a vowel each (Node's `kEnumerableProperty`, a member's `mRefreshToken`).
fn is_prefixed_constant(value: &str) -> bool {
    let b = value.as_bytes();
    b.len() > 8
        && b[0].is_ascii_lowercase()
        && b[1].is_ascii_uppercase()
        && super::code::is_compound_identifier(value)
        && super::code::words(&value[1..])
            .all(|w| w.len() >= 4 && w.bytes().any(|c| b"aeiouAEIOU".contains(&c)))
}

/// A variable named like the name it is given to, one of its words the name's own
/// (`keyPass = storePass;`, `secret = cookieSecret;`, `password: readPassword,`,
/// `shc.baseWriteSecret = writeSecret;`): an unquoted lowerCamelCase or snake_case identifier
/// of two words or more with no digit. A password of words shares none with its name
/// (`password = superSecret;` stays a secret).
fn is_named_like(name: &str, value: &str) -> bool {
    // A type's name is not a variable's (`secret: SuperSecret,` may be a password of words),
    // unless the name is a type's too (`EllipticCurvePrivateKeyWithSerialization =
    // EllipticCurvePrivateKey`: an alias).
    let alias = name.starts_with(|c: char| c.is_ascii_uppercase())
        && name.bytes().any(|c| c.is_ascii_lowercase())
        && !name.contains(['_', '-', '.']);
    // The cheap checks first: most values judged here are secrets, not variables.
    // Code's names only: `MYSQL_PASSWORD=mysqlPassword` in an environment is a password.
    if !is_code_name(name)
        || !(value.starts_with(|c: char| c.is_ascii_lowercase()) || alias)
        || value.bytes().any(|c| c.is_ascii_digit())
        || !super::code::words(value)
            .any(|w| w.len() >= 3 && super::code::words(name).any(|n| n.eq_ignore_ascii_case(w)))
    {
        return false;
    }
    super::code::is_compound_identifier(value)
}

/// A field's or a parameter's type of one capitalised word, ended as a type is ended
/// (`token: Literal,`, `fn from(token: Literal) -> Self`): a token or a key is no word. (Under
/// a password's name a capitalised word may be the password.)
fn is_one_word_type(rest: &str) -> bool {
    let len = rest
        .bytes()
        .take_while(|c| c.is_ascii_alphabetic() || *c == b'_')
        .count();
    let ty = &rest[..len];
    // Capitalised words (`Literal`, `ParseResults`), or a constant naming the types allowed
    // (`_ALLOWED_PRIVATE_KEY_TYPES`).
    let capitalised = !ty.contains('_') && super::code::words(ty).all(is_capitalised_word);
    let constant = ty.trim_start_matches('_').contains('_')
        && ty
            .split('_')
            .all(|w| w.is_empty() || (w.len() >= 3 && w.bytes().all(|c| c.is_ascii_uppercase())));
    // Ended as a type is: by the line, a parameter's or a field's end, type arguments, a
    // union (`auth: Authorization | None = None,`) or a default.
    let after = &rest[len..];
    len >= 3
        && (capitalised || constant)
        && (matches!(
            after.as_bytes().first(),
            None | Some(b',' | b')' | b';' | b'>' | b'\n' | b'\r')
        ) || after.starts_with(" | ")
            || after.starts_with(" = "))
}

/// A parameter's or a field's type named after what it holds (`secrets: ConnectionSecrets,`,
/// `token: AccessToken)`, `private_key: PrivateKeyDer<'static>`): capitalised words, two or
/// more, one of them the name's last word (a plural's `s` aside), ended as a type is ended.
fn names_its_type(name: &str, rest: &str) -> bool {
    let len = rest.bytes().take_while(u8::is_ascii_alphanumeric).count();
    let ty = &rest[..len];
    // Capitalised words are letters: a run with digits (most keys) is read no further.
    if !ty.starts_with(|c: char| c.is_ascii_uppercase())
        || !ty.bytes().all(|c| c.is_ascii_alphabetic())
        || !matches!(
            rest.as_bytes().get(len),
            None | Some(b',' | b')' | b'>' | b'<' | b';' | b'{' | b' ' | b'\n' | b'\r')
        )
    {
        return false;
    }
    let words: Vec<&str> = super::code::words(ty).collect();
    let last = super::code::words(name).last().unwrap_or(name);
    let stem = last
        .strip_suffix(['s', 'S'])
        .filter(|s| s.len() >= 3)
        .unwrap_or(last);
    // Each word a capital and lowercase letters (`PasswdVal9Z`'s `Val9` and `Z` are none).
    let capitalised = |w: &&str| {
        let b = w.as_bytes();
        b.len() >= 2 && b[0].is_ascii_uppercase() && b[1..].iter().all(u8::is_ascii_lowercase)
    };
    words.len() >= 2
        && words.iter().all(capitalised)
        && words.iter().any(|w| {
            w.eq_ignore_ascii_case(last)
                || w.eq_ignore_ascii_case(stem)
                || w.strip_suffix('s')
                    .is_some_and(|w| w.eq_ignore_ascii_case(stem))
        })
}

/// Types a parameter holding a secret is given, as their names start (`String`, `Uint8Array`,
/// `Option<…>`, `KeyLike`).
const COMMON_TYPES: &[&str] = &[
    "string",
    "str",
    "buffer",
    "bytes",
    "uint8array",
    "array",
    "vec",
    "option",
    "box",
    "arc",
    "rc",
    "promise",
    "map",
    "record",
    "partial",
    "readonly",
    "dict",
    "list",
    "secret",
    "zeroizing",
    "cow",
    "result",
    "any",
    "object",
    "number",
    "boolean",
    "bool",
    "int",
    "uint",
    "long",
    "char",
    "byte",
    "credential",
    "token",
    "key",
    "crypto",
    "jwk",
    "jwt",
    "jws",
    "jwe",
    "auth",
    "options",
    "config",
    "settings",
    "params",
    "request",
    "response",
    "session",
    "client",
    "provider",
];

/// A parameter's type after a name (`token: IToken`, `protectedHeader: IProtectedHeader`,
/// `key: Uint8Array`): a short one (`T`, `U256`), one holding a word of the name, or one
/// starting with a common type's name (after an interface's `I`). Letters in random case
/// (`AAAaaaaa`, `A0aaaaaA`) are none of these.
fn is_type_name(name: &str, word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    let bare = lower
        .strip_prefix('i')
        .filter(|_| word.as_bytes().get(1).is_some_and(u8::is_ascii_uppercase))
        .unwrap_or(&lower);
    word.len() <= 4
        || super::code::words(name).any(|w| w.len() >= 3 && lower.contains(&w.to_ascii_lowercase()))
        || COMMON_TYPES.iter().any(|t| bare.starts_with(t))
}

/// Words code names its variables with (any case): what a secret is and where it comes from,
/// and the common nouns and verbs of a variable's name.
const CODE_WORDS: &[&str] = &[
    "secret",
    "secrets",
    "key",
    "keys",
    "token",
    "tokens",
    "password",
    "passwd",
    "pass",
    "pwd",
    "credential",
    "credentials",
    "cred",
    "creds",
    "auth",
    "private",
    "public",
    "signing",
    "access",
    "refresh",
    "bearer",
    "api",
    "client",
    "server",
    "user",
    "account",
    "session",
    "value",
    "values",
    "result",
    "response",
    "resp",
    "request",
    "req",
    "data",
    "config",
    "conf",
    "options",
    "opts",
    "settings",
    "params",
    "args",
    "input",
    "output",
    "default",
    "defaults",
    "new",
    "old",
    "current",
    "next",
    "prev",
    "stored",
    "cached",
    "cache",
    "saved",
    "env",
    "local",
    "global",
    "get",
    "set",
    "load",
    "loaded",
    "read",
    "parse",
    "parsed",
    "make",
    "build",
    "create",
    "fetch",
    "fetched",
    "from",
    "with",
    "for",
    "raw",
    "encoded",
    "decoded",
    "encrypted",
    "decrypted",
    "hashed",
    "hash",
    "salt",
    "text",
    "str",
    "string",
    "bytes",
    "buf",
    "buffer",
    "payload",
    "body",
    "header",
    "headers",
    "ctx",
    "context",
    "state",
    "store",
    "provider",
    "source",
    "target",
    "item",
    "entry",
    "field",
    "name",
    "file",
    "path",
    "url",
    "uri",
    "host",
    "app",
    "service",
    "master",
    "root",
    "admin",
    "temp",
    "tmp",
    "test",
    "mock",
    "fake",
    "dummy",
    "sample",
    "example",
    "expected",
    "actual",
    "other",
    "this",
    "that",
    "the",
    "some",
    "maybe",
    "opt",
    "optional",
    "final",
    "initial",
    "real",
    "valid",
    "invalid",
];

/// Whether `w` is one of [`CODE_WORDS`], in any case.
fn is_code_word(w: &str) -> bool {
    CODE_WORDS.iter().any(|c| w.eq_ignore_ascii_case(c))
}

/// Python's code after a name (in a file, not data): a regular expression's group
/// (`r'Credential=(?P<access_key>\w+)/'`), a variable combined with `or`, `and`, `if`
/// (`credentials = request_credentials or self._credentials`), a snake-case variable of two
/// words or more ending the line (`get_auth = get_auth_instance`; not under a password's
/// name).
fn is_python_code(name: &str, value: &str, rest: &str) -> bool {
    if value.starts_with("(?") {
        return true;
    }
    let word = value
        .bytes()
        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
        .count();
    // Unquoted only: a quoted `'super_secret_password'` is a literal.
    let snake =
        word > 0 && value[..word].trim_matches('_').contains('_') && rest.starts_with(value);
    // What follows an unquoted value on its line (`rest` starts with it then).
    let after = rest
        .strip_prefix(value)
        .unwrap_or("")
        .split('\n')
        .next()
        .unwrap_or("");
    if word == value.len()
        && snake
        && ["or ", "and ", "if "]
            .iter()
            .any(|k| after.trim_start().starts_with(k))
    {
        return true;
    }
    if word == value.len() && snake && after.trim().is_empty() && !is_password_name(name) {
        return true;
    }
    false
}

/// Code that opens a list, tuple or object literal, what it holds read by the other rules:
/// `token = [("token", …)]`, `token = {"access_token": …}`; its first element a literal
/// (`x.return_value = (False,`), the name itself (`output_token = [output_token]`) or a
/// comprehension's key (`{key: None for key in tokens}`). A first element of a key's shape
/// is judged apart (`push_value`).
fn opens_a_structure(name: &str, value: &str) -> bool {
    let opened = value.trim_start_matches(['[', '(', '{']);
    if opened.len() == value.len() {
        return false;
    }
    let inner = opened.trim_end_matches([']', ')', '}', ',', ':']);
    let last = name.rsplit(['.', ':']).next().unwrap_or(name);
    inner.is_empty()
        || is_type_or_literal(opened.trim_end_matches(','))
        || inner == last
        || (value.starts_with('{') && value.ends_with(':') && is_segment(inner.as_bytes()))
}

/// A URL without credentials in it (`.. _Application Default Credentials: https://…`, a docs
/// link): no user information before its host, no key in its path or query.
fn is_plain_url(value: &str) -> bool {
    // Any scheme (`https://docs…`, `mongodb://localhost:27017/db`, `amqp://broker:5672`).
    let Some(rest) = url_scheme_len(value).map(|n| &value[n + 3..]) else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    // A capability URL (`https://hooks.example.com/T0/Xk9vQ2mLp7RzAb12Cd34`) is its secret:
    // no run of a key's shape in its path or query.
    !authority.is_empty()
        && !authority.contains('@')
        && !value.contains(char::is_whitespace)
        && !rest
            .as_bytes()
            .split(|&c| !c.is_ascii_alphanumeric())
            .any(|run| run.len() >= 16 && super::vendors::looks_random(run))
}

/// The length of `value`'s URL scheme, when it starts with one and `://`: a letter, then
/// letters, digits, `+`, `.` or `-`.
fn url_scheme_len(value: &str) -> Option<usize> {
    let b = value.as_bytes();
    if !b.first().is_some_and(u8::is_ascii_alphabetic) {
        return None;
    }
    // The scheme's colon, among the first 33 bytes, found at once.
    let n = memchr::memchr(b':', &b[..b.len().min(33)])?;
    (b[n..].starts_with(b"://")
        && b[..n]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'.' | b'-')))
    .then_some(n)
}

/// Whether a URL's password holds a reference a template or code fills in, not a password:
/// `{password}` (Python's format strings), `${DB_PASSWORD}` and `$DB_PASSWORD` (the shell,
/// Compose, JavaScript's templates), `{{pass}}` (Jinja, Go, Handlebars), `%(pw)s` and `%s`.
pub(crate) fn is_password_slot(value: &str) -> bool {
    // Every slot starts with one of three bytes: most values are settled by the first.
    if !matches!(value.as_bytes().first(), Some(b'{' | b'$' | b'%')) {
        return false;
    }
    // A name, not a password in braces (`{S3cr3tPw9}`): two digits at most.
    let ident = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b' ' | b'-'))
            && s.bytes().filter(u8::is_ascii_digit).count() <= 2
    };
    let inside = |open: &str, close: &str| {
        value
            .strip_prefix(open)
            .and_then(|v| v.strip_suffix(close))
            .is_some_and(|v| ident(v.trim()))
    };
    // A format string's slot, `{password}`, `{ password }`, `{}`, `{0}` ([`template_slot`]).
    template_slot(value).is_some_and(|inner| inner.bytes().filter(u8::is_ascii_digit).count() <= 2)
        || inside("{{", "}}")
        || inside("${", "}")
        || inside("%(", ")s")
        || value == "%s"
        // An environment variable's name (`$REDIS_PASSWORD`), not a password that starts
        // with a `$` (`$ecretPass1`).
        || value.strip_prefix('$').is_some_and(|v| {
            ident(v)
                && v.as_bytes()[0].is_ascii_uppercase()
                && v.bytes().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
        })
}

/// A template that interpolates code (`` `http.${serverUrl.origin}/.extraheader` ``,
/// `` `AUTHORIZATION: basic ${basicCredential}` ``, `"{}/{}/{}".format(`): its text around
/// the `${…}` and format slots holds no run of a key's shape (8 or more token characters that
/// look random).
fn is_interpolated(value: &str) -> bool {
    if !value.contains('{') {
        return false;
    }
    let mut text = String::with_capacity(value.len());
    let mut rest = value;
    let mut slots = 0;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else {
            break;
        };
        let dollar = open > 0 && rest.as_bytes()[open - 1] == b'$';
        // Python's `{}`, `{0}`, `{name}`, `{self.host!r}`, `{n:>4}`: a format slot is empty
        // or a lowercase name or path, maybe with a conversion or a format.
        let inner = &rest[open + 1..close];
        let slot = dollar
            || inner.bytes().all(|c| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || matches!(c, b'_' | b'.' | b'!' | b':' | b'>' | b'<' | b'^')
            });
        if !slot {
            return false;
        }
        slots += 1;
        text.push_str(&rest[..open - usize::from(dollar)]);
        text.push(' ');
        rest = &rest[close + 1..];
    }
    if slots == 0 {
        return false;
    }
    text.push_str(rest);
    !text
        .as_bytes()
        .split(|&c| !super::runs::is_token(c))
        .any(|run| run.len() >= 8 && super::vendors::looks_random(run))
}

/// A value's first word, before a `,`, `;`, `)` or blank (`None` of `None, backend=x`).
fn first_word(value: &str) -> &str {
    value
        .bytes()
        .position(|c| matches!(c, b',' | b';' | b')' | b' '))
        .map_or(value, |end| &value[..end])
}

/// Whether a label's value holds a Markdown link's `](` or a quote closing a string literal
/// (`')`, `",`): it is the text around a secret's name, not a secret.
fn beside_a_literal(value: &str) -> bool {
    let b = value.as_bytes();
    memchr::memchr3_iter(b'\'', b'"', b']', b).any(|at| match (b[at], b.get(at + 1)) {
        (b']', next) => next == Some(&b'('),
        (_, next) => matches!(next, Some(b')' | b',')),
    })
}

/// An identifier of code in snake case, digits allowed, or a constant's UPPER_SNAKE, two words
/// at least: `imdsv2_session_token`, `_convert_oauth2_credentials`,
/// `_IMDSV2_SESSION_TOKEN_TTL`.
fn is_snake_identifier(word: &str) -> bool {
    let all = |f: fn(&u8) -> bool| {
        word.bytes()
            .all(|c| f(&c) || c.is_ascii_digit() || c == b'_')
    };
    word.trim_matches('_').contains('_')
        && (all(u8::is_ascii_lowercase) || all(u8::is_ascii_uppercase))
}

/// A variable's name in snake case (`access_token`, `_session_token`): lowercase letters and
/// `_`, two words at least. A key has digits or capitals.
pub(super) fn is_snake_name(value: &str) -> bool {
    value.trim_matches('_').contains('_')
        && value.bytes().all(|c| c.is_ascii_lowercase() || c == b'_')
}

/// A docstring's type in parentheses after a parameter's name (`credentials
/// (google.auth.credentials.Signing): The credentials to`, `token (Optional(str)): ...`, or
/// one going on to the next line, `credentials (Union[a.B,`): names, dots, brackets,
/// parentheses and commas, closed by `)` or `):`, or open at a `,`.
fn is_docstring_type(value: &str) -> bool {
    let Some(inner) = value.strip_prefix('(').and_then(|v| {
        v.strip_suffix("):")
            .or_else(|| v.strip_suffix(')'))
            .or_else(|| v.strip_suffix(','))
    }) else {
        return false;
    };
    !inner.is_empty()
        && inner.starts_with(|c: char| c.is_ascii_alphabetic())
        && inner.bytes().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, b'.' | b'_' | b'[' | b']' | b'(' | b')' | b',' | b'|')
        })
        && inner.bytes().any(|c| c.is_ascii_lowercase())
        && !super::vendors::looks_random(inner.as_bytes())
}

/// A template's slot holding code: lowercase names, paths and calls
/// (`{self.scope(request)}']`, `{signature}'`); `{Xk9vQ2mLp7Rz}` is a value in braces.
fn is_code_slot(value: &str) -> bool {
    template_slot(value).is_some_and(|inner| {
        !inner.is_empty()
            && inner
                .bytes()
                .all(|c| c.is_ascii_lowercase() || matches!(c, b'_' | b'.' | b'(' | b')'))
    })
}

/// A template's slot standing for a value: `{}`, `{token}`, `{ token }`, `{self.api_key}`,
/// `{0}`, `{self.scope(request)}`, maybe closing its string (`{signature}'`).
fn is_template_slot(value: &str) -> bool {
    // Between a format string's own escapes (`"password = {}\n".format(pw)`) too.
    template_slot(value).is_some() || template_slot(trim_escapes(value).1).is_some()
}

/// What a template's slot holds ([`is_template_slot`]).
fn template_slot(value: &str) -> Option<&str> {
    // An f-string's slot may close its string and a list (`{self.scope(request)}']`).
    let value = value.trim_end_matches(['\'', '"', ']', ')', ',', ';']);
    value
        .strip_prefix('{')
        .and_then(|v| v.strip_suffix('}'))
        .map(|inner| inner.trim_matches(' '))
        .filter(|inner| {
            inner
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'(' | b')'))
        })
}

/// `Bearer {token}`, `Basic %s`, `token ${GH_TOKEN}`, `Bearer <token>`, `basic ***`: an authorization
/// scheme and a slot for its credential, not a credential. Read from the slot's first byte
/// first: this runs for every credential header's value.
fn is_scheme_and_slot(value: &str) -> bool {
    let Some((scheme, slot)) = value.split_once(' ') else {
        return false;
    };
    let slot = slot.trim_end_matches([',', ';', ')', '`', '"', '\'']);
    // `Bearer access_token`: a variable's name in a test or a doc, whose words are code's
    // (`ghp_a`, a token's prefix and a letter, is none).
    let word = is_snake_name(slot) && slot.split('_').any(is_code_word);
    (word
        || matches!(
            slot.as_bytes().first(),
            Some(b'{' | b'%' | b'$' | b'<' | b'*' | b'.')
        ))
        && !slot.contains(char::is_whitespace)
        && ["bearer", "basic", "token", "bot", "digest"]
            .iter()
            .any(|s| scheme.eq_ignore_ascii_case(s))
        && (word || is_template_slot(slot) || is_placeholder(slot) || is_shell_reference(slot))
}

/// Revision 3's code: a call or a member path of lowercase names, on one line.
fn is_call_or_path(rest: &str) -> bool {
    may_start_call_or_path(rest.as_bytes()) && call_or_path(rest)
}

/// Whether `rest` may start [`call_or_path`]'s code, read from its first word alone: a
/// path's first segment is a run of word characters (after an optional `&`) starting with a
/// letter or `_`, and the code is a call, a subscript or a path of more than one segment, so
/// the segment must end where the run does (nothing the pattern takes after a segment is a
/// word character) and be followed by `.`, `::`, `->`, `(` or `[`.
fn may_start_call_or_path(b: &[u8]) -> bool {
    let start = usize::from(b.first() == Some(&b'&'));
    let word = ident_len(&b[start..], usize::MAX);
    word > 0
        && is_segment(&b[start..start + word])
        && matches!(b.get(start + word), Some(b'.' | b':' | b'-' | b'(' | b'['))
}

/// Whether a run of word characters is one segment of [`call_or_path`]'s paths: lowercase
/// (`[a-z_][a-z0-9_]*`), UPPER_SNAKE (`[A-Z][A-Z0-9_]*`) or Capitalised words
/// (`[A-Z][a-z]{2,}(?:[A-Z][a-z]+)*[0-9]*`).
fn is_segment(w: &[u8]) -> bool {
    let Some((&first, rest)) = w.split_first() else {
        return false;
    };
    if first.is_ascii_lowercase() || first == b'_' {
        return rest
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_');
    }
    if !first.is_ascii_uppercase() {
        return false;
    }
    if rest
        .iter()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
    {
        return true;
    }
    capitalised(rest) || with_acronyms(rest)
}

/// After a segment's capital: words of a capital and lowercase letters, the first with two
/// or more, then digits (`[a-z]{2,}(?:[A-Z][a-z]+)*[0-9]*`).
fn capitalised(rest: &[u8]) -> bool {
    let letters = rest.len() - rest.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    let (body, _) = rest.split_at(letters);
    let first_word = body.iter().take_while(|c| c.is_ascii_lowercase()).count();
    if first_word < 2 {
        return false;
    }
    let mut i = first_word;
    while i < body.len() {
        if !body[i].is_ascii_uppercase() {
            return false;
        }
        let lower = body[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_lowercase())
            .count();
        if lower == 0 {
            return false;
        }
        i += 1 + lower;
    }
    true
}

/// After a segment's capital: a lowercase run of any length, then words, each one to five
/// capitals (or one to three digits and a capital or none) and three lowercase letters or
/// more, one word at least, then one to three capitals or digits or none
/// (`[a-z]*(?:(?:[A-Z]{1,5}|[0-9]{1,3}[A-Z]?)[a-z]{3,})+(?:[A-Z]{1,3}|[0-9]{1,3})?`):
/// `OAuth2Session`, `HTTPBasicAuth`, `OnDemandCredentials`, `X509Supplier`; not a random
/// run (`Xk9v`, `SUZCvk72Y3`, whose lowercase runs are short).
fn with_acronyms(rest: &[u8]) -> bool {
    let run = |from: usize, f: fn(&u8) -> bool| rest[from..].iter().take_while(|c| f(c)).count();
    let upper = |c: &u8| c.is_ascii_uppercase();
    let digit = |c: &u8| c.is_ascii_digit();
    let lower = |c: &u8| c.is_ascii_lowercase();
    let mut i = run(0, lower);
    let mut words = 0;
    loop {
        // A word's head: capitals, or digits and a capital or none.
        let caps = run(i, upper);
        let head = if caps > 0 {
            (caps <= 5).then_some(caps)
        } else {
            let digits = run(i, digit);
            let cap = usize::from(digits > 0 && rest.get(i + digits).is_some_and(upper));
            (1..=3).contains(&digits).then_some(digits + cap)
        };
        let tail = head.map_or(0, |h| run(i + h, lower));
        match head {
            Some(h) if tail >= 3 => {
                words += 1;
                i += h + tail;
            }
            _ => {
                // The end: one to three capitals or digits, or nothing.
                let end = rest.len() - i;
                let trailing =
                    end == 0 || (end <= 3 && (run(i, upper) == end || run(i, digit) == end));
                return words > 0 && trailing;
            }
        }
    }
}

/// [`is_call_or_path`] by its pattern.
fn call_or_path(rest: &str) -> bool {
    static CODE: LazyLock<Regex> = LazyLock::new(|| {
        // An attribute path's segments whatever their case (`Config.API_KEY`,
        // `process.env.CLIENT_SECRET`), as long as each is a word, not a random run
        // (`Xk9v`): lowercase, UPPER_SNAKE, Capitalised, or words with acronyms and digits
        // whose lowercase runs after the first are three letters or more (`OAuth2Session`,
        // `HTTPBasicAuth`, `OnDemandCredentials`, `X509Supplier`).
        let seg = r"(?:[a-z_][a-z0-9_]*|[A-Z][A-Z0-9_]*|[A-Z][a-z]{2,}(?:[A-Z][a-z]+)*[0-9]*|[A-Z][a-z]*(?:(?:[A-Z]{1,5}|[0-9]{1,3}[A-Z]?)[a-z]{3,})+(?:[A-Z]{1,3}|[0-9]{1,3})?)";
        // An argument's path: the same words, a capitalised one as short as `By`
        // (`find_element(By.ID, "password")`).
        let arg_seg = r"(?:[a-z_][a-z0-9_]*|[A-Z][A-Z0-9_]*|[A-Z][a-z]+(?:[A-Z][a-z]+)*[0-9]*)";
        let name = r"[a-z_][a-z0-9_]*";
        let arg_path =
            format!(r"&?(?:{name}(?:(?:\.|::|->){name})*|{arg_seg}(?:(?:\.|::|->){arg_seg})+)");
        let path = format!(r"&?{seg}(?:(?:\.|::|->){seg})*");
        let value = format!(r#"(?:{arg_path}|"[^"\n]*"|'[^'\n]*'|[0-9]+)"#);
        // A keyword argument too (`redirect_uri=redirect_uri`).
        let arg = format!(r"(?:[a-z_][a-z0-9_]*[ \t]*=[ \t]*)?{value}");
        // A call closed on its line, or one whose arguments go on after a `,` or its `(`
        // ends the line (`oauth.fetch_token(token_url,` then the next line).
        let call = format!(
            r"\((?:[ \t]*{arg}[ \t]*(?:,[ \t]*{arg}[ \t]*)*)?(?:\)|,?[ \t]*(?:\r?\n|$)|,[ \t]+[a-z_][a-z0-9_]*[ \t]*=)"
        );
        // A lookup: `env["API_KEY"]`, `credentials['SecretAccessKey']`, `keys[0]`.
        let index = format!(r"\[[ \t]*{value}[ \t]*\]");
        // A constant pattern; the unit tests run it.
        Regex::new(&format!(
            r"^(?P<p>{path})(?P<c>{call}|(?:{index})+)?(?:(?:\.|::){seg}(?:{call}|(?:{index})+)?)*[?;,)!]*(?:$|[\s])"
        ))
        .expect("code pattern is a valid regex")
    });
    CODE.captures(rest).is_some_and(|c| {
        c.name("c").is_some()
            || c.name("p")
                .is_some_and(|p| p.as_str().contains(['.', ':', '>']))
    })
}

/// The sources of a name service switch line (`/etc/nsswitch.conf`'s `passwd: files
/// systemd`, `shadow: files [NOTFOUND=return] sss`): every word a source or an action.
fn is_nss_sources(v: &str) -> bool {
    const SOURCES: &[&str] = &[
        "files",
        "systemd",
        "compat",
        "db",
        "dns",
        "ldap",
        "nis",
        "nisplus",
        "sss",
        "winbind",
        "mdns",
        "mdns4",
        "mdns4_minimal",
        "mdns6",
        "myhostname",
        "mymachines",
        "resolve",
        "hesiod",
        "extrausers",
        "cache",
        "altfiles",
    ];
    // The first word a source: most values fail at their first bytes.
    let first_len = v
        .bytes()
        .take(16)
        .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
        .count();
    if first_len == 0 || !SOURCES.contains(&&v[..first_len]) {
        return false;
    }
    v.split_ascii_whitespace().all(|w| {
        SOURCES.contains(&w) || (w.starts_with('[') && w.ends_with(']') && w.contains('='))
    })
}

/// `<` then a tag's name, a closing tag's `/`, or a template's `%`, `?` or `!`; or `<` as
/// HTML escapes it (`&lt;`, `&#x3C;`, `&#60;`: a page's `Password &#x3C;xxxxxxxx>`). Only
/// markup holding no text of its own: the text a tag wraps (`<code>Hunt3rPw9</code>`) is the
/// value ([`markup_text`]).
fn is_markup(v: &str) -> bool {
    let b = v.as_bytes();
    if !matches!(b.first(), Some(b'<' | b'&')) {
        return false;
    }
    ["&lt;", "&#x3c;", "&#60;"]
        .iter()
        .any(|e| starts_with_ignore_case(v, e))
        || markup_text(v) == Some(None)
}

/// For a value that starts with a tag: the text its tags wrap (`<b><i>…</i></b>`), or `None`
/// inside when it holds none (a tag left open where the value ends, `<span`, or tags alone).
/// `None` when the value starts with no tag.
fn markup_text(v: &str) -> Option<Option<&str>> {
    let b = v.as_bytes();
    let tag = |b: &[u8]| {
        b.len() >= 2
            && b[0] == b'<'
            && (b[1].is_ascii_alphabetic() || matches!(b[1], b'/' | b'%' | b'?' | b'!'))
    };
    if !tag(b) {
        return None;
    }
    let mut rest = v;
    while tag(rest.as_bytes()) {
        let Some(gt) = rest.find('>') else {
            return Some(None);
        };
        rest = &rest[gt + 1..];
    }
    let text = &rest[..rest.find('<').unwrap_or(rest.len())];
    Some((!text.is_empty()).then_some(text))
}

/// A stand-in for a value, written where a secret goes in docs and templates: `<token>`,
/// `<your-password-here>`, `...`, `xxxxxxxx`, `***`, `your-api-key-here`, `[trimmed 20 bytes]`.
fn is_placeholder(value: &str) -> bool {
    // Between a format string's own escapes (`"password = \t%s\n"`) too.
    let (_, inner) = trim_escapes(value);
    is_stand_in_text(value) || (inner.len() < value.len() && is_stand_in_text(inner))
}

/// [`is_placeholder`] of `value` as it is.
fn is_stand_in_text(value: &str) -> bool {
    let v = value.trim_end_matches([')', ',', ';']);
    // `<name>` and what closes round it (`passphrase: <string>]}`, `AUTH=<mechanism>.`).
    let angled = v.trim_end_matches([']', '}', '.', ':']);
    (angled.len() >= 3
        && angled.starts_with('<')
        && angled.ends_with('>')
        && !angled[1..angled.len() - 1].contains(['<', '>']))
        || is_nss_sources(v)
        // Markup where a value would be: an HTML tag (a highlighted code sample's `password =
        // <span class="hljs-keyword">new</span>`, `</code>`) or a template's tag (`<%= … %>`,
        // `<?= … ?>`), never a secret's first bytes.
        || is_markup(v)
        || (v.len() >= 3 && v.chars().all(|c| matches!(c, '.' | '…' | '*')))
        || (v.len() >= 3 && v.chars().all(|c| matches!(c, 'x' | 'X')))
        || ["your-", "your_", "[trimmed"]
            .iter()
            .any(|p| starts_with_ignore_case(v, p))
        // The words docs use for any value (`export AWS_ACCESS_KEY_ID=foo`).
        || ["foo", "bar", "baz", "qux", "quux", "foobar"]
            .iter()
            .any(|w| v.eq_ignore_ascii_case(w))
        // A value shown elided (`'ey...'`): too little of it left to be one.
        || v.strip_suffix("...")
            .or_else(|| v.strip_suffix('…'))
            .is_some_and(|seen| seen.chars().count() <= 8)
        || is_format_directive(v)
        // A CloudFormation function given its argument in one string (`!Ref 'DBPassword'`,
        // as a JSON or XML rendering of a template writes it): a reference to a parameter.
        || v.strip_prefix('!').is_some_and(|t| {
            let tag = t.split([' ', '\t']).next().unwrap_or_default();
            t.len() > tag.len() && CLOUDFORMATION_REFERENCES.contains(&tag)
        })
        // A value shown as already hidden (`'--- Token Redacted ---'`, `password: REDACTED`).
        // (A key's digit, most often among its first bytes, settles it before the search.)
        || ((8..=48).contains(&v.len())
            && !v.bytes().any(|c| c.is_ascii_digit())
            && v.as_bytes()
                .windows(8)
                .any(|w| w.eq_ignore_ascii_case(b"redacted")))
}

/// Whether `v` is two words or more, each a capital then small letters (a digit makes it a
/// password's: `Hunt3rPw9Secret`), the last a secret's word (`WrapToken`, `AwsCredentials`).
fn type_named_for_a_secret(v: &str) -> bool {
    const LAST: &[&str] = &[
        "Token",
        "Tokens",
        "Secret",
        "Secrets",
        "Key",
        "Keys",
        "Password",
        "Passwords",
        "Credential",
        "Credentials",
    ];
    let b = v.as_bytes();
    if b.len() > 64 || !b.first().is_some_and(u8::is_ascii_uppercase) {
        return false;
    }
    let mut words = 0;
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_uppercase() {
            return false;
        }
        let start = i;
        i += 1;
        let rest = b[i..].iter().take_while(|c| c.is_ascii_lowercase()).count();
        if rest == 0 {
            return false;
        }
        i += rest;
        words += 1;
        if i == b.len() {
            return words >= 2 && LAST.contains(&&v[start..]);
        }
    }
    false
}

/// `value` without the escapes of a string's layout around it (`\n`, `\r`, `\t` written as a
/// backslash and a letter), and how many bytes went from its start.
fn trim_escapes(value: &str) -> (usize, &str) {
    const ESCAPES: [&str; 3] = ["\\n", "\\t", "\\r"];
    // Most values hold no backslash.
    if memchr::memchr(b'\\', value.as_bytes()).is_none() {
        return (0, value);
    }
    let mut v = value;
    while let Some(rest) = ESCAPES.iter().find_map(|e| v.strip_prefix(e)) {
        v = rest;
    }
    let lead = value.len() - v.len();
    while let Some(rest) = ESCAPES.iter().find_map(|e| v.strip_suffix(e)) {
        v = rest;
    }
    (lead, v)
}

/// Whether `v` starts with `prefix` (ASCII), in any case.
fn starts_with_ignore_case(v: &str, prefix: &str) -> bool {
    v.as_bytes()
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// Whether `v` ends with `suffix` (ASCII), in any case.
fn ends_with_ignore_case(v: &str, suffix: &str) -> bool {
    v.len() >= suffix.len()
        && v.as_bytes()[v.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

const DIRECTIVE_PATTERN: &str =
    r"^%[-+ #0]*(?:[0-9]+|\*)?(?:\.(?:[0-9]+|\*))?[a-zA-Z](?:[^A-Za-z0-9]|$)";

/// A format string's placeholder where the value goes: `%s`, `%v`, `%-8d`
/// (`fmt.Sprintf("token: %v\nResponse: %s", ...)`), followed by nothing a value could
/// continue with.
fn is_format_directive(v: &str) -> bool {
    static DIRECTIVE: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern; the unit tests run it.
        Regex::new(DIRECTIVE_PATTERN).expect("format directive pattern is a valid regex")
    });
    v.starts_with('%') && DIRECTIVE.is_match(v)
}

/// Prose naming alternatives: `JSON/File/Stream)` in "a credential (JSON/File/Stream)": words
/// of letters joined by `/`.
fn is_word_list(value: &str) -> bool {
    let v = value
        .trim_start_matches('(')
        .trim_end_matches(['.', ',', ';', ':', ')']);
    // Counted as they come, without collecting them: the first that is not a word settles it.
    let mut parts = 0;
    for p in v.split('/') {
        if !(p.len() >= 2 && p.bytes().all(|b| b.is_ascii_alphabetic())) {
            return false;
        }
        parts += 1;
    }
    parts >= 2
}

/// Type annotations and literals that are never secrets (`setFirstTokenReceived: boolean`).
fn is_type_or_literal(value: &str) -> bool {
    // What ends a parameter's or a field's type: `password: string):` (a return type follows).
    let v = value.trim_end_matches([';', ',', '?', ')', ':']);
    let v = v.strip_suffix("[]").unwrap_or(v);
    const WORDS: &[&str] = &[
        "boolean",
        "bool",
        "string",
        "str",
        "&str",
        "number",
        "bigint",
        "symbol",
        "object",
        "any",
        "unknown",
        "void",
        "never",
        "null",
        "undefined",
        "none",
        "nil",
        "true",
        "false",
        "int",
        "float",
        "bytes",
        "dict",
        "list",
        "String",
        "usize",
        "u8",
        "u16",
        "u32",
        "u64",
        "i32",
        "i64",
        "f64",
        "Option",
        "Date",
        "Buffer",
        "datetime",
        "tuple",
        "callable",
        "mapping",
        "None",
        "True",
        "False",
        "Null",
        // A validation rule where a value would be (`password: required,` in a form's
        // schema, `password: optional`).
        "required",
        "optional",
        // C's types (`enum _TokenT : unsigned`) and a setting's switch (`#ssl_passphrase_…
        // = off`).
        "unsigned",
        "signed",
        "char",
        "long",
        "short",
        "double",
        "size_t",
        "off",
    ];
    // The longest of the words (`undefined`): a longer value is none of them.
    if v.len() <= 9
        && (WORDS.contains(&v)
            || WORDS
                .iter()
                .any(|w| w.eq_ignore_ascii_case(v) && w.len() > 3))
    {
        return true;
    }
    // Generic types: `Option<String>`, `Promise<string>`, `Vec<u8>`.
    if let Some(open) = v.find('<')
        && v.ends_with('>')
        && open >= 2
        && v[..open]
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b':')
        && v[..open].starts_with(|c: char| c.is_ascii_uppercase())
        && v[open + 1..]
            .starts_with(|c: char| c.is_ascii_uppercase() || c == '&' || c == 'u' || c == 's')
    {
        return true;
    }
    false
}

/// S1.5: token counts, UUID or git-hash ids named as such, package versions.
fn is_count_id_or_version(name: &str, value: &str, code: bool) -> bool {
    let ends = |suffix: &str| ends_with_ignore_case(name, suffix);
    // In code, what closes the list, the call or the sentence the value stands in is not part
    // of it: `f(max_tokens=4096, temperature=0.2)`, `"input_tokens": 1843021,` in printed
    // JSON. A JSON string under a secret's key is the whole value: `"42}"` is no count.
    let value = if code {
        value.trim_end_matches([',', ';', ')', ']', '}', '.'])
    } else {
        value
    };
    // `4096` or `1,843,021`.
    let mut groups = value.split(',');
    let digits = groups
        .next()
        .is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
        && groups.all(|g| g.len() == 3 && g.bytes().all(|b| b.is_ascii_digit()));
    // A duration or a size: `TOKEN_LIFETIME_SECONDS = 3600`, `token_ttl_ms = 500`.
    let measured = [
        "secs", "seconds", "_sec", "_ms", "millis", "minutes", "mins", "hours", "days", "bytes",
        "size", "retries", "attempts",
    ]
    .iter()
    .any(|w| ends(w));
    if measured && digits {
        return true;
    }
    if ends("tokens") || ends("count") || ends("_limit") {
        // A count, or an expression over a constant or a variable (`remainingTokens = MAX -
        // used`): names, not the mixed letters and digits of a credential.
        let constant = value.starts_with(|c: char| c.is_ascii_uppercase())
            && value
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        let variable = value.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        if digits || (code && (constant || variable)) {
            return true;
        }
    }
    // Not a secret's id: Vault's AppRole `secret_id`, Consul's `SecretID` and Nomad's
    // `Secret ID` are the credentials themselves, UUIDs as they are.
    let secret_id = name
        .bytes()
        .rev()
        .filter(u8::is_ascii_alphanumeric)
        .map(|b| b.to_ascii_lowercase())
        .take(8)
        .eq(b"secretid".iter().rev().copied());
    let named_id = !secret_id
        && ["id", "ids", "uuid", "hash", "sha", "commit"]
            .iter()
            .any(|w| ends(w));
    if named_id && (is_uuid(value) || is_hex(value, 7, 64)) {
        return true;
    }
    is_version(value)
}

fn is_uuid(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

fn is_hex(v: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_hexdigit())
}

const VERSION_PATTERN: &str = r"^(?:[\^~<>=v]{0,2}[0-9]+(?:\.[0-9x*]+){1,3}(?:[-+][0-9A-Za-z.\-]+)?|\*|latest|workspace:[\^~*]?)$";

/// `^2.1.0`, `~1.2`, `>=3.0.0-beta.1`, `v1.2.3`: a package version or range.
fn is_version(v: &str) -> bool {
    static VERSION: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern; the unit tests run it.
        Regex::new(VERSION_PATTERN).expect("version pattern is a valid regex")
    });
    // What the pattern can start with: a range operator, `v`, a digit, `*`, `latest` or
    // `workspace:`.
    let first = v.bytes().next();
    v.len() <= 40
        && first.is_some_and(|c| c.is_ascii_digit() || b"^~<>=v*lw".contains(&c))
        && VERSION.is_match(v)
}

/// Whether a value a secret's name labels is not a secret after all (S1.2, S1.5). `rest` is
/// the text from the value's start to the end of the string (a call's arguments may hold
/// quotes the value stops at).
pub(crate) fn value_exempt(name: &str, value: &str, rest: &str) -> bool {
    value_exempt_in(name, value, rest, true)
}

/// Whether `value` holds the marker: found from its `[`s, without building a substring
/// searcher for each value.
fn holds_marker(value: &str) -> bool {
    let b = value.as_bytes();
    memchr::memchr_iter(b'[', b).any(|at| b[at..].starts_with(MARKER.as_bytes()))
}

/// An absolute path of two segments or more, each of lowercase letters, digits, `.`, `_` or
/// `-` with a letter (`/dev/urandom`, `/run/secrets/db_password`); base64 has capitals.
fn is_lowercase_path(value: &str) -> bool {
    let Some(rest) = value.strip_prefix('/') else {
        return false;
    };
    let mut segments = 0;
    rest.split('/').all(|seg| {
        segments += 1;
        (1..=40).contains(&seg.len())
            && seg.bytes().any(|c| c.is_ascii_lowercase())
            && seg.bytes().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
            })
    }) && segments >= 2
}

/// Whether `phrase` holds a quote, the marker, then anything but that quote. (Not a marker
/// further inside the literal: `token "x [REDACTED] y": <secret>` must still label its
/// secret, though `token "token [REDACTED] [REDACTED] "x": …` then redacts more on a second
/// pass than on the first: more redacted, never less.)
fn quotes_a_marker_and_more(phrase: &str) -> bool {
    let b = phrase.as_bytes();
    memchr::memmem::find_iter(b, MARKER.as_bytes()).any(|at| {
        let quote = at.checked_sub(1).map(|q| b[q]);
        matches!(quote, Some(b'"' | b'\''))
            && b.get(at + MARKER.len()).is_some_and(|&c| Some(c) != quote)
    })
}

/// `#` then three, four, six or eight hex digits: a colour.
fn is_hex_colour(value: &str) -> bool {
    value.strip_prefix('#').is_some_and(|h| {
        matches!(h.len(), 3 | 4 | 6 | 8) && h.bytes().all(|c| c.is_ascii_hexdigit())
    })
}

/// A regular expression's piece where a value would be: a group or a class of its
/// metacharacters and escapes (`(.*)`, `(\S+)`, `[^\W\d]\w*`, `(?:.+)`), with no run of
/// three letters or digits outside an escape.
fn is_regex_fragment(value: &str) -> bool {
    let b = value.as_bytes();
    // A piece is a group or a class, so most values (which open neither) are settled in one
    // pass; an escape alone (`\sk-…`, a key after a stray backslash) is no pattern.
    if !b.iter().any(|c| matches!(c, b'[' | b'(')) {
        return false;
    }
    const PIECES: &[&str] = &[
        ".*", ".+", "\\w", "\\W", "\\d", "\\D", "\\s", "\\S", "[^", "(?",
    ];
    if b.len() < 3 || !PIECES.iter().any(|p| value.contains(p)) {
        return false;
    }
    let mut run = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                run = 0;
                i += 2;
                continue;
            }
            c if c.is_ascii_alphanumeric() => {
                run += 1;
                if run >= 3 {
                    return false;
                }
            }
            b'(' | b')' | b'[' | b']' | b'^' | b'$' | b'.' | b'*' | b'+' | b'?' | b'|' | b':'
            | b'{' | b'}' | b',' | b'-' | b'=' | b'<' | b'>' => run = 0,
            _ => return false,
        }
        i += 1;
    }
    matches!(b[0], b'(' | b'[' | b'^' | b'\\' | b'.')
}

/// One capitalised word of letters, three to twenty of them (`Name`, `Punctuation`).
fn is_capitalised_word(value: &str) -> bool {
    let b = value.as_bytes();
    (3..=20).contains(&b.len())
        && b[0].is_ascii_uppercase()
        && b[1..].iter().all(u8::is_ascii_lowercase)
}

/// [`value_exempt`] for a JSON string under a secret-named key (`code` false): data, so a
/// bare name there is not a variable.
pub(crate) fn value_exempt_in(name: &str, value: &str, rest: &str, code: bool) -> bool {
    // A value an HTML element closes (`<code>tokens: true</code>`): the text before the tag
    // is the value judged.
    if let Some(at) = memchr::memchr(b'<', value.as_bytes())
        && at > 0
        && value.as_bytes().get(at + 1) == Some(&b'/')
        && value
            .as_bytes()
            .get(at + 2)
            .is_some_and(u8::is_ascii_alphabetic)
    {
        return value_exempt_in(name, &value[..at], &rest[..at.min(rest.len())], code);
    }
    if value.is_empty() || value == MARKER {
        return true;
    }
    // A value in markup is the text its tags wrap (`Password: <code>Hunt3rPw9</code>`).
    // What closes a sentence or a bracket after a tag alone (`AUTH=<mechanism>.`,
    // `passphrase: <string>]}`) wraps nothing; any other text, symbols alone included
    // (`<code>#$%^&*()!</code>`), is judged as the value.
    if let Some(Some(text)) = markup_text(value) {
        return text.bytes().all(|c| {
            matches!(
                c,
                b'.' | b',' | b';' | b':' | b')' | b']' | b'}' | b' ' | b'\t'
            )
        }) || value_exempt_in(name, text, text, code);
    }
    // A format string's placeholder between the string's own escapes (`"token = \n%q\n"`,
    // `"password = \t%s\n"`, `"password = {}\n".format(pw)`): judged without them; a value
    // that is no stand-in without them is judged whole below.
    let (lead, inner) = trim_escapes(value);
    if inner.len() < value.len()
        && !inner.is_empty()
        && rest.is_char_boundary(lead)
        && value_exempt_in(name, inner, &rest[lead..], code)
    {
        return true;
    }
    // A type's or a class's name of words in capitals ending in a secret's word, one of a
    // list of such names (`tokens: WrapToken and MicToken`): a name of a thing. One alone
    // may be a password of words (`secret: SuperSecret,`, `DB_PASSWORD=MyDbPassword`).
    // (In text; a JSON string under a secret's key is the value whatever it says, as the
    // kcap CLI redacts it.)
    let bare = value.trim_end_matches([',', ';', ')', '.']);
    if code && type_named_for_a_secret(bare) && {
        let after = rest.get(bare.len()..).unwrap_or_default();
        let next = after
            .strip_prefix(" and ")
            .or_else(|| after.strip_prefix(" or "))
            .or_else(|| after.strip_prefix(", "))
            .or_else(|| after.strip_prefix('/'));
        next.is_some_and(|n| {
            type_named_for_a_secret(&n[..n.find([' ', ',', '.', ')']).unwrap_or(n.len())])
        })
    } {
        return true;
    }
    // Text that already held the marker: a value glued to it is still one (T2.1); the marker
    // and what a rule took with it (a comma, a short word) are not.
    if holds_marker(value) {
        return !super::glued_to_marker(value);
    }
    // A JSON string under a secret's key is data, the whole value: only revision 3's calls and
    // paths are code there; the structures of code (a bracket left open at the end of a line,
    // a literal) are code in a file.
    let code_value = if code {
        is_code(rest)
    } else {
        is_call_or_path(rest)
    };
    if is_shell_reference(value) || code_value || is_type_or_literal(value) {
        return true;
    }
    // In code, ended as an argument, a field or a statement is: a reference (`$name,`, a
    // macro's variable), a small number (`NoAuth = 0x00,`, `ERRORTOKEN = 58`), an object id
    // (`SERVER_AUTH = '1.3.6.1.5.5.7.3.1'`), an expression of Rust's (`Some(quic::Secrets::new(`,
    // `Box::new(…)`), a call through a dotted path whatever its arguments (`getpass.getpass("…"
    // % host)`, `re.compile(r"""`), or one in parentheses (`(self.password.encode('utf-8') if
    // …`).
    if code {
        let bare = value.trim_end_matches([',', ';', ')', ']']);
        let small_hex = bare.strip_prefix("0x").is_some_and(|h| {
            (1..=8).contains(&h.len()) && h.bytes().all(|c| c.is_ascii_hexdigit())
        });
        // `-1` too: a count's or an index's sentinel (`int inTokenLen = -1;`), also with C's
        // suffixes (`-1u`, `0UL`).
        let digits = bare.strip_prefix('-').unwrap_or(bare);
        let digits = digits.trim_end_matches(['u', 'U', 'l', 'L']);
        let small_number =
            (1..=3).contains(&digits.len()) && digits.bytes().all(|c| c.is_ascii_digit());
        let object_id = bare.len() >= 7
            && bare.bytes().filter(|&c| c == b'.').count() >= 3
            && bare.bytes().all(|c| c.is_ascii_digit() || c == b'.')
            && !bare.contains("..");
        if (bare.len() < value.len() && is_shell_reference(bare))
            // A template's slot (`{password}`, `{ password }`, `{NPM_TOKEN}`, `%(pw)s`); in a
            // JSON string under a secret's key, data, only `{{ … }}` is one.
            || is_password_slot(bare)
            || small_hex
            || small_number
            || object_id
            || is_rust_expression(rest)
            || is_dotted_call(rest)
            || rest.strip_prefix('(').is_some_and(is_dotted_call)
            // A type named in a docstring (`credentials: google.auth.credentials.Credentials.`).
            || (bare.ends_with('.') && is_call_or_path(bare.trim_end_matches('.')))
            // A regular expression's literal (`invalidTokenRegex = /[^^_…`) or a comment
            // before the value (`/** @type {const} */`).
            || ["/^", "/[", "/(", "/\\", "/*"].iter().any(|p| rest.starts_with(p))
            // A prompt asking for it (`'npm password: '`, `'New password: '`).
            || is_prompt(value)
            // `fetch`'s credentials mode.
            || (ends_with_ignore_case(name, "credentials")
                && matches!(bare.trim_matches(['\'', '"']), "include" | "omit" | "same-origin"))
        {
            return true;
        }
    }
    if is_count_id_or_version(name, value, code) || is_placeholder(value) {
        return true;
    }
    // Perl: the next argument (`my $token = shift;`), nothing (`\\undef`), the arguments
    // (`= @_`), a quoted regular expression (`qr/[\x21…]/`).
    if code
        && (matches!(
            value.trim_end_matches(';'),
            "shift" | "shift()" | "pop" | "undef" | "\\undef" | "@_"
        ) || ["qr/", "qr{", "qr(", "qr!"]
            .iter()
            .any(|p| value.starts_with(p)))
    {
        return true;
    }
    // A file's absolute path (`__token = "/dev/urandom"`, `token: /run/secrets/api`): where a
    // secret is kept, not the secret. Segments of lowercase words, two or more.
    if is_lowercase_path(value) {
        return true;
    }
    // A colour (`Token: '#ffffff'` in a syntax highlighter's style) and a regular expression
    // (`r"^aws_access_key_id = (.*)"`, `jsonnet_token = r'[^\W\d]\w*'`): no secret.
    if is_hex_colour(value) || is_regex_fragment(value) {
        return true;
    }
    if is_validation_rules(value) || (code && is_scheme_alone(value)) {
        return true;
    }
    if is_scheme_and_slot(value) {
        return true;
    }
    // In code only (a JSON string under a secret's key is data, the whole value): a docs
    // link, a template interpolating code, a table of names (`"refresh_token":
    // "refreshToken"`, the value the name in another case).
    if code
        && (is_plain_url(value)
            || is_interpolated(value)
            || same_name(name, value)
            || names_word(name, value)
            || is_code_variable(name, value, rest.starts_with(value))
            || is_code_slot(value)
            || is_python_code(name, value, rest))
    {
        return true;
    }
    if code && opens_a_structure(name, value) {
        return true;
    }
    // `ACCESS_KEY = 'AWS_ACCESS_KEY_ID'`, `awsSecurityTokenHeader = "x-amz-security-token"`:
    // the name of a variable, key or header, not a secret (T2.8).
    if super::code::is_name_of_thing(value) {
        return true;
    }
    let bare = value.trim_end_matches([')', ',', ';']);
    // `{password}`, `{tf.refreshToken}`, `{self.token}`: a variable or member in a composite
    // literal or a template placeholder.
    if let Some(inner) = bare.strip_prefix('{').and_then(|v| v.strip_suffix('}'))
        && code
        && !inner.is_empty()
        && (super::code::is_compound_identifier(inner)
            || inner.eq_ignore_ascii_case(name.rsplit(['.', '-', ':']).next().unwrap_or(name))
            || is_code(inner))
    {
        return true;
    }
    // `self._access_key = value`: what an attribute of `self` or `this` is given unquoted is an
    // expression; a literal would be quoted.
    let root = name.split(['.', ':']).next().unwrap_or("");
    if code
        && matches!(root, "self" | "this" | "cls")
        && name.len() > root.len()
        && super::code::is_word(bare)
    {
        return true;
    }
    // `api_key=api_key`, `token: token`, `self._token_cache = token_cache`,
    // `web_identity_token_loader=token_loader`: a variable named as the name, or its end.
    let last = name
        .rsplit(['.', '-', ':'])
        .next()
        .unwrap_or(name)
        .trim_matches(['"', '\''])
        .trim_start_matches('_');
    let (l, v) = (last.as_bytes(), bare.as_bytes());
    l.eq_ignore_ascii_case(v)
        || (l.len() > v.len()
            && l[l.len() - v.len()..].eq_ignore_ascii_case(v)
            && l[l.len() - v.len() - 1] == b'_'
            && super::code::is_word(bare))
}

/// The compiled program's size limit for a rule's pattern. The largest pattern needs well
/// under half of it; what the limit stops is a pattern whose compiling costs more than its
/// use (a counted repetition of a Unicode class, `[^\s]{6,4096}`, is that many copies of the
/// class: one such pattern took 36 ms to compile, paid by the first line holding its keyword).
pub(crate) const SIZE_LIMIT: usize = 1 << 20;

/// A rule's pattern compiled, within [`SIZE_LIMIT`].
pub(crate) fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(SIZE_LIMIT)
        .build()
}

/// The spans `rule` (its compiled pattern `re`) finds in `text`, each read from its
/// match's groups. The rules that match most where secrets are dense have groups that follow
/// from the match alone (`assignment` and `colon-pair`: [`name_and_last`]; the labelled rules,
/// the header, URL and prefixed-token rules: the functions named below; a pattern without
/// groups: the whole match): their matches come from the lazy DFA, without the capture engine
/// that costs most of such a text. The others go through [`refine`] of their captures.
pub(crate) fn find(rule: &Rule, re: &Regex, text: &str, out: &mut Vec<Range<usize>>) {
    if by_lines(rule) {
        find_by_lines(rule, re, text, out);
        return;
    }
    if reads_matches(rule, re) {
        if let Some(first) = next_match(rule, re, text, 0) {
            find_from(rule, re, text, first, out);
        }
        return;
    }
    // A Secret's data is read from the whole text whatever the match: once, however many
    // `kind: Secret` lines it holds (read for each, a text of them took the square of its
    // length).
    if rule.refine == Refine::KubernetesSecret {
        if re.is_match(text) {
            kubernetes_secret_data(text, out);
        }
        return;
    }
    // One memo of where cut values end, for the matches' cuts and their commands' looks.
    let mut look = Look::new(text);
    for caps in re.captures_iter(text) {
        let (start, end) = caps.get(0).map_or((0, 0), |m| (m.start(), m.end()));
        let (near, from) = (near_match(rule, text, end), out.len());
        refine(rule, &caps, near, out);
        look.stops.widen(text, near.len(), &mut out[from..]);
        if rule.refine == Refine::Flag
            && let Some(value) = out[from..].last()
        {
            let after = value.end;
            more_flags(re, text, start, after, &mut look, out);
        }
    }
}

/// How many more of a rule's flags [`more_flags`] reads after one command's first, and how
/// far past each it looks.
const MORE_FLAGS: usize = 8;
const MORE_FLAGS_BYTES: usize = 4096;

/// What [`more_flags`] may still read in one text, and where the values it cut end.
struct Look {
    /// Bytes: twice the text (a text made of commands, each with its flag, is read again a
    /// bounded number of times, never once per command).
    budget: usize,
    /// Where the values cut by a look, or by [`near_match`], end.
    stops: Stops,
}

impl Look {
    fn new(text: &str) -> Look {
        Look {
            budget: 2 * text.len() + 4 * MORE_FLAGS_BYTES,
            stops: Stops::default(),
        }
    }
}

/// The rest of a command whose first flag `rule` took (its match at `start`, the value ending
/// at `after`): a command given two of its flags (`ssh-keygen -P old -N new`, `ldappasswd -w
/// bind -s new`) had only the first taken, as the pattern names the command once and the next
/// search starts past it. So the rest of the line is searched again with the command's word
/// (the first word of the match) put before it. Only for a match that starts with a command's
/// name: a pattern that starts at a blank (a flag on any command) finds every flag by itself,
/// and one that starts with code (`auth=(`) names no command. Reads at most `look`'s budget
/// of bytes, less what it read.
fn more_flags(
    re: &Regex,
    text: &str,
    start: usize,
    mut after: usize,
    look: &mut Look,
    out: &mut Vec<Range<usize>>,
) {
    let b = text.as_bytes();
    if !b.get(start).is_some_and(u8::is_ascii_alphanumeric) {
        return;
    }
    // A command's name is a short word (what is read is bounded, on a line of any length).
    let Some(word_len) = b[start..b.len().min(start + 64)]
        .iter()
        .position(u8::is_ascii_whitespace)
    else {
        return;
    };
    let word = &text[start..start + word_len];
    // A command's name, not code that a pattern starts with (`auth=('u',`).
    if !word
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return;
    }
    let shift = word.len() + 1;
    for _ in 0..MORE_FLAGS {
        // A quoted value's closing quote is not read again as another value's opening one
        // (`ConvertTo-SecureString 'X' -AsPlainText` read on from the quote took the flags).
        if b.get(after).is_some_and(|&c| is_quote(Some(c))) {
            after += 1;
        }
        if after >= b.len() || !text.is_char_boundary(after) {
            return;
        }
        // To the line's end, at most `MORE_FLAGS_BYTES` on: the line is never searched to
        // its end for each command. What may be read is paid for before it is read.
        let limit = b.len().min(after + MORE_FLAGS_BYTES);
        let Some(left) = look.budget.checked_sub(shift + limit - after) else {
            return;
        };
        look.budget = left;
        let scan = &b[after..limit];
        #[cfg(test)]
        MORE_FLAGS_READ.with(|n| n.set(n.get() + scan.len()));
        let mut end = memchr::memchr(b'\n', scan).map_or(limit, |i| after + i);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end <= after {
            return;
        }
        let hay = format!("{word} {}", &text[after..end]);
        let Some(caps) = re.captures(&hay) else {
            return;
        };
        let mut found = Vec::new();
        refine_flag(&caps, &hay, &mut found);
        let mut spans: Vec<Range<usize>> = found
            .into_iter()
            .filter(|s| s.start >= shift && !s.is_empty())
            .map(|s| after + s.start - shift..after + s.end - shift)
            .collect();
        // A value the look's end cut goes on to its end (found once for each value).
        look.stops.widen(text, end, &mut spans);
        match spans.iter().map(|s| s.end).max() {
            Some(next) if next > after => after = next,
            _ => return,
        }
        out.extend(spans);
    }
}

/// The value a [`Refine::Flag`] rule's captures name: its group `s`, opened by the quote in
/// group `q` if any.
fn refine_flag(caps: &regex::Captures<'_>, text: &str, out: &mut Vec<Range<usize>>) {
    let Some(s) = caps.name("s") else { return };
    // `curl-user`'s password may open its own quote after the colon (`q2`), which wins.
    let first = |name: &str| caps.name(name).and_then(|q| q.as_str().bytes().next());
    let quote = first("q2").or_else(|| first("q"));
    flag(text, s.start(), quote, out);
}

/// Whether the word at `at` of `text` (up to a blank or a quote) has fewer than `n`
/// characters, a `\uXXXX` escape counting as one.
fn shorter_than(text: &str, at: usize, n: usize) -> bool {
    let rest = &text[at..];
    let word = &rest[..rest
        .find([' ', '\t', '\n', '\r', '"', '\''])
        .unwrap_or(rest.len())];
    word.chars()
        .count()
        .saturating_sub(5 * word.matches("\\u").count())
        < n
}

/// Whether `text` at `at` holds a word of letters (a `\uXXXX` escape counts as one), then
/// blanks and another word starting with a small letter, or a full stop: a sentence, not a
/// value.
fn word_then_word(text: &str, at: usize) -> bool {
    let rest = &text[at..];
    let end = rest.find([' ', '\t', '\n', '\r']).unwrap_or(rest.len());
    // The string the word is in may close after it (`-destkeypass specified."`).
    let word = rest[..end].trim_end_matches(['"', '\'', '`', ')']);
    let sentence_end = word.ends_with('.');
    let word = word.trim_end_matches(['.', ',', ';', ':']);
    let mut letters = 0;
    let mut chars = word.char_indices();
    while let Some((i, c)) = chars.next() {
        if c == '\\' && word[i..].starts_with("\\u") && word.len() >= i + 6 {
            // The escape's `u` and four hex digits.
            chars.nth(4);
        } else if !c.is_alphabetic() {
            return false;
        }
        letters += 1;
    }
    let next = rest[end..].trim_start_matches([' ', '\t']);
    // Or a word that ends the sentence (`Please retry with -destkeypass specified.`).
    letters > 0
        && (sentence_end
            || (next.chars().next().is_some_and(char::is_lowercase)
                && next.chars().nth(1).is_some_and(char::is_alphabetic)))
}

/// How far past its match a rule reads to judge a value: a value is judged by its first
/// kilobyte, and taken whole ([`Stops::widen`]). Each match read to the end of its line made a
/// line of values inside values (`token=token=…`, a minified bundle's `a.secret=b.token=…`)
/// cost the square of its length: a megabyte took a minute.
const NEAR_MATCH: usize = 1024;

/// `text` up to [`NEAR_MATCH`] bytes past a match of `rule` ending at `end` (at a character's
/// start). A rule on the whole text (a Secret manifest's data, a private key's body) reads its
/// text whole: what it takes is not a value after its match.
fn near_match<'t>(rule: &Rule, text: &'t str, end: usize) -> &'t str {
    let mut cut = end.saturating_add(NEAR_MATCH);
    if rule.multiline || cut >= text.len() {
        return text;
    }
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// Where values cut short by [`near_match`] end in the whole text, remembered for the next
/// match: the values inside one long value all end where it does, and are not read to there
/// again.
#[derive(Default)]
struct Stops {
    /// For each kind of value (unquoted, or the quote that opened it): the last cut it was
    /// read from and where that value ended.
    seen: [Option<(usize, usize)>; 4],
}

impl Stops {
    /// `spans`, found in `text[..cut]`: each that ends at the cut, where the text goes on,
    /// goes on to where its value ends: an unquoted value at a blank or a quote (as
    /// [`value_extent`] ends it), a quoted one at its quote or the line's end. A value judged
    /// a secret by its first kilobyte is never shipped in part.
    fn widen(&mut self, text: &str, cut: usize, spans: &mut [Range<usize>]) {
        if cut >= text.len() {
            return;
        }
        let b = text.as_bytes();
        for span in spans.iter_mut().filter(|s| s.end == cut) {
            let quote = span
                .start
                .checked_sub(1)
                .map(|i| b[i])
                .filter(|q| matches!(q, b'"' | b'\'' | b'`'));
            let kind = match quote {
                None => 0,
                Some(b'"') => 1,
                Some(b'\'') => 2,
                Some(_) => 3,
            };
            let stop = match self.seen[kind] {
                Some((from, stop)) if from <= cut && cut <= stop => stop,
                _ => {
                    // A quote after a backslash is escaped (read as one even after an escaped
                    // backslash: a few bytes too many, never too few).
                    let ends = |i: usize| match quote {
                        None => b[i].is_ascii_whitespace() || matches!(b[i], b'"' | b'`'),
                        Some(q) => {
                            (b[i] == q && b[i - 1] != b'\\') || b[i] == b'\n' || b[i] == b'\r'
                        }
                    };
                    let stop = (cut..b.len()).find(|&i| ends(i)).unwrap_or(b.len());
                    self.seen[kind] = Some((cut, stop));
                    stop
                }
            };
            span.end = stop;
        }
    }
}

/// `spans` found in `text[..cut]` (a rule's window), each that ends at the cut where the text
/// goes on, taken on to where its value ends ([`Stops::widen`]).
pub(crate) fn widen_cut(text: &str, cut: usize, spans: &mut [Range<usize>]) {
    Stops::default().widen(text, cut, spans);
}

/// Whether [`find`] runs `rule` only on the lines a cheap search names ([`find_by_lines`]):
/// the two rules on a whole text whose every match is one line, or two, that a byte search
/// finds. Searching a whole text with their patterns was a sixth of the instructions of
/// shipping a generated rollout (docs/redaction.md, "Speed").
pub(crate) fn by_lines(rule: &Rule) -> bool {
    matches!(rule.refine, Refine::YamlNextLine | Refine::TableColumn)
}

/// [`find`] for a rule [`by_lines`]: its pattern tried only where a match can start, with
/// the text from there on (whose start is a line's, as `(?m)^` needs) for its refinement.
/// The same matches as a search of the whole text, since no match of either pattern can
/// start inside another's:
///
/// - `yaml-next-line` matches one line and its line break, and that line holds a colon
///   followed by blanks and then the line's end, `|`, `>` or `#` ([`bare_colon_at`]): only
///   the lines holding such a colon are tried, each alone (with its line break).
/// - `table-column` matches a header line and the separator line under it, which holds three
///   dashes in a row and no letter (so it never starts a match itself): only the lines
///   holding `---` are tried as separators, with the line before them.
///
/// Answers how many lines it looked for (each read to its ends once), for the test that holds
/// a long line to one look.
fn find_by_lines(rule: &Rule, re: &Regex, text: &str, out: &mut Vec<Range<usize>>) -> usize {
    let b = text.as_bytes();
    let mut looked = 0;
    let line_start = |at: usize| memchr::memrchr(b'\n', &b[..at]).map_or(0, |i| i + 1);
    let try_at = |start: usize, end: usize, out: &mut Vec<Range<usize>>| {
        if !re.is_match(&text[start..end]) {
            return;
        }
        let rest = &text[start..];
        if let Some(caps) = re.captures(rest) {
            let from = out.len();
            refine(rule, &caps, rest, out);
            for span in &mut out[from..] {
                *span = span.start + start..span.end + start;
            }
        }
    };
    match rule.refine {
        // Each line is tried once and read once: an occurrence inside the line tried last is
        // passed over before its line is looked for (a line of a million `: |` or `---` would
        // otherwise be searched end to end for each).
        Refine::YamlNextLine => {
            let mut tried = 0;
            super::runs::any_at(b, [b':'], |at| {
                if at < tried || !bare_colon_at(b, at) {
                    return false;
                }
                // The pattern ends with the line break: a last line without one never matches.
                let Some(end) = memchr::memchr(b'\n', &b[at..]) else {
                    return true;
                };
                tried = at + end + 1;
                looked += 1;
                try_at(line_start(at), tried, out);
                false
            });
        }
        Refine::TableColumn => {
            let mut tables = Tables::default();
            let mut tried = 0;
            for at in super::finders::THREE_DASHES.find_iter(b) {
                if at < tried {
                    continue;
                }
                let end = memchr::memchr(b'\n', &b[at..]).map_or(b.len(), |e| at + e);
                tried = end;
                looked += 1;
                let sep = line_start(at);
                if sep == 0 {
                    continue;
                }
                let start = line_start(sep - 1);
                if !re.is_match(&text[start..end]) {
                    continue;
                }
                let rest = &text[start..];
                if let Some(caps) = re.captures(rest) {
                    let from = out.len();
                    table_column(&caps, rest, out, &mut tables, start);
                    for span in &mut out[from..] {
                        *span = span.start + start..span.end + start;
                    }
                }
            }
        }
        _ => {
            for caps in re.captures_iter(text) {
                refine(rule, &caps, text, out);
            }
        }
    }
    looked
}

/// Whether [`find`] reads `rule`'s spans from its matches alone (see [`spans_of_match`]).
pub(crate) fn reads_matches(rule: &Rule, re: &Regex) -> bool {
    label_value(rule).is_some()
        || matches!(rule.refine, Refine::Assign | Refine::Colon)
        || matches!(
            rule.id,
            "labelled-is"
                | "url-query"
                | "header"
                | "url-userinfo"
                | "labelled"
                | "password-is"
                | "url-token-user"
                | "kcap-vendor-token"
                | "curl-user"
                | "printed-secret"
        )
        || (rule.refine == Refine::Group && re.captures_len() == 1)
}

/// The spans of a rule [`reads_matches`] from its match `first` in `text` and every match
/// after it: a caller that found `first` (to learn whether there is any) need not search
/// again.
pub(crate) fn find_from(
    rule: &Rule,
    re: &Regex,
    text: &str,
    first: Range<usize>,
    out: &mut Vec<Range<usize>>,
) {
    let mut next = Some(first);
    let mut stops = Stops::default();
    while let Some(m) = next.take() {
        // These patterns never match empty text; were one to, the search would go on after
        // the next character, as `find_iter` does.
        let at = if m.is_empty() {
            m.end + text[m.end..].chars().next().map_or(1, char::len_utf8)
        } else {
            m.end
        };
        let (near, from) = (near_match(rule, text, m.end), out.len());
        spans_of_match(rule, re, near, m, out);
        stops.widen(text, near.len(), &mut out[from..]);
        if at <= text.len() {
            next = next_match(rule, re, text, at);
        }
    }
}

/// The most bytes a value of `printed-secret` holds, and how far past its command's line the
/// rule reads: twice that, so any leading blanks and the value fit.
const PRINTED_MAX: usize = 4096;
const PRINTED_REACH: usize = 8192;

/// The first match of `rule` (its compiled pattern `re`) in `text` at or after `at`, as
/// `re.find_at` finds it. `assignment` and `colon-pair`, which run on every line holding a
/// name word, are read by hand ([`name_pair`]); the others by their pattern.
pub(crate) fn next_match(rule: &Rule, re: &Regex, text: &str, at: usize) -> Option<Range<usize>> {
    match rule.id {
        "assignment" => name_pair(text, at, b'='),
        "colon-pair" => name_pair(text, at, b':'),
        _ => re.find_at(text, at).map(|m| m.range()),
    }
}

/// The first match at or after `from` of `assignment` (`sep` `=`:
/// `NAME["']?[ \t]*(?::|\?|\|\||\?\?)?=[ \t]*[^\s=>]`, `:=` for Go and Pascal, `?=`, `||=`,
/// `??=` for a default) or `colon-pair` (`sep` `:`:
/// `NAME["']?[ \t]*:(?:[ \t]+\S|["'])`), `NAME` a run of name characters holding a name
/// word. Each separator has one candidate: the name must end where the quote or blanks
/// before the separator start (no name character can follow it), and it starts where the
/// run of name characters does (the leading `[...]*` takes every one; not before `from`).
/// Nothing after a name may be taken back for another reading, so a separator whose
/// candidate fails has no match, and candidates start in the order of their separators.
fn name_pair(text: &str, from: usize, sep: u8) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let blank = |c: u8| c == b' ' || c == b'\t';
    for q in memchr::memchr_iter(sep, b.get(from..)?).map(|i| from + i) {
        let value_end = if sep == b'=' {
            let v = q + 1 + b[q + 1..].iter().take_while(|&&c| blank(c)).count();
            text[v..]
                .chars()
                .next()
                .filter(|&c| !c.is_whitespace() && c != '=' && c != '>')
                .map(|c| v + c.len_utf8())
        } else {
            match b.get(q + 1) {
                Some(b'"' | b'\'') => Some(q + 2),
                Some(&c) if blank(c) => {
                    let v = q + 1 + b[q + 1..].iter().take_while(|&&c| blank(c)).count();
                    text[v..]
                        .chars()
                        .next()
                        .filter(|c| !c.is_whitespace())
                        .map(|c| v + c.len_utf8())
                }
                _ => None,
            }
        };
        let Some(end) = value_end else { continue };
        // Go's and Pascal's `:=`: the colon sits right before the `=`; Ruby's `||=`, Make's
        // `?=` and JavaScript's `??=` assign a default the same way.
        let mut e = q;
        if sep == b'=' && e > from && b[e - 1] == b':' {
            e -= 1;
        } else if sep == b'=' {
            let before = &b[from..e];
            if before.ends_with(b"||") || before.ends_with(b"??") {
                e -= 2;
            } else if before.ends_with(b"?") {
                e -= 1;
            }
        }
        e -= b[from..e].iter().rev().take_while(|&&c| blank(c)).count();
        if e > from && matches!(b[e - 1], b'"' | b'\'') {
            e -= 1;
        }
        let start = name_run_start(b, from, e);
        if start < e && holds_name_word(&text[start..e]) {
            return Some(start..end);
        }
    }
    None
}

/// Whether a quoted literal opens at `at` and is the whole value: its closing quote is
/// followed by a `,` or `)` or ends the line (Perl's `password => 'x',`).
fn arrow_literal(b: &[u8], at: usize) -> bool {
    let Some(&q) = b.get(at).filter(|&&q| matches!(q, b'"' | b'\'')) else {
        return false;
    };
    let end = closing_quote(b, at + 1, q);
    if b.get(end) != Some(&q) {
        return false;
    }
    let rest = &b[end + 1..];
    let next = rest.iter().find(|&&c| c != b' ' && c != b'\t');
    matches!(next, None | Some(b',' | b')' | b';' | b'\n' | b'\r'))
}

/// `password = ssl_key_password`, `ssl["password"] = ssl_key_password`: an unquoted value
/// that is a variable of lowercase words whose last word is the name's.
fn named_after(name: &str, value: &str) -> bool {
    let last = name.rsplit(['.', '-', ':', '_']).next().unwrap_or(name);
    let (l, v) = (last.as_bytes(), value.as_bytes());
    !l.is_empty()
        && v.len() > l.len() + 1
        && v[v.len() - l.len()..].eq_ignore_ascii_case(l)
        && v[v.len() - l.len() - 1] == b'_'
        && v.iter().all(|c| c.is_ascii_lowercase() || *c == b'_')
}

/// An authorization scheme alone (`'Basic '`, `"Bearer "`): the credential is joined to it
/// after (`'Basic ' . base64_encode(…)`), and goes by its own rules.
fn is_scheme_alone(value: &str) -> bool {
    let v = value.trim();
    v.len() < value.len()
        && ["basic", "bearer", "token", "digest", "negotiate"]
            .iter()
            .any(|s| v.eq_ignore_ascii_case(s))
}

/// A validator's rules joined by `|` (Laravel's `'password' => 'required|string|min:8'`):
/// lowercase words, each with its `:` arguments, two or more.
fn is_validation_rules(value: &str) -> bool {
    let mut parts = 0;
    for part in value.split('|') {
        let (word, args) = part.split_once(':').unwrap_or((part, ""));
        if word.is_empty()
            || !word.bytes().all(|c| c.is_ascii_lowercase() || c == b'_')
            || args.bytes().any(|c| c.is_ascii_whitespace())
        {
            return false;
        }
        parts += 1;
    }
    parts >= 2
}

/// Where the run of name characters (`[A-Za-z0-9_.-]` and, as `(?i)` widens it, the Kelvin
/// sign and the long s) ending at `end` starts, not before `from`.
fn name_run_start(b: &[u8], from: usize, end: usize) -> usize {
    let mut i = end;
    while i > from {
        let c = b[i - 1];
        if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-') {
            i -= 1;
        } else if i - from >= 2 && b[i - 2..i] == [0xC5, 0xBF] {
            i -= 2;
        } else if i - from >= 3 && b[i - 3..i] == [0xE2, 0x84, 0xAA] {
            i -= 3;
        } else {
            break;
        }
    }
    i
}

/// The spans one match `m` of a rule [`reads_matches`] gives.
fn spans_of_match(
    rule: &Rule,
    re: &Regex,
    text: &str,
    m: Range<usize>,
    out: &mut Vec<Range<usize>>,
) {
    if let Some(value) = label_value(rule) {
        label(text, m.start, value(text, m.clone()), out);
        return;
    }
    match rule.refine {
        Refine::Assign => {
            let (n, last) = name_and_last(text, m);
            assign(text, n, last.start, out);
            return;
        }
        Refine::Colon => {
            let (n, last) = name_and_last(text, m);
            colon(text, n, last, out);
            return;
        }
        _ => {}
    }
    match rule.id {
        "labelled-is" => {
            if let Some(s) = labelled_is_value(text, m.clone()) {
                label(text, m.start, s, out);
                return;
            }
        }
        "url-query" => {
            let (n, s) = query_groups(text, m);
            query(text, n, s, out);
            return;
        }
        "header" => {
            let (s, lq, cq) = header_groups(text, m);
            header_value(text, s, lq, cq, out);
            return;
        }
        "printed-secret" => {
            // At most `PRINTED_MAX` bytes, and ended before the end of what the rule reads
            // could have cut it (less a character's bytes: the window's end is moved back to
            // a character's start). A longer word is no printed secret, and one the window
            // cut would be redacted in part, its rest shipped.
            let command_end = memchr::memchr(b'\n', &text.as_bytes()[m.start..])
                .map_or(text.len(), |i| m.start + i);
            if let Some(s) = re.captures_at(text, m.start).and_then(|c| c.name("s"))
                && s.len() <= PRINTED_MAX
                && s.end() < command_end + PRINTED_REACH - 3
            {
                out.push(s.range());
            }
            return;
        }
        "url-userinfo" => {
            let s = userinfo_value(text, m);
            if !s.is_empty() && !is_userinfo_stand_in(&text[s.clone()]) {
                out.push(s);
            }
            return;
        }
        "labelled" => {
            label(text, m.start, after_first_blanks(text, m.clone()), out);
            return;
        }
        "password-is" => {
            prose(text, after_last_quote_or_blank(text, m), out);
            return;
        }
        "url-token-user" => {
            url_token(text, url_token_user(text, m), out);
            return;
        }
        "kcap-vendor-token" => {
            token(text, m.clone(), vendor_token_body(text, m), out);
            return;
        }
        "curl-user" => {
            let (s, q) = curl_user_groups(text, m);
            flag(text, s, q, out);
            return;
        }
        // A pattern without groups: the span is the whole match.
        _ if rule.refine == Refine::Group && re.captures_len() == 1 => {
            if !m.is_empty() {
                out.push(m);
            }
            return;
        }
        _ => {}
    }
    // Not reached (a unit test checks every match of the rules above): the capture engine
    // from the match's start finds this same match.
    if let Some(caps) = re.captures_at(text, m.start) {
        refine(rule, &caps, text, out);
    }
}

/// The groups of an `assignment` or `colon-pair` match (`NAME["']?[ \t]*=[ \t]*V`,
/// `NAME["']?[ \t]*:[ \t]+V` or `NAME["']?[ \t]*:Q`): the name `n` is the match's leading name
/// characters (`[A-Za-z0-9_.-]`, which the pattern's case-insensitivity
/// widens by the two characters that fold to an ASCII letter, the Kelvin sign and the long s;
/// nothing that may follow the name is one, so the greedy group ends where they stop), and the
/// value's first character (`s`, or the quote `q`) is the match's last character (the
/// pattern's last item is that one character).
fn name_and_last(text: &str, m: Range<usize>) -> (Range<usize>, Range<usize>) {
    let name: usize = text[m.clone()]
        .chars()
        .take_while(|&c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '\u{212A}' | '\u{17F}')
        })
        .map(char::len_utf8)
        .sum();
    let last = text[m.clone()]
        .chars()
        .next_back()
        .map_or(0, char::len_utf8);
    (m.start..m.start + name, m.end - last..m.end)
}

/// The groups `n` and `s` of a `url-query` match (`(?:[?&]|\\u0026)N=S`): the name runs
/// from after the opening `?`, `&` or six-byte `\u0026` to the first `=` (the name's
/// characters hold none), the value from after it to the match's end.
fn query_groups(text: &str, m: Range<usize>) -> (Range<usize>, Range<usize>) {
    let b = text.as_bytes();
    let open = if matches!(b[m.start], b'?' | b'&') {
        1
    } else {
        "\\u0026".len()
    };
    let from = (m.start + open).min(m.end);
    let eq = memchr::memchr(b'=', &b[from..m.end]).map_or(m.end, |at| from + at);
    (from..eq, (eq + 1).min(m.end)..m.end)
}

/// The groups of a `header` match (`Q? NAME Q? [ \t]*:[ \t]* S`): where the one character
/// `s` starts (the match's last character), the quote `lq` the match starts with, if any (a
/// name starts with a letter or digit), and whether a quote `cq` ends the name (the character
/// before the blanks, colon and blanks before `s`; a name holds no quote).
fn header_groups(text: &str, m: Range<usize>) -> (usize, Option<u8>, bool) {
    let b = text.as_bytes();
    let last = text[m.clone()]
        .chars()
        .next_back()
        .map_or(0, char::len_utf8);
    let s = m.end - last;
    let lq = matches!(b[m.start], b'"' | b'\'').then_some(b[m.start]);
    let blank = |c: &&u8| **c == b' ' || **c == b'\t';
    let mut at = s - b[m.start..s].iter().rev().take_while(blank).count();
    // The colon.
    at = at.saturating_sub(1).max(m.start);
    at -= b[m.start..at].iter().rev().take_while(blank).count();
    let cq = at > m.start && matches!(b[at - 1], b'"' | b'\'');
    (s, lq, cq)
}

/// The group `s` of a `url-userinfo` match (`SCHEME://USER:S@`): from after the match's second
/// colon (a scheme and a user name hold none) to the `@` that ends it.
fn userinfo_value(text: &str, m: Range<usize>) -> Range<usize> {
    let b = &text.as_bytes()[m.clone()];
    let colon = memchr::memchr_iter(b':', b)
        .nth(1)
        .map_or(b.len(), |at| at + 1);
    let end = b.len().saturating_sub(1).max(colon);
    m.start + colon..m.start + end
}

/// A URL's password written as its docs write one (`https://username:password@proxy.com`,
/// `https://***:***@host`, `https://user:<password>@host`): a stand-in, not a password.
fn is_userinfo_stand_in(password: &str) -> bool {
    ["password", "passwd", "pass", "pwd", "secret", "token"]
        .iter()
        .any(|w| password.eq_ignore_ascii_case(w))
        || is_placeholder(password)
        || is_password_slot(password)
}

/// "the password is X" (rule `password-is`): X, unless it is a word.
fn prose(text: &str, s: Range<usize>, out: &mut Vec<Range<usize>>) {
    let word = text[s.clone()].trim_end_matches(['.', '!', '?', ':', ')']);
    if !(word.len() < 16 && word.chars().all(char::is_alphabetic)) {
        out.push(s);
    }
}

/// A prefixed token (rule `kcap-vendor-token`), the whole match `m`, unless its body `b` is
/// lowercase words joined by `_` (`npm_config_cache`, `npm_package_version`: a name).
fn token(text: &str, m: Range<usize>, b: Option<Range<usize>>, out: &mut Vec<Range<usize>>) {
    let random = b.is_none_or(|b| {
        let b = &text[b];
        !(b.contains('_') && b.bytes().all(|c| c.is_ascii_lowercase() || c == b'_'))
    });
    if random {
        out.push(m);
    }
}

/// A token as a URL's user name (rule `url-token-user`): `s` if it has two digits and four
/// letters or more.
fn url_token(text: &str, s: Range<usize>, out: &mut Vec<Range<usize>>) {
    let v = text[s.clone()].as_bytes();
    let digits = v.iter().filter(|b| b.is_ascii_digit()).count();
    let letters = v.iter().filter(|b| b.is_ascii_alphabetic()).count();
    if digits >= 2 && letters >= 4 {
        out.push(s);
    }
}

/// The group `s` of a `labelled` match (`\bKEYWORD\b[ \t]+S`): after the match's first run of
/// blanks (a keyword holds none, and the value no whitespace) to its end.
fn after_first_blanks(text: &str, m: Range<usize>) -> Range<usize> {
    let b = &text.as_bytes()[m.clone()];
    let blank = |c: &u8| *c == b' ' || *c == b'\t';
    let first = b.iter().position(blank).unwrap_or(b.len());
    let after = first + b[first..].iter().take_while(|c| blank(c)).count();
    m.start + after..m.end
}

/// The group `s` of a `password-is` match (`WORD[ \t]+(?:is|was)[ \t]+["']?S`): after the
/// match's last blank or quote (what comes before the value ends with one, and the value
/// holds neither) to its end.
fn after_last_quote_or_blank(text: &str, m: Range<usize>) -> Range<usize> {
    let b = &text.as_bytes()[m.clone()];
    let from = b
        .iter()
        .rposition(|c| matches!(c, b' ' | b'\t' | b'"' | b'\''))
        .map_or(0, |at| at + 1);
    m.start + from..m.end
}

/// The group `s` of a `url-token-user` match (`SCHEME://S@`): between the `://` and the `@`
/// that ends the match.
fn url_token_user(text: &str, m: Range<usize>) -> Range<usize> {
    let b = &text.as_bytes()[m.clone()];
    let from = memchr::memmem::find(b, b"://").map_or(0, |at| at + 3);
    let end = b.len().saturating_sub(1).max(from);
    m.start + from..m.start + end
}

/// The group `b` of a `kcap-vendor-token` match: the body after its prefix, none for an
/// `AIza` key. The prefixes are told apart by their first bytes (the pattern is
/// case-sensitive): `gh?_`, `github_pat_`, `glpat-`, `cfat_`, `[sr]k_live_`/`[sr]k_test_`,
/// `xox?-`, `pypi-`, `npm_`, `dckr_pat_`/`dckr_oat_`.
fn vendor_token_body(text: &str, m: Range<usize>) -> Option<Range<usize>> {
    let b = &text.as_bytes()[m.clone()];
    let prefix = match (b.first()?, b.get(1)?) {
        (b'A', _) => return None,
        (b'g', b'h') => 4,
        (b'g', b'i') => "github_pat_".len(),
        (b'g', _) => "glpat-".len(),
        (b'c', _) => "cfat_".len(),
        (b's' | b'r', _) => "sk_live_".len(),
        (b'x', _) => "xoxb-".len(),
        (b'p', _) => "pypi-".len(),
        (b'n', _) => "npm_".len(),
        _ => "dckr_pat_".len(),
    };
    Some(m.start + prefix.min(b.len())..m.end)
}

/// The length of `w` (ASCII lowercase) at the start of `text` as `(?i)` matches it: ASCII
/// letters in either case, and the two characters that fold to an ASCII letter (the Kelvin
/// sign to `k`, the long s to `s`).
fn folded_prefix(text: &[u8], w: &str) -> Option<usize> {
    let mut len = 0;
    for want in w.bytes() {
        let rest = text.get(len..)?;
        len += match rest.first()? {
            c if c.eq_ignore_ascii_case(&want) => 1,
            0xE2 if want == b'k' && rest.starts_with("\u{212A}".as_bytes()) => 3,
            0xC5 if want == b's' && rest.starts_with("\u{17F}".as_bytes()) => 2,
            _ => return None,
        };
    }
    Some(len)
}

/// The group `s` of a `labelled-is` match, read from the match's start as the pattern takes
/// it: its one keyword (the alternatives start differently, and a `[ _-]` inside one is taken
/// only before `key` or `secret`), then the first way on that leads to a value of 16 or more
/// characters (`[ \t]*[:=][ \t]*`, else blanks with `is` or `was` and blanks, else blanks),
/// an optional quote, and the value to the end of its run. `None` if that is not the match
/// (it always is; a unit test checks).
fn labelled_is_value(text: &str, m: Range<usize>) -> Option<Range<usize>> {
    let word = |at: usize, w: &str| folded_prefix(&text.as_bytes()[at..], w);
    // `stem`, an optional `[ _-]`, then `tail`.
    let joined = |at: usize, stem: &str, tail: &str| {
        let l = word(at, stem)?;
        let sep = matches!(text.as_bytes().get(at + l), Some(b' ' | b'_' | b'-'));
        if sep && let Some(t) = word(at + l + 1, tail) {
            return Some(l + 1 + t);
        }
        word(at + l, tail).map(|t| l + t)
    };
    let at = m.start;
    let keyword = word(at, "bearer")
        .or_else(|| word(at, "token"))
        .or_else(|| joined(at, "api", "key"))
        .or_else(|| joined(at, "access", "key"))
        .or_else(|| joined(at, "secret", "key"))
        .or_else(|| joined(at, "client", "secret"))?;
    let b = text.as_bytes();
    let blanks = |i: usize| {
        b[i..]
            .iter()
            .take_while(|&&c| c == b' ' || c == b'\t')
            .count()
    };
    // An optional quote, then 16 or more characters of the value's class (which `(?i)` widens
    // by the Kelvin sign and the long s).
    let value = |i: usize| -> Option<Range<usize>> {
        let from = i + usize::from(matches!(b.get(i), Some(b'"' | b'\'')));
        let (mut chars, mut len) = (0, 0);
        for c in text[from..].chars() {
            if !(c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    '_' | '-' | '.' | '/' | '+' | '=' | '~' | '\u{212A}' | '\u{17F}'
                ))
            {
                break;
            }
            chars += 1;
            len += c.len_utf8();
        }
        (chars >= 16).then_some(from..from + len)
    };
    let p = at + keyword;
    let n = blanks(p);
    let s = if matches!(b.get(p + n), Some(b':' | b'=')) {
        let j = p + n + 1;
        value(j + blanks(j))
    } else {
        None
    };
    let s = s
        .or_else(|| {
            let q = p + n;
            let l = word(q, "is").or_else(|| word(q, "was"))?;
            let r = blanks(q + l);
            (n > 0 && r > 0).then_some(())?;
            value(q + l + r)
        })
        .or_else(|| (n > 0).then_some(()).and_then(|()| value(p + n)))?;
    (s.end == m.end).then_some(s)
}

/// Where a match's value lies in the text, from the text and the match.
type ValueOf = fn(&str, Range<usize>) -> Range<usize>;

/// For the labelled rules whose value `s` follows from the match alone, how: `bearer`
/// (`bearer[ \t]+V`: the six letters of `bearer`, which no other character folds to, and the
/// blanks after them come first) and `connection-string` (`N[ \t]*=[ \t]*V` after one
/// delimiter: the value starts at the first character after the first `=` that is not a blank,
/// as the greedy blanks before it take every blank and a value cannot start with `;` or `"`).
/// The value runs to the match's end in both.
fn label_value(rule: &Rule) -> Option<ValueOf> {
    fn after_blanks(text: &str, from: usize, end: usize) -> Range<usize> {
        let blanks = text.as_bytes()[from..end]
            .iter()
            .take_while(|&&c| c == b' ' || c == b'\t')
            .count();
        from + blanks..end
    }
    match rule.id {
        "bearer" => Some(|text, m| after_blanks(text, m.start + "bearer".len(), m.end)),
        "connection-string" => Some(|text, m| {
            let eq = memchr::memchr(b'=', &text.as_bytes()[m.clone()])
                .map_or(m.end, |at| m.start + at + 1);
            let value = after_blanks(text, eq.min(m.end), m.end);
            let value = value.start..before_next_field(text, value.clone());
            // A quoted value cut there (`password='…', port=5432}`): its quotes stay.
            match text.as_bytes()[value.clone()] {
                [q @ (b'\'' | b'"'), .., c] if c == q => value.start + 1..value.end - 1,
                _ => value,
            }
        }),
        _ => None,
    }
}

/// Where a value that may hold blanks (a connection string's) ends when an object's printed
/// fields follow it: a `,`, blanks, then a name and its `=` (`password=…, user=bob)` as
/// Kotlin's data classes, Lombok's `toString` and Java's maps print them) ends it at the
/// comma. A connection string separates its pairs with `;`, so its values keep their blanks.
fn before_next_field(text: &str, value: Range<usize>) -> usize {
    let b = text.as_bytes();
    let mut at = value.start;
    while let Some(o) = memchr::memchr(b',', &b[at..value.end]) {
        let comma = at + o;
        let blanks = b[comma + 1..]
            .iter()
            .take_while(|&&c| c == b' ' || c == b'\t')
            .count();
        let name = ident_len(&b[comma + 1 + blanks..], 128);
        if blanks > 0 && name > 0 && b.get(comma + 1 + blanks + name) == Some(&b'=') {
            return comma;
        }
        at = comma + 1;
    }
    value.end
}

/// A labelled secret (`bearer`, `labelled`, `labelled-is`, `connection-string`): the value
/// `s` of a match starting at `match_at`, unless it is a reference, code, a list of words, the
/// name of a thing, annotated as code, or a string's prefix.
fn label(text: &str, match_at: usize, s: Range<usize>, out: &mut Vec<Range<usize>>) {
    let value = &text[s.clone()];
    let unquoted = value.trim_matches(['"', '\'']);
    // The label may end a longer name (`accessToken`): the name starts before it. A match
    // may start at the character before its label (`connection-string`'s `[;\s"'{(]`).
    let match_at = match text.as_bytes().get(match_at) {
        Some(c)
            if c.is_ascii() && !(c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-')) =>
        {
            match_at + 1
        }
        _ => match_at,
    };
    let name_at = text[..match_at]
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        .map_or(0, |(i, c)| i + c.len_utf8());
    // Judged last, as the checks that read around the value cost more.
    let annotated =
        || annotates(text, name_at, s.start, true) || declares_code(text, name_at, s.start);
    // A declaration of a variable or a method (`Credentials additionalCreds,`, `SecretKey
    // deriveKey(`): the byte ending it may follow the value the pattern took.
    let declared = || {
        let ends = matches!(
            text.as_bytes().get(s.end),
            Some(b'(' | b',' | b';' | b')' | b':' | b'}')
        );
        let value = if ends {
            &text[s.start..=s.end]
        } else {
            unquoted
        };
        declares_variable(
            &text[name_at..match_at.max(name_at)],
            &text[match_at..s.start],
            value,
        )
    };
    // A Markdown link (`([1b3c5ff…](https://…/commit/…))` after "secret" in a changelog), or
    // the text beside a string literal the label sits in (`'Async/Sync token equality')`).
    let beside = beside_a_literal(unquoted);
    // `pwd=pwd)`: a keyword argument given the variable of its name.
    let same = || {
        let label_word = &text[match_at..s.start];
        let first_len = ident_len(unquoted.as_bytes(), usize::MAX);
        matches!(
            unquoted.as_bytes().get(first_len),
            None | Some(b')' | b',' | b';')
        ) && same_name(
            label_word.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()),
            &unquoted[..first_len],
        )
    };
    // A word ending a sentence of a string, then the string's escape (`"Incorrect token
    // received.\nExpected: %s"`): prose.
    let word_then_escape = memchr::memchr_iter(b'\\', unquoted.as_bytes())
        .find(|&at| matches!(unquoted.as_bytes().get(at + 1), Some(b'n' | b't' | b'r')))
        .is_some_and(|at| {
            // Only a sentence's end: a word alone before an escape may be a password
            // (`Password=hunter\n`).
            let head = unquoted[..at].trim_end_matches(['.', '!', '?']);
            head.len() < at && !head.is_empty() && head.bytes().all(|c| c.is_ascii_lowercase())
        });
    if !beside
        && !word_then_escape
        && !unquoted.is_empty()
        && !declared()
        // What closes the template the label is in (`{{ password }}</p>`).
        && !unquoted.starts_with(['}', ')', ']'])
        // A word, then the tag closing the element the label is in (`the password
        // rules</passwordPolicy>`): the label's value is longer than a word.
        && !memchr::memchr(b'<', &unquoted.as_bytes()[..unquoted.len().min(17)]).is_some_and(
            |at| {
                unquoted.as_bytes().get(at + 1) == Some(&b'/')
                    && unquoted.as_bytes()[..at].iter().all(u8::is_ascii_alphabetic)
            },
        )
        && !is_password_slot(unquoted)
        // The word for what would be there (`a "bearer token"`, `Bearer <token>` without its
        // brackets): prose.
        && !["token", "secret", "password", "key", "credentials"]
            .iter()
            .any(|w| unquoted.eq_ignore_ascii_case(w))
        // Markup wrapping the word for what would be there (`the given PrivateKey
        // <code>key</code> must`): prose. (A name of words in markup may be a password of
        // words: `the password <code>correctHorseBattery</code>`.)
        && !markup_text(unquoted.trim_start_matches('('))
            .flatten()
            .is_some_and(|t| {
                ["token", "secret", "password", "key", "credentials"]
                    .iter()
                    .any(|w| t.eq_ignore_ascii_case(w))
            })
        // A command's next argument: after a flag that asks for the password
        // (`--ask-password https://host`), or a URL, which is no password.
        && !is_plain_url(unquoted)
        && !(match_at > 0 && text.as_bytes()[match_at - 1] == b'-' && asks_for_it(text, s.start))
        && !is_shell_reference(value)
        && !is_placeholder(unquoted)
        && !is_template_slot(unquoted)
        && !is_docstring_type(unquoted)
        && !is_type_or_literal(first_word(unquoted))
        && !is_snake_name(unquoted)
        && !is_code(&text[s.start..])
        && !is_word_list(value)
        && !super::code::is_name_of_thing(unquoted.trim_start_matches('_'))
        && !is_rust_type_or_array(&text[s.start..])
        && !is_go_type(unquoted)
        && !string_prefix(text, s.clone())
        && !annotated()
        && !same()
    {
        out.push(s);
    }
}

/// A Go type where a field's value would be (`Credentials map[string]string`, `Token
/// []byte`, `Secret *string`, `Keys chan Key`).
fn is_go_type(value: &str) -> bool {
    let v = value.trim_start_matches('*');
    v.starts_with("map[")
        || v.starts_with("[]")
        || v.starts_with("chan ")
        || v.starts_with("func(")
        || (value.starts_with('*') && v.split('.').all(super::code::is_word))
}

/// A declaration of a variable whose type is named like a secret (`Credentials
/// additionalCreds,`, `PrivateKey signerPrivateKey)`, `SecretKey masterSecret;`): the name
/// before the label (`before`, then the `label`) is capitalised as a type's, and the value
/// is a lowerCamelCase variable of two words or more, or one word ending the declaration.
fn declares_variable(before: &str, label: &str, value: &str) -> bool {
    let type_name = if before.is_empty() { label } else { before };
    // A sentence may start with a password's word (`Password correctHorseBattery, then…`),
    // and an authorization scheme is no type (`Bearer aaaAaaaAaAaaaAAA`): a type of one of
    // those words is no declaration here.
    let word = type_name.trim_end();
    if !type_name.starts_with(|c: char| c.is_ascii_uppercase())
        || !type_name.bytes().any(|c| c.is_ascii_lowercase())
        || [
            "password",
            "passwd",
            "passphrase",
            "pwd",
            "secret",
            "bearer",
            "basic",
            "token",
            "digest",
        ]
        .iter()
        .any(|w| word.eq_ignore_ascii_case(w))
    {
        return false;
    }
    // A method's declaration (`Credentials getKrb5Credentials() {`): its name, ended.
    let (value, method) = match value.strip_suffix("()").or_else(|| value.strip_suffix('(')) {
        Some(name) => (name, true),
        None => (value, false),
    };
    // A declaration ends its name: a parameter's `,` or `)`, a statement's `;`, a method's `(`,
    // a log label's `:`, a struct literal's `}`. A word run alone after the label may be a token of letters
    // (`Credentials aaaAaaaAaAaaaAAA`).
    let bare = value.trim_end_matches([',', ';', ')', ':', '}']);
    let ended =
        method || (bare.len() < value.len() && matches!(value.as_bytes()[bare.len()], b';' | b')'));
    bare.starts_with(|c: char| c.is_ascii_lowercase())
        && !bare.is_empty()
        && (method || bare.len() < value.len())
        && (super::code::is_compound_identifier(bare)
            || (ended && bare.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')))
}

/// `name: value` (rule `colon-pair`): the value from `first`, its first character or the quote
/// opening it, unless the name is not a secret's, the name is annotated as code or names a
/// variable, or an unquoted value is too short for the name. The regex stops at that first
/// character, so a rejected match hides no pair after it.
fn colon(text: &str, n: Range<usize>, first: Range<usize>, out: &mut Vec<Range<usize>>) {
    let name = &text[n.clone()];
    if !name_is_secret(name) {
        return;
    }
    // A conditional's branches (`$as->{pass} ? "PASS" : "FAIL"`, `ok ? 'token' : 'none'`):
    // a `?` before the name's quote, or a blank before the colon and ` ? ` earlier on the
    // line or ending the line before (`(a != null) ?` then `a.popPrivateKey : b.popPrivateKey;`).
    let before_name = text[..n.start].trim_end_matches(['"', '\'']);
    if before_name.trim_end_matches([' ', '\t']).ends_with('?') {
        return;
    }
    // Both lines are read within [`LOOK_AROUND`] bytes: a long line's many pairs must not
    // each read it back to its start.
    let after_name = text[n.end..].trim_start_matches(['"', '\'']);
    if after_name.starts_with([' ', '\t']) {
        let line = line_before(text, n.start);
        let line_start = n.start - line.len();
        let previous = if line_start > 0 && text.as_bytes()[line_start - 1] == b'\n' {
            line_before(text, line_start - 1)
        } else {
            ""
        };
        if line.contains(" ? ")
            || previous.trim_end().ends_with(" ?")
            || previous
                .rfind(" ? ")
                .is_some_and(|q| !previous[q..].contains(':'))
        {
            return;
        }
    }
    if annotates(text, n.start, first.start, true) || names_a_variable(text, n.clone(), first.start)
    {
        return;
    }
    // A loop over a collection (Java's `for (char[] pass : passwords) {`, C++'s `for (auto&
    // token : tokens)`): the name is the loop's variable.
    let head = line_before(text, n.start).trim_start();
    if (head.starts_with("for (") || head.starts_with("for(")) && !head[4..].contains([';', ')']) {
        return;
    }
    let first_char = &text[first.clone()];
    let quoted = matches!(first_char, "\"" | "'" | "`");
    if !quoted && matches!(first_char, ":" | "=") {
        return;
    }
    // A type named after the field is code's only where a field or a parameter is: on an
    // indented line or in a parameter list (`secret: SuperSecret,` starting a line may be a
    // password of words).
    let before = line_before(text, n.start);
    let indented = !before.is_empty() && before.bytes().all(|c| c == b' ' || c == b'\t');
    let field = indented || before.trim_end().ends_with(['(', ',']);
    if !quoted
        && (is_rust_type_or_array(&text[first.start..])
            || (field && names_its_type(name, &text[first.start..]))
            || (field && is_one_word_type(&text[first.start..]) && !is_password_name(name)))
    {
        return;
    }
    if !quoted && is_prose_after(before, &text[first.start..]) {
        return;
    }
    // A field of a composite literal given a variable, on a line indented with a tab (Go's
    // `AccessToken: correctAT,`, `credentials: &securityCredentials,`): a tab never indents
    // YAML, and an unquoted value there is code.
    if !quoted && before.contains('\t') && indented && is_variable_then_comma(&text[first.start..])
    {
        return;
    }
    let strong = is_password_name(name);
    let min = match (quoted, strong) {
        (true, _) => 1,
        (false, true) => 4,
        (false, false) => 8,
    };
    // A YAML anchor (`password: &pw hunter2`, the name starting its line) names the value
    // that follows it: as with a tag, the value is the word after it.
    let setting = before.bytes().all(|c| matches!(c, b' ' | b'\t' | b'-'));
    let mut value_at = first.start;
    if !quoted && setting {
        let b = text.as_bytes();
        let anchor = b[value_at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
            .count();
        if b[value_at] == b'&' && anchor > 0 && b.get(value_at + 1 + anchor) == Some(&b' ') {
            value_at += 1 + anchor;
            value_at += b[value_at..].iter().take_while(|&&c| c == b' ').count();
        }
    }
    let pushed = out.len();
    push_value(name, text, value_at, min, out);
    // A setting's unquoted value is the rest of its line (`password: correct horse battery
    // staple`, a YAML scalar of words), up to a comment: where the name starts its line and
    // the value was taken, its other words go with it.
    if !quoted
        && setting
        && out.len() == pushed + 1
        && let Some(span) = out.last_mut()
    {
        let line_end = memchr::memchr2(b'\n', b'\r', &text.as_bytes()[span.end..])
            .map_or(text.len(), |o| span.end + o);
        let rest = &text[span.end..line_end];
        let rest = rest.find(" #").map_or(rest, |c| &rest[..c]).trim_end();
        // Words, with their commas (`correct horse, battery staple`): another pair, a list
        // or code after the value (`hunter2, user: bob`) is not part of it.
        let words = rest
            .bytes()
            .all(|c| !matches!(c, b':' | b'=' | b'{' | b'}' | b'[' | b']' | b'(' | b')'));
        if rest.starts_with(' ')
            && words
            && !text[span.clone()].ends_with([',', ';'])
            && !rest.trim_start().starts_with('#')
        {
            span.end += rest.len();
        }
    }
}

/// Whether `rest` starts with a variable, its address or what it points to (`&x`, `*x`), a
/// path of fields (`cfg.Token`) or a call without arguments, then a `,` ending it.
fn is_variable_then_comma(rest: &str) -> bool {
    let b = rest.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'&' | b'*')));
    if !b
        .get(i)
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
    {
        return false;
    }
    while b
        .get(i)
        .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.'))
    {
        i += 1;
    }
    if b[i..].starts_with(b"()") {
        i += 2;
    }
    // Then the comma that ends a field on its own line (no configuration's value has one).
    b.get(i) == Some(&b',') && matches!(b.get(i + 1), None | Some(b'\n' | b'\r' | b' ' | b'\t'))
}

/// Whether `rest` starts with a cast of a variable (`(SecretKey) ks…`, `((Impl) creds)…`):
/// `(`, a capitalised name (a path of names, generics and `[]` allowed), `)`, then a
/// variable or `(`.
fn is_cast(rest: &str) -> bool {
    let b = rest.as_bytes();
    let mut i = 0;
    while b.get(i) == Some(&b'(') {
        i += 1;
    }
    if i == 0 || !b.get(i).is_some_and(u8::is_ascii_uppercase) {
        return false;
    }
    while b.get(i).is_some_and(|c| {
        c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'<' | b'>' | b'[' | b']')
    }) {
        i += 1;
    }
    if b.get(i) != Some(&b')') {
        return false;
    }
    i += 1;
    while b.get(i) == Some(&b' ') {
        i += 1;
    }
    // What is cast: a variable (small letters first, no digit), a call or a parenthesis; a
    // run of letters and digits after a cast may be a secret (`(Credentials)Xk9vQ2mLp7Rz`).
    let var = b[i..]
        .iter()
        .take_while(|c| c.is_ascii_alphabetic() || **c == b'_')
        .count();
    b.get(i) == Some(&b'(')
        || (var > 0 && b[i].is_ascii_lowercase() && !b.get(i + var).is_some_and(u8::is_ascii_digit))
}

/// `name = value` (rule `assignment`): the value from `value_at`, unless the name is not a
/// secret's, the pair is a URL query parameter's or the name is annotated as code.
fn assign(text: &str, n: Range<usize>, value_at: usize, out: &mut Vec<Range<usize>>) {
    let name = &text[n.clone()];
    // A URL query parameter: the query rule ends its value at the next `&`.
    let in_query = text[..n.start]
        .chars()
        .next_back()
        .is_some_and(|c| c == '?' || c == '&');
    if in_query || !name_is_secret(name) {
        return;
    }
    if annotates(text, n.start, value_at, false) {
        return;
    }
    // A cast or a parenthesised expression (`gssCredentials = ((GSSCredentialImpl)
    // creds).getElements();`, `key = (SecretKey) ks.getKey(a, p);`): code.
    if is_cast(&text[value_at..]) {
        return;
    }
    // `:=` (Go, Go templates, Python, Pascal) declares a variable from an expression: unquoted,
    // the value is code (`range m`, `eq .A "b"`, a variable), and only a literal can be a
    // secret. A Makefile's `DB_PASSWORD := value` (an UPPER_SNAKE name starting its line) is
    // an assignment of text, as with `=`.
    let separator = text[..value_at].trim_end_matches([' ', '\t']);
    let make = || {
        name.bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
            && line_before(text, n.start).trim().is_empty()
    };
    // A declaration (`let`, `let mut`, `const`, `var`, `val`, `auto`) binds an expression in
    // the same way: `let shared_secret = our_key_share`, `let secret = self.derive(…)`.
    if (separator.ends_with(":=") && !make() || declares_code(text, n.start, value_at))
        && !matches!(text.as_bytes().get(value_at), Some(b'"' | b'\'' | b'`'))
        && may_be_code(&text[value_at..])
    {
        if push_branches(name, text, value_at, out) {
            return;
        }
        if let Some(literal) = key_literal_argument(text, value_at) {
            out.push(literal);
        }
        return;
    }
    if is_argument_variable(text, n.start, value_at)
        || is_rust_type_or_array(&text[value_at..])
        || is_chained_assignment(&text[value_at..])
        || is_typed_integer(text, n.start, &text[n.end..value_at], &text[value_at..])
        || is_class_given(name, separator, &text[value_at..])
        || is_like_named_variable(name, &text[value_at..])
    {
        return;
    }
    // One character is no secret (HTML's `accesskey="n"`, `challengePassword = A challenge`).
    push_value(name, text, value_at, 2, out);
}

/// An assignment of a variable named like the name (`creds.token = tokenReg`, `lasttoken =
/// token`, JavaScript and Python without a `;`): the identifier at `rest`'s start, ending its
/// line or followed by a blank or an end of a statement.
fn is_like_named_variable(name: &str, rest: &str) -> bool {
    let len = rest
        .bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
        .count();
    let ident = &rest[..len];
    len > 0
        && matches!(
            rest.as_bytes().get(len),
            None | Some(b'\n' | b'\r' | b' ' | b'\t' | b';' | b',' | b')')
        )
        && (is_named_like(name, ident) || is_part_of_name(name, ident))
}

/// A code's assignment, blanks round its `=`, of one capitalised word to a name that is no
/// password's (`token = Punctuation`, `token = Name` in a lexer): a class or a constant. A
/// token is no word; a pair of a setting or a YAML file (`auth_token: Summerwind`) keeps its
/// rules.
fn is_class_given(name: &str, separator: &str, rest: &str) -> bool {
    let word = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
    separator.ends_with(" =")
        && is_capitalised_word(&rest[..word])
        && matches!(
            rest.as_bytes().get(word),
            None | Some(b'\n' | b'\r' | b')' | b',' | b';')
        )
        && !is_password_name(name)
}

/// A constant declared with an integer type and given a number (`pub const SECRETMEM_MAGIC:
/// u32 = 1397048141;`, `ETH_P_PREAUTH: u32 = 35015`): the line before the name at `name_at`
/// declares a constant (`const`, `static`), `between` is the text from the name to the
/// value, `rest` the value on. A variable's PIN (`PASSWORD: int = 123456`) is still
/// one.
fn is_typed_integer(text: &str, name_at: usize, between: &str, rest: &str) -> bool {
    let Some(ty) = between
        .trim_end_matches([' ', '\t', '='])
        .trim_end()
        .rsplit_once(':')
        .map(|(_, t)| t.trim())
    else {
        return false;
    };
    const INTEGERS: &[&str] = &[
        "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
        "int", "uint", "int32", "int64", "uint32", "uint64", "number",
    ];
    let digits = rest
        .bytes()
        .take_while(|c| c.is_ascii_digit() || *c == b'_')
        .count();
    // The line is read last: most assignments have no type.
    INTEGERS.contains(&ty)
        && digits > 0
        && matches!(
            rest.as_bytes().get(digits),
            None | Some(b';' | b',' | b' ' | b'\n' | b'\r')
        )
        && {
            let line = line_before(text, name_at);
            line.contains("const ") || line.contains("static ")
        }
}

/// Whether the first word of an unquoted value (up to a blank or the line's end) can be an
/// expression of code: no `#` (a comment's, outside any string) and no bracket closed that
/// was not opened, or closed by another kind (`m{{h}o)p${e]…`: a password, which no language
/// parses). A code expression's brackets nest (`cfg.Get("x")`, `[]byte(s)`, `{{ .A }}`), stay
/// open where the line ends, or close one opened before the value (`(secret := f(x))]`)
/// where the word ends.
fn may_be_code(value: &str) -> bool {
    let word = value
        .split([' ', '\t', '\n', '\r'])
        .next()
        .unwrap_or_default();
    let mut open: Vec<u8> = Vec::new();
    for (i, c) in word.bytes().enumerate() {
        match c {
            b'(' | b'[' | b'{' => open.push(c),
            b')' | b']' | b'}' => {
                let wanted = match c {
                    b')' => b'(',
                    b']' => b'[',
                    _ => b'{',
                };
                match open.pop() {
                    Some(o) if o == wanted => {}
                    // A bracket opened before the value closed: the expression ends there
                    // (Python's `if (secret := f(x))]`), and only more closing or a separator
                    // may follow it in the word.
                    None => {
                        return word[i + 1..]
                            .bytes()
                            .all(|c| matches!(c, b')' | b']' | b'}' | b',' | b';' | b':' | b'.'));
                    }
                    Some(_) => return false,
                }
            }
            b'#' => return false,
            // A string's content is not read for brackets.
            b'"' | b'\'' | b'`' => break,
            _ => {}
        }
    }
    true
}

/// Whether the name at `name_at` is declared by the word before it on its line: `let`, `let
/// mut`, `const`, `var`, `val`, `auto` (Rust, JavaScript, Swift, Kotlin, C++). What such a
/// name is given is an expression of code, where only a literal can be a secret.
fn declares(text: &str, name_at: usize) -> bool {
    // Read back over the blanks and one short word only: a line of any length costs the same.
    let b = text.as_bytes();
    let blanks = b[..name_at]
        .iter()
        .rev()
        .take_while(|&&c| c == b' ' || c == b'\t')
        .count();
    let end = name_at - blanks;
    let word = b[..end]
        .iter()
        .rev()
        .take(6)
        .take_while(|c| c.is_ascii_lowercase())
        .count();
    let start = end - word;
    blanks > 0
        && (start == 0 || matches!(b[start - 1], b' ' | b'\t' | b'\n' | b'(' | b'{' | b';'))
        && matches!(
            &text[start..end],
            "let" | "mut" | "const" | "var" | "val" | "auto"
        )
}

/// Whether the name at `name_at` is declared ([`declares`]) and given code at `value_at`: a
/// variable or a path of code's words (`our_key_share`, `self.ks`, `agreement::agree(…)`), a
/// reference, an array, a closure or a block. A random run given unquoted (`const token =
/// Xk9vQ2mLp7Rz`, a secret pasted without its quotes) is no variable of code.
fn declares_code(text: &str, name_at: usize, value_at: usize) -> bool {
    if !declares(text, name_at) {
        return false;
    }
    let rest = &text[value_at..];
    if rest.starts_with(['[', '&', '(', '|', '{', '*', '!']) {
        return true;
    }
    let word_len = ident_len(rest.as_bytes(), usize::MAX);
    let word = &rest[..word_len];
    is_snake_identifier(word)
        || (word.len() >= 2 && word.bytes().all(|c| c.is_ascii_lowercase()))
        || super::code::is_compound_identifier(word)
        || is_call_or_path(rest)
}

/// Whether a value is a prompt asking for a secret: words of letters ended by a colon and
/// maybe blanks (`'Password:'`, `'npm password: '`), no digit.
fn is_prompt(value: &str) -> bool {
    let v = value
        .trim_end_matches(['\'', '"', '`', ')', ','])
        .trim_end();
    v.strip_suffix(':').is_some_and(|words| {
        words.bytes().filter(u8::is_ascii_alphabetic).count() >= 3
            && words.bytes().all(|c| c.is_ascii_alphabetic() || c == b' ')
    })
}

/// The length of the run of identifier bytes (ASCII letters, digits, `_`) `b` starts with, at
/// most `max`.
fn ident_len(b: &[u8], max: usize) -> usize {
    b.iter()
        .take(max)
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count()
}

/// Whether `rest` is a name assigned in turn (`userid = passwd = acct = ''`): an identifier,
/// blanks, then `=` but not `==`.
fn is_chained_assignment(rest: &str) -> bool {
    let b = rest.as_bytes();
    // Most values hold no `=` near: one vector search settles them.
    if memchr::memchr(b'=', &b[..b.len().min(72)]).is_none() {
        return false;
    }
    let word = ident_len(b, 64);
    let blanks = b[word..].iter().take_while(|&&c| c == b' ').count();
    word > 0
        && blanks > 0
        && b.get(word + blanks) == Some(&b'=')
        && b.get(word + blanks + 1) != Some(&b'=')
}

/// Whether `rest` starts a call through a dotted path (`getpass.getpass(`, `re.compile(`,
/// `self.password.encode(`, `HTTPPasswordMgr.find_user_password(`): two identifiers or more
/// joined by `.`, the last a lowercase function's name of three letters or more, then `(`.
fn is_dotted_call(rest: &str) -> bool {
    let b = rest.as_bytes();
    // The first identifier is followed by a `.`: a key's run (most values here) ends without,
    // and one vector search for a `.` settles most.
    if memchr::memchr(b'.', &b[..b.len().min(49)]).is_none() {
        return false;
    }
    let first = ident_len(b, 48);
    if first == 0 || b.get(first) != Some(&b'.') {
        return false;
    }
    let len = b
        .iter()
        .take(96)
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.'))
        .count();
    if b.get(len) != Some(&b'(') {
        return false;
    }
    let path = &rest[..len];
    let mut parts = path.split('.');
    let first = parts.next().unwrap_or("");
    let Some(last) = path.rsplit('.').next() else {
        return false;
    };
    path.contains('.')
        && first.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && path.split('.').all(|p| !p.is_empty())
        && last.len() >= 3
        && last.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && last
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
}

/// Whether `rest` starts an expression only Rust writes: a path of code's words through `::`
/// (`Box::new(…)`, `quic::Secrets::new(`, `Self::X`), `vec![…]`, or either wrapped in
/// `Some(`, `Ok(` or `Err(`.
fn is_rust_expression(rest: &str) -> bool {
    // What ends the first word decides: a `::`, or the `(` or `!` of a wrapper or `vec!`.
    let b = rest.as_bytes();
    let word = ident_len(b, 24);
    if !matches!(b.get(word), Some(b':' | b'(' | b'!')) {
        return false;
    }
    let mut r = rest;
    while let Some(inner) = ["Some(", "Ok(", "Err("]
        .iter()
        .find_map(|w| r.strip_prefix(w))
    {
        r = inner;
    }
    if r.starts_with("vec![") {
        return true;
    }
    let b = r.as_bytes();
    let len = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b':'))
        .count();
    let path = &r[..len];
    path.contains("::")
        && !path.starts_with(':')
        && path.split("::").count() >= 2
        && path.split("::").all(|s| {
            // Any identifier (`PayloadU16`): a run of a key holds no `::`.
            s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && ident_len(s.as_bytes(), usize::MAX) == s.len()
        })
}

/// Whether an unquoted value (`rest`, from its first character) is a type or an array of
/// Rust's: a reference (`&[u8]`, `&'a str`, `&mut Buf`, `&dyn Store`, `&Block,` ending its
/// parameter or field) or an array (`[u8; 32]`, `[0u8; 48]`). A YAML anchor before a value
/// (`password: &pw hunter2`) is none: a word and a blank follow its `&`.
fn is_rust_type_or_array(rest: &str) -> bool {
    // After a `[`: a word, then `; N` (`u8; 32`, `0u8; KEY_LEN`) where `semi` asks for it, and
    // the `]`.
    fn bracketed(b: &[u8], semi: bool) -> bool {
        let mut i = ident_len(b, usize::MAX);
        if i == 0 {
            return false;
        }
        if b.get(i) == Some(&b';') {
            i += 1;
            i += b[i..].iter().take_while(|&&c| c == b' ').count();
            let n = ident_len(&b[i..], usize::MAX);
            if n == 0 {
                return false;
            }
            i += n;
        } else if semi {
            return false;
        }
        b.get(i) == Some(&b']')
    }
    let b = rest.as_bytes();
    match b.first() {
        Some(b'&') => {
            let r = &b[1..];
            if r.starts_with(b"mut ") || r.starts_with(b"dyn ") || r.starts_with(b"impl ") {
                return true;
            }
            match r.first() {
                Some(b'[') => bracketed(&r[1..], false),
                // A lifetime: `&'a str`, `&'static [u8]`.
                Some(b'\'') => {
                    let l = ident_len(&r[1..], usize::MAX);
                    l > 0 && r.get(1 + l) == Some(&b' ')
                }
                _ => {
                    // A path of code's words (`&Block`, `&hash::Output`), ended as a
                    // parameter's or a field's type is.
                    let len = r
                        .iter()
                        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b':'))
                        .count();
                    let path = &r[..len];
                    len > 0
                        && path
                            .split(|&c| c == b':')
                            .filter(|s| !s.is_empty())
                            .all(is_segment)
                        && matches!(
                            r.get(len),
                            None | Some(b',' | b')' | b'>' | b';' | b'<' | b'\n' | b'\r')
                        )
                }
            }
        }
        Some(b'[') => bracketed(&b[1..], true),
        _ => false,
    }
}

/// A keyword argument given a variable or a literal: the value's first word followed by the
/// `)`, `,`, `]` or `}` that ends it (`auth=oauth,`, `auth=auth).prepare()`, `token=None):`).
/// The word is lowercase letters and `_` (no digit: `hunter22,` may be a password), or a
/// literal (`None`, `null`, `true`). Only where the name at `name_at` is an argument: it
/// follows `(` or `,` on its line, or starts an indented line and the word ends with `,` (an
/// argument list spread over lines). A dotenv line's `PASSWORD=abc,def` is neither.
fn is_argument_variable(text: &str, name_at: usize, value_at: usize) -> bool {
    let value = &text.as_bytes()[value_at..];
    let word = ident_len(value, 128);
    let Some(&after) = value.get(word) else {
        return false;
    };
    if word == 0 || !matches!(after, b')' | b',' | b']' | b'}') {
        return false;
    }
    let head = &text[value_at..value_at + word];
    if !(head.bytes().all(|c| c.is_ascii_lowercase() || c == b'_') || is_type_or_literal(head)) {
        return false;
    }
    let before = line_before(text, name_at);
    let trimmed = before.trim_end_matches([' ', '\t']);
    trimmed.ends_with(['(', ',']) || (trimmed.is_empty() && !before.is_empty() && after == b',')
}

/// The spans one match of `rule` redacts in `text`.
pub(crate) fn refine(rule: &Rule, caps: &Captures<'_>, text: &str, out: &mut Vec<Range<usize>>) {
    let group = || {
        caps.name("s")
            .or_else(|| caps.name("m"))
            .or_else(|| caps.get(0))
    };
    match rule.refine {
        Refine::Element => {
            if let (Some(n), Some(m)) = (caps.name("n"), caps.name("s")) {
                let (n, v) = (n.as_str(), m.as_str().trim());
                if name_is_secret(n) && !value_exempt(n, v, v) && !same_name(n, v) {
                    out.push(m.range());
                }
            }
        }
        Refine::BareCall => {
            if let (Some(n), Some(m)) = (caps.name("n"), caps.name("s").or(caps.name("t"))) {
                let (n, v) = (n.as_str(), m.as_str());
                // The name ends with a secret's word (`DBPassword`, `apiKey`), not only holds
                // one (`secretlint:smoke`, an image and its tag).
                let ends = [
                    "password",
                    "passwd",
                    "pwd",
                    "secret",
                    "token",
                    "apikey",
                    "api_key",
                    "accesskey",
                    "access_key",
                    "secretkey",
                    "secret_key",
                    "privatekey",
                    "private_key",
                    "credential",
                    "credentials",
                    "passphrase",
                ]
                .iter()
                .any(|w| ends_with_ignore_case(n, w));
                if ends && name_is_secret(n) && !value_exempt(n, v, v) && !same_name(n, v) {
                    out.push(m.range());
                }
            }
        }
        Refine::NameValueElements => {
            if let (Some(n), Some(m)) = (caps.name("n"), caps.name("s")) {
                let (n, v) = (n.as_str().trim(), m.as_str().trim_end());
                if name_is_secret(n) && !value_exempt(n, v, v) && !same_name(n, v) {
                    out.push(m.start()..m.start() + v.len());
                }
            }
        }
        Refine::Group => {
            if let Some(m) = group()
                && !m.is_empty()
            {
                out.push(m.range());
            }
        }
        Refine::Assign => {
            if let (Some(n), Some(s)) = (caps.name("n"), caps.name("s")) {
                assign(text, n.range(), s.start(), out);
            }
        }
        Refine::Colon => {
            if let (Some(n), Some(first)) =
                (caps.name("n"), caps.name("s").or_else(|| caps.name("q")))
            {
                colon(text, n.range(), first.range(), out);
            }
        }
        // keytool's flags named in its own messages and docs (`-srckeypass must not be
        // specified`, `-keypass não deverão`, `-storepass ni -keypass`): a word of letters
        // then another word is prose, as is a word shorter than the six characters keytool
        // requires of a password; keytool takes only flags after its password (`-storepass
        // changeit -v`).
        Refine::Flag
            if rule.id == "keytool-pass"
                && caps.name("q").is_none_or(|q| q.is_empty())
                && caps.name("s").is_some_and(|s| {
                    word_then_word(text, s.start()) || shorter_than(text, s.start(), 6)
                }) => {}
        Refine::Flag => refine_flag(caps, text, out),
        Refine::Label => {
            if let (Some(m), Some(s)) = (caps.get(0), group()) {
                label(text, m.start(), s.range(), out);
            }
        }
        Refine::Prose => {
            if let Some(s) = group() {
                prose(text, s.range(), out);
            }
        }
        Refine::Header => {
            if let Some(s) = caps.name("s") {
                let lq = caps.name("lq").map(|q| q.as_str().as_bytes()[0]);
                header_value(text, s.start(), lq, caps.name("cq").is_some(), out);
            }
        }
        Refine::Query => {
            if let (Some(n), Some(s)) = (caps.name("n"), caps.name("s")) {
                query(text, n.range(), s.range(), out);
            }
        }
        Refine::PemBase64 => {
            let Some(m) = caps.get(0) else { return };
            if base64_private_key(m.as_str()) {
                out.push(m.range());
            }
        }
        Refine::Htpasswd => htpasswd(caps, text, out),
        Refine::KeyNamed => {
            if let (Some(n), Some(v)) = (caps.name("n"), caps.name("s")) {
                let quoted = caps.name("q").is_some_and(|q| !q.is_empty());
                key_named(text, n.as_str(), v.range(), quoted, out);
            }
        }
        Refine::QuotedProse => {
            if let (Some(q), Some(v)) = (caps.name("q"), caps.name("s")) {
                quoted_prose(text, q.as_str().as_bytes()[0], v.start(), out);
            }
        }
        Refine::Annotated => {
            if let (Some(n), Some(v)) = (caps.name("n"), caps.name("s")) {
                assign(text, n.range(), v.start(), out);
            }
        }
        Refine::Arrow => {
            // Only a quoted literal: an unquoted value of a `=>` pair is code (a constant, a
            // call, `$var`, `:symbol`, a hash `{:default => …}`).
            if let (Some(o), Some(n), Some(v)) = (caps.name("o"), caps.name("n"), caps.name("s"))
                && matches!(v.as_str(), "\"" | "'")
                && (!o.is_empty() || arrow_literal(text.as_bytes(), v.start()))
                // A module's path (`'CPAN::HTTP::Credentials' => 'cpan'`): its last part is
                // no secret's name.
                && !(o.as_str() == ":" && o.start() > 0 && text.as_bytes()[o.start() - 1] == b':')
            {
                assign(text, n.range(), v.start(), out);
            }
        }
        Refine::NamedLiteral => {
            // Two arguments: the literal closes the call (`set("token", "x")`), so a list of
            // names given to a call (`add("token", "user", "application")`) stays.
            let closes = |q: regex::Match<'_>| {
                let b = text.as_bytes();
                let end = closing_quote(b, q.end(), b[q.start()]);
                b.get(end + 1..).is_some_and(|rest| {
                    rest.iter().find(|c| !matches!(c, b' ' | b'\t')) == Some(&b')')
                })
            };
            // `"Bearer …"`: rule `bearer` takes the token and leaves the scheme.
            let schemed = |q: regex::Match<'_>| {
                let v = &text.as_bytes()[q.end()..];
                v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ")
            };
            // An environment's setter takes more after the value (C's `setenv(name, value,
            // overwrite)`, PowerShell's `SetEnvironmentVariable(name, value, 'User')`).
            let setter = caps.name("f").is_some_and(|f| {
                [
                    "setenv",
                    "setenvironmentvariable",
                    "buildconfigfield",
                    "resvalue",
                ]
                .iter()
                .any(|s| f.as_str().eq_ignore_ascii_case(s))
            });
            if let (Some(n), Some(q)) = (caps.name("n"), caps.name("q"))
                && !n.as_str().starts_with('-')
                && name_is_secret(n.as_str())
                && (setter || closes(q))
                && !schemed(q)
            {
                let first = out.len();
                push_value(n.as_str(), text, q.start(), 1, out);
                // Gradle's value quoted again (`"\"…\""`): its closing `\"` is the source's.
                if text[..q.start()].ends_with('\\') {
                    for s in &mut out[first..] {
                        if text[s.clone()].ends_with("\\\"") {
                            s.end -= 2;
                        }
                    }
                }
            } else if let (Some(n), Some(q)) = (caps.name("n"), caps.name("q"))
                && ends_in_key(n.as_str())
                && closes(q)
            {
                // A vendor's key named after it (`define('AUTH_KEY', '…')`, WordPress's
                // salts): the literal, if it has a key's shape.
                let b = text.as_bytes();
                let end = closing_quote(b, q.end(), b[q.start()]);
                key_named(text, n.as_str(), q.end()..end, true, out);
            }
        }
        Refine::Fallback => {
            // The variable looked up, else (a literal's fallback) the name it is assigned to.
            let assigned = || {
                caps.name("q")?;
                let m = caps.get(0)?;
                assigned_before(text, m.start()).map(|n| &text[n])
            };
            let name = caps
                .name("n")
                .map(|n| n.as_str())
                .filter(|n| name_is_secret(n))
                .or_else(|| assigned().filter(|n| name_is_secret(n)));
            if let Some(n) = name {
                if let Some(q) = caps.name("q") {
                    push_value(n, text, q.start(), 1, out);
                } else if let Some(v) = caps.name("s")
                    && !value_exempt(n, v.as_str(), v.as_str())
                {
                    out.push(v.range());
                }
            }
        }
        Refine::NameThenValue => {
            if let (Some(n), Some(v)) = (caps.name("n").or(caps.name("c")), caps.name("s")) {
                assign(text, n.range(), v.start(), out);
            }
        }
        Refine::Comparison => {
            if let (Some(n), Some(q), Some(v)) = (caps.name("n"), caps.name("q"), caps.name("s")) {
                comparison(text, n.as_str(), q.as_str().as_bytes()[0], v.start(), out);
            }
        }
        Refine::SqlInsert => {
            if let (Some(h), Some(v)) = (caps.name("h"), caps.name("v")) {
                sql_insert(text, h.as_str(), v.start(), out);
            }
        }
        Refine::DeviceConfig => {
            if let Some(v) = caps.name("s") {
                out.push(v.range());
            } else if let Some(c) = caps.name("c")
                && !is_stand_in(c.as_str())
            {
                out.push(c.range());
            }
        }
        Refine::NamedPair => {
            // Group `n`: a pair opening its brackets; group `f`: a flag anywhere in a list.
            let name = caps.name("n").or_else(|| caps.name("f"));
            if let (Some(m), Some(n), Some(v)) = (caps.get(0), name, caps.name("s")) {
                // What follows the literal's quote: the pair's end, or more of a list, in
                // which only a flag and its value are a pair.
                let after = skip_blanks(text.as_bytes(), m.end());
                let closes = matches!(text.as_bytes().get(after), Some(b']' | b')'));
                let more = text.as_bytes().get(after) == Some(&b',');
                // A row of SQL's `VALUES (…)` is data in columns, not a name and its value.
                let head = text[..m.start()].trim_end_matches([' ', '\t']);
                let row = head.len() >= 6
                    && head.is_char_boundary(head.len() - 6)
                    && head[head.len() - 6..].eq_ignore_ascii_case("values");
                if !row && (closes || (more && n.as_str().starts_with('-'))) {
                    named_pair(n.as_str(), v.as_str(), v.range(), out);
                }
            }
        }
        Refine::CallArgument => {
            if let Some(m) = caps.get(0) {
                call_argument(text, m.range(), out);
            }
        }
        Refine::Sqlplus => {
            let Some(s) = caps.name("s") else { return };
            // A quoted password (`scott/"p@ss"@db`) is the quotes' content, whatever it holds.
            if s.as_str().starts_with('"') {
                let from = s.start() + 1;
                if let Some(o) = text[from..].find(['"', '\n'])
                    && text[from + o..].starts_with('"')
                    && o > 0
                {
                    out.push(from..from + o);
                }
                return;
            }
            let end = text[s.start()..]
                .find(|c: char| c.is_whitespace() || matches!(c, '@' | '"' | '\''))
                .map_or(text.len(), |o| s.start() + o);
            if end > s.start() {
                out.push(s.start()..end);
            }
        }
        Refine::Token => {
            if let Some(m) = caps.get(0) {
                token(text, m.range(), caps.name("b").map(|b| b.range()), out);
            }
        }
        Refine::KubernetesSecret => kubernetes_secret_data(text, out),
        Refine::Pair => {
            if let (Some(n), Some(s)) = (caps.name("n"), caps.name("s")) {
                colon(text, n.range(), s.range(), out);
            }
        }
        Refine::YamlNextLine => yaml_next_line(caps, text, out),
        Refine::TableColumn => table_column(caps, text, out, &mut Tables::default(), 0),
        Refine::TableRow => {
            let (Some(n), Some(v)) = (caps.name("n"), caps.name("s")) else {
                return;
            };
            let end = text[v.start()..]
                .find(['|', '\n'])
                .map_or(text.len(), |o| v.start() + o);
            let value = text[v.start()..end].trim_end();
            // Prose in a cell (`the API token`) describes; a credential is one word.
            if name_is_secret(n.as_str())
                && !value.contains(char::is_whitespace)
                && !value_exempt(n.as_str(), value, value)
            {
                out.push(v.start()..v.start() + value.len());
            }
        }
        Refine::UrlToken => {
            if let Some(s) = caps.name("s") {
                url_token(text, s.range(), out);
            }
        }
        Refine::LabelToken => {
            // A quoted literal of the phrase that starts with a redacted value and goes on
            // (`token "[REDACTED] "x": …`) held that value and more: up to 40 bytes now, it may
            // have been longer before the value was redacted, so redacting again would find a
            // label redacting once did not. A literal that is the marker alone (`token
            // "[REDACTED]": …`) or a marker outside quotes still labels its value.
            if let (Some(s), Some(m)) = (caps.name("s"), caps.get(0))
                && super::vendors::class_changes(s.as_str().as_bytes()) >= 4
                && !quotes_a_marker_and_more(&text[m.start()..s.start()])
            {
                url_token(text, s.range(), out);
            }
        }
        Refine::ProseToken => {
            if let Some(s) = caps.name("s") {
                let alnum: Vec<u8> = s
                    .as_str()
                    .bytes()
                    .filter(u8::is_ascii_alphanumeric)
                    .collect();
                if super::vendors::class_changes(&alnum) >= 4 {
                    url_token(text, s.range(), out);
                }
            }
        }
    }
}

/// A command-line secret (rules refined as [`Refine::Flag`]): the value from `s` (group `s`'s
/// start), to its closing quote if `quote` (group `q`) opened it, else to its extent; not a
/// shell reference or the marker.
fn flag(text: &str, s: usize, quote: Option<u8>, out: &mut Vec<Range<usize>>) {
    let range = match quote {
        None => value_extent(text, s),
        Some(q) => {
            let end = closing_quote(text.as_bytes(), s, q);
            (end > s).then_some(s..end)
        }
    };
    // The AWS CLI reads a value given as `file://path` (`fileb://` for bytes) from that file.
    if let Some(r) = range
        && !is_shell_reference(&text[r.clone()])
        && &text[r.clone()] != MARKER
        && !text[r.clone()].starts_with("file://")
        && !text[r.clone()].starts_with("fileb://")
        // A prompt given to a reader of one (`read.password('Password:')`).
        && !(quote.is_some() && is_prompt(&text[r.clone()]))
        // The command's next argument after a flag that asks for the password, or after an
        // empty one (`wget --ask-password https://host`, `--password= https://host`).
        && !is_plain_url(&text[r.clone()])
        && !asks_for_it(text, s)
        && !(quote.is_none() && is_function_word(&text[r.clone()]))
        // A usage line's `|` (`-key | -pkcs12 | -pass | \\`): punctuation alone.
        && !text[r.clone()].bytes().all(|c| c.is_ascii_punctuation())
    {
        out.push(r);
    }
}

/// A word that joins or qualifies where a flag's value would be: prose naming the flag (`the
/// -storepass and -keypass options`, `-srckeypass must not be specified`, and the same in the
/// languages a tool's messages are translated to), not a password.
fn is_function_word(value: &str) -> bool {
    const WORDS: &[&str] = &[
        "and", "or", "not", "nor", "must", "is", "are", "was", "were", "can", "cannot", "should",
        "will", "may", "to", "of", "for", "with", "the", "option", "options", "flag", "und",
        "oder", "et", "ou", "y", "o", "e", "och", "eller", "og",
    ];
    let word = value.trim_end_matches([',', '.', ';', ':', ')']);
    WORDS.iter().any(|w| w.eq_ignore_ascii_case(word))
}

/// Whether the flag before a value at `s` takes none: one that makes the command ask for
/// the password or go without one (`--ask-password`, Ansible's `--ask-pass` and
/// `--ask-become-pass`, `--prompt-password`, `--no-password`), so the word after it is the
/// command's next argument.
fn asks_for_it(text: &str, s: usize) -> bool {
    let b = text.as_bytes();
    let mut end = s;
    while end > 0 && matches!(b[end - 1], b'"' | b'\'' | b' ' | b'\t' | b'=') && s - end < 8 {
        end -= 1;
    }
    let mut start = end;
    while start > 0
        && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'-')
        && end - start < 48
    {
        start -= 1;
    }
    let flag = &b[start..end];
    flag.first() == Some(&b'-')
        && flag.split(|&c| c == b'-').any(|w| {
            [&b"ask"[..], b"prompt", b"no"]
                .iter()
                .any(|a| w.eq_ignore_ascii_case(a))
        })
}

/// The groups of a `curl-user` match (`... FLAG(?:[ \t]+|=)?Q?U*:Q2?S`, `U` any character but
/// `:`, whitespace and quotes, or a quoted user name): where the one character `s` starts (the
/// match's last character), and the quote that opens the password: `Q2`, right after the
/// colon (`user:'pass'`, `"user":"pass"`), else the quote `Q` if the user name `U` (read back
/// from that colon) follows one (the flag, a blank or `=` precede it otherwise, and a blank
/// precedes the flag).
fn curl_user_groups(text: &str, m: Range<usize>) -> (usize, Option<u8>) {
    let b = text.as_bytes();
    let last = text[m.clone()]
        .chars()
        .next_back()
        .map_or(0, char::len_utf8);
    let s = m.end - last;
    // `user:'pass'`, `"user":"pass"`: the password's own quote, right after the colon.
    if s >= m.start + 2 && matches!(b[s - 1], b'"' | b'\'') && b[s - 2] == b':' {
        return (s, Some(b[s - 1]));
    }
    let colon = s.saturating_sub(1).max(m.start);
    // A user name quoted on its own (`"{id}":pass`, `'"':pass`): the pattern's first two
    // alternatives, tried before the third, whose quote `Q` is then none.
    if colon > m.start + 1
        && let q @ (b'"' | b'\'') = b[colon - 1]
        && let Some(open) = b[m.start..colon - 1]
            .iter()
            .rposition(|&c| c == q || c == b':' || c == b'\n')
            .map(|i| m.start + i)
        && b[open] == q
        && follows_user_flag(b, m.start, open)
    {
        return (s, None);
    }
    let user = b[m.start..colon]
        .iter()
        .rev()
        .take_while(|&&c| !matches!(c, b':' | b'"' | b'\'' | b'\t'..=b'\r' | b' '))
        .count();
    let before = colon - user;
    let q = (before > m.start && matches!(b[before - 1], b'"' | b'\'')).then(|| b[before - 1]);
    (s, q)
}

/// Whether `b[from..at]` ends with `curl-user`'s flag and what may separate it from its value
/// (blanks, `=`, a `\` and a line break): `at` is where the flag's value starts.
fn follows_user_flag(b: &[u8], from: usize, at: usize) -> bool {
    let mut e = at;
    while e > from && matches!(b[e - 1], b' ' | b'\t' | b'=' | b'\n' | b'\r' | b'\\') {
        e -= 1;
    }
    let head = &b[from..e];
    let ends = |flag: &[u8]| {
        head.len() > flag.len()
            && head[head.len() - flag.len()..].eq_ignore_ascii_case(flag)
            && matches!(head[head.len() - flag.len() - 1], b' ' | b'\t')
    };
    ends(b"-u") || ends(b"--user") || ends(b"--proxy-user")
}

/// A URL query parameter (rule `url-query`): the value `s` if the name `n` is a secret's.
fn query(text: &str, n: Range<usize>, s: Range<usize>, out: &mut Vec<Range<usize>>) {
    let lower = text[n].to_ascii_lowercase();
    let secret = [
        "token",
        "secret",
        "password",
        "passwd",
        "pass",
        "pwd",
        "key",
        "sig",
        "signature",
        "auth",
        "credential",
        "credentials",
        "sas",
        "awsaccesskeyid",
        "tokens",
    ]
    .iter()
    .any(|w| lower.ends_with(w))
        || lower.contains("token")
        || lower.contains("secret")
        || lower.contains("passw");
    let value = &text[s.clone()];
    if secret
        && !is_shell_reference(value)
        && !is_template_slot(value)
        && !is_format_directive(value)
        && !value
            .trim_end_matches(['`', ')', '\'', '"'])
            .eq_ignore_ascii_case("value")
    {
        out.push(s);
    }
}

/// Whether the name at `name_at` is declared with a type rather than given a value, and the
/// value at `value_at` is that type (T2.7): a docstring field (`:type credential_sourcer:
/// CanonicalNameCredentialSourcer`, `@param {string} token`), a declaration
/// (`const token: SharedJWE = [`) or, for an assignment (`colon` false), a type alias
/// (`type DefaultCredentials = Credentials`).
fn annotates(text: &str, name_at: usize, value_at: usize, colon: bool) -> bool {
    let before = line_before(text, name_at).trim_end();
    let word_before = before
        .rsplit(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .next()
        .unwrap_or("");
    let declared = if colon {
        matches!(
            word_before,
            ":type" | ":param" | ":ivar" | ":vartype" | "@type" | "@param" | "@property"
        ) || matches!(
            word_before,
            "const"
                | "let"
                | "var"
                | "readonly"
                | "public"
                | "private"
                | "protected"
                // Rust's and Kotlin's fields and bindings: `pub password: SecretString,`,
                // `pub(crate) token: Token`, `let mut secret: Secret`, `val password: CharArray`.
                | "pub"
                | "crate)"
                | "super)"
                | "mut"
                | "val"
                | "static"
                | "internal"
                | "lateinit"
                | "override"
        )
    } else {
        word_before == "type"
    };
    // Ruby's setter method: `def password=(new_password)` defines, it assigns nothing.
    if !colon
        && word_before == "def"
        && text.as_bytes().get(value_at) == Some(&b'(')
        && value_at > 0
        && text.as_bytes()[value_at - 1] == b'='
    {
        return true;
    }
    // `api_key: str = …`, `token: Optional[SecretStr] = None`: a type annotation, whose value
    // after the `=` is read by rule `annotated-assignment`.
    if colon && annotation_then_value(&text[value_at..]) {
        return true;
    }
    if !declared {
        return false;
    }
    let value = text[value_at..]
        .split(|c: char| c.is_whitespace())
        .next()
        .unwrap_or("")
        .trim_end_matches([',', ';', ')']);
    super::code::is_word(value) || is_type_or_literal(value) || is_code(&text[value_at..])
}

/// Whether `rest` (what follows a name's colon) is a type and then `=`: an identifier or a
/// dotted path, with one `[…]` or `<…>` of parameters, then blanks and `=` (not `==`).
fn annotation_then_value(rest: &str) -> bool {
    let b = rest.as_bytes();
    if !b
        .first()
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
    {
        return false;
    }
    let mut i = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.'))
        .count();
    if let Some(&open) = b.get(i).filter(|c| matches!(c, b'[' | b'<')) {
        let close = if open == b'[' { b']' } else { b'>' };
        let Some(len) = b[i..]
            .iter()
            .take(128)
            .position(|&c| c == close || c == b'\n')
        else {
            return false;
        };
        if b[i + len] != close {
            return false;
        }
        i += len + 1;
    }
    // A blank before the `=`, as code writes it: a value's own `=` (`Q73UTRCDWz=5NN`, base64's
    // padding) has none.
    let blanks = b[i..]
        .iter()
        .take_while(|c| matches!(c, b' ' | b'\t'))
        .count();
    i += blanks;
    blanks > 0 && b.get(i) == Some(&b'=') && b.get(i + 1) != Some(&b'=')
}

/// Whether an unquoted value at `value_at` after the name at `name` is a variable or a type of
/// code (T2.7): an identifier of several words (`auth_token`, `SharedJWE`) after a quoted key
/// (`{'Authorization': auth_token}`), or a type ending an indented line with a comma after a
/// lowercase name (`  token: SharedJWE,`, a parameter spread over lines). Data would quote
/// it, and a secret has digits or no words; a password may be two capitalised words
/// (`password: SuperSecret,`), so not after a password's name.
fn names_a_variable(text: &str, name: Range<usize>, value_at: usize) -> bool {
    let bytes = text.as_bytes();
    if matches!(bytes.get(value_at), Some(b'"' | b'\'' | b'`')) {
        return false;
    }
    let after = line_after(text, value_at);
    let word_len = after
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    let word = &after[..word_len];
    // What follows the word ends it as code does: the line, or a separator of a literal.
    let next = after[word_len..].trim_start().bytes().next();
    // `(protectedHeader: IProtectedHeader, token: IToken)`: a parameter's type in a list.
    if line_before(text, name.start)
        .trim_end()
        .ends_with(['(', ','])
        && word.starts_with(|c: char| c.is_ascii_uppercase())
        && is_type_name(&text[name.clone()], word)
        && is_segment(word.as_bytes())
        && matches!(next, Some(b',' | b')' | b'>' | b'|' | b'=' | b'[' | b'<'))
    {
        return true;
    }
    // `{'credential': password}`: one lowercase word after a quoted key in a literal.
    let lowercase_word = word.len() >= 3 && word.bytes().all(|b| b.is_ascii_lowercase());
    let snake = is_snake_identifier(word);
    let variable = super::code::is_compound_identifier(word)
        || snake
        || (lowercase_word && matches!(next, Some(b',' | b'}')));
    if !variable {
        return false;
    }
    // A key in code: quoted (`{'credential': password}`), or a dotted path
    // (`oauth2client.client.OAuth2Credentials: _convert_oauth2_credentials,`).
    let code_key = (name.start > 0
        && matches!(bytes[name.start - 1], b'"' | b'\'')
        && bytes.get(name.end) == Some(&bytes[name.start - 1]))
        || (text[name.clone()].contains('.') && snake);
    let quoted_key = code_key && matches!(next, None | Some(b',' | b'}' | b')' | b';'));
    let value = after.trim_end();
    let line_ends = value_at + after.len() == text.len() || bytes[value_at + after.len()] == b'\n';
    let indent = line_before(text, name.start);
    let parameter = !indent.is_empty()
        && indent.bytes().all(|b| b == b' ' || b == b'\t')
        && bytes[name.start].is_ascii_lowercase()
        // A field of several words given capitalised words (`current_exporter_secret:
        // OkmBlock,`) is code's; a password's own name alone may be given words (`password:
        // SuperSecret,`), and one with digits (`db_password: Hunter2,`) may be a password.
        && (!is_password_name(&text[name.clone()])
            || (is_snake_identifier(&text[name.clone()])
                && word.len() >= 4
                && word.bytes().all(|c| c.is_ascii_alphabetic())
                && word.bytes().filter(u8::is_ascii_uppercase).count() >= 2))
        && word.starts_with(|c: char| c.is_ascii_uppercase())
        && line_ends
        && value.len() == word.len() + 1
        && value.ends_with(',');
    quoted_key || parameter
}

/// A name of the words a password goes by, whose values may be short and made of words.
fn is_password_name(name: &str) -> bool {
    // `passw` and `passphrase` hold `pass`.
    let holds = |w: &[u8]| {
        name.as_bytes()
            .windows(w.len())
            .any(|at| at.eq_ignore_ascii_case(w))
    };
    holds(b"pass") || holds(b"pwd") || holds(b"secret")
}

/// Whether `text[r]` is a string prefix right before a quote: Python's (`f`, `b`, `rb`, ...),
/// Objective-C's and C#'s `@`, C++'s `L` and `u8`.
fn string_prefix(text: &str, r: Range<usize>) -> bool {
    r.len() <= 2
        && matches!(
            text[r.clone()].to_ascii_lowercase().as_str(),
            "f" | "b" | "r" | "u" | "rb" | "br" | "fr" | "rf" | "@" | "l" | "u8"
        )
        && matches!(text.as_bytes().get(r.end), Some(b'"' | b'\''))
}

/// How far the precision checks look along a line from a name or value: a long line of
/// minified code holds a keyword every few bytes, and looking to its ends from each one would
/// cost the square of its length.
const LOOK_AROUND: usize = 1024;

/// The text from the start of `at`'s line (or [`LOOK_AROUND`] bytes back, on a longer line)
/// to `at`.
fn line_before(text: &str, at: usize) -> &str {
    let mut from = at.saturating_sub(LOOK_AROUND);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let window = &text[from..at];
    window.rfind('\n').map_or(window, |i| &window[i + 1..])
}

/// The text from `at` to the end of its line, or [`LOOK_AROUND`] bytes on.
fn line_after(text: &str, at: usize) -> &str {
    let mut to = (at + LOOK_AROUND).min(text.len());
    while !text.is_char_boundary(to) {
        to -= 1;
    }
    let window = &text[at..to];
    window.find('\n').map_or(window, |i| &window[..i])
}

/// Whether the quote at `at` closes the string the name sits in (`console.log('Access
/// token:', tokenResponse.access_token)`) rather than opening a value: an odd number of the
/// same quote before it on its line, and none after it.
fn closes_string(text: &str, at: usize) -> bool {
    let bytes = text.as_bytes();
    let Some(&q) = bytes.get(at) else {
        return false;
    };
    if !matches!(q, b'"' | b'\'' | b'`') {
        return false;
    }
    let line_start = at - line_before(text, at).len();
    if line_start > 0 && bytes[line_start - 1] != b'\n' {
        // A line too long to judge: the quote opens a value.
        return false;
    }
    let mut count = 0;
    let mut i = line_start;
    while i < at {
        match bytes[i] {
            b'\\' => i += 1,
            b if b == q => count += 1,
            _ => {}
        }
        i += 1;
    }
    if count % 2 == 0 {
        return false;
    }
    // No closing quote on the rest of the line (as far as it is looked at).
    let rest = line_after(text, at + 1);
    let end = at + 1 + rest.len();
    let close = closing_quote(rest.as_bytes(), 0, q);
    (end == text.len() || bytes[end] == b'\n') && rest.as_bytes().get(close) != Some(&q)
}

/// The CloudFormation functions whose argument names something in the template (a parameter,
/// a resource, an export, a condition) or is an expression over such names: `!Ref DBPassword`
/// is no password. `!Sub` and `!Base64` are not here: their argument may be a literal.
const CLOUDFORMATION_REFERENCES: &[&str] = &[
    "Ref",
    "GetAtt",
    "ImportValue",
    "FindInMap",
    "Join",
    "Select",
    "Split",
    "If",
    "GetAZs",
    "Cidr",
    "Condition",
    "Equals",
    "Not",
    "And",
    "Or",
    "Transform",
];

/// The name of `value` when it is a YAML tag that real files put before a value: YAML's own
/// types (`!!str`, `!!binary`), CloudFormation's functions (`!Ref`, `!Sub`), Ansible's
/// `!vault`, Home Assistant's `!secret`, `!env`, `!include`, GitLab's `!reference`. Only
/// these: a password may well start with `!` (`!QAZ2wsx`), and a word after it is no
/// reason to let it through.
fn yaml_tag(value: &str) -> Option<&str> {
    const TAGS: &[&str] = &[
        "!!str",
        "!!binary",
        "!!int",
        "!!float",
        "!!bool",
        "!!null",
        "!!map",
        "!!seq",
        "!!set",
        "!!timestamp",
        "!Sub",
        "!Base64",
        "!vault",
        "!secret",
        "!env",
        "!ENV",
        "!include",
        "!reference",
    ];
    if TAGS.contains(&value) {
        return Some(value.trim_start_matches('!'));
    }
    let name = value.strip_prefix('!')?;
    CLOUDFORMATION_REFERENCES.contains(&name).then_some(name)
}

/// The value of an assignment or pair from `start`, if it is a secret.
fn push_value(name: &str, text: &str, start: usize, min: usize, out: &mut Vec<Range<usize>>) {
    if closes_string(text, start) {
        return;
    }
    // A comment where the value would be (`secret = # disable PBM`, `password: # none`): a
    // `#` between blanks starts one in a configuration file, YAML, a shell and Python alike.
    // (`password = #gets0m3` is a value to an INI parser: a `#` glued to what follows stays
    // one.)
    if text.as_bytes().get(start) == Some(&b'#')
        && start > 0
        && matches!(text.as_bytes()[start - 1], b' ' | b'\t')
        && text
            .as_bytes()
            .get(start + 1)
            .is_none_or(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
    {
        return;
    }
    // A quote that closes a word the same quote opened (`accesskey="u" href="…"`: the `"`
    // after `u`) opens no value: what follows it is the next attribute. (A string's prefix
    // before its opening quote, `f"…"`, `b'…'`, follows no quote.)
    let b = text.as_bytes();
    if let Some(&q) = b.get(start).filter(|q| matches!(q, b'"' | b'\'' | b'`')) {
        let word = b[..start]
            .iter()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric())
            .count();
        if word > 0 && start > word && b[start - word - 1] == q {
            return;
        }
    }
    // Python's and TOML's triple-quoted strings on one line (`PASSWORD = """Xk9…"""`): a
    // value of one word inside is the value; words with blanks between them are a
    // docstring's prose. (A string whose value starts on the next line is beyond the
    // assignment's window, its line: not found.)
    if let Some(quote) = ["\"\"\"", "'''"]
        .iter()
        .find(|q| text[start..].starts_with(**q))
    {
        let from = start + 3;
        let close = text[from..].find(quote).map_or(text.len(), |o| from + o);
        let inner = &text[from..close];
        let word = inner.trim_matches(|c: char| c.is_ascii_whitespace());
        if !word.is_empty() && !word.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        {
            let at = from + (inner.len() - inner.trim_start().len());
            push_value(name, text, at, min, out);
        }
        return;
    }
    let Some(range) = value_extent(text, start) else {
        return;
    };
    // A triple-quoted string with a prefix opening at the end of the line (`token_end =
    // r'''`): its value is on the next lines, beyond the assignment's window.
    if text[range.clone()]
        .trim_start_matches(['r', 'R', 'b', 'B', 'f', 'F', 'u', 'U'])
        .len()
        == 3
        && matches!(
            text[range.clone()].trim_start_matches(['r', 'R', 'b', 'B', 'f', 'F', 'u', 'U']),
            "'''" | "\"\"\""
        )
    {
        return;
    }
    // Python's string prefixes (`f"{self.token}"`, `b'...'`): the value is the string.
    if string_prefix(text, range.clone()) {
        push_value(name, text, range.end, min, out);
        return;
    }
    // A `'` is no value's end, so a prefix before one is read here (`r'[^\W\d]\w*'`).
    let prefix = text.as_bytes()[range.clone()]
        .iter()
        .take(3)
        .position(|&c| c == b'\'')
        .filter(|&at| at > 0 && string_prefix(text, range.start..range.start + at));
    if let Some(at) = prefix {
        push_value(name, text, range.start + at, min, out);
        return;
    }
    // `(await fs.readdir(dir)).filter(…)`: an expression in parentheses is code.
    if matches!(
        &text[range.clone()],
        "(await" | "(new" | "(yield" | "function" | "function(" | "async" | "lambda"
    ) {
        return;
    }
    // A conditional (`isProd ? "Pr0dPw9" : "devPw9"`): each branch's literal is a value the
    // name may be given.
    if push_branches(name, text, range.start, out) {
        return;
    }
    // `await`, `new`: the value is the expression after the keyword, judged as any value is
    // (`new Token("Xk9v…")` loses a key-shaped literal; `new Foo(bar)` is code).
    if matches!(&text[range.clone()], "await" | "new" | "yield")
        && let Some(blank) = text[range.end..].find(|c: char| c != ' ' && c != '\t')
        && blank > 0
    {
        push_value(name, text, range.end + blank, min, out);
        return;
    }
    // A cast of a literal (`(String) "Hunter2Pw9"`, `(char*)"…"`): the literal is the value.
    let value = &text[range.clone()];
    if value.len() > 2
        && value.starts_with('(')
        && value.ends_with(')')
        && value[1..value.len() - 1]
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'*' | b' '))
        && value.as_bytes()[1].is_ascii_alphabetic()
        && let Some(blank) = text[range.end..].find(|c: char| c != ' ' && c != '\t')
        && matches!(text.as_bytes()[range.end + blank], b'"' | b'\'')
    {
        push_value(name, text, range.end + blank, min, out);
        return;
    }
    // A YAML tag (`!Ref DBPassword`, `!!binary c2Vj…`, `!vault |`): the tag is no value. The
    // reference of a CloudFormation function is a name in the template, code; any other tag's
    // value is the word after it, judged as the value.
    // Tags after tags are skipped in a loop, not a call each: a line of them is not a stack.
    let mut tagged = range.clone();
    while let Some(tag) = yaml_tag(&text[tagged.clone()])
        && let Some(blank) = text[tagged.end..].find(|c: char| c != ' ' && c != '\t')
        && blank > 0
    {
        if CLOUDFORMATION_REFERENCES.contains(&tag) {
            return;
        }
        match value_extent(text, tagged.end + blank) {
            Some(next) if yaml_tag(&text[next.clone()]).is_some() => tagged = next,
            _ => return push_value(name, text, tagged.end + blank, min, out),
        }
    }
    // An optional value that is there (`password: Some("…")` as Rust's `{:?}` prints a
    // struct, Scala's `Some("…")`, `Ok("…")`): the wrapper is no call, its literal is the
    // value, whatever its shape.
    if let Some(literal) = wrapped_literal(text, range.start) {
        if !literal.is_empty() && !is_stand_in(&text[literal.clone()]) {
            out.push(literal);
        }
        return;
    }
    // A call given a literal (`SecretStr("…")`, `[]byte("…")`): the call is code, its literal
    // the secret when it has a key's shape. The unquoted value holds the call's `(`.
    if memchr::memchr(b'(', &text.as_bytes()[range.clone()]).is_some()
        && let Some(literal) = key_literal_argument(text, start)
    {
        out.push(literal);
        return;
    }
    let value = &text[range.clone()];
    // A tuple (`auth=(user, pw)`, `auth=('alice', 'Xk9…')`): its names are code, its
    // literals the values.
    if value.starts_with('(')
        && let Some((items, literals)) = tuple_literals(text, range.start)
    {
        // A pair under a login's name is a user name, then its password.
        let login = items == 2
            && super::code::words(name).any(|w| {
                ["auth", "credential", "credentials", "login", "creds"]
                    .iter()
                    .any(|l| w.eq_ignore_ascii_case(l))
            });
        out.extend(
            literals
                .into_iter()
                .filter(|&(item, _)| !login || item == 1)
                // A function's or a variable's name (`'OAuth': ('oauth_get_sbs',
                // 'oauth_urlencode')`): words joined by `_`. A login's password may be such
                // words (`auth=('alice', 'super_secret_pw')`).
                .filter(|(_, r)| login || !is_snake_name(&text[r.clone()]))
                .map(|(_, r)| r),
        );
        return;
    }
    // A shell array (`API_KEYS=(k1 k2)`): every item.
    if value.starts_with('(')
        && let Some(items) = shell_array(text, range.start)
    {
        if !items.is_empty() {
            out.push(items);
        }
        return;
    }
    // `token = [ "Xk9v…" ]`: a literal that opens a structure is code, and its first
    // element goes when it has a key's shape (a key or a name in it stays: `{"token": …}`,
    // `[("token", …)]`).
    if value.bytes().all(|c| matches!(c, b'[' | b'(' | b'{')) {
        let blanks = text[range.end..]
            .bytes()
            .take_while(|&c| c == b' ' || c == b'\t')
            .count();
        if let Some(literal) = key_literal(text, range.end + blanks) {
            out.push(literal);
        }
        return;
    }
    if value.chars().nth(min.saturating_sub(1)).is_none()
        || value_exempt(name, value, &text[start..])
        || (range.start == start && named_after(name, value))
    {
        return;
    }
    // A quoted value: also exempt when the quotes hold code.
    out.push(range);
}

/// A string literal of a tuple: its item's place, and its content's span.
type ItemLiteral = (usize, Range<usize>);

/// How many items the tuple whose `(` is at `open` has, and its string literals (not
/// stand-ins) with their places, when it is one of two items or more, each a name (`user`,
/// `self.pw`), a number or a string literal.
fn tuple_literals(text: &str, open: usize) -> Option<(usize, Vec<ItemLiteral>)> {
    let starts = argument_starts(text, open + 1)?;
    if starts.len() < 2 {
        return None;
    }
    let b = text.as_bytes();
    let mut literals = Vec::new();
    for (item, &at) in starts.iter().enumerate() {
        let end = match quoted_at(text, at) {
            Some(r) => {
                if !r.is_empty() && !is_stand_in(&text[r.clone()]) {
                    literals.push((item, r.clone()));
                }
                r.end + 1
            }
            None => {
                let word = b[at..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.'))
                    .count();
                // A name a person wrote, or a number: a random run (`(Xk9vQ2mLp7Rz, x)`) is
                // no name, and the tuple is then a value as written.
                let item = &text[at..at + word];
                if word == 0
                    || !(item.bytes().all(|c| c.is_ascii_digit() || c == b'.')
                        || item.split('.').all(super::code::is_word))
                {
                    return None;
                }
                at + word
            }
        };
        // Nothing but blanks after an item, up to its `,` or the tuple's `)`.
        let next = b[end..].iter().find(|c| !matches!(c, b' ' | b'\t'))?;
        if !matches!(next, b',' | b')') {
            return None;
        }
    }
    Some((starts.len(), literals))
}

/// The items of the shell array whose `(` is at `open` (`(k1 k2 "k 3")`, ending its line or
/// command); none (an empty range) when each is a reference (`($A $B)`).
fn shell_array(text: &str, open: usize) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let len = b[open + 1..]
        .iter()
        .take(1024)
        .position(|&c| matches!(c, b')' | b'(' | b',' | b'=' | b'|' | b'&' | b'\n' | b'\r'))?;
    let close = open + 1 + len;
    if b[close] != b')' {
        return None;
    }
    let after = b[close + 1..]
        .iter()
        .position(|&c| c != b' ' && c != b'\t')
        .map(|o| b[close + 1 + o]);
    if !matches!(after, None | Some(b'\n' | b'\r' | b';' | b'#')) {
        return None;
    }
    let inner = &text[open + 1..close];
    let words: Vec<&str> = inner.split_ascii_whitespace().collect();
    if words.len() < 2 {
        return None;
    }
    if words
        .iter()
        .all(|w| is_shell_reference(w.trim_matches(['"', '\''])))
    {
        return Some(open..open);
    }
    let lead = inner.len() - inner.trim_start().len();
    Some(open + 1 + lead..open + 1 + inner.trim_end().len())
}

/// The literals of a conditional's branches at `start` given to `name`, each judged as a
/// quoted value of four characters or more: whether `start` holds a conditional with one.
fn push_branches(name: &str, text: &str, start: usize, out: &mut Vec<Range<usize>>) -> bool {
    let branches = conditional_literals(text, start);
    for literal in &branches {
        let value = &text[literal.clone()];
        if value.chars().nth(3).is_some()
            && !is_stand_in(value)
            && !value_exempt(name, value, &text[literal.start - 1..])
        {
            out.push(literal.clone());
        }
    }
    !branches.is_empty()
}

/// The quoted literals of the branches of a conditional whose condition is the word at
/// `start` (`isProd ? "a" : "b"`, `prod ? process.env.KEY : 'dev'`), or of a default after it
/// (`token ?? "…"`, `input || "…"`, `arg or "…"`). Empty when the word is followed by none of
/// these, or no branch is a literal. Read from the word's end only: a value costs this one
/// look.
fn conditional_literals(text: &str, start: usize) -> Vec<Range<usize>> {
    let b = text.as_bytes();
    let word = b[start..]
        .iter()
        .take(LOOK_AROUND)
        .take_while(|c| {
            !matches!(
                c,
                b' ' | b'\t' | b'\n' | b'\r' | b'"' | b'\'' | b'`' | b';' | b'='
            )
        })
        .count();
    if word == 0 {
        return Vec::new();
    }
    let at = start + word;
    let after = &text[at..];
    let literal = |from: usize| quoted_at(text, from).filter(|r| !r.is_empty());
    if let Some(op) = [" ?? ", " || ", " or "]
        .iter()
        .find(|op| after.starts_with(**op))
    {
        return literal(at + op.len()).into_iter().collect();
    }
    if !after.starts_with(" ? ") {
        return Vec::new();
    }
    let first = at + 3;
    let (first_end, mut found) = match quoted_at(text, first) {
        Some(r) => (r.end + 1, vec![r]),
        None => {
            let word = b[first..]
                .iter()
                .take(LOOK_AROUND)
                .take_while(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r' | b'"' | b'\'' | b'`'))
                .count();
            (first + word, Vec::new())
        }
    };
    if !text[first_end.min(text.len())..].starts_with(" : ") {
        return Vec::new();
    }
    found.extend(literal(first_end + 3));
    found.retain(|r| !r.is_empty());
    found
}

/// The string literal an option's or a result's wrapper at `start` holds (`Some("…")`,
/// `Some('…')`, `Ok("…")`, also round a conversion: `Some("…".to_string())`,
/// `Some(String::from("…"))`): the content of its quotes.
fn wrapped_literal(text: &str, start: usize) -> Option<Range<usize>> {
    let rest = &text[start..];
    let after = ["Some(", "Ok("]
        .iter()
        .find(|w| rest.starts_with(**w))?
        .len();
    let inner = &rest[after..];
    let from = inner
        .strip_prefix("String::from(")
        .map_or(after, |_| after + 13);
    quoted_at(text, start + from)
}

/// The literal a call or conversion at `start` is given first, when it has a key's shape:
/// `SecretStr("Xk9v…")`, `[]byte("…")`, `decode('…')`: a callee without blanks or quotes, its
/// `(`, then a [`key_literal`]. Other literals (`os.getenv("API_KEY")`,
/// `open("keys/prod.pem")`) are left to the call's own judgement, which keeps code.
fn key_literal_argument(text: &str, start: usize) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let callee = b[start..]
        .iter()
        .take(128)
        .position(|&c| c == b'(' || c.is_ascii_whitespace() || matches!(c, b'"' | b'\'' | b'`'))?;
    let open = start + callee;
    if callee == 0 || b[open] != b'(' {
        return None;
    }
    key_literal(text, open + 1)
}

/// The words before `key` that name a key which is not a secret: a public one, a database's
/// or a store's key (a name, a path or an id), a cache's or a request's.
pub(crate) const NOT_SECRET_KEYS: &[&str] = &[
    "public",
    "pub",
    "publishable",
    "primary",
    "partition",
    "sort",
    "range",
    "hash",
    "cache",
    "idempotency",
    "foreign",
    "object",
    "s3",
    "host",
    "ssh",
    "map",
    "row",
    "lookup",
    "dedup",
    "routing",
    "shard",
    "group",
    "message",
    "index",
    "cursor",
    "page",
    "sequence",
    "unique",
    "composite",
    "natural",
    "surrogate",
    "join",
    "dict",
    "tenant",
    "user",
    "item",
    "entity",
    "field",
    "column",
    "property",
    "record",
    "resource",
    "label",
    "translation",
    "i18n",
    // GnuPG's key options, given a key's id or fingerprint, both public (`gpg --recv-keys
    // 4ED778F5…`, as Dockerfiles that check a download's signature run it).
    "recv",
    "send",
    "search",
    "refresh",
    "list",
    "delete",
    "edit",
    "lsign",
    "trusted",
];

/// A value of a key's shape under a name ending in `_key` or `-key` (rule `key-named-value`,
/// a vendor's key named after its vendor: `paymongo_key`, `VOODOO_KEY`): the value, when it
/// looks random (letters and digits both, a key's entropy) and the word before `key` is not
/// one of [`NOT_SECRET_KEYS`]; a call is left.
/// Whether `name` ends in the word `key` after a separator (`AUTH_KEY`, `acme-key`,
/// `stripe.key`), as rule `key-named`'s names do.
fn ends_in_key(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() > 4
        && b[b.len() - 3..].eq_ignore_ascii_case(b"key")
        && matches!(b[b.len() - 4], b'_' | b'-' | b'.')
}

fn key_named(text: &str, name: &str, v: Range<usize>, quoted: bool, out: &mut Vec<Range<usize>>) {
    let word = name[..name.len() - 3]
        .trim_end_matches(['_', '-', '.'])
        .rsplit(['_', '-', '.'])
        .next()
        .unwrap_or("");
    if NOT_SECRET_KEYS.iter().any(|w| word.eq_ignore_ascii_case(w)) {
        return;
    }
    let b = text.as_bytes();
    // A call (`cache_key = computeKeyFor2024(x)`) is code.
    if b.get(v.end) == Some(&b'(') || !super::vendors::looks_random(&b[v.clone()]) {
        return;
    }
    // The whole value, whatever it holds past the key's characters (`…Xk9!@x`): a quoted one
    // to its closing quote, an unquoted one to the blank, quote or separator after it.
    let end = if quoted {
        closing_quote(b, v.start, b[v.start - 1])
    } else {
        v.end
            + b[v.end..]
                .iter()
                .take_while(|c| {
                    !c.is_ascii_whitespace()
                        && !matches!(c, b',' | b';' | b'"' | b'\'' | b')' | b']' | b'}')
                })
                .count()
    };
    out.push(v.start..end);
}

/// The words docs say a password "is" without giving one.
const PROSE_NOT_PASSWORDS: &[&str] = &[
    "required",
    "optional",
    "empty",
    "blank",
    "none",
    "null",
    "hidden",
    "invalid",
    "incorrect",
    "correct",
    "wrong",
    "set",
    "unset",
    "redacted",
    "masked",
    "encrypted",
    "hashed",
    "changed",
    "expired",
    "valid",
    "missing",
    "ignored",
    "sensitive",
    "secret",
];

/// A password given in quotes in prose (rule `password-is-quoted`), or a literal given to a
/// secret's wrapper (`SecretStr("…")`, rule `secret-wrapper`; the quote `q` before `at`):
/// the quoted text (3 characters or more, to its closing quote on its line), unless a stand-in
/// or one of [`PROSE_NOT_PASSWORDS`].
fn quoted_prose(text: &str, q: u8, at: usize, out: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    let end = closing_quote(b, at, q);
    if b.get(end) != Some(&q) {
        return;
    }
    let v = &text[at..end];
    if v.chars().count() >= 3
        && !is_stand_in(v)
        && !PROSE_NOT_PASSWORDS
            .iter()
            .any(|w| v.eq_ignore_ascii_case(w))
    {
        out.push(at..end);
    }
}

/// A literal compared with a secret's name (rule `secret-comparison`, the quote `q` before
/// `at`): the literal, unless it is a stand-in, or the name is of a kind or a type rather than
/// the secret (`tokenType == "Bearer"`). A password's (or a secret's) may be words
/// (`"open-sesame"`, 3 characters or more); under other names (`token`, `key`) the literal
/// must have a key's shape (8 characters or more, letters and digits both, no blank), as a
/// parser compares its `token` with `"}"` and `"return"`.
fn comparison(text: &str, name: &str, q: u8, at: usize, out: &mut Vec<Range<usize>>) {
    let last = name
        .rsplit(['.', '[', ']', '\'', '"'])
        .find(|p| !p.is_empty())
        .unwrap_or(name);
    if !name_is_secret(last) {
        return;
    }
    let b = text.as_bytes();
    let end = closing_quote(b, at, q);
    if end <= at || b.get(end) != Some(&q) {
        return;
    }
    let literal = &text[at..end];
    // A literal that spells the expression's own path or its end names it, as a test's
    // fixture does (`assertEqual(creds.consumer.secret, "consumer.secret")`).
    if literal.len() >= 3
        && name
            .to_ascii_lowercase()
            .ends_with(&literal.to_ascii_lowercase())
    {
        return;
    }
    let shaped = if is_password_name(last) {
        literal.chars().count() >= 3
    } else {
        // A key's shape: letters with digits or with symbols no name or path holds
        // (`m{{h}o)p$…`), no blank.
        literal.len() >= 8
            && literal.bytes().any(|c| {
                c.is_ascii_digit() || (c.is_ascii_punctuation() && !b"-_./:@".contains(&c))
            })
            && literal.bytes().any(|c| c.is_ascii_alphabetic())
            && !literal.bytes().any(|c| c.is_ascii_whitespace())
    };
    if shaped && !is_stand_in(literal) {
        out.push(at..end);
    }
}

/// [`Refine::SqlInsert`]: `columns` of an `INSERT`, its rows from `from` in `text`. A row's
/// values are split at its commas outside quotes and parentheses; a literal in `'…'` (with
/// SQL's `''` for a quote) or `"…"` at a secret column's place is redacted, a number, a
/// `NULL`, a call (`crypt('…', gen_salt('bf'))` is read inside: its first literal) or a
/// parameter (`?`, `$1`, `:pw`) is not.
fn sql_insert(text: &str, columns: &str, from: usize, out: &mut Vec<Range<usize>>) {
    let secret: Vec<bool> = columns
        .split(',')
        .map(|c| name_is_secret(c.trim().trim_matches(['`', '"', '[', ']', '\''])))
        .collect();
    if !secret.contains(&true) {
        return;
    }
    let b = text.as_bytes();
    let mut i = from;
    // Rows: `(` values `)`, separated by `,`; at most a thousand, within the line.
    for _ in 0..1000 {
        i = skip_blanks(b, i);
        if b.get(i) != Some(&b'(') {
            return;
        }
        i += 1;
        let mut place = 0;
        let mut depth = 0usize;
        // The first literal of the value at the current place.
        let mut first_literal: Option<Range<usize>> = None;
        loop {
            let Some(&c) = b.get(i) else { return };
            match c {
                b'\'' | b'"' => {
                    let start = i + 1;
                    let mut j = start;
                    // SQL doubles a quote inside a literal; a backslash escapes one in MySQL.
                    loop {
                        match b.get(j) {
                            None | Some(b'\n') => return,
                            Some(b'\\') => j += 2,
                            Some(&q) if q == c && b.get(j + 1) == Some(&c) => j += 2,
                            Some(&q) if q == c => break,
                            Some(_) => j += 1,
                        }
                    }
                    if first_literal.is_none() {
                        first_literal = Some(start..j);
                    }
                    i = j + 1;
                }
                b'(' => {
                    depth += 1;
                    i += 1;
                }
                b')' if depth > 0 => {
                    depth -= 1;
                    i += 1;
                }
                b',' | b')' => {
                    if secret.get(place) == Some(&true)
                        && let Some(lit) = first_literal.take()
                        && !lit.is_empty()
                        && !is_stand_in(&text[lit.clone()])
                    {
                        out.push(lit);
                    }
                    first_literal = None;
                    place += 1;
                    i += 1;
                    if c == b')' {
                        break;
                    }
                }
                b'\n' => return,
                _ => i += 1,
            }
        }
        i = skip_blanks(b, i);
        if b.get(i) != Some(&b',') {
            return;
        }
        i += 1;
    }
}

/// [`Refine::NamedPair`]: `literal` at `at` is the value of the secret named `name` unless
/// it reads as a name or a label itself (`["access_token", "refresh_token"]`,
/// `("password", "Password")`, `("--token", "-t")`): it must hold no blank, be no secret's
/// name, and hold a digit, a symbol other than `_` and `-`, or a capital after its first
/// character beside small letters (a constant's capitals, `('AUTH', 'SELECTED')`, are a
/// name).
fn named_pair(name: &str, literal: &str, at: Range<usize>, out: &mut Vec<Range<usize>>) {
    if pair_value_is_secret(name, literal) {
        out.push(at);
    }
}

/// Whether `literal`, paired with `name` ([`Refine::NamedPair`]; a JSON array of the two),
/// is that secret's value.
pub(crate) fn pair_value_is_secret(name: &str, literal: &str) -> bool {
    let name = name.trim_start_matches('-');
    // A name as code writes one (a JSON array's first string may be any text).
    let is_name = name.bytes().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
    if !is_name || !name_is_secret(name) || literal.len() < 4 || literal.len() > 256 {
        return false;
    }
    let b = literal.as_bytes();
    let lower = b.iter().any(|c| c.is_ascii_lowercase());
    let marked = b.iter().enumerate().any(|(i, &c)| {
        c.is_ascii_digit()
            || (c.is_ascii_punctuation() && !matches!(c, b'_' | b'-'))
            || (i > 0 && lower && c.is_ascii_uppercase())
    });
    marked
        && !b.iter().any(|c| c.is_ascii_whitespace())
        && !literal.eq_ignore_ascii_case(name)
        && !name_is_secret(literal)
        && !is_stand_in(literal)
}

/// The calls whose password is their third argument, after a place (a connection's URL or
/// host, a tenant, an identity); the rest take a user name, then the password.
const PASSWORD_THIRD: &[&str] = &[
    "getconnection",
    "mysqli",
    "pdo",
    "mysql_connect",
    "ldap_bind",
    "ftp_login",
    "plainauth",
    "clientsecretcredential",
    "directoryentry",
];

/// A credential given to a call by its place (rule `credential-call`; `m` ends at the call's
/// `(`): the password argument when it is a string literal (Rust's `Some("…")` too) and not a
/// stand-in (`"<password>"`, `"${PW}"`, `"%s"`, the word `password`). A call whose
/// arguments are not all read (a bracket not closed within 1 KiB) is left alone; JDBC's
/// `getConnection` of two arguments (a data source's: user, password) takes its second.
fn call_argument(text: &str, m: Range<usize>, out: &mut Vec<Range<usize>>) {
    let callee = text[m.clone()].to_ascii_lowercase();
    let Some(args) = argument_starts(text, m.end) else {
        return;
    };
    // A literal argument's content, seen through a wrapper (`Some("…")`, Go's `[]byte("…")`,
    // Python's bytes `b'…'`).
    let literal = |i: usize| {
        let rest = &text[i..];
        let at = ["Some(", "[]byte(", "b", "B"]
            .iter()
            .find(|w| {
                rest.starts_with(*w)
                    && matches!(rest.as_bytes().get(w.len()), Some(b'"' | b'\'' | b'`'))
            })
            .map_or(i, |w| i + w.len());
        quoted_at(text, at).filter(|r| !r.is_empty() && !is_stand_in(&text[r.clone()]))
    };
    let chosen = if callee.contains("hmac") {
        // An HMAC's key: the first literal that is not the name of the hash (`hmac.new(b'…',
        // msg, sha256)`, `createHmac('sha256', '…')`, `OpenSSL::HMAC.hexdigest('SHA256', '…',
        // data)`, Go's `hmac.New(sha256.New, []byte("…"))`).
        args.iter()
            .take(3)
            .find_map(|&i| literal(i).filter(|r| !is_hash_name(&text[r.clone()])))
    } else if callee.starts_with(".auth") {
        // A client's `auth`: the password alone, or a user and the password (`.auth('user',
        // '…')`), or a token and its options (`.auth('…', { type: 'bearer' })`).
        match args.get(1) {
            None => args.first().and_then(|&i| literal(i)),
            Some(&i) if text[i..].starts_with('{') => literal(args[0]),
            Some(&i) => literal(i),
        }
    } else {
        let third = PASSWORD_THIRD.iter().any(|c| callee.contains(c));
        let want = if third && !(callee.contains("getconnection") && args.len() == 2) {
            2
        } else {
            1
        };
        args.get(want).and_then(|&i| literal(i))
    };
    out.extend(chosen);
}

/// The name an expression starting at `at` is assigned to on its line (`NAME = ` or `NAME: `
/// before it, with the expression's receiver: `process.` of `process.env`, `os.`), not a
/// comparison's (`==`, `!=`, `<=`); a name's closing quote or bracket may come before the
/// sign (`$cfg['password'] = `, `"password": `).
fn assigned_before(text: &str, at: usize) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let mut i = at;
    // The receiver: `process.`, `os.`, `std::`, `System.`, at most 24 bytes.
    while i > 0
        && at - i < 24
        && (b[i - 1].is_ascii_alphanumeric() || matches!(b[i - 1], b'.' | b':' | b'_'))
    {
        i -= 1;
    }
    while i > 0 && matches!(b[i - 1], b' ' | b'\t') {
        i -= 1;
    }
    match b.get(i.checked_sub(1)?)? {
        b'=' => {
            i -= 1;
            if i > 0 && matches!(b[i - 1], b'=' | b'!' | b'<' | b'>') {
                return None;
            }
            if i > 0 && b[i - 1] == b':' {
                i -= 1;
            }
        }
        b':' => i -= 1,
        _ => return None,
    }
    while i > 0 && matches!(b[i - 1], b' ' | b'\t') {
        i -= 1;
    }
    while i > 0 && matches!(b[i - 1], b'"' | b'\'' | b']') {
        i -= 1;
    }
    let end = i;
    while i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        i -= 1;
    }
    (i < end).then_some(i..end)
}

/// Whether a name's colon and what follows are a sentence's (`# First pass: determine the
/// length`, `TypeError("pwd: expected bytes, got %s")`), not a setting: the name comes after a
/// word and a blank, or inside a string's quote, and a lowercase word then another word
/// follow its colon. A setting's name starts its line (`password: correct horse battery`, a
/// passphrase of words, still goes).
fn is_prose_after(before: &str, rest: &str) -> bool {
    let b = before.as_bytes();
    let in_sentence = match b.last() {
        Some(b' ') => b.len() >= 2 && b[b.len() - 2].is_ascii_alphabetic(),
        Some(b'"' | b'\'') => true,
        _ => false,
    };
    if !in_sentence {
        return false;
    }
    let r = rest.as_bytes();
    let first = r.iter().take_while(|c| c.is_ascii_lowercase()).count();
    let second = r.get(first + 1..).map_or(0, |n| {
        n.iter().take_while(|c| c.is_ascii_alphabetic()).count()
    });
    first >= 2 && r.get(first) == Some(&b' ') && second >= 2
}

/// Whether `v` names a hash function (`sha256`, `SHA-512`, `md5`), as an HMAC's first
/// arguments do.
fn is_hash_name(v: &str) -> bool {
    let v = v.to_ascii_lowercase().replace(['-', '_'], "");
    [
        "sha1",
        "sha224",
        "sha256",
        "sha384",
        "sha512",
        "sha3256",
        "sha3512",
        "md5",
        "sm3",
        "blake2b512",
        "blake2s256",
    ]
    .contains(&v.as_str())
}

/// The content of the string literal whose opening quote is at `at`, when it closes on its
/// line.
fn quoted_at(text: &str, at: usize) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let q = *b.get(at)?;
    if !matches!(q, b'"' | b'\'' | b'`') {
        return None;
    }
    let end = closing_quote(b, at + 1, q);
    (b.get(end) == Some(&q)).then_some(at + 1..end)
}

/// Where each argument of the call whose arguments start at `from` (after its `(`) starts,
/// past blanks and line breaks, read over strings and brackets to the call's `)`; `None` if
/// that is not reached within 1 KiB, or a string does not close on its line.
fn argument_starts(text: &str, from: usize) -> Option<Vec<usize>> {
    let b = text.as_bytes();
    let limit = (from + 1024).min(b.len());
    let mut starts = Vec::new();
    let mut i = from;
    let mut depth = 0usize;
    let mut fresh = true;
    while i < limit {
        let c = b[i];
        if fresh && !c.is_ascii_whitespace() {
            if c == b')' && starts.is_empty() {
                return Some(starts);
            }
            starts.push(i);
            fresh = false;
        }
        match c {
            b'"' | b'\'' | b'`' => {
                let end = closing_quote(b, i + 1, c);
                if b.get(end) != Some(&c) {
                    return None;
                }
                i = end;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return Some(starts),
            },
            b',' if depth == 0 => fresh = true,
            _ => {}
        }
        i += 1;
    }
    None
}

/// A literal written where a password goes in docs, tests and templates, not a password: a
/// placeholder, a reference, a format's slot, the marker, or the word for it.
fn is_stand_in(v: &str) -> bool {
    is_placeholder(v)
        || is_prompt(v)
        || is_shell_reference(v)
        || holds_reference(v)
        || v == MARKER
        || ["password", "passwd", "pass", "pwd", "secret"]
            .iter()
            .any(|w| v.eq_ignore_ascii_case(w))
}

/// Whether `v` holds a template's reference: `{{ … }}` or `${ … }` closed, with no brace inside
/// and its brackets balanced (`${DB_PASSWORD}`, `{{ .Values.pw }}`, `${cfg.get("pw")}`). A
/// secret holding those characters (`m{{h}o)p${e]nob(…}}`) is not one.
fn holds_reference(v: &str) -> bool {
    let b = v.as_bytes();
    let well_formed = |inner: &[u8]| {
        let mut depth = 0i32;
        for &c in inner {
            match c {
                b'{' | b'}' => return false,
                b'(' | b'[' => depth += 1,
                b')' | b']' => {
                    depth -= 1;
                    if depth < 0 {
                        return false;
                    }
                }
                _ => {}
            }
        }
        depth == 0 && !inner.iter().all(u8::is_ascii_whitespace)
    };
    (0..b.len().saturating_sub(1)).any(|i| match (b[i], b[i + 1]) {
        (b'{', b'{') => memchr::memmem::find(&b[i + 2..], b"}}")
            .is_some_and(|end| well_formed(&b[i + 2..i + 2 + end])),
        (b'$', b'{') => {
            memchr::memchr(b'}', &b[i + 2..]).is_some_and(|end| well_formed(&b[i + 2..i + 2 + end]))
        }
        _ => false,
    })
}

/// The content of the quoted literal at `at` (its opening quote), when it has a key's shape:
/// 12 to 512 letters, digits and base64's `+/=` that look random.
fn key_literal(text: &str, at: usize) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let quote = *b.get(at)?;
    if !matches!(quote, b'"' | b'\'' | b'`') {
        return None;
    }
    let from = at + 1;
    let end = closing_quote(b, from, quote);
    let literal = &b[from..end];
    // No `-`, `_` or `.`: those join words and ids (`new-project-456`); the keys that hold
    // them have a provider's prefix, which the provider rules know.
    let shaped = (12..=512).contains(&literal.len())
        && b.get(end) == Some(&quote)
        && literal
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='))
        && super::vendors::looks_random(literal);
    shaped.then_some(from..end)
}

/// A credential header's value: quoted, a list (`["a", "b"]`, Go's `[a b]`), or the rest of
/// the line (stopping at the quote that opened the header, as in `-H 'Cookie: a=b'`).
/// `start` is where group `s` starts; `lq` the quote before the name (group `lq`), `cq`
/// whether a quote closes the name (group `cq`).
fn header_value(text: &str, start: usize, lq: Option<u8>, cq: bool, out: &mut Vec<Range<usize>>) {
    let bytes = text.as_bytes();
    // Inside a string that holds the header's name: a scheme alone, or nothing, before that
    // string closes (`"Proxy-Authorization: Basic " + base64.b64encode(auth)`, `the leading
    // "Cookie:" token`): the credential is code's, appended, or there is none.
    if let Some(q) = lq
        && !cq
        && let Some(close) =
            memchr::memchr(q, &bytes[start..(start + LOOK_AROUND).min(bytes.len())])
        && (bytes[start..start + close].iter().all(|c| *c == b' ')
            || is_scheme_alone(&text[start..start + close]))
    {
        return;
    }
    // A blank before the colon and code after it: no header but a loop's variable (Java's
    // `for (HttpCookie cookie : cookieJar.get(uri)) {`). A header's name ends at its colon;
    // PowerShell's aligned `Authorization : Bearer …` is text, and stays a header.
    let colon_at = text[..start]
        .trim_end_matches([' ', '\t'])
        .len()
        .saturating_sub(1);
    if colon_at > 0 && matches!(bytes[colon_at - 1], b' ' | b'\t') && is_code(&text[start..]) {
        return;
    }
    let first = bytes[start];
    if first == b'[' {
        let close = bytes[start..]
            .iter()
            .position(|&b| b == b']')
            .map_or(bytes.len(), |o| start + o);
        let inner = start + 1..close;
        let body = &text[inner.clone()];
        if body.contains(['"', '\'']) {
            let mut i = inner.start;
            while i < inner.end {
                let b = bytes[i];
                if b == b'"' || b == b'\'' {
                    let end = closing_quote(bytes, i + 1, b).min(inner.end);
                    if end > i + 1 && &text[i + 1..end] != MARKER {
                        out.push(i + 1..end);
                    }
                    i = end + 1;
                } else {
                    i += 1;
                }
            }
        } else {
            let trimmed = body.trim();
            if !trimmed.is_empty() && trimmed != MARKER && !trimmed.starts_with('[') {
                let lead = body.len() - body.trim_start().len();
                out.push(inner.start + lead..inner.start + lead + trimmed.len());
            }
        }
        return;
    }
    let (quote, from) = match first {
        b'"' | b'\'' | b'`' => (Some(first), start + 1),
        b'b' if matches!(bytes.get(start + 1), Some(b'"' | b'\'')) => {
            (Some(bytes[start + 1]), start + 2)
        }
        _ => (None, start),
    };
    let end = match quote {
        Some(q) => closing_quote(bytes, from, q),
        None => {
            let line_end = bytes[from..]
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
                .map_or(bytes.len(), |o| from + o);
            match lq {
                Some(q) if !cq => closing_quote(bytes, from, q).min(line_end),
                _ => line_end,
            }
        }
    };
    let value = text[from..end].trim_end();
    if value.is_empty() || value == MARKER {
        return;
    }
    if quote.is_none()
        && (is_type_or_literal(value)
            || is_shell_reference(value.trim_end_matches([';', ',', ')']))
            || is_type_or_literal(first_word(value)))
    {
        return;
    }
    // Another header's name (`$mode eq 'proxy' ? 'Proxy-Authorization' : 'Authorization'`),
    // and a docstring's field (`:param cookie: The cookie header.`).
    if [
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
    ]
    .iter()
    .any(|h| {
        value
            .trim_matches(['"', '\'', ';', ','])
            .eq_ignore_ascii_case(h)
    }) || {
        let line = line_before(text, start).trim_start();
        [":param ", ":type ", "@param "]
            .iter()
            .any(|p| line.starts_with(p))
    } {
        return;
    }
    // A path of code (`cookie::CookieStore`), a type (`cookie: &Jar,`), or a call given to a
    // field named for a header (`cookie: Some(Cookie::new(…)),`): no header's value.
    if quote.is_none()
        && (value.starts_with(':')
            || is_rust_type_or_array(value)
            || is_rust_expression(value)
            || is_call_or_path(value))
    {
        return;
    }
    // `Authorization: Bearer %s`, `Bearer {token}`, `Bearer access_token`: a template's
    // scheme and slot; reST's `authorization::` opens a literal block.
    if is_scheme_and_slot(value)
        || is_template_slot(value)
        || is_format_directive(value)
        || value.bytes().all(|c| c.is_ascii_punctuation())
        // A scheme alone, the string closing after it (`"Proxy-Authorization: Basic " +
        // base64.b64encode(auth)`): the credential is code's, appended.
        || is_scheme_alone(value)
    {
        return;
    }
    // `{'Authorization': auth_token}`: a quoted header name is a key in code, and an unquoted
    // word or member path after it a variable (data would be quoted).
    let name_quoted = lq.is_some() && cq;
    let word = value.trim_end_matches([',', ';', '}', ')']);
    let snake = is_snake_identifier(word);
    // (`{'Authorization': auth,}`: one lowercase word, ended by the literal's `,` or `}`.)
    let lowercase_word =
        word.len() >= 3 && word.bytes().all(|c| c.is_ascii_lowercase()) && word.len() < value.len();
    if quote.is_none()
        && name_quoted
        && (super::code::is_compound_identifier(word) || snake || lowercase_word || is_code(word))
        && word.len() + 2 >= value.len()
    {
        return;
    }
    out.push(from..from + value.len());
}

/// `htpasswd` with `-b`: the password is the last of the file, user and password arguments
/// (no file with `-n`).
fn htpasswd(caps: &Captures<'_>, text: &str, out: &mut Vec<Range<usize>>) {
    let Some(m) = caps.get(0) else { return };
    // The match runs to the end of the command line, which can hold a second `htpasswd -b`
    // (`... Pw8 htpasswd -b f u Pw9`): each one is its own command with its own password
    // (the second leaked when only the first was read).
    let s = m.as_str();
    let b = s.as_bytes();
    // A command word stands alone (`.htpasswd`, the usual file name, is not one).
    let mut starts: Vec<usize> = memchr::memmem::find_iter(b, b"htpasswd")
        .filter(|&i| {
            let end = i + "htpasswd".len();
            // After a blank, a quote, a shell operator (`\"htpasswd`, `;htpasswd`) or a
            // directory (`/usr/bin/htpasswd`, as the match itself may start), not inside a
            // word (of any script) or a file's name. Read as the match's own start reads it:
            // the second of two commands was a path until the first was redacted, and a
            // second pass redacted its password.
            (i == 0
                || !(b[i - 1].is_ascii_alphanumeric()
                    || b[i - 1] >= 0x80
                    || matches!(b[i - 1], b'.' | b'_' | b'-')))
                && (end == b.len() || b[end].is_ascii_whitespace())
        })
        .collect();
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    starts.push(s.len());
    for w in starts.windows(2) {
        htpasswd_command(m.start() + w[0], &s[w[0]..w[1]], text, out);
    }
}

/// One `htpasswd` command: `s` starts with the command word and lies at `offset` in `text`.
fn htpasswd_command(offset: usize, s: &str, text: &str, out: &mut Vec<Range<usize>>) {
    let mut flags = String::new();
    let mut positional: Vec<Range<usize>> = Vec::new();
    let mut i = 0;
    let bytes = s.as_bytes();
    // Skip the command word itself.
    i += "htpasswd".len();
    while i < bytes.len() {
        if bytes[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let (a, b) = if matches!(bytes[i], b'"' | b'\'') {
            let end = closing_quote(bytes, i + 1, bytes[i]);
            i = end + 1;
            (start + 1, end)
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            (start, i)
        };
        let word = &s[a.min(b)..b];
        if word.starts_with('-') && positional.is_empty() {
            flags.push_str(word);
        } else {
            positional.push(offset + a.min(b)..offset + b);
        }
    }
    if !flags.contains('b') {
        return;
    }
    let want = if flags.contains('n') { 2 } else { 3 };
    if positional.len() >= want {
        let r = positional[want - 1].clone();
        if !r.is_empty() && &text[r.clone()] != MARKER {
            out.push(r);
        }
    }
}

/// The cells of a table's secret columns: the header (group `h`) is split into columns by
/// `|` when the separator line has pipes, else by the separator's runs of dashes (fixed-width
/// tables); a column is secret when its name is a secret's, or when it is `Value` beside a
/// key's name (`KeyName`, Azure's key lists). Rows run to the first blank line.
/// What the tables of one block of lines (no blank line between) have read, so that each row
/// is read a bounded number of times: every separator line under a header starts a table whose
/// rows run to the block's first blank line, and a block of a thousand tables (`| password |
/// x |` over `|---|---|`, again and again) read its rows a thousand times, the square of
/// its length.
#[derive(Default)]
pub(crate) struct Tables {
    /// Where the block the first table with a secret column read ends (its first blank line, or
    /// the text's end), in the whole text.
    block_end: usize,
    /// Each kind of table read over it: whether piped, the columns (for one aligned by
    /// spaces), and each secret column with its name: the same kind reads the same spans.
    kinds: Vec<TableKind>,
}

/// A kind of table ([`Tables`]): piped or not, its columns, its secret columns and their names.
type TableKind = (bool, Vec<Range<usize>>, Vec<(usize, String)>);

#[cfg(test)]
thread_local! {
    /// How many table rows [`table_column`] has read on this thread.
    static TABLE_ROWS_READ: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many kinds of table read a block of rows whole ([`Tables`]).
const TABLE_KINDS_READ_WHOLE: usize = 8;

/// Whether a table's row is a separator line (`|---|---|`, `+----+`, `---- ----`): three dashes
/// and nothing but rule characters.
fn is_separator_row(body: &str) -> bool {
    body.contains("---")
        && body
            .bytes()
            .all(|c| matches!(c, b'-' | b'+' | b'|' | b':' | b'=' | b' ' | b'\t'))
}

/// `table-column`'s spans: the cells under each secret column's name, from the separator to the
/// block's first blank line. `text` starts at `base` in the whole text; `tables` is what the
/// block's tables read before this one: a table of a kind already read over its rows reads
/// nothing (it would find the same cells), and past [`TABLE_KINDS_READ_WHOLE`] kinds one reads
/// only its own rows, up to the next separator line.
fn table_column(
    caps: &Captures<'_>,
    text: &str,
    out: &mut Vec<Range<usize>>,
    tables: &mut Tables,
    base: usize,
) {
    let (Some(h), Some(sep)) = (caps.name("h"), caps.name("sep")) else {
        return;
    };
    // Cells between bars: Markdown's and psql's `|---|---|`, and MySQL's and PrettyTable's
    // bordered tables, whose rule lines cross at `+` (`+------+----------+`) under a header
    // of bars.
    let piped =
        sep.as_str().contains('|') || (sep.as_str().contains('+') && h.as_str().contains('|'));
    // Each column's byte range within a line.
    let columns: Vec<Range<usize>> = if piped {
        let mut cols = Vec::new();
        let mut from = 0;
        for (i, c) in h.as_str().char_indices() {
            if c == '|' {
                cols.push(from..i);
                from = i + 1;
            }
        }
        cols.push(from..h.as_str().len());
        cols
    } else {
        let b = sep.as_str().as_bytes();
        let mut cols = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'-' {
                let start = i;
                while i < b.len() && b[i] == b'-' {
                    i += 1;
                }
                cols.push(start..i);
            } else {
                i += 1;
            }
        }
        // A cell runs to the next column's start (values may be wider than their dashes).
        let starts: Vec<usize> = cols.iter().map(|c| c.start).collect();
        cols.iter()
            .enumerate()
            .map(|(k, c)| c.start..starts.get(k + 1).copied().unwrap_or(usize::MAX))
            .collect()
    };
    let cell = |line: &str, k: usize| -> Option<Range<usize>> {
        if piped {
            let mut from = 0;
            let mut n = 0;
            for (i, c) in line.char_indices() {
                if c == '|' {
                    if n == k {
                        return Some(from..i);
                    }
                    n += 1;
                    from = i + 1;
                }
            }
            (n == k).then_some(from..line.len())
        } else {
            let r = columns.get(k)?;
            let start = r.start.min(line.len());
            let end = r.end.min(line.len());
            (line.is_char_boundary(start) && line.is_char_boundary(end)).then_some(start..end)
        }
    };
    let names: Vec<String> = (0..columns.len())
        .filter_map(|k| cell(h.as_str(), k))
        .map(|r| h.as_str()[r].trim().to_owned())
        .collect();
    let keyed = names.iter().any(|n| n.eq_ignore_ascii_case("keyname"));
    let secret: Vec<usize> = names
        .iter()
        .enumerate()
        .filter(|(_, n)| name_is_secret(n) || (keyed && n.eq_ignore_ascii_case("value")))
        .map(|(k, _)| k)
        .collect();
    if secret.is_empty() {
        return;
    }
    let kind = (
        piped,
        if piped { Vec::new() } else { columns.clone() },
        secret
            .iter()
            .map(|&k| (k, names[k].clone()))
            .collect::<Vec<_>>(),
    );
    let in_block = base + sep.end() < tables.block_end;
    if in_block && tables.kinds.contains(&kind) {
        return;
    }
    // A few kinds read the whole block, as if each were alone; past them, a table reads its
    // own rows only (the nearest header governs a row), so no block is read more than a few
    // times whatever its headers.
    let local = in_block && tables.kinds.len() >= TABLE_KINDS_READ_WHOLE;
    if !in_block {
        tables.kinds.clear();
        tables.block_end = text.len() + base;
    }
    tables.kinds.push(kind);
    let mut at = sep.end();
    let rows = &text[at..];
    let rows = rows.strip_prefix("\r").unwrap_or(rows);
    let rows = rows.strip_prefix('\n').unwrap_or(rows);
    at = text.len() - rows.len();
    for line in rows.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        if body.trim().is_empty() {
            if !local {
                tables.block_end = base + start;
            }
            return;
        }
        if local && is_separator_row(body) {
            return;
        }
        #[cfg(test)]
        TABLE_ROWS_READ.with(|n| n.set(n.get() + 1));
        for &k in &secret {
            let Some(r) = cell(body, k) else { continue };
            let raw = &body[r.clone()];
            let value = raw.trim();
            // Prose in a cell (`the user's token`) describes; a credential is one word.
            if value.len() < 4
                || value.contains(char::is_whitespace)
                || value
                    .chars()
                    .all(|c| matches!(c, '-' | '+' | '|' | ':' | '='))
            {
                continue;
            }
            if value_exempt(&names[k], value, value) {
                continue;
            }
            let lead = raw.len() - raw.trim_start().len();
            let s = start + r.start + lead;
            out.push(s..s + value.len());
        }
    }
}

/// The value of a YAML key with a secret's name and nothing after its colon: a block
/// scalar's lines, or one plain scalar on the next deeper line (not a nested mapping, a list
/// or a comment: `password:` then `  min_length: 12` is a section of settings).
fn yaml_next_line(caps: &Captures<'_>, text: &str, out: &mut Vec<Range<usize>>) {
    let (Some(m), Some(n)) = (caps.get(0), caps.name("n")) else {
        return;
    };
    if !name_is_secret(n.as_str()) {
        return;
    }
    let base = caps.name("i").map_or(0, |i| i.len());
    let block = caps.name("b").is_some();
    let mut at = m.end();
    for line in text[m.end()..].split_inclusive('\n') {
        let start = at;
        at += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        let value = body.trim();
        let lead = body.len() - body.trim_start_matches([' ', '\t']).len();
        if value.is_empty() {
            if block {
                continue;
            }
            return;
        }
        // A list of values (`api_keys:` over `- …` lines, at the name's indentation or
        // deeper): each item, until a line that is not one.
        if !block && lead >= base && value.starts_with("- ") {
            yaml_list_items(n.as_str(), text, start, lead, out);
            return;
        }
        if lead <= base {
            return;
        }
        let span = start + lead..start + lead + value.len();
        if block {
            out.push(span);
            continue;
        }
        let mapping = value.contains(": ") || value.ends_with(':');
        if mapping || value.starts_with(['-', '#', '[', '{']) {
            return;
        }
        if !value_exempt(n.as_str(), value, value) {
            out.push(span);
        }
        return;
    }
}

/// The scalar items of a YAML list under a secret's name, from the line at `from` (each
/// `- item` at indentation `lead`): each that is a value, not code or a placeholder. A mapping
/// item (`- name: db`) or a nested list ends it: those are names of things.
fn yaml_list_items(name: &str, text: &str, from: usize, lead: usize, out: &mut Vec<Range<usize>>) {
    let mut at = from;
    for line in text[from..].split_inclusive('\n') {
        let start = at;
        at += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        let trimmed = body.trim_start_matches([' ', '\t']);
        if body.len() - trimmed.len() != lead {
            return;
        }
        let Some(item) = trimmed.strip_prefix("- ") else {
            return;
        };
        let item = item.trim();
        if item.is_empty()
            || item.contains(": ")
            || item.ends_with(':')
            || item.starts_with(['-', '#', '[', '{', '&', '*', '!'])
        {
            return;
        }
        let after_dash = &trimmed[2..];
        let item_at = start + lead + 2 + (after_dash.len() - after_dash.trim_start().len());
        let mut span = item_at..item_at + item.len();
        let quoted = item.len() >= 2
            && matches!(item.as_bytes()[0], b'"' | b'\'')
            && item.as_bytes()[item.len() - 1] == item.as_bytes()[0];
        let value = if quoted {
            span = span.start + 1..span.end - 1;
            &item[1..item.len() - 1]
        } else {
            item
        };
        // A list's items in lowercase without a digit are names of settings, scopes or files
        // (`password_rules:` over `- min_length`, `token_scopes:` over `- read:org`,
        // `secret_files:` over `- config/master.key`), and a path is one wherever it starts
        // (`- /etc/app/creds.json`, `- ~/.aws/credentials`): a key or a token has capitals or
        // digits. (A single value after a name is more often the secret itself.)
        let named = !value
            .bytes()
            .any(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            || value.starts_with(['/', '~', '.']);
        if !value.is_empty() && !named && !value_exempt(name, value, value) {
            out.push(span);
        }
    }
}

/// Every value under a `data:` or `stringData:` block of YAML `text` (a Kubernetes Secret):
/// the lines indented deeper than the block's name, each `key: value`'s value (a block
/// scalar's lines too).
fn kubernetes_secret_data(text: &str, out: &mut Vec<Range<usize>>) {
    let indent = |line: &str| line.len() - line.trim_start_matches([' ', '\t']).len();
    let mut block: Option<usize> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        let trimmed = body.trim_start_matches([' ', '\t']);
        if trimmed.is_empty() {
            continue;
        }
        let depth = indent(body);
        if let Some(b) = block {
            if depth > b {
                // `key: value`, or a continuation line of a block scalar.
                let value_at = trimmed.find(": ").map_or(depth, |colon| depth + colon + 2);
                let raw = &body[value_at..];
                let value = raw.trim();
                let lead = raw.len() - raw.trim_start().len();
                if !value.is_empty() && !matches!(value, "|" | ">" | "|-" | ">-" | "|+" | ">+") {
                    let s = start + value_at + lead;
                    out.push(s..s + value.len());
                }
                continue;
            }
            block = None;
        }
        if matches!(trimmed.trim_end(), "data:" | "stringData:") {
            block = Some(depth);
        }
    }
}

/// Whether base64 text starting `LS0tLS1CRUdJTi` decodes to a private key's BEGIN line.
fn base64_private_key(b64: &str) -> bool {
    use base64::Engine;
    let take = b64.len().min(96) / 4 * 4;
    base64::engine::general_purpose::STANDARD
        .decode(&b64.as_bytes()[..take])
        .is_ok_and(|bytes| {
            let head = String::from_utf8_lossy(&bytes);
            head.lines()
                .next()
                .is_some_and(|l| l.contains("PRIVATE KEY"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rule's pattern compiles within the size limit the redactor compiles it with, and
    /// the limit refuses the pattern shape that made compiling one rule cost 36 ms.
    #[test]
    fn every_rule_compiles_within_the_size_limit() {
        for rule in RULES {
            let built = compile(rule.pattern);
            assert!(built.is_ok(), "{}: {:?}", rule.id, built.err());
        }
        assert!(compile(r"\n[ \t]*(?P<s>[^\s]{6,4096})").is_err());
    }

    /// The groups of `assignment` and `colon-pair` (every rule refined as an assignment or a
    /// colon pair) taken from their matches alone are the capture engine's, on every example of both tables and on lines built around each secret
    /// name.
    #[test]
    fn name_rule_groups_from_the_match_are_the_captures() {
        let mut corpus: Vec<String> = Vec::new();
        for r in RULES {
            corpus.extend(r.positive.iter().chain(r.negative).map(|t| t.to_string()));
        }
        for p in super::super::providers::RULES {
            corpus.extend(p.positive.iter().chain(p.negative).map(|t| t.to_string()));
        }
        for name in [
            "DB_PASSWORD",
            "x.api-key",
            "Token",
            "\u{212a}ey_auth",
            "pass",
        ] {
            for sep in [
                "=", " = ", "\"=", "'  =\t", "==", ":", ": ", "\":\t", "' :  ", "::",
            ] {
                for value in ["v", "\"q\"", "'q'", "é1", "${X}", "=>", " ", "", "\u{a0}x"] {
                    corpus.push(format!("a {name}{sep}{value} b"));
                    corpus.push(format!("?{name}{sep}{value}&{name}{sep}{value}"));
                }
            }
        }
        // Getters named after a secret returning a literal (`returned-literal`).
        for name in [
            "DB_PASSWORD",
            "getToken",
            "get_api_key",
            "fetchSecrets",
            "x.getAccessKey",
            "credentials",
        ] {
            for form in [
                "func {n}() string { return ",
                "def {n}(self): return ",
                "{n} ( ) -> str:return\t",
                "  {n}(){ return ",
            ] {
                for value in ["\"v\"", "'q'", "`t`"] {
                    corpus.push(format!("{}{value} }}", form.replace("{n}", name)));
                }
            }
        }
        // Every rule whose groups `find` takes from the match.
        for rule in RULES
            .iter()
            .filter(|r| matches!(r.refine, Refine::Assign | Refine::Colon))
        {
            let id = rule.id;
            let re = Regex::new(rule.pattern).expect("pattern compiles");
            let mut matched = 0;
            for t in &corpus {
                for caps in re.captures_iter(t) {
                    let whole = caps.get(0).expect("group 0");
                    let n = caps.name("n").expect("group n");
                    let first = caps
                        .name("s")
                        .or_else(|| caps.name("q"))
                        .expect("group s or q");
                    assert_eq!(
                        name_and_last(t, whole.range()),
                        (n.range(), first.range()),
                        "{id}: {t:?}"
                    );
                    matched += 1;
                }
            }
            assert!(matched > 50, "{id}: {matched}");
        }
        // The labelled rules whose value `find` takes from the match.
        for rule in RULES {
            let Some(value) = label_value(rule) else {
                continue;
            };
            let re = Regex::new(rule.pattern).expect("pattern compiles");
            let mut lines = corpus.clone();
            for label in [
                "Bearer",
                "BEARER",
                "Password",
                "pwd",
                "AccountKey",
                "sharedsecret",
            ] {
                for sep in [" ", "  \t", "=", " = ", "=\t ", "==", ";", "=\u{a0}", "= ;"] {
                    for v in [
                        "Xk9vQ2mLp7Rz",
                        "tok.en-12345678~+/==",
                        "a b c",
                        "\"q\"",
                        "x;y",
                        "${X}",
                        "===",
                    ] {
                        lines.push(format!("{label}{sep}{v}"));
                        lines.push(format!("Server=db;{label}{sep}{v};Database=x"));
                        lines.push(format!("\n\u{a0}{label}{sep}{v}\n"));
                    }
                }
            }
            let mut matched = 0;
            for t in &lines {
                for caps in re.captures_iter(t) {
                    let whole = caps.get(0).expect("group 0");
                    let s = caps.name("s").expect("group s");
                    assert_eq!(value(t, whole.range()), s.range(), "{}: {t:?}", rule.id);
                    matched += 1;
                }
            }
            assert!(matched > 20, "{}: {matched}", rule.id);
        }
    }

    /// The groups [`find`] takes from a match of `header`, `url-query`, `url-userinfo` or
    /// `labelled-is` against the capture engine's, on every match in `t`. Returns how many
    /// matches were compared.
    fn compare_groups_from_matches(t: &str) -> usize {
        static COMPILED: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
            ["header", "url-query", "url-userinfo", "labelled-is"]
                .into_iter()
                .map(|id| {
                    let rule = RULES.iter().find(|r| r.id == id).expect("rule exists");
                    (id, Regex::new(rule.pattern).expect("pattern compiles"))
                })
                .collect()
        });
        let mut compared = 0;
        for (id, re) in COMPILED.iter() {
            for caps in re.captures_iter(t) {
                let m = caps.get(0).expect("group 0").range();
                let s = caps.name("s").expect("group s").range();
                match *id {
                    "header" => {
                        let lq = caps.name("lq").map(|q| q.as_str().as_bytes()[0]);
                        let cq = caps.name("cq").is_some();
                        assert_eq!(header_groups(t, m), (s.start, lq, cq), "{id}: {t:?}");
                    }
                    "url-query" => {
                        let n = caps.name("n").expect("group n").range();
                        assert_eq!(query_groups(t, m), (n, s), "{id}: {t:?}");
                    }
                    "url-userinfo" => assert_eq!(userinfo_value(t, m), s, "{id}: {t:?}"),
                    _ => assert_eq!(labelled_is_value(t, m), Some(s), "{id}: {t:?}"),
                }
                compared += 1;
            }
        }
        compared
    }

    /// Text built from the pieces of credential headers, URL queries and userinfo, and
    /// labelled secrets.
    fn label_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::sample::select;
        let lead = vec![
            "",
            " ",
            "\"",
            "'",
            "x",
            "?",
            "&",
            "\\u0026",
            "\\U0026",
            "https://u",
            "git+ssh://",
            "é",
            "\n",
            "b",
        ];
        let name = vec![
            "token",
            "Bearer",
            "api key",
            "API_KEY",
            "apikey",
            "access-key",
            "secret_key",
            "client secret",
            "to\u{212a}en",
            "\u{17f}ecret-key",
            "authorization",
            "X-Api-Key",
            "cookie",
            "x-amz-signature",
            "user",
            "sig",
            "",
            "u:p",
        ];
        let sep = vec![
            "",
            " ",
            "\t",
            ":",
            ": ",
            " :\t",
            "=",
            " = ",
            "==",
            " is ",
            " IS\t",
            " was ",
            " i\u{17f} ",
            "\"",
            "'",
            "\":",
            "': ",
            " \"",
            ":'",
            "@",
            ":@",
            "://",
        ];
        let value = vec![
            "",
            "abcdefgh",
            "abcdefghijklmnop",
            "ABCDEFGH12345678/+=~._-",
            "=abcdefghijklmnop",
            "\u{212a}\u{17f}abcdefghijklmno",
            "[\"a\"]",
            ":",
            "é",
            "p#q'r",
            "a&b",
            "x y",
        ];
        let tail = vec!["", " ", "@h", "&x=1", "#f", "\"", "'", "\n", ",", "é"];
        let piece = (
            select(lead),
            select(name),
            select(sep),
            select(value),
            select(tail),
        )
            .prop_map(|(a, b, c, d, e)| format!("{a}{b}{c}{d}{e}"));
        proptest::collection::vec(piece, 1..4).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// The groups of `header`, `url-query`, `url-userinfo` and `labelled-is` read from
        /// their matches are the capture engine's.
        #[test]
        fn label_and_url_groups_from_the_match_are_the_captures(t in label_text()) {
            compare_groups_from_matches(&t);
        }
    }

    /// The same on every example of both tables and on lines built around each keyword.
    #[test]
    fn label_and_url_groups_from_the_match_on_examples() {
        let mut corpus: Vec<String> = Vec::new();
        for r in RULES {
            corpus.extend(r.positive.iter().chain(r.negative).map(|t| t.to_string()));
        }
        for p in super::super::providers::RULES {
            corpus.extend(p.positive.iter().chain(p.negative).map(|t| t.to_string()));
        }
        for key in [
            "token",
            "API key",
            "access-key",
            "Secret_Key",
            "client secret",
            "bearer",
        ] {
            for sep in [
                " ", ": ", " = ", "=", "==", " is ", " was\t", "  \"", " '", ":\t'",
            ] {
                for v in [
                    "abcdefghijklmnop1234",
                    "=abcdefghijklmno",
                    "short",
                    "a/b+c=~d.e-f_g0123456",
                ] {
                    corpus.push(format!("the {key}{sep}{v} end"));
                }
            }
        }
        for h in [
            "Authorization",
            "'Cookie'",
            "\"x-api-key\"",
            "X-Amz-Security-Token'",
        ] {
            for sep in [": ", ":", " :\t", "\" : "] {
                for v in ["Bearer abc", "'q'", "[\"a\"]", ":", "é"] {
                    corpus.push(format!("{h}{sep}{v}"));
                }
            }
        }
        for u in [
            "https://u:p@h",
            "git+ssh://a:b:c@h/x",
            "x://:@",
            "https://u:p#q'r@h",
        ] {
            corpus.push(format!("clone {u} now"));
        }
        for q in [
            "?token=abc&x=1",
            "\\u0026secret=x#y",
            "&sig=a=b",
            "?a=b&api_key=c d",
        ] {
            corpus.push(format!("GET https://h/p{q}"));
        }
        let compared: usize = corpus.iter().map(|t| compare_groups_from_matches(t)).sum();
        assert!(compared > 100, "{compared}");
    }

    /// What [`find`] takes from each rule's matches against [`refine`] of the capture
    /// engine's groups, on `t`, for every rule of the core table.
    fn compare_find_with_captures(t: &str) {
        static COMPILED: LazyLock<Vec<Regex>> = LazyLock::new(|| {
            RULES
                .iter()
                .map(|r| Regex::new(r.pattern).expect("pattern compiles"))
                .collect()
        });
        for (rule, re) in RULES.iter().zip(COMPILED.iter()) {
            let mut found = Vec::new();
            find(rule, re, t, &mut found);
            let mut captured = Vec::new();
            let mut look = Look::new(t);
            for caps in re.captures_iter(t) {
                let from = captured.len();
                refine(rule, &caps, t, &mut captured);
                // A command's later flags, read again ([`more_flags`]).
                if rule.refine == Refine::Flag
                    && let (Some(m), Some(value)) = (caps.get(0), captured[from..].last())
                {
                    let after = value.end;
                    more_flags(re, t, m.start(), after, &mut look, &mut captured);
                }
            }
            assert_eq!(found, captured, "{}: {t:?}", rule.id);
        }
    }

    /// A character of more than one byte anywhere in a line never makes the redactor slice
    /// text off a character's boundary (a panic, which would end the watcher): every example
    /// of every rule with such a character put in at each place, and put in place of each
    /// character, as text and as a JSON string. The characters are those `(?i)` reads as
    /// ASCII letters (the Kelvin sign, the long s), letters and symbols of two, three and
    /// four bytes, and blanks and separators that are not ASCII; each example takes one in
    /// turn (all of them for every example passed too, in 48 s unoptimised).
    #[test]
    fn a_character_of_several_bytes_anywhere_never_panics() {
        let redactor = super::super::shared::global();
        let chars = [
            '\u{212a}', '\u{17f}', 'é', '中', '😀', '\u{a0}', '\u{200b}', '\u{ff1d}',
        ];
        let mut examples: Vec<&str> = Vec::new();
        for r in RULES {
            examples.extend(r.positive.iter().chain(r.negative));
        }
        for p in super::super::providers::RULES {
            examples.extend(p.positive.iter().chain(p.negative));
        }
        let mut lines = 0;
        for (n, e) in examples.iter().enumerate() {
            let c = chars[n % chars.len()];
            for at in (0..=e.len()).filter(|&i| e.is_char_boundary(i)) {
                let next = e[at..].chars().next().map_or(0, char::len_utf8);
                for text in [
                    format!("{}{c}{}", &e[..at], &e[at..]),
                    format!("{}{c}{}", &e[..at], &e[at + next..]),
                ] {
                    let _ = redactor.redact_text(&text);
                    let line = format!("{{\"output\":{}}}", serde_json::Value::from(text));
                    assert!(redactor.redact_json(&line).is_some(), "{line}");
                    lines += 1;
                }
            }
        }
        // The line that first failed: code::words sliced the Kelvin sign of `tokenK`.
        let _ = redactor.redact_text("tokenK\u{17f}abcdefghijklmnobAPI_KEY\"=abcdefghijklmnop");
        assert!(lines > 20_000, "{lines}");
    }

    /// Lines made of the examples of every rule, joined and cut.
    fn example_text() -> impl proptest::strategy::Strategy<Value = String> {
        let mut examples: Vec<&'static str> = Vec::new();
        for r in RULES {
            examples.extend(r.positive.iter().chain(r.negative));
        }
        let seps = vec!["", " ", "\n", "; ", "\"", "=", ": "];
        let piece = (
            proptest::sample::select(examples),
            proptest::sample::select(seps),
            0usize..64,
        )
            .prop_map(|(e, sep, cut)| {
                let mut at = e.len().saturating_sub(cut);
                while !e.is_char_boundary(at) {
                    at -= 1;
                }
                format!("{}{sep}", &e[at..])
            });
        proptest::collection::vec(piece, 1..4).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        /// Every rule's spans from [`find`] are those of its captures.
        #[test]
        fn find_gives_the_spans_of_the_captures(
            t in proptest::strategy::Union::new([example_text().boxed(), label_text().boxed()])
        ) {
            compare_find_with_captures(&t);
        }
    }

    /// Text built from name words, name characters and what may follow a name: quotes,
    /// blanks, the separators and values, with the characters `(?i)` and `\s` treat apart
    /// (the Kelvin sign, the long s, a no-break space, a line break).
    fn pair_text() -> impl proptest::strategy::Strategy<Value = String> {
        let pieces = vec![
            "token",
            "TOKEN",
            "pass",
            "Passwd",
            "api",
            "_key",
            "key",
            "auth",
            "secret",
            "pwd",
            "credential",
            "access-",
            "private.",
            "DB_",
            "x",
            "9",
            "-",
            ".",
            "_",
            "\u{212a}ey",
            "pa\u{17f}\u{17f}",
            "\u{17f}ecret",
            "é",
            "\"",
            "'",
            "`",
            " ",
            "\t",
            "  ",
            "=",
            "==",
            ":",
            "::",
            ">",
            "=>",
            "v",
            "\u{a0}",
            "\n",
            "?",
            "&",
            "$",
            "(",
            "{",
            ",",
            "/",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..14).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// [`next_match`] reads `assignment` and `colon-pair` by hand: from every character
        /// boundary, its match is the pattern's `find_at`.
        #[test]
        fn name_pairs_by_hand_are_the_patterns_matches(t in pair_text()) {
            for id in ["assignment", "colon-pair"] {
                let rule = RULES.iter().find(|r| r.id == id).expect("rule exists");
                let re = Regex::new(rule.pattern).expect("pattern compiles");
                for at in (0..=t.len()).filter(|&at| t.is_char_boundary(at)) {
                    proptest::prop_assert_eq!(
                        next_match(rule, &re, &t, at),
                        re.find_at(&t, at).map(|m| m.range()),
                        "{} at {} in {:?}", id, at, t
                    );
                }
            }
        }
    }

    /// Text around `is` and `was` (and what `(?i)` reads as them), blanks and other
    /// characters.
    fn is_text() -> impl proptest::strategy::Strategy<Value = String> {
        let pieces = vec![
            "password",
            "secret",
            " ",
            "\t",
            "  ",
            "is",
            "IS",
            "i\u{17f}",
            "was",
            "WaS",
            "wa\u{17f}",
            "wa",
            "i",
            "s",
            "\u{17f}",
            "x",
            "\n",
            "\"",
            "hunter2x",
            "@",
            "\u{a0}",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..10).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// `password-is`'s check passes wherever its pattern's `[ \t](?:is|was)[ \t]` (in any
        /// case) is, and only there.
        #[test]
        fn is_or_was_check_is_the_patterns_blanks_and_words(t in is_text()) {
            let re = Regex::new(r"(?i)[ \t](?:is|was)[ \t]").expect("pattern compiles");
            proptest::prop_assert_eq!(has_is_or_was(&t), re.is_match(&t), "{:?}", t);
        }

        /// The checks written without allocating are the ones they replace.
        #[test]
        fn password_name_and_marker_checks_are_the_substring_ones(t in is_text(), cut in 0usize..4) {
            let lower = t.to_ascii_lowercase();
            let by_substrings = ["passw", "pwd", "secret", "passphrase", "pass"]
                .iter()
                .any(|w| lower.contains(w));
            proptest::prop_assert_eq!(is_password_name(&t), by_substrings, "{:?}", t);
            let mut with_marker = format!("{t}{MARKER}");
            let mut at = with_marker.len() - cut;
            while !with_marker.is_char_boundary(at) {
                at -= 1;
            }
            with_marker.truncate(at);
            proptest::prop_assert_eq!(
                holds_marker(&with_marker),
                with_marker.contains(MARKER),
                "{:?}",
                with_marker
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// The checks before `labelled`, `netrc`, `url-token-user`, `table-row-pair` and
        /// `sql-password` pass wherever their patterns match.
        #[test]
        fn checks_before_the_patterns_pass_where_they_match(
            t in proptest::collection::vec(
                proptest::sample::select(vec![
                    "password", "Password", "secret", "tokens", "api_key", "api_\u{212a}ey",
                    "\u{17f}ecret\u{17f}", "credentials", "login", "bob", "https", "git", "://",
                    "@", "|", "CREATE USER", "SET PASSWORD", "'", "\"", "=", " ", "\t", "\n", "\r",
                    "\u{a0}", "é", "Xk9vQ2mLp7Rz", "0123456789abcdefXYZ7", "-", "_",
                ]),
                0..10,
            ).prop_map(|p| p.concat())
        ) {
            static CHECKED: LazyLock<Vec<(&'static Rule, Regex)>> = LazyLock::new(|| {
                RULES
                    .iter()
                    .filter(|r| {
                        matches!(
                            r.id,
                            "labelled" | "netrc" | "url-token-user" | "table-row-pair" | "sql-password"
                        )
                    })
                    .map(|r| (r, Regex::new(r.pattern).expect("pattern compiles")))
                    .collect()
            });
            for (rule, re) in CHECKED.iter() {
                let pre = rule.pre.expect("a check before the pattern");
                proptest::prop_assert!(!re.is_match(&t) || (pre.check)(&t), "{}: {:?}", rule.id, t);
            }
        }
    }

    /// `labelled`'s check as first written: each blank's three bytes before it compared with
    /// each ending, case folded.
    fn has_label_and_value_by_endings(text: &str) -> bool {
        const ENDINGS: &[&[u8; 3]] = &[
            b"ret", b"ets", b"ken", b"ens", b"ord", b"rds", b"swd", b"pwd", b"key", b"eys", b"ial",
            b"als",
        ];
        let b = text.as_bytes();
        memchr::memchr2_iter(b' ', b'\t', b).any(|at| {
            let Some(before) = at.checked_sub(3).map(|s| &b[s..at]) else {
                return false;
            };
            let ends = before.iter().any(|&c| c >= 0x80)
                || ENDINGS
                    .iter()
                    .any(|e| before.eq_ignore_ascii_case(e.as_slice()));
            ends && b[at..]
                .iter()
                .skip_while(|&&c| c == b' ' || c == b'\t')
                .take_while(|&&c| c >= 0x80 || !(matches!(c, b'\t'..=b'\r' | b' ' | b'"')))
                .nth(15)
                .is_some()
        })
    }

    proptest::proptest! {
        /// The word-at-a-time check of `labelled` says what the byte comparisons said, on text
        /// made of the endings in any case, near misses (bytes one bit from a letter), blanks,
        /// quotes, long values and characters above ASCII.
        #[test]
        fn labelled_check_agrees_with_the_endings_compared_byte_by_byte(
            t in proptest::collection::vec(
                proptest::sample::select(vec![
                    "secret", "TOKEN", "Keys", "pwd", "credentiAL", "passwords", "ret", "KeN",
                    "ial", "@ET", "[E", "ke\u{7f}", "\u{17f}", "é", "ÿ", " ", "\t", "  ", "\"",
                    "\n", "\r", "Xk9vQ2mLp7Rz", "0123456789abcdefXYZ7", "x", "-", "{", "[",
                ]),
                0..24,
            ).prop_map(|p| p.concat())
        ) {
            proptest::prop_assert_eq!(
                has_label_and_value(&t),
                has_label_and_value_by_endings(&t),
                "{:?}", t
            );
        }
    }

    proptest::proptest! {
        /// Each rule's cheap check passes only on text holding the bytes it says it needs (a
        /// line failing them is skipped without the check), and where it says it is those
        /// bytes alone, it passes on every such text. Text made of every byte a check looks
        /// at, the words some look for and characters above ASCII; a need left out of a
        /// check's list, or one too many, fails it.
        #[test]
        fn checks_need_the_bytes_they_say(
            t in proptest::collection::vec(
                proptest::sample::select(vec![
                    ":", "=", "|", "-", "@", "\"", "'", "(", "{", "[", "]", ">", "?", "&", "\\",
                    ",", "p", " ", "\t", "\n", "==", "!=", "=>", "---", "://", "password",
                    "value:", "name:", "key:", " is ", " was ", " to ", "token", "secret", "x", "é",
                    "0123456789abcdefXYZ7", "Xk9vQ2mLp7Rz",
                ]),
                0..16,
            ).prop_map(|p| p.concat())
        ) {
            let held = bytes_held(t.as_bytes());
            for (name, pre) in PRES {
                let passes = (pre.check)(&t);
                proptest::prop_assert!(!passes || pre.needs.met(held), "{}: {:?}", name, t);
                if pre.exact {
                    proptest::prop_assert_eq!(passes, pre.needs.met(held), "{}: {:?}", name, t);
                }
            }
        }
    }

    /// Every check the rules use is in the list the property above reads.
    #[test]
    fn every_check_is_held_to_its_needs() {
        for rule in RULES {
            if let Some(pre) = rule.pre {
                assert!(
                    PRES.iter()
                        .any(|(_, p)| std::ptr::fn_addr_eq(p.check, pre.check)),
                    "{}'s check is not in PRES",
                    rule.id
                );
            }
        }
    }

    /// Command lines built from `curl-user`'s pieces (a flag, a separator, a quote, a user
    /// name, a value), and the pieces joined at random.
    fn curl_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::sample::select;
        let piece = select(vec![
            "curl",
            "CURL",
            " ",
            "\t",
            "-u",
            "-U",
            "--user",
            "--proxy-user",
            "=",
            "\"",
            "'",
            "admin",
            ":",
            "Pw1",
            "p w",
            "$X",
            "\u{a0}",
            "é",
            "\n",
            "|",
            "-s",
            "\u{b}",
            "[REDACTED]",
        ]);
        let line = (
            select(vec!["curl ", "CURL -s ", "x curl\t"]),
            select(vec!["-u", "-U", "--user", "--proxy-user"]),
            select(vec!["", " ", "=", "\t "]),
            select(vec!["", "\"", "'"]),
            select(vec!["", "admin", "a\u{a0}b", "é"]),
            select(vec![
                "Pw1",
                "p w\"",
                "p'w' x",
                "$X",
                "[REDACTED]",
                "\"",
                " ",
            ]),
        );
        let built = line.prop_map(|(c, f, sep, q, u, v)| format!("{c}{f}{sep}{q}{u}:{v}"));
        let random = proptest::collection::vec(piece, 0..12).prop_map(|p| p.concat());
        proptest::prop_oneof![built, random]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// `curl-user`'s spans read from its matches are its captures'.
        #[test]
        fn curl_user_from_its_matches_is_its_captures(t in curl_text()) {
            compare_find_with_captures(&t);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// The list of words read part by part says what the collected parts said.
        #[test]
        fn word_list_read_part_by_part_is_the_collected_one(
            t in proptest::collection::vec(
                proptest::sample::select(vec!["JSON", "File", "a", "/", "//", "(", ")", ".", ",", "9", "é", ":"]),
                0..8,
            ).prop_map(|p| p.concat())
        ) {
            let v = t.trim_start_matches('(').trim_end_matches(['.', ',', ';', ':', ')']);
            let parts: Vec<&str> = v.split('/').collect();
            let collected = parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| p.len() >= 2 && p.bytes().all(|b| b.is_ascii_alphabetic()));
            proptest::prop_assert_eq!(is_word_list(&t), collected, "{:?}", t);
        }
    }

    /// The same on every example of both tables.
    #[test]
    fn find_gives_the_spans_of_the_captures_on_examples() {
        for r in RULES {
            for t in r.positive.iter().chain(r.negative) {
                compare_find_with_captures(t);
            }
        }
        for p in super::super::providers::RULES {
            for t in p.positive.iter().chain(p.negative) {
                compare_find_with_captures(t);
            }
        }
    }

    /// A rule's cheap check never turns away text its pattern matches: on every example of
    /// every rule of both tables, and on each with its punctuation taken out one character at a
    /// time, a match means the check passes.
    #[test]
    fn every_check_before_a_pattern_passes_where_the_pattern_matches() {
        let mut corpus: Vec<String> = Vec::new();
        for r in RULES {
            corpus.extend(r.positive.iter().chain(r.negative).map(|t| t.to_string()));
        }
        for p in super::super::providers::RULES {
            corpus.extend(p.positive.iter().chain(p.negative).map(|t| t.to_string()));
        }
        let mut more = Vec::new();
        for t in &corpus {
            for (i, c) in t.char_indices().filter(|(_, c)| c.is_ascii_punctuation()) {
                more.push(format!("{}{}", &t[..i], &t[i + c.len_utf8()..]));
            }
        }
        corpus.extend(more);
        for rule in RULES {
            let Some(pre) = rule.pre else { continue };
            let re = Regex::new(rule.pattern).expect("pattern compiles");
            for t in &corpus {
                assert!(!re.is_match(t) || (pre.check)(t), "{}: {t:?}", rule.id);
            }
        }
    }

    #[test]
    fn code_values() {
        for yes in [
            "load_key(path)",
            "os.getenv(\"X\")",
            "profile.api_key",
            "std::env::var(name)?;",
            "load_secret(&path)?;",
            "profile.openai_api_key || \"\"",
        ] {
            assert!(is_code(yes), "{yes}");
        }
        for yes in [
            "Config.API_KEY",
            "process.env.CLIENT_SECRET;",
            "settings.API_KEY,",
            "abc.Def",
            "os.environ[\"API_TOKEN\"]",
            "credentials['SecretAccessKey']",
            "keys[0].value",
        ] {
            assert!(is_code(yes), "{yes}");
        }
        for no in ["Xk9v(Q2mLp7)", "hunter2", "x(S)", "Ab9.Xk2", "x(S9q)"] {
            assert!(!is_code(no), "{no}");
        }
    }

    /// Text built from the pieces values and code are made of, for the checks read from a
    /// value's first word.
    fn value_text() -> impl proptest::strategy::Strategy<Value = String> {
        let pieces = vec![
            "a",
            "Z",
            "x9",
            "_",
            "$",
            "&",
            "*",
            "!",
            ".",
            ":",
            "::",
            "-",
            "->",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            "<",
            ">",
            " ",
            "\t",
            "\n",
            "\"",
            "'",
            "`",
            "?",
            ",",
            ";",
            "=",
            "%",
            "^",
            "~",
            "1",
            "2.1.0",
            "v",
            "x",
            "latest",
            "workspace:",
            "os",
            "getenv",
            "Config",
            "ConfigFile9",
            "ABc",
            "AbcDe",
            "Ab",
            "API_KEY",
            "await ",
            "new ",
            "self",
            "é",
            "\u{212a}",
            "%v",
            "%-8d",
            "@",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..10).prop_map(|p| p.concat())
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// The first-word checks turn away only what the patterns would: with them, each
        /// check answers as its pattern alone does.
        #[test]
        fn first_word_checks_agree_with_the_patterns(v in value_text()) {
            proptest::prop_assert_eq!(is_call_or_path(&v), call_or_path(&v), "{:?}", v);
            let version = Regex::new(VERSION_PATTERN).expect("pattern compiles");
            proptest::prop_assert_eq!(is_version(&v), v.len() <= 40 && version.is_match(&v), "{:?}", v);
            let directive = Regex::new(DIRECTIVE_PATTERN).expect("pattern compiles");
            proptest::prop_assert_eq!(is_format_directive(&v), directive.is_match(&v), "{:?}", v);
        }
    }

    /// Text made of the pieces YAML and tables are made of, in any order: names with and
    /// without a secret's word, colons bare or not, block scalars, comments, separator lines
    /// (with and without pipes), indentation, line breaks of both kinds, markers.
    fn yaml_and_tables() -> impl proptest::strategy::Strategy<Value = String> {
        let pieces = &[
            "password",
            "api_key",
            "KeyName",
            "Value",
            "name",
            "  ",
            "\t",
            "- ",
            ":",
            ": ",
            ": |",
            ": >-",
            " # note",
            "\n",
            "\r\n",
            "---",
            "-------",
            "|",
            " | ",
            "+",
            "Hunt3rNextLine9",
            "Zq8Wm3Np7Lk2Vb6Xc1Rt5",
            "x",
            "[REDACTED]",
            "é",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..40).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        /// The rules run line by line find what a search of the whole text finds.
        #[test]
        fn rules_by_lines_find_what_the_whole_text_search_finds(text in yaml_and_tables()) {
            for rule in RULES.iter().filter(|r| by_lines(r)) {
                let re = Regex::new(rule.pattern).expect("pattern compiles");
                let mut whole = Vec::new();
                for caps in re.captures_iter(&text) {
                    refine(rule, &caps, &text, &mut whole);
                }
                let mut lines = Vec::new();
                find(rule, &re, &text, &mut lines);
                // The same bytes: a table of a kind read before over the same rows is not read
                // again, so its spans are not listed twice.
                proptest::prop_assert_eq!(covered(&lines), covered(&whole), "{} on {:?}", rule.id, text);
            }
        }
    }

    /// The bytes `spans` cover, as sorted, merged ranges.
    fn covered(spans: &[Range<usize>]) -> Vec<Range<usize>> {
        let mut sorted: Vec<Range<usize>> =
            spans.iter().filter(|s| !s.is_empty()).cloned().collect();
        sorted.sort_by_key(|s| (s.start, s.end));
        let mut out: Vec<Range<usize>> = Vec::new();
        for s in sorted {
            match out.last_mut() {
                Some(last) if s.start <= last.end => last.end = last.end.max(s.end),
                _ => out.push(s),
            }
        }
        out
    }

    /// A block of rows under many headers (each separator line starts a table whose rows run
    /// to the block's end) is read a few times, not once per header: a block of a thousand
    /// tables took the square of its length. Tables of one kind find their cells once; of
    /// many kinds, each reads its own rows past the first few; a table whose rows are split by
    /// rule lines (`+---+` between every row) still has every row read under its header.
    #[test]
    fn a_block_of_many_tables_reads_its_rows_a_few_times() {
        let rule = RULES.iter().find(|r| r.id == "table-column").expect("rule");
        let re = Regex::new(rule.pattern).expect("pattern compiles");
        let one_kind = "| password | x |\n|---|---|\n".repeat(8000);
        let many_kinds: String = (0..8000)
            .map(|i| format!("| password{i} | x |\n|---|---|\n"))
            .collect();
        for text in [one_kind, many_kinds] {
            TABLE_ROWS_READ.with(|n| n.set(0));
            let mut spans = Vec::new();
            find(rule, &re, &text, &mut spans);
            let lines = text.lines().count();
            let read = TABLE_ROWS_READ.with(std::cell::Cell::get);
            assert!(read <= 12 * lines, "{read} rows read for {lines} lines");
        }
        let ruled = "| user | password |\n|------|----------|\n| a | Hunt3rPw9a |\n|------|----------|\n| b | Hunt3rPw9b |\n|------|----------|\n| c | Hunt3rPw9c |\n";
        let mut spans = Vec::new();
        find(rule, &re, ruled, &mut spans);
        let found: Vec<&str> = covered(&spans).into_iter().map(|s| &ruled[s]).collect();
        assert_eq!(found, ["Hunt3rPw9a", "Hunt3rPw9b", "Hunt3rPw9c"]);
    }

    /// One long line of what the rules' byte searches look for is looked for once, not once
    /// for each occurrence (read end to end each time, which took minutes on a 4 MiB line).
    #[test]
    fn rules_by_lines_read_a_long_line_once() {
        for (id, unit) in [("yaml-next-line", "a: |"), ("table-column", "---")] {
            let rule = RULES.iter().find(|r| r.id == id).expect("rule");
            let re = Regex::new(rule.pattern).expect("pattern compiles");
            for size in [64 << 10, 4 << 20] {
                let text = format!("name\n{}\nkey1\n", unit.repeat(size / unit.len()));
                let mut spans = Vec::new();
                let looked = find_by_lines(rule, &re, &text, &mut spans);
                assert!(spans.is_empty(), "{id}: {spans:?}");
                assert_eq!(looked, 1, "{id}: the long line looked for {looked} times");
            }
        }
    }

    #[test]
    fn rules_by_lines_find_yaml_values_and_table_columns() {
        let yaml = RULES
            .iter()
            .find(|r| r.id == "yaml-next-line")
            .expect("rule");
        let table = RULES.iter().find(|r| r.id == "table-column").expect("rule");
        let text = "a: 1\ndb:\n  password:\n    Hunt3rNextLine\nrows\nKeyName  Value\n-------  -----\nkey1     Zq8Wm3Np7Lk2Vb6Xc1Rt5\n";
        for (rule, value) in [(yaml, "Hunt3rNextLine"), (table, "Zq8Wm3Np7Lk2Vb6Xc1Rt5")] {
            let mut spans = Vec::new();
            find(
                rule,
                &Regex::new(rule.pattern).expect("pattern compiles"),
                text,
                &mut spans,
            );
            let found: Vec<&str> = spans.iter().map(|s| &text[s.clone()]).collect();
            assert_eq!(found, [value], "{}", rule.id);
        }
    }

    #[test]
    fn value_extents() {
        assert_eq!(value_extent("p@ss;w0rd|x y", 0), Some(0..11));
        assert_eq!(value_extent("'a b' c", 0), Some(1..4));
        assert_eq!(value_extent("\"a'b\"", 0), Some(1..4));
    }
}
