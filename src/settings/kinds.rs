//! The kinds of setting: for each, the unit and default, the flag's parser, and how flag,
//! variable and default resolve into a typed value.
//!
//! Variables are read as the kcap CLI reads its own: whole numbers for minutes, hours and
//! milliseconds, whitespace around a value ignored, an empty variable the same as an unset one
//! for text. Flags take human durations (`90s`, `5m`, `2h`, `1h30m`, `1.5h`, `2d`), parsed with
//! jiff's friendly format; a bare number is rejected with a hint to add a unit (is `5` minutes,
//! as in the variables, or seconds?), except `0`, which needs no unit, and for milliseconds
//! settings, where a bare number means milliseconds like their variable.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use clap::builder::{
    NonEmptyStringValueParser, OsStringValueParser, PossibleValuesParser, TypedValueParser,
    ValueParser,
};

use super::ConfigError;
use crate::time::{MAX_WINDOW, clamp_window};

/// What a kind gets to resolve one setting.
pub struct Input<'a> {
    /// The setting's variable, for messages.
    pub var: &'static str,
    /// The flag and its raw value, when given (a switch's value is empty).
    pub flag: Option<(&'static str, &'a OsStr)>,
    /// The variable's raw value, when set (possibly empty).
    pub raw_var: Option<String>,
}

/// A kind of setting.
pub trait Kind: Sync + 'static {
    /// The resolved value.
    type Value;
    /// The flag's parser, which rejects a bad value while parsing (exit 2 naming the flag),
    /// yielding the raw value; `None` for a switch, which takes no value.
    fn value_parser(&'static self) -> Option<ValueParser>;
    /// The default as users see it.
    fn shown_default(&self) -> String;
    /// What the variable takes, for the documents.
    fn var_syntax(&self) -> String;
    /// A valid variable value other than the default, and a flag value (`None`: a switch):
    /// see [`super::Entry::example`].
    fn example(&self) -> (String, Option<String>);
    /// Flag, else variable, else default; warnings about a bad variable go to `warnings`.
    fn resolve(
        &self,
        input: Input<'_>,
        warnings: &mut Vec<String>,
    ) -> Result<Self::Value, ConfigError>;
}

/// A text flag: non-empty, kept as given.
fn text_parser() -> ValueParser {
    ValueParser::new(NonEmptyStringValueParser::new().map(OsString::from))
}

/// A flag checked by `check` while parsing, kept as given.
fn checked_parser(
    check: impl Fn(&str) -> Result<(), String> + Clone + Send + Sync + 'static,
) -> ValueParser {
    ValueParser::new(
        NonEmptyStringValueParser::new().try_map(move |s| check(&s).map(|()| OsString::from(s))),
    )
}

/// The flag's text, for kinds whose parser accepted it as UTF-8. A value that is not is
/// refused here too, naming the flag (clap already refused it while parsing).
fn flag_text(flag: &'static str, raw: &OsStr) -> Result<String, ConfigError> {
    raw.to_str().map(str::to_string).ok_or_else(|| ConfigError {
        name: flag,
        message: format!("failed to read {flag}: the value is not valid UTF-8"),
    })
}

/// A flag's value that its own parser accepted while parsing and now refuses: only possible
/// when [`super::SettingsArgs`] was built by hand; still an error naming the flag, not a panic.
fn flag_refused(flag: &'static str, raw: &str, why: String) -> ConfigError {
    ConfigError {
        name: flag,
        message: format!("invalid value {raw:?} for {flag}: {why}"),
    }
}

// ------------------------------------------------------------------------- durations

/// The unit of a window variable's whole number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Minutes,
    Hours,
}

impl TimeUnit {
    const fn secs(self) -> u64 {
        match self {
            TimeUnit::Minutes => 60,
            TimeUnit::Hours => 3600,
        }
    }

    const fn name(self) -> &'static str {
        match self {
            TimeUnit::Minutes => "minutes",
            TimeUnit::Hours => "hours",
        }
    }
}

/// What `0` means for a window that cannot be disabled (the kcap CLI's meanings for its own
/// variables, kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    /// Zero is zero: the stop is posted immediately, pauses earn no credit.
    NoTime,
    /// The idle windows cannot be disabled: zero falls back to the default.
    Default,
}

/// A window: whole `unit`s in the variable, a human duration in the flag, clamped to
/// [`MAX_WINDOW`] with a warning.
#[derive(Debug)]
pub struct Window {
    pub unit: TimeUnit,
    pub default: Duration,
    pub zero: Zero,
}

/// A window that `0` disables (`None`).
#[derive(Debug)]
pub struct OptionalWindow {
    pub unit: TimeUnit,
    pub default: Duration,
}

/// A window as read, before its zero is interpreted.
enum WindowRead {
    Default,
    Zero,
    Given(Duration),
}

fn read_window(
    unit: TimeUnit,
    default: Duration,
    input: Input<'_>,
    warnings: &mut Vec<String>,
) -> Result<WindowRead, ConfigError> {
    let (d, shown) = match (input.flag, input.raw_var) {
        (Some((flag, raw)), _) => {
            let text = flag_text(flag, raw)?;
            let d = parse_duration(&text).map_err(|why| flag_refused(flag, &text, why))?;
            (d, flag.to_string())
        }
        (None, None) => return Ok(WindowRead::Default),
        (None, Some(raw)) => match parse_whole(&raw) {
            // Overflowing the multiplication means "longer than any timer".
            Ok(n) => (
                n.checked_mul(unit.secs())
                    .map_or(Duration::MAX, Duration::from_secs),
                format!("{}={raw:?}", input.var),
            ),
            Err(bad) => {
                warnings.push(format!(
                    "ignoring {}={raw:?}: {}; using the default {} {}",
                    input.var,
                    bad.describe(unit.name()),
                    default.as_secs() / unit.secs(),
                    unit.name(),
                ));
                return Ok(WindowRead::Default);
            }
        },
    };
    if d.is_zero() {
        return Ok(WindowRead::Zero);
    }
    if d > MAX_WINDOW {
        warnings.push(format!(
            "{shown} is longer than the largest supported window; using {} days",
            MAX_WINDOW.as_secs() / 86_400
        ));
    }
    Ok(WindowRead::Given(clamp_window(d)))
}

fn duration_parser() -> ValueParser {
    checked_parser(|s| parse_duration(s).map(|_| ()))
}

fn window_syntax(unit: TimeUnit) -> String {
    format!("whole {}", unit.name())
}

/// Seven units more than the default for the variable, 90 s more for the flag (a value the
/// variable cannot say).
fn window_example(unit: TimeUnit, default: Duration) -> (String, Option<String>) {
    let var = default.as_secs() / unit.secs() + 7;
    let flag = show_duration(default + Duration::from_secs(90));
    (var.to_string(), Some(flag))
}

impl Kind for Window {
    type Value = Duration;

    fn value_parser(&'static self) -> Option<ValueParser> {
        Some(duration_parser())
    }

    fn shown_default(&self) -> String {
        show_duration(self.default)
    }

    fn var_syntax(&self) -> String {
        window_syntax(self.unit)
    }

    fn example(&self) -> (String, Option<String>) {
        window_example(self.unit, self.default)
    }

    fn resolve(
        &self,
        input: Input<'_>,
        warnings: &mut Vec<String>,
    ) -> Result<Duration, ConfigError> {
        Ok(
            match read_window(self.unit, self.default, input, warnings)? {
                WindowRead::Default => self.default,
                WindowRead::Zero => match self.zero {
                    Zero::NoTime => Duration::ZERO,
                    Zero::Default => self.default,
                },
                WindowRead::Given(d) => d,
            },
        )
    }
}

impl Kind for OptionalWindow {
    type Value = Option<Duration>;

    fn value_parser(&'static self) -> Option<ValueParser> {
        Some(duration_parser())
    }

    fn shown_default(&self) -> String {
        show_duration(self.default)
    }

    fn var_syntax(&self) -> String {
        window_syntax(self.unit)
    }

    fn example(&self) -> (String, Option<String>) {
        window_example(self.unit, self.default)
    }

    fn resolve(
        &self,
        input: Input<'_>,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Duration>, ConfigError> {
        Ok(
            match read_window(self.unit, self.default, input, warnings)? {
                WindowRead::Default => Some(self.default),
                WindowRead::Zero => None,
                WindowRead::Given(d) => Some(d),
            },
        )
    }
}

/// An interval in milliseconds within a range: whole milliseconds in the variable, a duration
/// or a bare number of milliseconds in the flag.
#[derive(Debug)]
pub struct Millis {
    pub min: Duration,
    pub max: Duration,
    pub default: Duration,
}

impl Millis {
    fn parse_flag(&self, s: &str) -> Result<Duration, String> {
        let t = s.trim();
        let d = if t.bytes().all(|b| b.is_ascii_digit()) && !t.is_empty() {
            // Digits too many for u64 are far out of range anyway.
            Duration::from_millis(t.parse::<u64>().unwrap_or(u64::MAX))
        } else {
            parse_human(t)?
        };
        if !(self.min..=self.max).contains(&d) {
            // In seconds, not minutes: the scale of a poll or retry interval.
            let show = |d: Duration| match d.as_millis() {
                ms if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
                ms => format!("{ms}ms"),
            };
            return Err(format!(
                "it must be between {} and {}",
                show(self.min),
                show(self.max)
            ));
        }
        Ok(d)
    }
}

impl Kind for Millis {
    type Value = Duration;

    fn value_parser(&'static self) -> Option<ValueParser> {
        Some(checked_parser(move |s| self.parse_flag(s).map(|_| ())))
    }

    fn shown_default(&self) -> String {
        format!("{}ms", self.default.as_millis())
    }

    fn example(&self) -> (String, Option<String>) {
        let ms = |d: Duration| (d + Duration::from_millis(250)).min(self.max).as_millis();
        // Another value than the default, below it where the default is the maximum.
        let other = if self.default >= self.max {
            self.default
                .saturating_sub(Duration::from_millis(250))
                .max(self.min)
                .as_millis()
        } else {
            ms(self.default)
        };
        (other.to_string(), Some(format!("{}ms", ms(self.min))))
    }

    fn var_syntax(&self) -> String {
        format!(
            "whole milliseconds from {} to {}",
            self.min.as_millis(),
            self.max.as_millis()
        )
    }

    fn resolve(
        &self,
        input: Input<'_>,
        warnings: &mut Vec<String>,
    ) -> Result<Duration, ConfigError> {
        if let Some((flag, raw)) = input.flag {
            let text = flag_text(flag, raw)?;
            return self
                .parse_flag(&text)
                .map_err(|why| flag_refused(flag, &text, why));
        }
        let Some(raw) = input.raw_var else {
            return Ok(self.default);
        };
        let problem = match parse_whole(&raw) {
            Ok(ms) => {
                let d = Duration::from_millis(ms);
                if (self.min..=self.max).contains(&d) {
                    return Ok(d);
                }
                format!(
                    "it is outside {} to {} milliseconds",
                    self.min.as_millis(),
                    self.max.as_millis()
                )
            }
            Err(bad) => bad.describe("milliseconds"),
        };
        warnings.push(format!(
            "ignoring {}={raw:?}: {problem}; using the default {} milliseconds",
            input.var,
            self.default.as_millis()
        ));
        Ok(self.default)
    }
}

/// A duration as users type it: the largest of h, m, s, ms that divides it evenly.
fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms > 0 && ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

const DURATION_HINT: &str = "expected a duration such as 90s, 5m, 2h, 1h30m or 2d";

/// Parses a duration flag. A negative value is an error (no window runs backwards), and so is
/// a bare number other than `0`: the variables count minutes or hours, the flags do not.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.bytes().all(|b| b.is_ascii_digit()) && !t.is_empty() {
        if t.bytes().all(|b| b == b'0') {
            return Ok(Duration::ZERO);
        }
        return Err(format!("a duration needs a unit, e.g. {t}m or {t}s"));
    }
    parse_human(t)
}

fn parse_human(t: &str) -> Result<Duration, String> {
    // `SignedDuration` takes units up to hours (and huge hour counts, which then clamp); a
    // `Span` adds days and weeks, counted as 24 hours for a watcher's window. Months and years
    // have no fixed length and stay errors.
    let d = match t.parse::<jiff::SignedDuration>() {
        Ok(d) => d,
        Err(_) => t
            .parse::<jiff::Span>()
            .and_then(|s| s.to_duration(jiff::SpanRelativeTo::days_are_24_hours()))
            // jiff's own message would suggest its types; the hint says what to type.
            .map_err(|_| DURATION_HINT.to_string())?,
    };
    if d.is_negative() {
        return Err("a duration cannot be negative".to_string());
    }
    Ok(d.unsigned_abs())
}

/// Why a variable's whole number could not be read.
#[derive(Debug)]
enum BadNumber {
    Empty,
    Negative,
    NotWhole,
}

impl BadNumber {
    fn describe(&self, unit: &str) -> String {
        match self {
            BadNumber::Empty => "it is empty".to_string(),
            BadNumber::Negative => "it is negative".to_string(),
            BadNumber::NotWhole => format!("it is not a whole number of {unit}"),
        }
    }
}

/// Reads a whole number the way the kcap CLI's variables are meant: digits, surrounding
/// whitespace ignored. Digits beyond `u64` read as `u64::MAX`, so they clamp, never wrap.
fn parse_whole(raw: &str) -> Result<u64, BadNumber> {
    let t = raw.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if t.is_empty() {
        return Err(BadNumber::Empty);
    }
    if let Some(rest) = t.strip_prefix('-')
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_digit())
    {
        return if rest.bytes().all(|b| b == b'0') {
            Ok(0)
        } else {
            Err(BadNumber::Negative)
        };
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BadNumber::NotWhole);
    }
    Ok(digits.parse::<u64>().unwrap_or(u64::MAX))
}

// ------------------------------------------------------------------------- switches

/// On or off: the flag turns it on; the variable does with `1`, `true` or `yes` (any case).
#[derive(Debug)]
pub struct Switch;

impl Kind for Switch {
    type Value = bool;

    fn value_parser(&'static self) -> Option<ValueParser> {
        None
    }

    fn shown_default(&self) -> String {
        "off".to_string()
    }

    fn example(&self) -> (String, Option<String>) {
        ("1".to_string(), None)
    }

    fn var_syntax(&self) -> String {
        "1, true or yes to turn it on (anything else leaves it off)".to_string()
    }

    fn resolve(&self, input: Input<'_>, _: &mut Vec<String>) -> Result<bool, ConfigError> {
        Ok(input.flag.is_some()
            || input.raw_var.is_some_and(|v| {
                let v = v.trim();
                ["1", "true", "yes"]
                    .iter()
                    .any(|on| v.eq_ignore_ascii_case(on))
            }))
    }
}

// ------------------------------------------------------------------------- text

/// Where a text value came from, for messages that name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    pub value: String,
    /// The flag (`--server`) or the variable (`KCAP_URL`).
    pub origin: &'static str,
}

/// The variable's value trimmed, unless unset or blank (a blank variable counts as unset).
fn trimmed(raw: Option<String>) -> Option<String> {
    raw.map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// A text value that may be absent (`None`): the server URL, a token.
#[derive(Debug)]
pub struct OptionalText {
    /// What users are told absence means (`offline`, `none`).
    pub absent: &'static str,
    /// What the value is, for the documents (`an http or https URL`).
    pub what: &'static str,
    /// A valid value, for tests ([`Kind::example`]).
    pub example: &'static str,
}

impl Kind for OptionalText {
    type Value = Option<Given>;

    fn value_parser(&'static self) -> Option<ValueParser> {
        Some(text_parser())
    }

    fn shown_default(&self) -> String {
        self.absent.to_string()
    }

    fn var_syntax(&self) -> String {
        self.what.to_string()
    }

    fn example(&self) -> (String, Option<String>) {
        (self.example.to_string(), Some(self.example.to_string()))
    }

    fn resolve(&self, input: Input<'_>, _: &mut Vec<String>) -> Result<Option<Given>, ConfigError> {
        if let Some((flag, raw)) = input.flag {
            return Ok(Some(Given {
                value: flag_text(flag, raw)?,
                origin: flag,
            }));
        }
        Ok(trimmed(input.raw_var).map(|value| Given {
            value,
            origin: input.var,
        }))
    }
}

/// A check a text value must pass: the flag's failure is an error, the variable's a warning.
#[derive(Debug)]
pub struct Check {
    /// What the value must be (`a log filter`), for messages.
    pub what: &'static str,
    pub test: fn(&str) -> Result<(), String>,
}

/// A text value with a default, optionally checked.
#[derive(Debug)]
pub struct Text {
    pub default: &'static str,
    /// What the value is, for the documents (`a profile name`).
    pub what: &'static str,
    pub check: Option<Check>,
    /// A valid value other than the default, for tests ([`Kind::example`]).
    pub example: &'static str,
}

impl Kind for Text {
    type Value = String;

    fn value_parser(&'static self) -> Option<ValueParser> {
        // The check runs at resolution: a bad filter is a configuration error (exit 2
        // naming the flag), reported the same way whether or not clap parsed the flag.
        Some(text_parser())
    }

    fn shown_default(&self) -> String {
        self.default.to_string()
    }

    fn example(&self) -> (String, Option<String>) {
        (self.example.to_string(), Some(self.example.to_string()))
    }

    fn var_syntax(&self) -> String {
        self.what.to_string()
    }

    fn resolve(&self, input: Input<'_>, warnings: &mut Vec<String>) -> Result<String, ConfigError> {
        let test = |v: &str| self.check.as_ref().map_or(Ok(()), |c| (c.test)(v));
        if let Some((flag, raw)) = input.flag {
            let v = flag_text(flag, raw)?;
            return match test(&v) {
                Ok(()) => Ok(v),
                Err(e) => Err(ConfigError {
                    name: flag,
                    message: format!(
                        "failed to use {flag} {v:?} as {}: {e}",
                        self.check.as_ref().map_or(self.what, |c| c.what)
                    ),
                }),
            };
        }
        let Some(v) = trimmed(input.raw_var) else {
            return Ok(self.default.to_string());
        };
        match test(&v) {
            Ok(()) => Ok(v),
            Err(e) => {
                warnings.push(format!(
                    "ignoring {}={v:?}: {e}; using the default {}",
                    input.var, self.default
                ));
                Ok(self.default.to_string())
            }
        }
    }
}

/// A path that may be absent (its default is computed by the caller, e.g. from `HOME`).
/// Not trimmed: a path may end in a space.
#[derive(Debug)]
pub struct Path {
    /// What users are told the default is (`$HOME/.config/kcap`).
    pub absent: &'static str,
}

impl Kind for Path {
    type Value = Option<PathBuf>;

    fn value_parser(&'static self) -> Option<ValueParser> {
        // Paths need not be UTF-8; only an empty one is refused.
        Some(ValueParser::new(OsStringValueParser::new().try_map(
            |s: OsString| {
                if s.is_empty() {
                    Err("a path cannot be empty")
                } else {
                    Ok(s)
                }
            },
        )))
    }

    fn shown_default(&self) -> String {
        self.absent.to_string()
    }

    fn var_syntax(&self) -> String {
        "a path".to_string()
    }

    fn example(&self) -> (String, Option<String>) {
        let path = "/srv/kcap example/dir".to_string();
        (path.clone(), Some(path))
    }

    fn resolve(
        &self,
        input: Input<'_>,
        _: &mut Vec<String>,
    ) -> Result<Option<PathBuf>, ConfigError> {
        if let Some((_, raw)) = input.flag {
            return Ok(Some(PathBuf::from(raw)));
        }
        Ok(input.raw_var.filter(|v| !v.is_empty()).map(PathBuf::from))
    }
}

// ------------------------------------------------------------------------- choices

/// One of a fixed set of names (a clap `ValueEnum`), any case in the variable.
pub struct Choice<T>(PhantomData<fn() -> T>);

impl<T> Choice<T> {
    pub const fn new() -> Choice<T> {
        Choice(PhantomData)
    }
}

impl<T> Default for Choice<T> {
    fn default() -> Choice<T> {
        Choice::new()
    }
}

impl<T> std::fmt::Debug for Choice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Choice")
    }
}

fn choice_name<T: ValueEnum>(v: &T) -> Cow<'static, str> {
    v.to_possible_value()
        .map_or(Cow::Borrowed("?"), |p| Cow::Owned(p.get_name().to_string()))
}

impl<T: ValueEnum + Default + 'static> Kind for Choice<T> {
    type Value = T;

    fn value_parser(&'static self) -> Option<ValueParser> {
        let values = T::value_variants()
            .iter()
            .filter_map(ValueEnum::to_possible_value);
        Some(ValueParser::new(
            PossibleValuesParser::new(values).map(OsString::from),
        ))
    }

    fn shown_default(&self) -> String {
        choice_name(&T::default()).into_owned()
    }

    fn example(&self) -> (String, Option<String>) {
        let other = T::value_variants()
            .iter()
            .map(choice_name)
            .find(|n| *n != choice_name(&T::default()))
            .unwrap_or_else(|| choice_name(&T::default()));
        (other.to_string(), Some(other.into_owned()))
    }

    fn var_syntax(&self) -> String {
        let names: Vec<_> = T::value_variants().iter().map(choice_name).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }

    fn resolve(&self, input: Input<'_>, warnings: &mut Vec<String>) -> Result<T, ConfigError> {
        if let Some((flag, raw)) = input.flag {
            let text = flag_text(flag, raw)?;
            return T::from_str(&text, false).map_err(|why| flag_refused(flag, &text, why));
        }
        let Some(v) = trimmed(input.raw_var) else {
            return Ok(T::default());
        };
        match T::from_str(&v, true) {
            Ok(c) => Ok(c),
            Err(_) => {
                warnings.push(format!(
                    "ignoring {}={v:?}: expected {}; using the default {}",
                    input.var,
                    self.var_syntax(),
                    self.shown_default()
                ));
                Ok(T::default())
            }
        }
    }
}

/// Log record format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2h 30m"), Ok(Duration::from_secs(9000)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("5").unwrap_err().contains("5m"));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(48 * 3600)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(7 * 24 * 3600)));
        assert!(parse_duration("1 month").is_err());
        assert!(parse_duration("-5m").is_err());
        assert!(parse_duration("-1d").is_err());
        assert!(parse_duration("5m ago").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn millis_flag_bare_number_is_milliseconds() {
        let poll = Millis {
            min: Duration::from_millis(10),
            max: Duration::from_secs(60),
            default: Duration::from_secs(1),
        };
        assert_eq!(poll.parse_flag("250"), Ok(Duration::from_millis(250)));
        assert_eq!(poll.parse_flag("2s"), Ok(Duration::from_secs(2)));
        assert!(poll.parse_flag("5").unwrap_err().contains("10ms and 60s"));
        assert!(poll.parse_flag("61s").is_err());
        assert!(poll.parse_flag("99999999999999999999999").is_err());
    }

    #[test]
    fn whole_numbers() {
        assert!(matches!(parse_whole(" 15 "), Ok(15)));
        assert!(matches!(parse_whole("+15"), Ok(15)));
        assert!(matches!(parse_whole("-0"), Ok(0)));
        assert!(matches!(parse_whole("-5"), Err(BadNumber::Negative)));
        assert!(matches!(parse_whole(""), Err(BadNumber::Empty)));
        assert!(matches!(parse_whole("   "), Err(BadNumber::Empty)));
        assert!(matches!(parse_whole("1.5"), Err(BadNumber::NotWhole)));
        assert!(matches!(parse_whole("5m"), Err(BadNumber::NotWhole)));
        assert!(matches!(parse_whole("+"), Err(BadNumber::NotWhole)));
        assert!(matches!(
            parse_whole("99999999999999999999999999"),
            Ok(u64::MAX)
        ));
    }

    #[test]
    fn shown_durations_use_the_largest_even_unit() {
        assert_eq!(show_duration(Duration::from_secs(65 * 60)), "65m");
        assert_eq!(show_duration(Duration::from_secs(360 * 60)), "6h");
        assert_eq!(show_duration(Duration::from_secs(90)), "90s");
        assert_eq!(show_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(show_duration(Duration::ZERO), "0ms");
    }

    #[test]
    fn choices_are_listed_for_the_documents() {
        assert_eq!(Choice::<LogFormat>::new().var_syntax(), "text or json");
        assert_eq!(Choice::<LogFormat>::new().shown_default(), "text");
    }
}
