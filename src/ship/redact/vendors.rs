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

use std::collections::HashSet;
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
    "ping", "duo", "onelogin", "keycloak",
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
];

/// Words that name a secret: with a weak vendor name, or a value shaped like a hash or a UUID.
#[rustfmt::skip]
const SECRET_WORDS: &[&str] = &[
    "key", "keys", "token", "tokens", "secret", "secrets", "password", "passwd", "pass", "pwd",
    "apikey", "auth", "credential", "credentials", "bearer", "private",
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

struct Tables {
    vendors: HashSet<&'static str>,
    weak: HashSet<&'static str>,
    secret: HashSet<&'static str>,
    other: HashSet<&'static str>,
}

static TABLES: LazyLock<Tables> = LazyLock::new(|| Tables {
    vendors: VENDORS.iter().copied().collect(),
    weak: WEAK.iter().copied().collect(),
    secret: SECRET_WORDS.iter().copied().collect(),
    other: OTHER_WORDS.iter().copied().collect(),
});

fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'/')
}

/// Pushes every value in `text` that a vendor's name shortly before it marks as that vendor's
/// credential.
pub(crate) fn spans(text: &str, out: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    let n = b.len();
    let mut i = 0;
    while i < n {
        if !token_byte(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && token_byte(b[i]) {
            i += 1;
        }
        // Padding ends a run.
        while i < n && b[i] == b'=' && i > start && b[i - 1] != b'=' {
            i += 1;
        }
        // A run right after a backslash starts with an escape's letter (`\nabc`).
        let mut s = start;
        if s > 0 && b[s - 1] == b'\\' {
            s += 1;
        }
        let body = trim_run(s..i, b);
        let value = &b[body.clone()];
        if value.len() < MIN_LEN || value.len() > MAX_LEN || !looks_random(value) {
            continue;
        }
        if vendor_before(&b[body.start.saturating_sub(CONTEXT)..body.start]) {
            out.push(body);
        }
    }
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

/// A key's shape: letters and digits both, classes (digit, lower, upper) changing often, no
/// long run of one letter, and the Shannon entropy of random text.
pub(crate) fn looks_random(v: &[u8]) -> bool {
    let digits = v.iter().filter(|c| c.is_ascii_digit()).count();
    let letters = v.iter().filter(|c| c.is_ascii_alphabetic()).count();
    if digits == 0 || letters == 0 {
        return false;
    }
    let class = |c: u8| match c {
        b'0'..=b'9' => 0,
        b'a'..=b'z' => 1,
        b'A'..=b'Z' => 2,
        _ => 3,
    };
    let changes = v.windows(2).filter(|w| class(w[0]) != class(w[1])).count();
    if changes < (v.len() / 5).max(4) {
        return false;
    }
    // Identifiers: words (four letters or more, split at digits, separators and case
    // changes: `mailjet_send_v3`, `SomeLongIdentifierName2024`) cover most of it.
    let mut wordy = 0;
    let mut seg = 0;
    for (k, &c) in v.iter().enumerate() {
        let starts_word = c.is_ascii_uppercase() && k > 0 && v[k - 1].is_ascii_lowercase();
        if !c.is_ascii_alphabetic() || starts_word {
            if seg >= 4 {
                wordy += seg;
            }
            seg = 0;
        }
        if c.is_ascii_alphabetic() {
            seg += 1;
        }
    }
    if seg >= 4 {
        wordy += seg;
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
    entropy(v) >= if hex { 3.0 } else { 3.3 }
}

fn entropy(v: &[u8]) -> f32 {
    let mut counts = [0u32; 256];
    for &c in v {
        counts[c as usize] += 1;
    }
    let n = v.len() as f32;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f32 / n;
            -p * p.log2()
        })
        .sum()
}

/// The words before a value, nearest first: split at anything but letters and digits, at
/// case changes (`mailjetApiKey`), with escapes (`\n`, `\u0022`) as separators, over at most
/// one line break and never past a `[REDACTED]` marker.
fn words_before(context: &[u8]) -> Vec<String> {
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
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut k = 0;
    let push = |cur: &mut String, words: &mut Vec<String>| {
        if !cur.is_empty() {
            words.push(std::mem::take(cur));
        }
    };
    while k < ctx.len() {
        let c = ctx[k];
        if c == b'\\' {
            push(&mut cur, &mut words);
            k += match ctx.get(k + 1) {
                Some(b'u') => 6,
                _ => 2,
            };
            continue;
        }
        if !c.is_ascii_alphanumeric() {
            push(&mut cur, &mut words);
        } else {
            // `mailjetApi`: a capital after a lowercase letter starts a word.
            let prev = (k > 0).then(|| ctx[k - 1]);
            if c.is_ascii_uppercase() && prev.is_some_and(|p| p.is_ascii_lowercase()) {
                push(&mut cur, &mut words);
            }
            cur.push(c.to_ascii_lowercase() as char);
        }
        k += 1;
    }
    push(&mut cur, &mut words);
    // A word cut by the window's start is not a word.
    if from == 0
        && context.len() >= CONTEXT
        && context.first().is_some_and(u8::is_ascii_alphanumeric)
        && !words.is_empty()
    {
        words.remove(0);
    }
    words.reverse();
    words
}

/// Whether a vendor's name is among the words before a value, with nothing naming something
/// else nearer; a weak name needs a secret word nearer than itself (`segment write key:`).
fn vendor_before(context: &[u8]) -> bool {
    let t = &*TABLES;
    let words = words_before(context);
    for (i, w) in words.iter().enumerate() {
        if t.other.contains(w.as_str()) {
            return false;
        }
        // A name split in two (`Scraper API` for `scraperapi`).
        let pair = words.get(i + 1).map(|p| format!("{p}{w}"));
        let named = |name: &str| t.vendors.contains(name) || t.weak.contains(name);
        let found = if named(w) {
            Some(w.as_str())
        } else {
            pair.as_deref().filter(|p| named(p))
        };
        if let Some(name) = found {
            let secret_nearer = words[..i].iter().any(|w| t.secret.contains(w.as_str()));
            return !t.weak.contains(name) || secret_nearer;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        spans(text, &mut out);
        out.into_iter().map(|r| &text[r]).collect()
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
    fn randomness() {
        assert!(looks_random(b"Zq8Wm3Np7Lk2Vb6Xc1Rt5Yh9Uj4Ik0O"));
        assert!(looks_random(b"8f3a9c2e71b04d5f9a6e3c1b7d2f4a80"));
        assert!(!looks_random(b"aaaaaaaaaaaaaaaaaaaaaaaa1"));
        assert!(!looks_random(b"SomeLongIdentifierName2024"));
        assert!(!looks_random(b"00000000000000000000000000000000"));
    }
}
