//! The precision classes of docs/behaviour.md T2.7-T2.9 found on real credential-handling code
//! (as `redact_precision` found them): for each, cases generated over secret names of every case,
//! left alone in every placement a rollout has, and the same shape holding a real secret, still
//! redacted (a precision fix must not open a leak).
//!
//! `@` in a template stands for a secret's name, `@@` for it in capitals.

use crate::redact_forms::{changes, leaks};

/// Secret names as code writes them.
const NAMES: &[&str] = &[
    "token",
    "api_key",
    "apiKey",
    "accessToken",
    "client_secret",
    "secret_key",
    "password",
];

/// The names a parameter of code goes by, but not a password's (whose value may be words).
const NON_PASSWORD_NAMES: &[&str] = &["token", "api_key", "apiKey", "accessToken", "jwt_token"];

/// A random run standing for a real secret.
const SECRET: &str = "Xk9vQ2mLp7Rz";

fn fill(template: &str, name: &str) -> String {
    template
        .replace("@@", &name.to_ascii_uppercase())
        .replace('@', name)
}

/// Every template filled with every name ships byte for byte in every placement.
fn left_alone(names: &[&str], templates: &[&str]) {
    let mut failures = Vec::new();
    for name in names {
        for template in templates {
            failures.extend(changes(&fill(template, name)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every template filled with every name, holding [`SECRET`] (or the secrets given), ships
/// without it in every placement.
fn redacted(names: &[&str], templates: &[&str]) {
    let mut failures = Vec::new();
    for name in names {
        for template in templates {
            failures.extend(leaks(&fill(template, name), &[SECRET, "Xk9v", "Q2mLp7"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `left alone` and `redacted` for one class.
macro_rules! class_tests {
    ($($class:ident: $names:expr, left alone [$($neg:expr),+ $(,)?], redacted [$($pos:expr),+ $(,)?];)+) => {$(
        mod $class {
            use super::*;

            #[test]
            fn left_alone_in_every_placement() {
                left_alone($names, &[$($neg),+]);
            }

            #[test]
            fn a_secret_in_the_same_shape_is_redacted() {
                redacted($names, &[$($pos),+]);
            }
        }
    )+};
}

class_tests! {
    // A call whose arguments go on on the next lines.
    code_call_open_at_line_end: NAMES,
        left alone [
            "@ = load_credentials(\n    profile_name,\n)",
            "const @ = useCallback(\n  async () => client.get(),\n  [client]\n);",
            "    @ = self._resolve_source_credentials(\n        role_config, profile_name\n    )",
        ],
        redacted ["@ = Xk9vQ2mLp7Rz(\n    profile_name,\n)"];
    // A bracket left open at the end of a line: a literal spread over lines.
    code_literal_open_at_line_end: NAMES,
        left alone [
            "        @ = {\n            'access_key': creds['AccessKeyId'],\n        }",
            "    _REQUIRED_@@_FIELDS = (\n        'accessToken',\n    )",
            "\t\t@ = &Token{\n\t\t\tAccessToken: vals.Get(\"access_token\"),\n\t\t}",
        ],
        redacted ["@ = &Xk9vQ2mLp7Rz{\n}", "@ = ['Xk9vQ2mLp7Rz']"];
    // `await`, `new` and a call of words of any case with arguments of any kind.
    code_await_and_calls_of_any_case: NAMES,
        left alone [
            "const @ = await getAccessTokenSilently(options);",
            "        @ = await client.getTokenSilently(opts);",
            "@ = JSONFileCache(get_login_token_cache_directory())",
            "@ = fetcher(require_expiry=False)",
            "@ = environ.get(mapping['access_key'], '')",
            "\t@ = credentials.DetectDefaultStore(configFile.CredentialsStore)",
            "\t@ = time.Now().Add(time.Duration(expires) * time.Second)",
            "@: authhandler.TokenSourceWithPKCE(ctx, config, params.State, params.PKCE),",
        ],
        redacted [
            "@ = Xk9vQ2mLp7Rz(options)",
            "@ = getToken(Xk9vQ2mLp7Rz)",
            "@ = await Xk9vQ2mLp7Rz(opts);",
        ];
    // Subscripts and member paths whose segments are words of any case.
    code_subscripts_and_paths_of_any_case: NAMES,
        left alone [
            "@ = creds[self.ACCESS_KEY]",
            "@ = self._environ[self.ENV_VAR_AUTH_TOKEN_FILE]",
            "@: types.FlattenedJWSInput,",
            "(`refreshTokenMode: RefreshTokenMode.Online`): @ = refreshTokenMode.Online;",
            "'secretAccessKey': output['accessToken'][\n    'secretAccessKey'\n]",
        ],
        redacted ["@ = creds[Xk9vQ2mLp7Rz]", "@ = Xk9vQ2mLp7Rz.value"];
    // Comparisons and arithmetic on a word.
    code_comparison: NAMES,
        left alone [
            "const @ = usage === 'decrypt' || usage === 'sign'",
            "@ = expires * time.Second",
        ],
        redacted ["const @ = Xk9vQ2mLp7Rz === x", "@ = Xk9vQ2mLp7Rz && deploy"];
    // An arrow function's parameters and a function type.
    code_arrow_function_type: NAMES,
        left alone ["  revoke@: (options?: RevokeRefreshTokenOptions) => Promise<void>;"],
        redacted ["  @: (Xk9vQ2mLp7Rz)"];
    // A variable named as the name, or as its end, and what `self` is given unquoted.
    code_same_name_variable: NAMES,
        left alone [
            "        self._@ = @",
            "        self._sso_@ = @",
            "            web_identity_@=@,",
            "    def @(self, value):\n        self._@ = value",
        ],
        redacted ["self._@ = Xk9vQ2mLp7Rz", "self._@ = 'Xk9vQ2mLp7Rz'"];
    // A variable or member inside a composite literal or a template placeholder.
    code_variable_in_braces: NAMES,
        left alone [
            "\t\t\"@\":   {@},",
            "\t\t\"@\": {tf.refreshToken},",
            "        @ = f\"{self.@}\"",
        ],
        redacted ["\"@\": {Xk9vQ2mLp7Rz},", "@ = f\"Xk9vQ2mLp7Rz\""];
    // A quoted key given a variable: code, where data would quote the value.
    code_quoted_key_given_a_variable: NAMES,
        left alone [
            "            return {'Authorization': auth_token}",
            "    headers = {\"@\": session_token, \"Accept\": accept}",
        ],
        redacted [
            "return {'Authorization': 'Bearer Xk9vQ2mLp7Rz'}",
            "    {\"@\": Xk9vQ2mLp7Rz}",
        ];
    // Type annotations: docstring fields, declarations, type aliases, parameters.
    code_type_annotations: NON_PASSWORD_NAMES,
        left alone [
            "        :type @: CanonicalNameCredentialSourcer\n        :param @: A provider.",
            "        :type @: callable",
            "  const @: SharedJWE = [",
            "type Default@ = Credentials",
            "function decrypt(\n  jwe: types.FlattenedJWE,\n  @: SharedJWE,\n  shared: DecryptShared,\n)",
        ],
        redacted [
            "  @: Xk9vQ2mLp7Rz,",
            "  const @ = 'Xk9vQ2mLp7Rz'",
            "type Default@ = Xk9vQ2mLp7Rz",
        ];
    // Generic types and subscripted type hints, on the name's line or the next.
    code_generic_type_annotation: NAMES,
        left alone [
            "  setFirst@Received:\n    React.Dispatch<React.SetStateAction<boolean>>;",
            "  set@: React.Dispatch<React.SetStateAction<string | null>>;",
            "    @: t.Optional[t.Dict[str, t.Any]] = None,",
            "  @: Map<string, SecretValue>;",
            "@ = aws4auth.Auth(creds.access_key, creds.secret_key, region, 'es')",
        ],
        redacted ["  @: Xk9vQ2mLp7Rz<T>;", "@ = t.Xk9vQ2mLp7Rz"];
    // A name inside a string literal, whose quote closes the string, not a value.
    code_name_inside_a_string: NAMES,
        left alone ["  console.log('Access @:', tokenResponse.access_token);"],
        redacted ["  console.log('@: Xk9vQ2mLp7Rz ok');"];
    // Format strings: the value is a directive.
    code_format_directive: NAMES,
        left alone [
            "\treturn fmt.Sprintf(\"oauth2: cannot fetch @: %v\\nResponse: %s\", r.Status, r.Body)",
            "\treturn fmt.Sprintf(\"%s Credential=%s/%s, SignedHeaders=%s\", a, b, c, d)",
        ],
        redacted ["@: %sXk9vQ2mLp7Rz"];
}

// Names of things (T2.8): a variable's value naming an environment variable, key, header or
// prefix, and names of what handles or locates a secret.
class_tests! {
    name_environment_variable_or_constant: NAMES,
        left alone [
            "    @@ = 'AWS_SECRET_ACCESS_KEY'",
            "\t@ = \"AWS_SESSION_TOKEN\"",
            "    '@_file': 'AWS_WEB_IDENTITY_TOKEN_FILE',",
            "        'ec2_credential_refresh_window': _DEFAULT_ADVISORY_REFRESH_TIMEOUT,",
            "    @S = ['AWS_SECURITY_TOKEN', 'AWS_SESSION_TOKEN']",
        ],
        redacted ["@@ = 'XK9V_Q2MLP7RZ'", "@S = ['Xk9vQ2mLp7Rz']"];
    name_key_or_header_naming_a_secret: NAMES,
        left alone [
            "    @@ = 'aws_secret_access_key'",
            "\taws@Header = \"x-amz-security-token\"",
            "\tawsIMDSv2Session@Header = \"X-aws-ec2-metadata-token\"",
            "\tremote@Prefix = \"docker-credential-\"",
            "  subject_@: 'external_token_value',",
        ],
        redacted ["@ = 'correct_horse_Xk9vQ2mLp7Rz'", "@ = 'Xk9vQ2mLp7Rz-token'"];

    name_of_what_handles_a_secret: NAMES,
        left alone [
            "            @_loader_cls = FileWebIdentityTokenLoader",
            "    _SSO_@@_CACHE_DIR = os.path.expanduser(",
            "    typeof max@Age === 'number' ? max@Age : secs(max@Age),",
            "\t\t@.Expiry = expiry",
            "\tdefaultRegional@Url = \"https://sts.{region}.amazonaws.com?Action=GetCallerIdentity\"",
            "@@_FILE=/var/run/secrets/eks.amazonaws.com/serviceaccount/@",
        ],
        redacted ["@@=Xk9vQ2mLp7Rz", "@@_FILE=ghp_Xk9vQ2mLp7RzXk9vQ2mLp7RzXk9vQ2mLp7Rz"];
    name_kubernetes_secret_key_ref: &["token", "password"],
        left alone [
            "        - name: HUGGING_FACE_HUB_@@\n          valueFrom:\n            secretKeyRef:\n              name: hf-secret\n              key: hf_@",
            "      volumes:\n      - name: secret-volume\n        secret:\n          secretName: nginxsecret",
            "  adminSecretName: ceph-secret-admin\n  adminSecretNamespace: \"kube-system\"",
        ],
        redacted ["          @: Xk9vQ2mLp7Rz"];
}

// Placeholders (T2.8): the words docs use for any value, an elided value, prose listing
// alternatives.
class_tests! {
    placeholder_metasyntactic_words: &["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "API_TOKEN"],
        left alone ["        # export @=foo\n        # export @=bar"],
        redacted ["export @=fooXk9vQ2mLp7Rz"];
    placeholder_elided_value: NAMES,
        left alone ["  *   subject_@: 'ey...',", "  @: sk-...,"],
        redacted ["  @: 'Xk9vQ2mLp7Rz...'"];
    placeholder_words_joined_by_slashes: &["credential", "token"],
        left alone ["// If you accept a @ configuration (@ JSON/File/Stream) from an"],
        redacted ["@ Xk9v/Q2mLp7Rz/Ab12Cd34Ef"];
}

// Hashes named as such (T2.9), in the lockfiles the precision fixture holds.
class_tests! {
    hash_lockfile_integrity: &["auth", "token"],
        left alone [
            "    \"node_modules/@-lib\": {\n      \"version\": \"1.2.3\",\n      \"integrity\": \"sha512-Zk9xQ2mLp7Rz8Wq4Tk7Pb1Nc6Hy3Dj5Gf0SaQe4Ur6Ty8Ii1Op3Aa5Ss7DxXk9vQ2mLp7Rz8Wq4Tk7Pb1Nc6Hy3Dj5==\"\n    },",
            "golang.org/x/o@2 v0.30.0 h1:dnDm7JmhM45NNpd8FTDQvXxu2qnzcv6Y9DaIr0Br9ow=\ngolang.org/x/o@2 v0.30.0/go.mod h1:B5kvtBvbCcUkpIaL6oGBm4hQrzdT2Fw9VJbGmHdvsXM=",
        ],
        redacted ["@: Xk9vQ2mLp7Rz"];
}

/// A password of joined words is still one when it ends as a password does, though it holds a
/// secret's name (`name_key_or_header_naming_a_secret` leaves `aws_secret_access_key` alone).
#[test]
fn name_words_ending_as_a_password_are_a_secret() {
    let mut failures = Vec::new();
    for name in NAMES {
        for (template, secret) in [
            ("@ = 'super_secret_password'", "super_secret_password"),
            ("@@=my-jwt-secret ./run", "my-jwt-secret"),
            ("  @: \"dev_db_password\"", "dev_db_password"),
        ] {
            failures.extend(leaks(&fill(template, name), &[secret]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// Names of things (T2.8): which version of a secret a flag or a setting picks is a number or
// a resource's name (Secret Manager's `projects/…/secrets/…/versions/…`), not the secret.
class_tests! {
    name_of_a_secrets_version: &["token", "secret", "api_key"],
        left alone [
            "gcloud run deploy --authorizer-@-secret-version=projects/myproj/secrets/api-pat/versions/1",
            "  @_version: projects/PROJECT/secrets/SECRET/versions/VERSION",
            "export @@_VERSION=2",
        ],
        redacted ["export @@=Xk9vQ2mLp7Rz"];
}

// Markup where a value would be (T2.8), as a page fetched with `curl` holds it: a highlighted
// code sample's tags after a secret's name (whose first tag, taken as a value, took every
// `<span class=` of a 600 KB page with it), a literal an element closes, a placeholder HTML
// escapes, and an attribute of one character.
class_tests! {
    markup_html_after_a_secrets_name: NAMES,
        left alone [
            "<span class=\"hljs-keyword\">const</span> @ = <span class=\"hljs-keyword\">new</span> <span class=\"hljs-title\">Gen</span>();\n<span class=\"hljs-string\">other</span>",
            "<p>Only returned if <code>config</code> includes <code>@: true</code>.</p>",
            "<span class=\"hljs-comment\">// Prints @ &#x3C;xxxxxxxx></span></code>",
            // A tag named for the value's kind, with what closes round it.
            "   `{buf: <string|buffer>[, @: <string>]}`. The object form",
            "        form @@=<mechanism>.\n\n        The mechanism is",
        ],
        redacted [
            "<code>@: Xk9vQ2mLp7Rz</code>",
            // A value wrapped in markup is still the value (`<code>` around it, or nested tags).
            "<p>Your @: <code>Xk9vQ2mLp7Rz</code></p>",
            "<li>@ = <b><i>Xk9vQ2mLp7Rz</i></b></li>",
        ];
    markup_html_attribute_of_one_character: &["accesskey", "api_key", "token"],
        left alone [
            "<a @=\"n\" rel=\"next\">Next</a>",
            "<td><a @=\"u\" href=\"index.html\"><img src=\"x\"></a></td>",
        ],
        redacted ["<a @=\"Xk9vQ2mLp7Rz\" href=\"x\">"];
}

/// The system's own files, as `cat` shows them: `/etc/shadow`'s locked accounts (read as a
/// `.pgpass` line), `/etc/nsswitch.conf`'s sources (under `passwd:`, and their copies under
/// `group:`), a configuration's comment where a value would be, and how a password is hashed
/// (`password_encryption`). Each ships as written; a `.pgpass` line and a password beside
/// those settings still go.
#[test]
fn system_files_holding_secret_words_ship_as_written() {
    let mut failures = Vec::new();
    for text in [
        "root:*:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\ncloudsdk:!:20263::::::",
        "passwd:         files systemd\ngroup:          files systemd\nshadow:         files [NOTFOUND=return] sss",
        "[ca]\nsecret = # disable PBM\nkey = ca.key",
        "#password_encryption = scram-sha-256\t# scram-sha-256 or md5\n#db_user_namespace = off",
    ] {
        failures.extend(changes(text));
    }
    for (text, secret) in [
        ("*:*:*:postgres:PgStarSecret88", "PgStarSecret88"),
        (
            "db.internal:5432:appdb:app_user:PgPassSecret77",
            "PgPassSecret77",
        ),
        (
            "password_encryption = scram-sha-256\npassword = Xk9vQ2mLp7Rz",
            "Xk9vQ2mLp7Rz",
        ),
        // A `#` glued to the value is the value's to an INI parser.
        ("[db]\npassword = #gets0m3Xk9", "gets0m3Xk9"),
    ] {
        failures.extend(leaks(text, &[secret]));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// Names of things (T2.8): GnuPG's key options take a key's id or fingerprint, both public, as
// a Dockerfile that checks a download's signature runs them (its first fingerprint had gone,
// and every copy of it in the same text).
class_tests! {
    name_gpg_key_ids_and_fingerprints: &["keys", "key"],
        left alone [
            "RUN gpg --batch --keyserver hkps://keys.openpgp.org --recv-@ 4ED778F539E3634C779C87C6D7062848A1AB005C 141F07595B7B3FFE74309A937405533BE57C7D57",
            "gpg --keyserver hkps://keys.openpgp.org --recv-@ DD792F5973C6DE52C432CBDAC77ABFA00DDBF2B7 # Juan\n  `DD792F5973C6DE52C432CBDAC77ABFA00DDBF2B7`",
            "gpg --send-@ 4ED778F539E3634C779C87C6D7062848A1AB005C",
        ],
        redacted ["api_@ = \"Xk9vQ2mLp7Rz\""];
}

// Code (T2.7) as the JDK's security code and Node's libraries write it around credentials: a
// cast, a condition or a shift in parentheses, a conditional going on on the next line, a
// count's `-1`, a constructor given a name then an object left open, a loop's variable, and a
// variable named like the name it is given to. One of them taken for a secret took every copy
// of it in the same output too (20 lines of one object literal).
class_tests! {
    code_java_casts_conditions_and_loops: NAMES,
        left alone [
            "            @ = (X509Credentials)cd;",
            "        @ = (XECPrivateKey) key;",
            "        char[] @ = (storePassNew!=null) ? storePassNew : storePass;",
            "        int @Id = ((is.read()<<8) | is.read());",
            "        SecretKey @ = isValidation ?\n                a : b;",
            "        int @Len = -1;",
            "    @: new Definition('@', {\n      default: null,\n    }),",
            "        for (HttpCookie @ : cookieJar.get(uri)) {",
            "        @Len = (keyLenBits + 7) >> 3;",
            "        srcIs@ = PKCS12KeyStore.isPasswordless(srcksfile);",
            "        PrivateKey pk = (rsaPossession != null) ?\n                rsaPossession.pop@ : x509Possession.pop@;",
            "            krb5@ = new Credentials(asn1Encoding,",
        ],
        redacted [
            "@ = (Credentials)Xk9vQ2mLp7Rz;",
            "@ = (Xk9vQ2mLp7Rz!=null)",
            "@ = new Xk9vQ2mLp7Rz('a', {",
            "@ = Xk9vQ2mLp7Rz ?",
            // A constructor, a cast or a tuple around a secret does not hide it.
            "@ = new Token(\"Xk9vQ2mLp7Rz\")",
            "@ = new Token(\"Xk9vQ2mLp7Rz\", {",
            "@ = (String) \"Xk9vQ2mLp7Rz\";",
            "@ = (Xk9vQ2mLp7Rz, x)",
            // Each branch of a conditional given to the name is a value.
            "@ = isProd ? \"Xk9vQ2mLp7Rz\" : \"devpass99\"",
            "const @ = prod ? 'Xk9vQ2mLp7Rz' : null;",
            "  @: isProd ? process.env.KEY : \"Xk9vQ2mLp7Rz\",",
            // A default after code, and the operators that assign one.
            "  @: @ ?? \"Xk9vQ2mLp7Rz\",",
            "@ = user_input or \"Xk9vQ2mLp7Rz\"",
            "@ ||= \"Xk9vQ2mLp7Rz\"",
            "@@ ?= Xk9vQ2mLp7Rz",
            "@ ??= 'Xk9vQ2mLp7Rz';",
            "let c = Client::builder().with_password(\"Xk9vQ2mLp7Rz\");",
        ];
    code_variable_named_like_its_name: &["x"],
        left alone [
            "        keyPassNew = newPass;",
            "        secret = cookieSecret;",
            "        shc.baseWriteSecret = writeSecret;",
            "  password: readPassword,",
            "    creds.token = tokenReg",
            "  credentials: kEnumerableProperty,\n  withCredentials: kEnumerableProperty\n  mode: kEnumerableProperty,",
        ],
        redacted [
            "keyPass = Xk9vQ2mLp7Rz;",
            "  credentials: kXk9vQ2mLp7Rz,",
            "    creds.token = Xk9vQ2mLp7Rz",
        ];
    code_declaration_of_a_type_named_like_a_secret: &["Credentials", "PrivateKey", "SecretKey"],
        left alone [
            "            @ additionalCreds, PAData[] extraPAs)",
            "    private final @ localPrivateKey;",
            "            DEBUG.println(\">>> @ acquireServiceCreds: \" +",
            "    @ getKrb5Credentials() {",
            "     * <p>The given java.security.@ <code>key</code> must",
        ],
        redacted [
            "    @ Xk9vQ2mLp7RzAbCd9",
            "    @ xk9vQ2mLp7RzAbCd9,",
        ];
}

/// A password of words stays a secret where a variable named like its name would not: it
/// shares no word with the name, or is quoted.
#[test]
fn a_password_of_words_is_no_variable_named_like_its_name() {
    let mut failures = Vec::new();
    for (text, secret) in [
        ("        password = superSecret;", "superSecret"),
        ("secret: SuperSecret,", "SuperSecret"),
        ("  password: \"myPassword\",", "myPassword"),
        // An environment's names are no code's: a value sharing their word is a password.
        ("DB_SECRET=cookieSecret", "cookieSecret"),
        ("export JWT_SECRET=jwtSecretKey", "jwtSecretKey"),
        // A PIN typed as an integer outside a constant's declaration, and a capitalised word
        // given by a setting or YAML rather than assigned in code.
        ("PASSWORD: int = 123456", "123456"),
        ("auth_token: Summerwind", "Summerwind"),
        ("TOKEN=Summerwind", "Summerwind"),
        // A YAML or settings literal of words sharing the name's word: no code's variable.
        ("password: adminPassword", "adminPassword"),
        // A token of letters in camel case after a scheme or a type's name is no declaration
        // (the property test `json_keeps_its_structure` found the first).
        (" Bearer aaaAaaaAaAaaaAAA ", "aaaAaaaAaAaaaAAA"),
        ("    Credentials aaaAaaaAaAaaaAAA", "aaaAaaaAaAaaaAAA"),
        // A login's password of joined words in a tuple.
        ("auth = ('alice', 'super_secret_pw')", "super_secret_pw"),
        // A password of words in prose, after the word or wrapped in markup.
        (
            "Password correctHorseBattery, then log in",
            "correctHorseBattery",
        ),
        (
            "The password <code>correctHorseBattery</code> was set",
            "correctHorseBattery",
        ),
    ] {
        failures.extend(leaks(text, &[secret]));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// Prose about a tool's flags and headers (T2.9), as a tool's messages and their translations
// say it: a word joining two flags is no flag's value, and a header's name quoted with its
// colon holds no value.
class_tests! {
    prose_naming_flags_and_headers: &["x"],
        left alone [
            "{ \"if.protected.is.specified.then.storepass.keypass.and.new.must.not.be.specified\", \"if -protected is specified, then -storepass, -keypass, and -new must not be specified\" },",
            "{ \"keypass.and.new\", \"Les commandes -keypass et -new ne peuvent pas\" },",
            " * as RFC 2965/2109, but without leading \"Cookie:\" token.",
        ],
        redacted [
            "keytool -list -storepass Xk9vQ2mLp7Rz -keypass and",
            "curl -H \"Cookie: Xk9vQ2mLp7Rz\" https://x",
        ];
}

// Code (T2.7) of Rust's parsers, Python's lexers and Perl's modules, where "token" and "key"
// name what a parser reads: a macro's invocation, a turbofish, a field's type of one or more
// capitalised words or a constant naming types, a class given to a name, a colour, a regular
// expression, a tuple of one name, a typed integer, an alias of a type, a variable whose name
// is part of the name, Perl's `shift` and `qr//`, a conditional's branches.
class_tests! {
    code_rust_macros_types_and_constants: NON_PASSWORD_NAMES,
        left alone [
            "    pub or2_@: Token![|],",
            "        bracket_@: bracketed!(content in input),",
            "    let eq_@: Token![=] = input.parse()?;",
            "        bool_@: input.parse::<kw::bool>()?,",
            "    @: Literal,",
            "    fn from(@: Literal) -> Self {",
            "    Auth: AsyncAuthorizeRequest<ReqBody, ResponseBody = ResBody>,",
            "    semaphore_@s: Rc<Cell<Vec<JobToken>>>,",
            "pub const @@_MAGIC: u32 = 1397048141;",
        ],
        redacted [
            "    @: Xk9vQ2mLp7Rz,",
            "    let @ = Xk9vQ2mLp7Rz![x];",
            "@@: u32 = Xk9vQ2mLp7Rz",
        ];
    code_python_lexers_and_types: NON_PASSWORD_NAMES,
        left alone [
            "            @ = Punctuation",
            "    @:              '#ffffff',",
            "    @ = r'[^\\W\\d]\\w*'",
            "consistent!(w_0, r\"^aws_@_id = (.*)\");",
            "    _@s = (COMMENT,)",
            "    @_end = r'''",
            "    @s = [default_value]",
            "def strip_html_tags(s: str, l: int, @s: ParseResults):",
            "    private_@: _ALLOWED_PRIVATE_KEY_TYPES,",
            "    other@type = @type",
            "EllipticCurvePrivateKeyWithSerialization = EllipticCurvePrivateKey",
        ],
        redacted [
            "@ = Xk9vQ2mLp7Rz",
            "@ = '#Xk9vQ2mLp7Rz'",
            "@ = (Xk9vQ2mLp7Rz,)",
        ];
    code_perl_and_conditionals: &["token", "pass", "auth"],
        left alone [
            "    my $@ = shift;",
            "our $exists_@ = \\undef;",
            "my $@ = qr/[\\x21\\x23-\\x27]/;",
            "    'CPAN::HTTP::Credentials'=> 'cpan',",
            "    my $out = $as->{@} ? \"PASS\" : \"FAIL\";",
            "my $header = $mode eq 'proxy' ? 'Proxy-Authorization' : 'Authorization';",
            "        return \"Proxy-Authorization: Basic \" + base64.b64encode(@).decode()",
            "    :param cookie: The cookie header as a string.",
            "    cookie: str | None = None,",
            "    return '<a href=\"topic?key=%s\">%s</a>' % (name, name)",
        ],
        redacted [
            "my $@ = 'Xk9vQ2mLp7Rz';",
            "    'CPAN' => 'Xk9vQ2mLp7Rz', '@' => 'Xk9vQ2mLp7Rz',",
            "Proxy-Authorization: Basic Xk9vQ2mLp7Rz",
        ];
}

// C's headers and settings files (T2.7-T2.9): a C type after an enum's colon, a negative
// number with C's suffix, a device's path given as a default, a setting switched off, and a
// usage line's `|` after a password flag.
class_tests! {
    code_c_headers_and_settings: &["token", "passphrase"],
        left alone [
            "      enum _@T : unsigned",
            "      _S_@_unknown = -1u",
            "    random_device(const std::string& __@ = \"/dev/urandom\")",
            "#ssl_@_command_supports_reload = off",
            "    -key | -pkcs12 | -pass | \\",
        ],
        redacted [
            "    std::string __@ = \"Xk9vQ2mLp7Rz\"",
            "@ = /Xk9vQ2mLp7Rz/abc",
            "openssl pkcs12 -in a.p12 -pass pass:Xk9vQ2mLp7Rz -out b",
        ];
}

// Go (T2.7): a struct's field declared with a Go type, and a struct literal's last field given
// a variable named like it.
class_tests! {
    code_go_field_types_and_literals: NON_PASSWORD_NAMES,
        left alone [
            "\tCredentials map[string]string",
            "\t@ map[string][]string",
            "\t@ *oauth2.Token",
            "\ttkr := conf.TokenSource(ctx, &Token{Refresh@: oldRefresh@})",
        ],
        redacted [
            "\t@ Xk9vQ2mLp7RzAbCdEf",
            "\ttkr := conf.TokenSource(ctx, &Token{@: Xk9vQ2mLp7Rz})",
        ];
}
