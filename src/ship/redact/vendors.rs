//! Credentials named only by their vendor (docs/behaviour.md T2.6): `cloudsmith: "3f9c…"`,
//! `scraperapi token = 'Zq8W…'`, `MAILJET_KEY=…`. Most public detectors find these as a
//! service's name, a short gap, then a value of the family's shape; the prefixed formats and
//! the `near-<vendor>` rules of [`super::providers`] cover the vendors with a known shape, and
//! this covers the long tail of services whose keys are plain hex or base62.
//!
//! Token first, so that hundreds of vendor names cost nothing on a line without a long random
//! run: every run of token characters 20 to 256 long that looks random (letters and digits
//! changing often, entropy of a key) is a candidate, and only then are the words before it
//! (up to [`CONTEXT`] bytes, at most one line break back) looked up in the vendor table.
//!
//! A word that names something else first, nearer the value (`integrity`, `sha256`, `h1`,
//! `commit`, `id`, `url`…), means the value is that thing: a lockfile's hash next to a
//! package named after a vendor stays. Vendor names that are also common words (`segment`,
//! `front`, `square`) count only with a secret word (`key`, `token`, `secret`, …) beside them.
//! Git hashes and UUIDs need a secret word too.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;
use std::sync::LazyLock;

/// Bytes before a value searched for the vendor's name.
const CONTEXT: usize = 64;
/// Shortest and longest value considered.
const MIN_LEN: usize = 20;
const MAX_LEN: usize = 256;

/// Services whose keys are plain runs (hex, base62, base64), named as their users write them
/// in settings, lowercase with separators removed. Written for this project from the services'
/// public API documentation; the distinctive ones.
#[rustfmt::skip]
const VENDORS: &[&str] = &[
    "abuseipdb", "accuweather", "adzuna", "agora", "airbrake", "airship", "airvisual", "aiven",
    "alchemy", "alconost", "alegra", "amadeus", "ambee", "amplitude", "apify", "apilayer",
    "appcues", "appfollow", "apptivo", "assemblyai", "atera", "autodesk", "autoklose", "avaza",
    "aviationstack", "aylien", "ayrshare", "bannerbear", "baremetrics", "beebole", "bitly",
    "bitmex", "blazemeter", "bombbomb", "borgbase", "braintree", "brandfetch", "browserstack",
    "bugherd", "bugsnag", "buildkite", "buttercms", "calendly", "calorieninjas", "capsulecrm",
    "censys", "chartmogul", "circleci", "clarifai", "clearbit", "clicksend", "clickup",
    "clockify", "cloudconvert", "cloudinary", "cloudmersive", "cloudsmith", "cloverly",
    "codacy", "codeclimate", "codemagic", "coinapi", "coinlayer", "coinlib", "commercejs",
    "convertkit", "countrylayer", "coveralls", "craftmypdf", "crowdin", "currencycloud",
    "currencylayer", "currencyscoop", "currentsapi", "customerio", "dailyco", "databox",
    "deepai", "deepgram", "deepl", "delighted", "detectlanguage", "diffbot", "digitalocean",
    "disqus", "docparser", "documo", "docusign", "doppler", "dwolla", "dynalist", "edamam",
    "edenai", "elasticemail", "enablex", "ethplorer", "etherscan", "eventbrite", "everhour",
    "exchangerates", "exchangerate", "faceplusplus", "fastforex", "fathom", "fetchrss", "figma",
    "finage", "financialmodelingprep", "fixerio", "fleetbase", "flightapi", "flightstats",
    "flutterwave", "formio", "foursquare", "frameio", "freshdesk", "freshworks", "fullstory",
    "fusebill", "geckoboard", "gengo", "geoapify", "geocodio", "geocodify", "getresponse",
    "gitguardian", "glassnode", "gocanvas", "godaddy", "gorgias", "graphcms", "graphhopper",
    "gtmetrix", "gumroad", "gyazo", "happyscribe", "hellosign", "helpcrunch", "helpscout",
    "holidayapi", "honeycomb", "html2pdf", "hubstaff", "hypertrack", "iconfinder", "iexcloud",
    "imagekit", "imagga", "infura", "insightly", "instamojo", "intrinio", "ipapi",
    "ipgeolocation", "ipify", "ipinfo", "ipqualityscore", "ipstack", "jotform", "kanbantool",
    "karmacrm", "kickbox", "klaviyo", "klipfolio", "knapsackpro", "languagelayer", "lastfm",
    "leadfeeder", "lemlist", "linkpreview", "liveagent", "livestorm", "loaderio", "locationiq",
    "loggly", "loginradius", "logzio", "lokalise", "loyverse", "madkudu", "magicbell",
    "mailboxlayer", "mailerlite", "mailjet", "mailmodo", "mailsac", "mandrill", "mapbox",
    "mapquest", "marketstack", "mavenlink", "maxmind", "mediastack", "meistertask", "mesibo",
    "messagemedia", "metrilo", "mindmeister", "mixmax", "mixpanel", "mockaroo", "monkeylearn",
    "moosend", "moralis", "myintervals", "nethunt", "neutrinoapi", "newsapi", "nexmo",
    "nftport", "ngrok", "nicereply", "noticeable", "nozbe", "numverify", "nutritionix", "nylas",
    "oanda", "omnisend", "onedesk", "onelogin", "onepagecrm", "onesignal", "onfleet", "oopspam",
    "opencagedata", "opencage", "openuv", "openweather", "openweathermap", "optimizely",
    "owlbot", "packagecloud", "pagerduty", "pandadoc", "pandascore", "paperform",
    "paralleldots", "parsehub", "parseur", "partnerstack", "passbase", "pastebin", "paymongo",
    "paypal", "paystack", "pdflayer", "pdfshift", "peopledatalabs", "pepipost", "pinata",
    "pipedream", "pipedrive", "pivotaltracker", "pixabay", "planyo", "plivo", "podio",
    "poloniex", "positionstack", "postageapp", "postmark", "prodpad", "proxycrawl", "pubnub",
    "purestake", "pushbullet", "pusher", "qase", "qualaroo", "qubole", "quickmetrics", "rawg",
    "razorpay", "reachmail", "rebrandly", "recurly", "rentman", "repairshopr", "restpack",
    "ringcentral", "ritekit", "rocketreach", "rockset", "route4me", "salesblink", "salesflare",
    "salesforce", "satismeter", "saucelabs", "scaleway", "scalr", "scrapeowl", "scraperapi",
    "scraperbox", "scrapestack", "scrapfly", "scrapingant", "scrapingbee", "screenshotapi",
    "screenshotlayer", "securitytrails", "selectpdf", "sendgrid", "sendinblue", "serpapi",
    "serphouse", "serpstack", "sheety", "sherpadesk", "shipday", "shodan", "shotstack",
    "shutterstock", "signalwire", "signaturit", "signupgenius", "sigopt", "simplesat", "sirv",
    "siteleaf", "skybiometry", "smartsheet", "smartystreets", "smooch", "snipcart", "sparkpost",
    "speechtext", "splunk", "spoonacular", "sportmonks", "spotify", "stackhawk", "statuscake",
    "statuspage", "stitchdata", "stockdata", "storecove", "stormglass", "storyblok",
    "storychief", "strava", "stytch", "sugester", "sumologic", "supabase", "surveysparrow",
    "survicate", "swiftype", "tallyfy", "tatum", "taxjar", "teamgate", "telnyx", "testingbot",
    "textmagic", "theoddsapi", "thinkific", "thousandeyes", "ticketmaster", "tickettailor",
    "tiingo", "timecamp", "tmetric", "todoist", "toggl", "tomorrowio", "tomtom", "tradier",
    "transferwise", "travelpayouts", "trello", "twelvedata", "twilio", "tyntec", "typetalk",
    "ubidots", "uclassify", "unsplash", "upcdatabase", "uplead", "uploadcare", "urlscan",
    "userflow", "userstack", "vatlayer", "vbout", "vercel", "verimail", "veriphone",
    "virustotal", "visualcrossing", "voicegain", "vonage", "vultr", "walkscore", "weatherbit",
    "weatherstack", "webex", "webflow", "websitepulse", "whoxy", "wistia", "worksnaps",
    "worldcoinindex", "wrike", "yelp", "youneedabudget", "ynab", "zapier", "zenrows",
    "zenscrape", "zenserp", "zeplin", "zerobounce", "zipbooks", "zipcodeapi", "zipcodebase",
    "zulip", "openai", "anthropic", "mistral", "groq", "perplexity", "replicate", "huggingface",
    "cohere", "together", "fireworks", "deepseek", "elevenlabs", "pinecone", "weaviate",
    "qdrant", "langsmith", "langfuse", "tavily", "firecrawl", "browserbase", "exa", "serper",
    "jina", "voyage", "anyscale", "runpod", "modal", "neon", "upstash", "planetscale", "turso",
    "convex", "clerk", "auth0", "resend", "loops", "posthog", "logrocket", "datadog",
    "newrelic", "rollbar", "raygun", "honeybadger", "launchdarkly", "flagsmith", "statsig",
    "algolia", "meilisearch", "typesense", "contentful", "sanity", "prismic", "strapi",
    "mailgun", "mailchimp", "sendpulse", "brevo", "twitch", "discord", "telegram", "github",
    "gitlab", "bitbucket", "netlify", "heroku", "render", "fly", "cloudflare", "fastly",
    "akamai", "bunnycdn", "backblaze", "wasabi", "dropbox", "box", "onedrive", "gdrive",
    "airtable", "notion", "asana", "jira", "linear", "clickup", "monday", "basecamp", "zendesk",
    "intercom", "hubspot", "pipedrive", "freshsales", "shopify", "woocommerce", "bigcommerce",
    "stripe", "square", "adyen", "mollie", "checkout", "klarna", "plaid", "coinbase", "binance",
    "kraken", "bitfinex", "kucoin", "gemini", "etsy", "ebay", "amazon", "aws", "azure", "gcp",
    "google", "firebase", "mapbox", "here", "tomtom", "bing", "yandex", "baidu", "twitter",
    "facebook", "instagram", "linkedin", "pinterest", "reddit", "tiktok", "snapchat", "youtube",
    "vimeo", "zoom", "slack", "teams", "mattermost", "rocketchat", "segment", "mux", "agora",
    "twilio", "sinch", "messagebird", "bandwidth", "nexmo", "sentry", "snyk", "sonarcloud",
    "sonarqube", "codecov", "travis", "jenkins", "drone", "terraform", "pulumi", "vault",
    "consul", "nomad", "artifactory", "jfrog", "nuget", "docker", "dockerhub", "quay", "okta",
    "ping", "duo", "onelogin", "keycloak", "luno", "metabase", "keenio", "invoiceocean",
    "kanban", "dovico", "mrticktock", "redhat", "railway", "webexbot", "mite", "cloze",
    "apimetrics", "apitemplate", "cloudimage", "metaapi", "redhatpyxis", "beamer", "coda",
    "owm", "pyowm", "skrapp", "cloudplan", "sourcegraph",
];

/// Vendor names that are also common words: they count only with a secret word nearby.
#[rustfmt::skip]
const WEAK: &[&str] = &[
    "box", "here", "fly", "render", "neon", "modal", "exa", "voyage", "together", "loops",
    "convex", "clerk", "sanity", "linear", "monday", "notion", "segment", "square", "checkout",
    "gemini", "amazon", "google", "ping", "duo", "teams", "bandwidth", "drone", "vault",
    "consul", "nomad", "quay", "docker", "github", "gitlab", "aws", "azure", "gcp", "twitter",
    "facebook", "youtube", "spotify", "slack", "zoom", "bing", "telegram", "discord",
    "firebase", "reddit", "ebay", "mistral", "replicate", "fireworks", "openai", "anthropic",
    "jenkins", "travis", "sentry", "mux", "agora", "tatum", "sirv", "qase", "rawg", "here",
    "kanban", "redhat", "railway", "mite", "cloze", "coda",
];

/// Words that name a secret: with a weak vendor name, or a value shaped like a hash or a UUID.
#[rustfmt::skip]
const SECRET_WORDS: &[&str] = &[
    "key", "keys", "token", "tokens", "secret", "secrets", "password", "passwd", "pass", "pwd",
    "apikey", "auth", "credential", "credentials", "bearer", "private", "access",
];

/// Words that say the value is something else: a hash, an id, a version, a place.
#[rustfmt::skip]
const OTHER_WORDS: &[&str] = &[
    "sha", "sha1", "sha256", "sha384", "sha512", "md5", "hash", "hashes", "integrity",
    "checksum", "digest", "commit", "commits", "h1", "etag", "id", "ids", "uuid", "guid",
    "version", "rev", "revision", "ref", "url", "uri", "path", "file", "name", "user",
    "username", "email", "tree", "blob", "object", "oid", "fingerprint", "nonce", "signature",
    "trace", "span", "request", "session", "build", "image", "tag", "branch",
];

/// What a word is, as bits: a vendor's name, a weak one, a secret word, a word naming
/// something else.
const VENDOR: u8 = 1;
const WEAK_NAME: u8 = 2;
const SECRET: u8 = 4;
const OTHER: u8 = 8;

/// Every listed word by its hash ([`word_hash`]): one lookup per word of context, no
/// allocation. 64-bit hashes of a few hundred short words do not collide (a test checks).
static TABLE: LazyLock<HashMap<u64, u8, BuildHasherDefault<Prehashed>>> = LazyLock::new(|| {
    let mut t: HashMap<u64, u8, BuildHasherDefault<Prehashed>> = HashMap::default();
    for (list, bit) in [
        (VENDORS, VENDOR),
        (WEAK, WEAK_NAME),
        (SECRET_WORDS, SECRET),
        (OTHER_WORDS, OTHER),
    ] {
        for w in list {
            *t.entry(word_hash(w.as_bytes())).or_default() |= bit;
        }
    }
    t
});

/// FNV-1a, continued from `seed` (so a pair of words hashes as their concatenation).
fn fnv(seed: u64, w: &[u8]) -> u64 {
    w.iter().fold(seed, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    })
}

const FNV_SEED: u64 = 0xcbf2_9ce4_8422_2325;

fn word_hash(w: &[u8]) -> u64 {
    fnv(FNV_SEED, w)
}

/// The table's keys are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = fnv(self.0, bytes);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

fn kind(hash: u64) -> u8 {
    TABLE.get(&hash).copied().unwrap_or(0)
}

/// Pushes every value in `text` that a vendor's name shortly before it marks as that vendor's
/// credential, that a secret's word glued before it names, or that a provider's prefix
/// starts. `found` are `text`'s long runs ([`super::runs::long_runs`]).
/// `known(span)`: whether the span is one found already, which is not read again.
pub(crate) fn spans(
    text: &str,
    found: &[Range<usize>],
    known: &impl Fn(&Range<usize>) -> bool,
    out: &mut Vec<Range<usize>>,
) {
    let b = text.as_bytes();
    for run in found {
        // Read before trimming: such a key may start or end with `+`, `/`, `-` or `_`.
        if is_azure_identifiable(&b[run.clone()]) {
            let padding = b[run.end..]
                .iter()
                .take(2)
                .take_while(|&&c| c == b'=')
                .count();
            let span = run.start..run.end + padding;
            if !known(&span) && !known(run) {
                out.push(span);
            }
            continue;
        }
        let body = trim_run(run.clone(), b);
        if known(&body) {
            continue;
        }
        // MySQL's `mysql_native_password` hash: `*` and 40 capital hex digits, as `SELECT
        // authentication_string FROM mysql.user` prints it (cracked offline like any
        // unsalted hash).
        if body.start > 0
            && b[body.start - 1] == b'*'
            && body.len() == 40
            && b[body.clone()]
                .iter()
                .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c))
        {
            out.push(body.start - 1..body.end);
            continue;
        }
        let value = &b[body.clone()];
        if value.len() > MAX_LEN + 48 {
            continue;
        }
        // The letters and digits first: most runs are identifiers, which they turn away in
        // one pass, before the words in and before the run are looked up and the rest of the
        // shape read.
        let (digits, letters) = digits_and_letters(value);
        // A key after a prefix or a name in the run holds a digit (one of 40 random base62
        // characters lacks all ten one time in a thousand: that one ships).
        if digits > 0 {
            let seps = Separators::of(&value[..value.len().min(48)]);
            // A provider's prefix before a random run its format's rule turned away.
            if let Some(span) = prefixed(b, &body, &seps) {
                let span = span.start..through_dots(b, span.end);
                if !known(&span) {
                    out.push(span);
                }
                continue;
            }
            // A value glued to its own name in one run (`dd_secret_key-3c0c…`,
            // `codakey-<uuid>`).
            if let Some(at) = named_inside(b, &body, &seps) {
                let value = at..body.end;
                if !known(&value) && secret_shaped(&b[value.clone()]) {
                    out.push(at..through_dots(b, body.end));
                    continue;
                }
            }
        }
        if is_truenas_key(value) {
            out.push(body);
            continue;
        }
        if value.len() < MIN_LEN
            || value.len() > MAX_LEN
            || key_mix(digits, letters, value.len()).is_none()
            || nearest_is_other(b, body.start)
            || !looks_random(value)
        {
            continue;
        }
        if vendor_before(&b[body.start.saturating_sub(CONTEXT)..body.start])
            || secret_word_right_before(b, body.start)
        {
            out.push(body);
        }
    }
}

/// Where a value found as a run goes on to: past a `.` or `~` glued to more token characters
/// (`…aS9d.F4gH6jK0`), which a run stops at, so that no part of it ships after the part found.
/// A `.` before a blank or the end (a sentence's) is not taken.
fn through_dots(b: &[u8], mut end: usize) -> usize {
    while matches!(b.get(end), Some(b'.' | b'~'))
        && b.get(end + 1).is_some_and(|&c| super::runs::is_token(c))
    {
        end += 1;
        while b.get(end).is_some_and(|&c| super::runs::is_token(c)) {
            end += 1;
        }
    }
    end
}

/// An Azure key that names its kind inside itself (an "identifiable" key): base64 of a fixed
/// length with a four-character signature at a fixed place, such as `+ASt` 76 characters into
/// a storage account's key, `AzSe` 42 into a search service's, `AIoT` 33 into an IoT hub's, and
/// `JQQJ9` 52 into the common annotated keys of the Cognitive Services, Azure DevOps and
/// others (docs/redaction.md). The portal and `az … keys list` print them under names that do
/// not say "secret" (`"value"`, `primaryKey`), and bare. `v` is a whole run, its `=` padding
/// not included. No identifier or hash has a signature at such a place.
fn is_azure_identifiable(v: &[u8]) -> bool {
    let at = |i: usize, sigs: &[&[u8; 4]]| sigs.iter().any(|s| &v[i..i + 4] == s.as_slice());
    let standard = || !v.iter().any(|&c| c == b'_' || c == b'-');
    let common_annotated = || {
        &v[52..56] == b"JQQJ"
            && v[56] == b'9'
            && matches!(v[57], b'9' | b'D' | b'H')
            && (b'A'..=b'L').contains(&v[59])
            && v.iter().all(u8::is_ascii_alphanumeric)
    };
    match v.len() {
        43 => {
            at(33, &[b"+ARm", b"+AEh", b"+ASb", b"AIoT", b"AzCa", b"AZEG"])
                && (b'A'..=b'P').contains(&v[37])
                && standard()
        }
        52 => at(42, &[b"AzSe", b"+ACR"]) && (b'A'..=b'D').contains(&v[46]) && standard(),
        54 => {
            at(44, &[b"AzFu"])
                && matches!(v[53], b'A' | b'Q' | b'g' | b'w')
                && !v.iter().any(|&c| c == b'+' || c == b'/')
        }
        84 => common_annotated(),
        86 => {
            (at(76, &[b"+ASt", b"ACDb", b"+ABa", b"+AMC", b"APIM"])
                && matches!(v[85], b'A' | b'Q' | b'g' | b'w')
                && standard())
                || common_annotated()
        }
        _ => false,
    }
}

/// A TrueNAS API key: its number, `-`, and 64 random letters (both cases) and digits
/// (`3-Qm8Zp2…`), as its `auth.login_with_api_key` call takes it, in any placement (a JSON
/// request's `params` list is a string of its own).
fn is_truenas_key(v: &[u8]) -> bool {
    if !(66..=71).contains(&v.len()) {
        return false;
    }
    let Some(dash) = v.iter().take(7).position(|&c| c == b'-') else {
        return false;
    };
    let key = &v[dash + 1..];
    (1..=6).contains(&dash)
        && key.len() == 64
        && v[..dash].iter().all(u8::is_ascii_digit)
        && key.iter().all(u8::is_ascii_alphanumeric)
        && key.iter().any(u8::is_ascii_uppercase)
        && key.iter().any(u8::is_ascii_lowercase)
        && key.iter().any(u8::is_ascii_digit)
        && looks_random(key)
}

/// The words a secret's name ends with, for a name glued to its value in one run.
const GLUED_SECRET_WORDS: &[&[u8]] = &[
    b"private",
    b"key",
    b"token",
    b"secret",
    b"access",
    b"password",
    b"passwd",
    b"pwd",
];

/// Where the value starts in a run that begins with its own name, joined by `-` or `_`
/// (`dd_secret_key-3c0c…`, `hellosign-PRIVATE-key-LaKS…`, `holidayapiKEY-<uuid>`,
/// `urlscanSECRET-access-key-<uuid>`): after the last separator, within the run's first 48
/// bytes, whose part before ends with a secret's word ([`names_secret`]).
fn named_inside(b: &[u8], body: &Range<usize>, seps: &Separators) -> Option<usize> {
    let head = &b[body.start..];
    // A separator right after the last letter of one of the words: `y`, `n`, `t`, `s`, `d`,
    // `e`.
    seps.backward()
        .find(|&i| {
            i >= 3
                && matches!(head[i - 1] | 0x20, b'y' | b'n' | b't' | b's' | b'd' | b'e')
                && names_secret(&head[..i])
        })
        .map(|i| body.start + i + 1)
}

/// Where the `_` and `-` are among a run's first 48 bytes, one bit each
/// ([`super::runs::separator_mask`]): read once for [`prefixed`] and [`named_inside`].
struct Separators(u64);

impl Separators {
    fn of(head: &[u8]) -> Self {
        Separators(super::runs::separator_mask(head))
    }

    /// The places, first to last.
    fn forward(&self) -> impl Iterator<Item = usize> {
        let mut m = self.0;
        std::iter::from_fn(move || {
            (m != 0).then(|| {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                i
            })
        })
    }

    /// The places, last to first.
    fn backward(&self) -> impl Iterator<Item = usize> {
        let mut m = self.0;
        std::iter::from_fn(move || {
            (m != 0).then(|| {
                let i = 63 - m.leading_zeros() as usize;
                m &= !(1 << i);
                i
            })
        })
    }
}

/// Whether `name` (the part of a run before a separator) ends with a secret's word, and that
/// word is not one of a key that is no secret (`cache-key-…`, `session-token-…`) nor the
/// end of another word (`monkey-…`). The word may be glued to what comes before it in
/// another case (`holidayapiKEY`, `bloggerSECRETkey`), or in the same case to a vendor's
/// name or a secret's word (`apikey`, `secrettoken`, `mailjetkey`).
fn names_secret(name: &[u8]) -> bool {
    // The last three letters of one of the words first: most names end otherwise.
    let [.., x, y, z] = name else {
        return false;
    };
    if !matches!(
        [x | 0x20, y | 0x20, z | 0x20],
        [b'k', b'e', b'y']
            | [b'a', b't', b'e']
            | [b'k', b'e', b'n']
            | [b'r', b'e', b't']
            | [b'e', b's', b's']
            | [b'o', b'r', b'd']
            | [b's', b'w', b'd']
            | [b'p', b'w', b'd']
    ) {
        return false;
    }
    let n = name
        .iter()
        .rev()
        .take(24)
        .take_while(|c| c.is_ascii_alphabetic())
        .count();
    if n < 3 {
        return false;
    }
    let word = &name[name.len() - n..];
    let mut lower = [0u8; 24];
    let lower = &mut lower[..n];
    lower.copy_from_slice(word);
    lower.make_ascii_lowercase();
    let Some(suffix) = GLUED_SECRET_WORDS.iter().find(|s| lower.ends_with(s)) else {
        return false;
    };
    let split = n - suffix.len();
    // The word that says which key it is: the one before the separator (`cache-key`), the
    // part glued before it in another case (`cacheKey`), or the same case's glued part.
    let head: &[u8] = if split == 0 {
        let before = &name[..name.len() - n];
        let Some(before) = before
            .strip_suffix(b"-")
            .or_else(|| before.strip_suffix(b"_"))
        else {
            return true;
        };
        let k = before
            .iter()
            .rev()
            .take(24)
            .take_while(|c| c.is_ascii_alphabetic())
            .count();
        &before[before.len() - k..]
    } else if word[split - 1].is_ascii_lowercase() != word[split].is_ascii_lowercase() {
        let p = &word[..split];
        let from = (1..p.len())
            .rev()
            .find(|&i| p[i].is_ascii_uppercase() && p[i - 1].is_ascii_lowercase())
            .unwrap_or(0);
        &p[from..]
    } else {
        let p = &lower[..split];
        let glued = kind(word_hash(p)) & (VENDOR | SECRET) != 0
            || [&b"api"[..], b"secret", b"private", b"access", b"auth"]
                .iter()
                .any(|w| p.ends_with(w));
        if !glued {
            return false;
        }
        &word[..split]
    };
    let mut h = [0u8; 24];
    let h = &mut h[..head.len()];
    h.copy_from_slice(head);
    h.make_ascii_lowercase();
    !super::rules::NOT_SECRET_KEYS
        .iter()
        .any(|k| k.as_bytes() == &h[..])
        && kind(word_hash(h)) & OTHER == 0
}

/// A value a secret's word names: random as a key is ([`looks_random`]), a UUID or a hex
/// digest (which a name must mark as a secret: here one does). Of one piece: what follows a
/// name's word across `_` or `-` is more often more of the name (`load_key_and_certificates
/// _from_pkcs12`, `secure-key-exchange-x25519mlkem768`) than a key, so a `_` or a `-` in it
/// (but a UUID's) says it is no key.
fn secret_shaped(v: &[u8]) -> bool {
    if v.len() < 16 || v.len() > MAX_LEN {
        return false;
    }
    let hex = v.iter().all(u8::is_ascii_hexdigit);
    let uuid = v.len() == 36
        && v.iter().enumerate().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                *c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    uuid || (!v.iter().any(|&c| matches!(c, b'_' | b'-'))
        && (looks_random(v) || (hex && v.len() >= 32 && super::providers::entropy(v) >= 2.5)))
}

/// Providers' token prefixes distinctive enough that a random run after one is that
/// provider's token whatever its alphabet or length: the provider rules
/// ([`super::providers`]) hold each format exactly, and this takes the variants they turn
/// away (a token written in another alphabet than its format's, one cut or run on by a few
/// characters). Sorted, for [`prefixed_spans`]'s search by first byte.
#[rustfmt::skip]
const PREFIXES: &[&str] = &[
    "CFPAT-", "NRAA-", "NRAK-", "NRII-", "NRIQ-", "NRJS-", "aio_", "bkua_", "ccipat_",
    "cciprj_", "cfat_", "cfk_", "cfut_", "clojars_", "dckr_oat_", "dckr_pat_", "doo_v1_", "dop_v1_", "dor_v1_",
    "duffel_live_", "duffel_test_", "figd_", "fio-u-", "flb_live_", "fm1a_", "fm1r_", "fm2_", "fo1_", "gho_", "ghp_", "ghr_",
    "ghs_", "ghu_", "github_pat_", "glc_", "gldt-", "glpat-", "glptt-", "glrt-", "glsa_",
    "gsk_", "hrku-", "ion_", "jina_", "lin_api_", "lin_oauth_", "lsv2_pt_", "lsv2_sk_",
    "mdb_sa_sk_", "nfp_", "npm_", "ntn_", "nvapi-", "pcsk_", "phx_", "pmak-", "pnu_", "pplx-",
    "pscale_oauth_", "pscale_pw_", "pscale_tkn_", "rdme_", "rk_live_", "rnd_", "rootly_",
    "rubygems_", "sb_secret_", "sbp_", "sgp_", "shippo_live_", "shippo_test_", "shpat_",
    "shpca_", "shppa_", "shpss_", "sk-ant-", "sk-lf-", "sk_live_", "sk_test_", "slk_",
    "sm_aat_", "sm_pat_", "sm_sat_", "sntrys_", "sntryu_", "sq0atp-", "sq0csp-", "sqa_",
    "sqp_", "squ_", "tfp_", "tskey-", "tvly-", "vca_", "vci_", "vck_", "vcp_", "vcr_", "whsec_", "xai-", "xapp-", "xkeysib-",
    "xoxa-", "xoxb-", "xoxe-", "xoxp-", "xoxr-", "xsmtpsib-",
];

/// The first two bytes of every prefix: bit `d` of entry `c` for a prefix starting `cd`. Turns
/// away most places of most runs with two loads.
const PREFIX_PAIRS: [u128; 128] = {
    let mut t = [0u128; 128];
    let mut i = 0;
    while i < PREFIXES.len() {
        let p = PREFIXES[i].as_bytes();
        t[p[0] as usize] |= 1 << p[1];
        i += 1;
    }
    t
};

/// The span of `body` that is a provider's prefix ([`PREFIXES`]) then at least 16
/// characters of a key's shape ([`looks_random`]), the prefix at the run's start or after a
/// `_` or `-` in its first 24 bytes (`key_sk-ant-…`).
fn prefixed(b: &[u8], body: &Range<usize>, seps: &Separators) -> Option<Range<usize>> {
    let after = seps.forward().map(|i| i + 1).take_while(|&i| i <= 24);
    for at in std::iter::once(0).chain(after).map(|i| body.start + i) {
        let (Some(&c), Some(&d)) = (b.get(at), b.get(at + 1)) else {
            break;
        };
        if c >= 128 || d >= 128 || PREFIX_PAIRS[usize::from(c)] >> d & 1 == 0 {
            continue;
        }
        let first = PREFIXES.partition_point(|p| p.as_bytes()[0] < c);
        let Some(prefix) = PREFIXES[first..]
            .iter()
            .take_while(|p| p.as_bytes()[0] == c)
            .find(|p| b[at..body.end].starts_with(p.as_bytes()))
        else {
            continue;
        };
        let rest = &b[at + prefix.len()..body.end];
        if rest.len() >= 16 && rest.len() <= MAX_LEN && looks_random(rest) {
            return Some(at..body.end);
        }
    }
    None
}

/// Pushes every Discord bot token among `found`'s runs: a user's numeric id in base64 (the run,
/// 23 to 28 characters, whose first 24 or so decode to ASCII digits), `.`, six characters of a
/// timestamp, `.`, and an HMAC of 25 to 40. The id's base64 starts with `M`, `N` or `O`; the
/// decoding to digits is what tells it from any dotted run.
pub(crate) fn discord_spans(text: &str, found: &[Range<usize>], out: &mut Vec<Range<usize>>) {
    use base64::Engine as _;
    let b = text.as_bytes();
    let token = |from: usize| {
        b.get(from..).map_or(0, |r| {
            r.iter().take_while(|&&c| super::runs::is_token(c)).count()
        })
    };
    for run in found {
        let (start, end) = (run.start, run.end);
        if !(23..=28).contains(&(end - start))
            || !matches!(b[start], b'M' | b'N' | b'O')
            || b.get(end) != Some(&b'.')
            || token(end + 1) != 6
            || b.get(end + 7) != Some(&b'.')
        {
            continue;
        }
        let mac = token(end + 8);
        if !(25..=40).contains(&mac) {
            continue;
        }
        let id = &b[start..start + (end - start) / 4 * 4];
        let digits = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(id)
            .is_ok_and(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit));
        // Or the shape alone, where each part is random as a token's are (a token made up for
        // docs or tests, whose id decodes to no number, is still written as one).
        let random = |r: Range<usize>| {
            let p = &b[r];
            p.iter().any(u8::is_ascii_uppercase)
                && p.iter().any(u8::is_ascii_lowercase)
                && p.iter().any(u8::is_ascii_digit)
        };
        if digits
            || (random(start..end)
                && random(end + 8..end + 8 + mac)
                && looks_random(&b[end + 8..end + 8 + mac]))
        {
            out.push(start..end + 8 + mac);
        }
    }
}

/// Whether a secret's word (`key`, `token`, `secret`, …) comes right before `at`, across at
/// most four blanks, quotes, `=`, `:` or `-` (`Using Key=…`, `zendesk token - '…'`): a random
/// run so labelled is a credential whatever its vendor.
fn secret_word_right_before(b: &[u8], at: usize) -> bool {
    let mut end = at;
    // A quote may be escaped (`\"key\": \"…` in JSON printed inside a JSON string, `\\\"`
    // a level deeper): its backslashes are not counted.
    let mut seen = 0;
    while end > 0 && seen < 4 {
        match b[end - 1] {
            b' ' | b'\t' | b'=' | b':' | b'-' => end -= 1,
            b'\'' | b'"' => {
                end -= 1;
                while end > 0 && at - end < 16 && b[end - 1] == b'\\' {
                    end -= 1;
                }
            }
            _ => break,
        }
        seen += 1;
    }
    if end == at {
        return false;
    }
    // `Your API key is …`: the word before `is`.
    if end >= 4 && b[end - 3..end].eq_ignore_ascii_case(b" is") && b[end - 4] != b' ' {
        end -= 3;
    }
    let mut start = end;
    while start > 0 && b[start - 1].is_ascii_alphabetic() && end - start < 12 {
        start -= 1;
    }
    // After a backslash, the first letter is an escape's (`\ntoken`).
    if start > 0 && start < end && b[start - 1] == b'\\' {
        start += 1;
    }
    // A word's end (`api_key`, `webex_bot_token`) is the word; a camel-case one's too
    // (`apiKey`).
    if let Some(camel) = (start + 1..end)
        .rev()
        .find(|&i| b[i].is_ascii_uppercase() && b[i - 1].is_ascii_lowercase())
    {
        start = camel;
    }
    let mut word = [0u8; 12];
    let w = &mut word[..end - start];
    w.copy_from_slice(&b[start..end]);
    w.make_ascii_lowercase();
    if w.is_empty() || kind(word_hash(w)) & SECRET == 0 {
        return false;
    }
    // A key that is no secret (`public_key`, `object_key`, `cacheKey`): the word before.
    let before = &b[..start];
    let before = before
        .strip_suffix(b"_")
        .or_else(|| before.strip_suffix(b"-"))
        .or_else(|| before.strip_suffix(b"."))
        .or_else(|| before.strip_suffix(b" "))
        .unwrap_or(before);
    let from = before.len()
        - before
            .iter()
            .rev()
            .take(16)
            .take_while(|c| c.is_ascii_alphabetic())
            .count();
    // After a backslash, the first letter is an escape's (`\ncacheKey`).
    let from = from + usize::from(from > 0 && from < before.len() && before[from - 1] == b'\\');
    let word = &before[from..];
    let word = (1..word.len())
        .rev()
        .find(|&i| word[i].is_ascii_uppercase() && word[i - 1].is_ascii_lowercase())
        .map_or(word, |i| &word[i..]);
    !super::rules::NOT_SECRET_KEYS
        .iter()
        .any(|k| word.eq_ignore_ascii_case(k.as_bytes()))
}

/// Whether the word right before `at` (skipping blanks and punctuation on the same line)
/// names something other than a secret (`commit 3f9c…`, `sha512-…`): the common case of a
/// long run in tool output, settled without reading more context.
fn nearest_is_other(b: &[u8], at: usize) -> bool {
    let mut end = at;
    while end > 0 && !b[end - 1].is_ascii_alphanumeric() && b[end - 1] != b'\n' && at - end < 8 {
        end -= 1;
    }
    let mut start = end;
    while start > 0 && b[start - 1].is_ascii_alphanumeric() && end - start < 24 {
        start -= 1;
    }
    // After a backslash, the first letter is an escape's (`\\ncommit`).
    if start > 0 && b[start - 1] == b'\\' {
        start += 1;
    }
    if start >= end {
        return false;
    }
    let mut word = [0u8; 24];
    let w = &mut word[..end - start];
    w.copy_from_slice(&b[start..end]);
    w.make_ascii_lowercase();
    kind(word_hash(w)) & OTHER != 0
}

/// A run without its separators at either end (`-`, `_`, `/`, `+`) and padding.
fn trim_run(mut run: Range<usize>, b: &[u8]) -> Range<usize> {
    let edge = |c: u8| matches!(c, b'-' | b'_' | b'/' | b'+' | b'=');
    while run.start < run.end && edge(b[run.start]) {
        run.start += 1;
    }
    while run.end > run.start && edge(b[run.end - 1]) {
        run.end -= 1;
    }
    run
}

/// Whether `v` holds letters and digits both (`Some(false)`), or letters alone as a long key
/// does (`Some(true)`); `None` for neither. A key of letters alone (`PSIYbVgfkbEPQoqJfzHp…`, a
/// digit missing by chance from a long base64 run) is long, of one piece (two separators at
/// most: a path's words are not a key) and changes case every few letters ([`looks_random`]),
/// as no identifier does.
fn letters_and_digits(v: &[u8]) -> Option<bool> {
    let (digits, letters) = digits_and_letters(v);
    key_mix(digits, letters, v.len())
}

/// [`letters_and_digits`] from the counts of a value `len` bytes long.
fn key_mix(digits: usize, letters: usize, len: usize) -> Option<bool> {
    let letters_alone = digits == 0 && len >= 24 && len - letters <= 2;
    (letters > 0 && (digits > 0 || letters_alone)).then_some(letters_alone)
}

/// How many ASCII digits and letters `v` holds.
fn digits_and_letters(v: &[u8]) -> (usize, usize) {
    // Counted in bytes a chunk of 255 at a time: the vector unit counts sixteen or thirty-two
    // at once, where counters as wide as `usize` took a dozen instructions a byte.
    let (mut digits, mut letters) = (0usize, 0usize);
    for chunk in v.chunks(255) {
        let (mut d, mut l) = (0u8, 0u8);
        for c in chunk {
            d += u8::from(c.is_ascii_digit());
            l += u8::from(c.is_ascii_alphabetic());
        }
        digits += usize::from(d);
        letters += usize::from(l);
    }
    (digits, letters)
}

/// How often `v` changes between digits, lowercase, uppercase and other bytes from one byte to
/// the next: a random key every few bytes, a word or a setting's name a few times in all.
pub(crate) fn class_changes(v: &[u8]) -> usize {
    let class = |c: u8| match c {
        b'0'..=b'9' => 0,
        b'a'..=b'z' => 1,
        b'A'..=b'Z' => 2,
        _ => 3,
    };
    v.windows(2).filter(|w| class(w[0]) != class(w[1])).count()
}

/// A key's shape: letters and digits both, classes (digit, lower, upper) changing often, no
/// long run of one letter, and the Shannon entropy of random text.
pub(crate) fn looks_random(v: &[u8]) -> bool {
    let Some(letters_alone) = letters_and_digits(v) else {
        return false;
    };
    let changes = class_changes(v);
    if changes < (v.len() / 5).max(4) || (letters_alone && changes * 3 < v.len()) {
        return false;
    }
    // Identifiers: words (four letters or more, split at digits, separators and case
    // changes: `mailjet_send_v3`, `SomeLongIdentifierName2024`) cover most of it. A run of
    // letters is a word when its capitals are an acronym or read as a word (`HTTP`, `SECRET`)
    // or its lowercase tail reads as one (`Name`, `HTTPServer`, `send`): the letters between a
    // random key's digits (`HWao`, `LNknss`, `CHfr` of `5HWaoDB9…LNknss4m6TPmaCHfr`) seldom are.
    let mut wordy = 0;
    let mut from = 0;
    for k in 0..=v.len() {
        let c = v.get(k).copied().unwrap_or(b'0');
        let starts_word = c.is_ascii_uppercase() && k > 0 && v[k - 1].is_ascii_lowercase();
        if !c.is_ascii_alphabetic() || starts_word {
            if k - from >= 4 && is_word(&v[from..k]) {
                wordy += k - from;
            }
            from = if c.is_ascii_alphabetic() { k } else { k + 1 };
        }
    }
    if wordy * 10 > v.len() * 6 {
        return false;
    }
    // A name built of short words (`X-aws-ec2-metadata-token`, `AWS_SECRET_ACCESS_KEY`): a
    // header, key or variable, not a key of its vendor (T2.8).
    if std::str::from_utf8(v).is_ok_and(super::code::is_name_of_thing) {
        return false;
    }
    let hex = v.iter().all(u8::is_ascii_hexdigit);
    // The provider rules' entropy: the same sum, each count's term computed once.
    super::providers::entropy(v) >= if hex { 3.0 } else { 3.3 }
}

/// A run of letters split as [`looks_random`] splits them (capitals, then lowercase) that reads
/// as a word: capitals alone that are an acronym's four or fewer (`HTTP`) or read as a word
/// (`SECRET`, `PASSWORD`), or a lowercase tail of three letters or more that reads as one. The
/// capitals between a random key's digits (`WHVQWWUT`, `GNXFMO`) do not.
fn is_word(seg: &[u8]) -> bool {
    let lower = seg
        .iter()
        .position(u8::is_ascii_lowercase)
        .unwrap_or(seg.len());
    if lower == seg.len() {
        return seg.len() <= 4 || reads_as_word(seg);
    }
    reads_as_word(&seg[lower..])
}

/// Whether letters of one case read as a word: three or more, a vowel among them, and no four
/// consonants in a row but a word's clusters.
fn reads_as_word(tail: &[u8]) -> bool {
    let vowel = |c: &u8| matches!(c | 0x20, b'a' | b'e' | b'i' | b'o' | b'u' | b'y');
    if tail.len() < 3 || !tail.iter().any(vowel) {
        return false;
    }
    // Four consonants in a row are a word's only as one of its clusters (`substring`,
    // `strength`, `instruction`): `wdvn`, `kjhv` of a random run are not.
    tail.split(vowel).all(|run| {
        run.len() < 4
            || run
                .windows(2)
                .any(|pair| CLUSTERS.iter().any(|c| pair.eq_ignore_ascii_case(&c[..])))
    })
}

/// Pairs of consonants that hold words' runs of four (`nstr`, `ngth`, `bstr`).
const CLUSTERS: &[&[u8; 2]] = &[
    b"st", b"ng", b"ch", b"th", b"sh", b"sc", b"ct", b"nd", b"nt", b"rt", b"rd", b"ld", b"ns",
    b"ts", b"ph", b"tr", b"pr", b"gh",
];

/// The words before a value, nearest first, lowercase in `buf`: split at anything but letters
/// and digits, at case changes (`mailjetApiKey`), with escapes (`\n`, `\u0022`) as
/// separators, over at most one line break and never past a `[REDACTED]` marker.
fn words_before<'b>(context: &[u8], buf: &'b mut [u8; CONTEXT]) -> Vec<&'b [u8]> {
    // Cut at the second line break back (real or escaped).
    let mut breaks = 0;
    let mut from = 0;
    let mut j = context.len();
    while j > 0 {
        j -= 1;
        let escaped_n = context[j] == b'n' && j > 0 && context[j - 1] == b'\\';
        if context[j] == b'\n' || escaped_n {
            breaks += 1;
            if breaks == 2 {
                from = j + 1;
                break;
            }
        }
    }
    // Nor past a marker: a name before it named the value it replaced. (So a second pass,
    // whose markers are shorter than what they replaced, sees no name the first did not.)
    if let Some(m) = memchr::memmem::rfind(&context[from..], super::REDACTED.as_bytes()) {
        from += m + super::REDACTED.len();
    }
    let ctx = &context[from..];
    let len = ctx.len().min(CONTEXT);
    let ctx = &ctx[ctx.len() - len..];
    // Lowercase copy; word boundaries as ranges into it.
    let mut bounds: Vec<Range<usize>> = Vec::new();
    let mut cur: Option<usize> = None;
    let mut k = 0;
    while k < ctx.len() {
        let c = ctx[k];
        buf[k] = c.to_ascii_lowercase();
        let boundary = !c.is_ascii_alphanumeric()
            || (c.is_ascii_uppercase() && k > 0 && ctx[k - 1].is_ascii_lowercase());
        if boundary && let Some(s) = cur.take() {
            bounds.push(s..k);
        }
        if c == b'\\' {
            // The backslashes (`\\n` is JSON inside JSON's `\n`), the escaped letter, and a
            // `\u`'s four digits.
            let mut e = k;
            while e < ctx.len() && ctx[e] == b'\\' {
                e += 1;
            }
            let end = (e + if ctx.get(e) == Some(&b'u') { 5 } else { 1 }).min(ctx.len());
            buf[k..end].fill(b' ');
            k = end;
            continue;
        }
        if c.is_ascii_alphanumeric() && cur.is_none() {
            cur = Some(k);
        }
        k += 1;
    }
    if let Some(s) = cur {
        bounds.push(s..ctx.len());
    }
    // A word cut by the window's start is not a word.
    if from == 0
        && context.len() >= CONTEXT
        && context.first().is_some_and(u8::is_ascii_alphanumeric)
        && !bounds.is_empty()
    {
        bounds.remove(0);
    }
    let buf: &'b [u8] = buf;
    bounds.iter().rev().map(|r| &buf[r.clone()]).collect()
}

/// Whether a vendor's name is among the words before a value, with nothing naming something
/// else nearer; a weak name needs a secret word nearer than itself (`segment write key:`).
fn vendor_before(context: &[u8]) -> bool {
    let mut buf = [0u8; CONTEXT];
    let words = words_before(context, &mut buf);
    let hashes: Vec<u64> = words.iter().map(|w| word_hash(w)).collect();
    for (i, (&w, &h)) in words.iter().zip(&hashes).enumerate() {
        let k = kind(h);
        if k & OTHER != 0 {
            return false;
        }
        // A name split in two (`Scraper API` for `scraperapi`).
        let pair = words.get(i + 1).map_or(0, |p| kind(fnv(word_hash(p), w)));
        let name = if k & (VENDOR | WEAK_NAME) != 0 {
            k
        } else {
            pair
        };
        if name & (VENDOR | WEAK_NAME) != 0 {
            let secret_nearer = hashes[..i].iter().any(|&h| kind(h) & SECRET != 0);
            return name & VENDOR != 0 && name & WEAK_NAME == 0 || secret_nearer;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let runs = crate::ship::redact::runs::long_runs(text.as_bytes(), MIN_LEN);
        spans(text, &runs, &|_: &Range<usize>| false, &mut out);
        out.into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn prefixes_are_sorted_with_their_first_pairs_in_the_table() {
        assert!(PREFIXES.is_sorted(), "PREFIXES must stay sorted");
        for p in PREFIXES {
            let b = p.as_bytes();
            assert!(b.len() >= 4 && b.is_ascii(), "{p}");
            assert_ne!(PREFIX_PAIRS[usize::from(b[0])] >> b[1] & 1, 0, "{p}");
        }
    }

    #[test]
    fn a_vendor_a_short_gap_and_a_random_value() {
        assert_eq!(
            found("cloudsmith: \"3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345\" # api key"),
            ["3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345"]
        );
        assert_eq!(
            found("scraperapi token = 'Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O'"),
            ["Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O"]
        );
        assert_eq!(
            found("MAILJET_KEY=8f3a9c2e71b04d5f9a6e3c1b7d2f4a80"),
            ["8f3a9c2e71b04d5f9a6e3c1b7d2f4a80"]
        );
        assert_eq!(
            found("const mailjetApiKey = \"8f3a9c2e71b04d5f9a6e3c1b7d2f4a80\";"),
            ["8f3a9c2e71b04d5f9a6e3c1b7d2f4a80"]
        );
        assert_eq!(
            found("Scraper API key:\n  Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O"),
            ["Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O"]
        );
        // A vendor named in code as a variable (`apiMetrics := "…"`), a setting
        // (`cloudimage: "…"`) or a word before the key.
        for (text, key) in [
            (
                "apiMetrics := \"7Kp2Wq9Zx4Lm8Rt1Vb6Nc3Hj5Gd0Sf2A\"",
                "7Kp2Wq9Zx4Lm8Rt1Vb6Nc3Hj5Gd0Sf2A",
            ),
            (
                "apiTemplate := \"Qm4Zp8Wx2Lc7Vb1Nr5Kt9Yh3Gs6Df0Ja4Pe8U\"",
                "Qm4Zp8Wx2Lc7Vb1Nr5Kt9Yh3Gs6Df0Ja4Pe8U",
            ),
            (
                "cloudimage: \"k3f9x2m7q1w8z4v6n5b0c2\"",
                "k3f9x2m7q1w8z4v6n5b0c2",
            ),
            (
                "owm = '7f3k9a2m5q8w1z4x6c0v3b7n9a2s4d6f'",
                "7f3k9a2m5q8w1z4x6c0v3b7n9a2s4d6f",
            ),
            (
                "metaapi 9c4e1a7f3b2d8e05a6c9f1b4d7e2a8c3f05b9d1e6a4c7f2b8e3d0a5c9f1b6e4d",
                "9c4e1a7f3b2d8e05a6c9f1b4d7e2a8c3f05b9d1e6a4c7f2b8e3d0a5c9f1b6e4d",
            ),
        ] {
            assert_eq!(found(text), [key], "{text}");
        }
    }

    #[test]
    fn hashes_ids_and_words_near_a_vendor_stay() {
        for text in [
            "\"@sentry/browser\": {\"integrity\": \"sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg==\"}",
            "github.com/stripe/stripe-go/v72 v72.5.0 h1:QyB6M2a9mqPkbRzzTHXhEFuA6KxnJxf4cUqEdIuQ6Zo=",
            "see https://github.com/mailjet/mailjet-apiv3-go/commit/3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345",
            "cloudsmith upload raw org/repo mailjet_send_transactional_email_v3.tar.gz",
            "mailjet request id 0199a2b4-c0de-7000-a000-000000000001",
            "segment: 3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345",
        ] {
            assert_eq!(found(text), Vec::<&str>::new(), "{text}");
        }
    }

    #[test]
    fn a_common_word_vendor_needs_a_secret_word() {
        assert_eq!(
            found("segment write key: Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O"),
            ["Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O"]
        );
        assert_eq!(
            found("segment Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O"),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn words_split_at_escapes_of_any_depth() {
        let mut buf = [0u8; CONTEXT];
        let words: Vec<String> = words_before(br"Cargo.lock\\ncommit ", &mut buf)
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        assert_eq!(words, ["commit", "lock", "cargo"]);
        let mut buf = [0u8; CONTEXT];
        let words: Vec<String> = words_before(br"x \u0022mailjetKey\u0022: ", &mut buf)
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        assert_eq!(words, ["key", "mailjet", "x"]);
    }

    #[test]
    fn no_two_listed_words_share_a_hash() {
        let mut seen = std::collections::HashMap::new();
        for w in VENDORS
            .iter()
            .chain(WEAK)
            .chain(SECRET_WORDS)
            .chain(OTHER_WORDS)
        {
            if let Some(other) = seen.insert(word_hash(w.as_bytes()), *w) {
                assert_eq!(other, *w, "{other} and {w} share a hash");
            }
        }
    }

    #[test]
    fn randomness() {
        assert!(looks_random(b"Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O"));
        assert!(looks_random(b"8f3a9c2e71b04d5f9a6e3c1b7d2f4a80"));
        assert!(!looks_random(b"aaaaaaaaaaaaaaaaaaaaaaaa1"));
        assert!(!looks_random(b"SomeLongIdentifierName2024"));
        assert!(!looks_random(b"mailjet_send_v3_HTTPServer"));
        // Letters between a key's digits are not words because there are four of them.
        assert!(looks_random(b"5HWaoDB9jbokXJ9LNknss4m6TPmaCHfr"));
        // Nor are lowercase letters with four consonants in a row outside a word's clusters.
        assert!(looks_random(b"wdvnousa87acfxp9ioasrea4tbeasrfa"));
        assert!(!looks_random(b"substring_strength_instruction_v2"));
        assert!(!looks_random(b"00000000000000000000000000000000"));
        // Capitals between digits read as words only when they do: `SECRET`, an acronym.
        assert!(looks_random(
            b"I5SYNPRFZI41WHVQWWUT0GNXFMO104343E7CXFIISR01E2V8ETS"
        ));
        assert!(!looks_random(b"HTTP2_PROXY_PASSWORD_FILE"));
        // Letters alone: a long run changing case every few letters, never an identifier.
        assert!(looks_random(b"PSIYbVgfkbEPQoqJfzHpACTtihONkQ_cKmOpNDPNiCU"));
        assert!(!looks_random(b"getAccessTokenFromRefreshTokenCache"));
        assert!(!looks_random(b"ThisIsAVeryLongClassNameWithoutDigits"));
        assert!(!looks_random(b"XMLHttpRequestEventTargetHandlers"));
        assert!(!looks_random(b"PSIYbVgfkbEPQoqJfzHp"));
        assert!(!looks_random(
            b"io/gh/PyMySQL/PyMySQL/branch/main/graph/badge"
        ));
    }

    #[test]
    fn discord_bot_tokens_by_their_id() {
        let spans = |text: &str| {
            let mut out = Vec::new();
            let runs = crate::ship::redact::runs::long_runs(text.as_bytes(), MIN_LEN);
            discord_spans(text, &runs, &mut out);
            out.into_iter()
                .map(|r| text[r].to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            spans("bot.run('MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs')"),
            ["MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs"]
        );
        // A token made up for docs or tests, whose first part is no id in base64, by the
        // randomness of its parts.
        assert_eq!(
            spans("MZ1yGvKTjE0rY0cV8i47CjAa.uRHQPq.Xb1Mk2nEhe-4iUcrGOuegj57zMC"),
            ["MZ1yGvKTjE0rY0cV8i47CjAa.uRHQPq.Xb1Mk2nEhe-4iUcrGOuegj57zMC"]
        );
        // A dotted path of names in the same shape is none.
        assert!(spans("MainActivityControllerXY.onInit.handleRequestCallbackFactory").is_empty());
        assert!(spans("MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FM.ZnCjm1XVW7vRze4b7Cq4se7kKWs").is_empty());
    }

    #[test]
    fn a_secret_word_right_before_a_random_run() {
        assert_eq!(
            found("[DEBUG] Using Key=wdvnousa87acfxp9ioasrea4tbeasrfa"),
            ["wdvnousa87acfxp9ioasrea4tbeasrfa"]
        );
        assert_eq!(
            found("Your API2CART key is 2afddb813193eb9d3b5bd99bf5d834cd, which"),
            ["2afddb813193eb9d3b5bd99bf5d834cd"]
        );
        assert!(found("the cache key is Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4").is_empty());
        assert_eq!(
            found("zendesk token - 'Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4'"),
            ["Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4"]
        );
        for kept in [
            "PUBLIC_KEY=Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
            "cacheKey: Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
            "object-key = Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
            "monkey: Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
            "key id Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
        ] {
            assert!(found(kept).is_empty(), "{kept}");
        }
        // Nothing before the run, or only separators: no word, no panic.
        for text in [
            "==Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
            "\\ Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
            "é: Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4",
        ] {
            assert!(found(text).is_empty(), "{text}");
        }
    }
}
