//! Provider formats (docs/behaviour.md S1.4): a generated sample of every text-applicable rule
//! family of gitleaks v8.30's default configuration, each as the whole output of one tool call,
//! must ship without its secret. Coverage over the family list is asserted at 95 % or more; the
//! families not covered are listed in the README ("Provider formats").
//!
//! Samples are generated here from a template per family (the family's value shape in the
//! context its rule expects): `{a:N}` letters and digits, `{l:N}` lowercase and digits, `{u:N}`
//! uppercase and digits, `{h:N}`/`{H:N}` hex, `{d:N}` digits, `{b:N}` base64, `{w:N}` base64url,
//! `{L:N}` letters, `{bech:N}` bech32, `{aws:N}` base32, `{g}`/`{G}` a UUID. A `NAME=value`
//! template is also tried as a shell export, a YAML config line and a JSON field.

use kcap_watch::ship::redact::global;
use serde_json::json;

/// Every gitleaks v8.30 default rule that applies to text (`pkcs12-file` matches file names
/// only), with the sample templates of its family.
const FAMILIES: &[(&str, &[&str])] = &[
    (
        "1password-secret-key",
        &[r"Secret Key: A3-{u:6}-{u:6}-{u:5}-{u:5}-{u:5}-{u:5}"],
    ),
    (
        "1password-service-account-token",
        &[r"OP_SERVICE_ACCOUNT_TOKEN=ops_eyJ{b:300}"],
    ),
    (
        "adafruit-api-key",
        &[r"ADAFRUIT_IO_KEY=aio_{a:28}", r"ADAFRUIT_KEY={l:32}"],
    ),
    ("adobe-client-id", &[r"ADOBE_CLIENT_ID={h:32}"]),
    ("adobe-client-secret", &[r"client_secret: p8e-{a:32}"]),
    ("age-secret-key", &["# created\nAGE-SECRET-KEY-1{bech:58}"]),
    ("airtable-api-key", &[r"AIRTABLE_API_KEY=key{a:14}"]),
    (
        "airtable-personnal-access-token",
        &[r"AIRTABLE_TOKEN=pat{a:14}.{h:64}"],
    ),
    ("algolia-api-key", &[r"ALGOLIA_ADMIN_KEY={l:32}"]),
    ("alibaba-access-key-id", &[r"AccessKeyId: LTAI{a:20}"]),
    (
        "alibaba-secret-key",
        &[r"ALIBABA_CLOUD_ACCESS_KEY_SECRET={a:30}"],
    ),
    (
        "anthropic-admin-api-key",
        &[
            r"ANTHROPIC_API_KEY=sk-ant-api03-{w:93}AA",
            r"admin: sk-ant-admin01-{w:93}AA",
        ],
    ),
    (
        "anthropic-api-key",
        &[
            r"ANTHROPIC_API_KEY=sk-ant-api03-{w:93}AA",
            r"admin: sk-ant-admin01-{w:93}AA",
        ],
    ),
    ("artifactory-api-key", &[r"X-JFrog-Art-Api: AKCp{a:69}"]),
    ("artifactory-reference-token", &[r"token cmVmd{a:59}"]),
    (
        "asana-client-id",
        &[r"ASANA_CLIENT_ID={d:16}", r"ASANA_CLIENT_SECRET={l:32}"],
    ),
    (
        "asana-client-secret",
        &[r"ASANA_CLIENT_ID={d:16}", r"ASANA_CLIENT_SECRET={l:32}"],
    ),
    (
        "atlassian-api-token",
        &[r"JIRA_API_TOKEN=ATATT3{w:186}", r"JIRA_TOKEN={l:20}{h:4}"],
    ),
    (
        "authress-service-client-access-key",
        &[r"AUTHRESS_KEY=sc_{a:20}.{l:5}.acc_{l:20}.{b:60}"],
    ),
    ("aws-access-token", &[r"aws_access_key_id = AKIA{aws:16}"]),
    (
        "aws-amazon-bedrock-api-key-long-lived",
        &[r"AWS_BEARER_TOKEN_BEDROCK=ABSK{b:132}"],
    ),
    (
        "aws-amazon-bedrock-api-key-short-lived",
        &[r"AWS_BEARER_TOKEN_BEDROCK=bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t{b:400}"],
    ),
    (
        "azure-ad-client-secret",
        &[r#""clientSecret": "{a:3}{d:1}Q~{w:34}""#],
    ),
    ("beamer-api-token", &[r"BEAMER_API_KEY=b_{w:44}"]),
    (
        "bitbucket-client-id",
        &[
            r"BITBUCKET_CLIENT_ID={l:32}",
            r"BITBUCKET_CLIENT_SECRET={w:64}",
        ],
    ),
    (
        "bitbucket-client-secret",
        &[
            r"BITBUCKET_CLIENT_ID={l:32}",
            r"BITBUCKET_CLIENT_SECRET={w:64}",
        ],
    ),
    (
        "bittrex-access-key",
        &[r"BITTREX_API_KEY={l:32}", r#"bittrex_secret = "{l:32}""#],
    ),
    (
        "bittrex-secret-key",
        &[r"BITTREX_API_KEY={l:32}", r#"bittrex_secret = "{l:32}""#],
    ),
    (
        "cisco-meraki-api-key",
        &[r"MERAKI_DASHBOARD_API_KEY={h:40}"],
    ),
    (
        "clickhouse-cloud-api-secret-key",
        &[r"CLICKHOUSE_KEY_SECRET=4b1d{a:38}"],
    ),
    ("clojars-api-token", &[r"password CLOJARS_{l:60}"]),
    (
        "cloudflare-api-key",
        &[
            r"CLOUDFLARE_API_TOKEN={w:40}",
            r"CLOUDFLARE_GLOBAL_API_KEY={h:37}",
        ],
    ),
    (
        "cloudflare-global-api-key",
        &[
            r"CLOUDFLARE_API_TOKEN={w:40}",
            r"CLOUDFLARE_GLOBAL_API_KEY={h:37}",
        ],
    ),
    (
        "cloudflare-origin-ca-key",
        &[r"CF_ORIGIN_CA_KEY=v1.0-{h:24}-{h:146}"],
    ),
    ("codecov-access-token", &[r"CODECOV_TOKEN={l:32}"]),
    ("cohere-api-token", &[r"COHERE_API_KEY={a:40}"]),
    ("coinbase-access-token", &[r"COINBASE_ACCESS_TOKEN={w:64}"]),
    (
        "confluent-access-token",
        &[
            r"CONFLUENT_CLOUD_API_KEY={u:16}",
            r"CONFLUENT_CLOUD_API_SECRET={b:64}",
        ],
    ),
    (
        "confluent-secret-key",
        &[
            r"CONFLUENT_CLOUD_API_KEY={u:16}",
            r"CONFLUENT_CLOUD_API_SECRET={b:64}",
        ],
    ),
    (
        "contentful-delivery-api-token",
        &[r"CONTENTFUL_DELIVERY_TOKEN={w:43}"],
    ),
    (
        "curl-auth-header",
        &[
            r#"curl -H "Authorization: Bearer {w:40}" https://api.example.com/v1/items"#,
            r"curl --header 'X-API-Key: {a:32}' https://api.example.com/v1/items",
        ],
    ),
    (
        "curl-auth-user",
        &[
            r"curl -u admin:{a:16} https://example.com/api",
            r#"curl --user "deploy:{a:20}" https://example.com/api"#,
        ],
    ),
    ("databricks-api-token", &[r"DATABRICKS_TOKEN=dapi{h:32}"]),
    (
        "datadog-access-token",
        &[r"DATADOG_APP_KEY={l:40}", r"DD_API_KEY={h:32}"],
    ),
    (
        "defined-networking-api-token",
        &[r"DN_API_KEY=dnkey-{w:26}-{w:52}"],
    ),
    (
        "digitalocean-access-token",
        &[
            r"DIGITALOCEAN_TOKEN=dop_v1_{h:64}",
            r"oauth: doo_v1_{h:64}",
            r"refresh: dor_v1_{h:64}",
        ],
    ),
    (
        "digitalocean-pat",
        &[
            r"DIGITALOCEAN_TOKEN=dop_v1_{h:64}",
            r"oauth: doo_v1_{h:64}",
            r"refresh: dor_v1_{h:64}",
        ],
    ),
    (
        "digitalocean-refresh-token",
        &[
            r"DIGITALOCEAN_TOKEN=dop_v1_{h:64}",
            r"oauth: doo_v1_{h:64}",
            r"refresh: dor_v1_{h:64}",
        ],
    ),
    (
        "discord-api-token",
        &[
            r"DISCORD_CLIENT_ID={d:18}",
            r"DISCORD_CLIENT_SECRET={w:32}",
            r"discord_api_token: {h:64}",
        ],
    ),
    (
        "discord-client-id",
        &[
            r"DISCORD_CLIENT_ID={d:18}",
            r"DISCORD_CLIENT_SECRET={w:32}",
            r"discord_api_token: {h:64}",
        ],
    ),
    (
        "discord-client-secret",
        &[
            r"DISCORD_CLIENT_ID={d:18}",
            r"DISCORD_CLIENT_SECRET={w:32}",
            r"discord_api_token: {h:64}",
        ],
    ),
    ("doppler-api-token", &[r"DOPPLER_TOKEN=dp.pt.{a:43}"]),
    ("droneci-access-token", &[r"DRONE_TOKEN={a:32}"]),
    (
        "dropbox-api-token",
        &[
            r"DROPBOX_APP_KEY={l:15}",
            r"DROPBOX_TOKEN={l:11}AAAAAAAAAA{w:43}",
            r"DROPBOX_ACCESS_TOKEN=sl.{w:135}",
        ],
    ),
    (
        "dropbox-long-lived-api-token",
        &[
            r"DROPBOX_APP_KEY={l:15}",
            r"DROPBOX_TOKEN={l:11}AAAAAAAAAA{w:43}",
            r"DROPBOX_ACCESS_TOKEN=sl.{w:135}",
        ],
    ),
    (
        "dropbox-short-lived-api-token",
        &[
            r"DROPBOX_APP_KEY={l:15}",
            r"DROPBOX_TOKEN={l:11}AAAAAAAAAA{w:43}",
            r"DROPBOX_ACCESS_TOKEN=sl.{w:135}",
        ],
    ),
    (
        "duffel-api-token",
        &[r"DUFFEL_ACCESS_TOKEN=duffel_test_{w:43}"],
    ),
    ("dynatrace-api-token", &[r"Api-Token dt0c01.{u:24}.{u:64}"]),
    (
        "easypost-api-token",
        &[r"EASYPOST_API_KEY=EZAK{a:54}", r"test key EZTK{a:54}"],
    ),
    (
        "easypost-test-api-token",
        &[r"EASYPOST_API_KEY=EZAK{a:54}", r"test key EZTK{a:54}"],
    ),
    ("etsy-access-token", &[r"ETSY_KEYSTRING={l:24}"]),
    (
        "facebook-access-token",
        &[r"facebook access_token={d:15}|{w:32}"],
    ),
    (
        "facebook-page-access-token",
        &[r"FB_PAGE_TOKEN=EAAM{a:120}", r"token EAAC{a:110}"],
    ),
    ("facebook-secret", &[r"FACEBOOK_APP_SECRET={h:32}"]),
    ("fastly-api-token", &[r"FASTLY_API_TOKEN={w:32}"]),
    (
        "finicity-api-token",
        &[r"FINICITY_APP_KEY={h:32}", r"FINICITY_SECRET={a:20}"],
    ),
    (
        "finicity-client-secret",
        &[r"FINICITY_APP_KEY={h:32}", r"FINICITY_SECRET={a:20}"],
    ),
    ("finnhub-access-token", &[r"FINNHUB_API_KEY={l:20}"]),
    ("flickr-access-token", &[r"FLICKR_API_KEY={l:32}"]),
    (
        "flutterwave-encryption-key",
        &[
            r"FLW_SECRET_KEY=FLWSECK_TEST-{h:32}-X",
            r"FLW_PUBLIC_KEY=FLWPUBK_TEST-{h:32}-X",
            r"FLW_ENCRYPTION_KEY=FLWSECK_TEST-{h:12}",
        ],
    ),
    (
        "flutterwave-public-key",
        &[
            r"FLW_SECRET_KEY=FLWSECK_TEST-{h:32}-X",
            r"FLW_PUBLIC_KEY=FLWPUBK_TEST-{h:32}-X",
            r"FLW_ENCRYPTION_KEY=FLWSECK_TEST-{h:12}",
        ],
    ),
    (
        "flutterwave-secret-key",
        &[
            r"FLW_SECRET_KEY=FLWSECK_TEST-{h:32}-X",
            r"FLW_PUBLIC_KEY=FLWPUBK_TEST-{h:32}-X",
            r"FLW_ENCRYPTION_KEY=FLWSECK_TEST-{h:12}",
        ],
    ),
    (
        "flyio-access-token",
        &[r"FLY_API_TOKEN=fo1_{w:43}", r"FLY_ACCESS_TOKEN=fm2_{b:160}"],
    ),
    ("frameio-api-token", &[r"FRAMEIO_TOKEN=fio-u-{w:64}"]),
    ("freemius-secret-key", &[r"'secret_key' => 'sk_{a:29}',"]),
    ("freshbooks-access-token", &[r"FRESHBOOKS_TOKEN={l:64}"]),
    ("gcp-api-key", &[r"GOOGLE_API_KEY=AIza{w:35}"]),
    (
        "generic-api-key",
        &[r"API_KEY={a:32}", r#"app_token = "{w:32}""#],
    ),
    (
        "github-app-token",
        &[
            r"GITHUB_TOKEN=ghp_{a:36}",
            r"oauth gho_{a:36}",
            r"ghu_{a:36}",
            r"installation token ghs_{a:36}",
            r"ghr_{a:36}",
        ],
    ),
    (
        "github-fine-grained-pat",
        &[r"GH_TOKEN=github_pat_{a:22}_{a:59}"],
    ),
    (
        "github-oauth",
        &[
            r"GITHUB_TOKEN=ghp_{a:36}",
            r"oauth gho_{a:36}",
            r"ghu_{a:36}",
            r"installation token ghs_{a:36}",
            r"ghr_{a:36}",
        ],
    ),
    (
        "github-pat",
        &[
            r"GITHUB_TOKEN=ghp_{a:36}",
            r"oauth gho_{a:36}",
            r"ghu_{a:36}",
            r"installation token ghs_{a:36}",
            r"ghr_{a:36}",
        ],
    ),
    (
        "github-refresh-token",
        &[
            r"GITHUB_TOKEN=ghp_{a:36}",
            r"oauth gho_{a:36}",
            r"ghu_{a:36}",
            r"installation token ghs_{a:36}",
            r"ghr_{a:36}",
        ],
    ),
    (
        "gitlab-cicd-job-token",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-deploy-token",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-feature-flag-client-token",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-feed-token",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-incoming-mail-token",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-kubernetes-agent-token",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-oauth-app-secret",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-pat",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-pat-routable",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-ptt",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-rrt",
        &[r"RUNNER_REGISTRATION_TOKEN=GR1348941{w:20}"],
    ),
    (
        "gitlab-runner-authentication-token",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-runner-authentication-token-routable",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-scim-token",
        &[
            r"GITLAB_TOKEN=glpat-{w:20}",
            r"glpat-{w:40}.01{l:7}",
            r"deploy gldt-{w:20}",
            r"feed glft-{w:20}",
            r"glffct-{w:20}",
            r"glimt-{w:25}",
            r"glsoat-{w:20}",
            r"runner glrt-{w:20}",
            r"glrt-t1_{w:30}.01{l:7}",
            r"gloas-{w:64}",
            r"glptt-{h:40}",
            r"glagent-{w:50}",
            r"CI_JOB_TOKEN=glcbt-{a:3}_{w:20}",
        ],
    ),
    (
        "gitlab-session-cookie",
        &[r"Cookie: _gitlab_session={l:32}"],
    ),
    ("gitter-access-token", &[r"GITTER_TOKEN={w:40}"]),
    (
        "gocardless-api-token",
        &[r"GOCARDLESS_ACCESS_TOKEN=live_{w:40}"],
    ),
    ("grafana-api-key", &[r"GRAFANA_API_KEY=eyJrIjoi{a:80}"]),
    (
        "grafana-cloud-api-token",
        &[r"GRAFANA_CLOUD_TOKEN=glc_{b:80}"],
    ),
    (
        "grafana-service-account-token",
        &[r"GRAFANA_SA_TOKEN=glsa_{a:32}_{h:8}"],
    ),
    (
        "harness-api-key",
        &[r"HARNESS_API_KEY=pat.{w:22}.{a:24}.{a:20}"],
    ),
    (
        "hashicorp-tf-api-token",
        &[r#"token = "{a:14}.atlasv1.{w:67}""#],
    ),
    (
        "hashicorp-tf-password",
        &[r#"administrator_login_password = "{a:16}""#],
    ),
    ("heroku-api-key", &[r"HEROKU_API_KEY={g}"]),
    ("heroku-api-key-v2", &[r"HEROKU_API_KEY=HRKU-AA{w:58}"]),
    ("hubspot-api-key", &[r"HUBSPOT_API_KEY={G}"]),
    ("huggingface-access-token", &[r"HF_TOKEN=hf_{L:34}"]),
    ("huggingface-organization-api-token", &[r"api_org_{L:34}"]),
    ("infracost-api-token", &[r"INFRACOST_API_KEY=ico-{a:32}"]),
    ("intercom-api-key", &[r"INTERCOM_ACCESS_TOKEN={w:60}"]),
    ("intra42-client-secret", &[r"FT_SECRET=s-s4t2ud-{h:64}"]),
    (
        "jfrog-api-key",
        &[
            r"JFROG_API_KEY={l:73}",
            r"ARTIFACTORY_IDENTITY_TOKEN={l:64}",
        ],
    ),
    (
        "jfrog-identity-token",
        &[
            r"JFROG_API_KEY={l:73}",
            r"ARTIFACTORY_IDENTITY_TOKEN={l:64}",
        ],
    ),
    (
        "jwt",
        &[r"Authorization: Bearer eyJ{w:30}.eyJ{w:60}.{w:43}"],
    ),
    ("jwt-base64", &[r"token: ZXlK{b:180}"]),
    ("kraken-access-token", &[r"KRAKEN_API_SECRET={b:88}"]),
    (
        "kubernetes-secret-yaml",
        &[
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\ndata:\n  password: {b:24}\n  tls.key: {b:64}",
        ],
    ),
    (
        "kucoin-access-token",
        &[r"KUCOIN_API_KEY={h:24}", r"KUCOIN_API_SECRET={g}"],
    ),
    (
        "kucoin-secret-key",
        &[r"KUCOIN_API_KEY={h:24}", r"KUCOIN_API_SECRET={g}"],
    ),
    (
        "launchdarkly-access-token",
        &[r"LAUNCHDARKLY_ACCESS_TOKEN={w:40}"],
    ),
    ("linear-api-key", &[r"LINEAR_API_KEY=lin_api_{a:40}"]),
    ("linear-client-secret", &[r"LINEAR_CLIENT_SECRET={h:32}"]),
    (
        "linkedin-client-id",
        &[
            r"LINKEDIN_CLIENT_ID={l:14}",
            r"LINKEDIN_CLIENT_SECRET={a:16}",
        ],
    ),
    (
        "linkedin-client-secret",
        &[
            r"LINKEDIN_CLIENT_ID={l:14}",
            r"LINKEDIN_CLIENT_SECRET={a:16}",
        ],
    ),
    (
        "lob-api-key",
        &[
            r"LOB_API_KEY=live_{h:35}",
            r"LOB_PUBLISHABLE_KEY=test_pub_{h:31}",
        ],
    ),
    (
        "lob-pub-api-key",
        &[
            r"LOB_API_KEY=live_{h:35}",
            r"LOB_PUBLISHABLE_KEY=test_pub_{h:31}",
        ],
    ),
    (
        "looker-client-id",
        &[
            r"LOOKERSDK_CLIENT_ID={l:20}",
            r"LOOKERSDK_CLIENT_SECRET={l:24}",
        ],
    ),
    (
        "looker-client-secret",
        &[
            r"LOOKERSDK_CLIENT_ID={l:20}",
            r"LOOKERSDK_CLIENT_SECRET={l:24}",
        ],
    ),
    (
        "mailchimp-api-key",
        &[
            r"MAILCHIMP_KEY={h:32}-us{d:2}",
            r"mailchimp_api_key: {h:32}-us{d:1}",
        ],
    ),
    (
        "mailgun-private-api-token",
        &[
            r"MAILGUN_API_KEY=key-{h:32}",
            r"MAILGUN_PUBLIC_KEY=pubkey-{h:32}",
            r"MAILGUN_WEBHOOK_SIGNING_KEY={h:32}-{h:8}-{h:8}",
        ],
    ),
    (
        "mailgun-pub-key",
        &[
            r"MAILGUN_API_KEY=key-{h:32}",
            r"MAILGUN_PUBLIC_KEY=pubkey-{h:32}",
            r"MAILGUN_WEBHOOK_SIGNING_KEY={h:32}-{h:8}-{h:8}",
        ],
    ),
    (
        "mailgun-signing-key",
        &[
            r"MAILGUN_API_KEY=key-{h:32}",
            r"MAILGUN_PUBLIC_KEY=pubkey-{h:32}",
            r"MAILGUN_WEBHOOK_SIGNING_KEY={h:32}-{h:8}-{h:8}",
        ],
    ),
    ("mapbox-api-token", &[r"MAPBOX_TOKEN=pk.eyJ1{a:56}.{a:22}"]),
    ("mattermost-access-token", &[r"MATTERMOST_TOKEN={l:26}"]),
    (
        "maxmind-license-key",
        &[r"MAXMIND_LICENSE_KEY={a:6}_{a:29}_mmk"],
    ),
    (
        "messagebird-api-token",
        &[r"MESSAGEBIRD_API_KEY={a:25}", r"MESSAGEBIRD_CLIENT_ID={g}"],
    ),
    (
        "messagebird-client-id",
        &[r"MESSAGEBIRD_API_KEY={a:25}", r"MESSAGEBIRD_CLIENT_ID={g}"],
    ),
    (
        "microsoft-teams-webhook",
        &[
            r"TEAMS_WEBHOOK=https://contoso.webhook.office.com/webhookb2/{g}@{g}/IncomingWebhook/{a:32}/{g}",
        ],
    ),
    ("netlify-access-token", &[r"NETLIFY_AUTH_TOKEN={w:43}"]),
    (
        "new-relic-browser-api-token",
        &[
            r"NEW_RELIC_API_KEY=NRAK-{u:27}",
            r"newrelic license NRII-{w:32}",
            r"new_relic browser NRJS-{h:19}",
        ],
    ),
    (
        "new-relic-insert-key",
        &[
            r"NEW_RELIC_API_KEY=NRAK-{u:27}",
            r"newrelic license NRII-{w:32}",
            r"new_relic browser NRJS-{h:19}",
        ],
    ),
    ("new-relic-user-api-id", &[r"NEW_RELIC_USER_API_ID={l:64}"]),
    (
        "new-relic-user-api-key",
        &[
            r"NEW_RELIC_API_KEY=NRAK-{u:27}",
            r"newrelic license NRII-{w:32}",
            r"new_relic browser NRJS-{h:19}",
        ],
    ),
    ("notion-api-token", &[r"NOTION_TOKEN=ntn_{d:11}{a:35}"]),
    ("npm-access-token", &[r"//registry/:_authToken=npm_{a:36}"]),
    (
        "nuget-config-password",
        &[r#"<add key="ClearTextPassword" value="{a:16}" />"#],
    ),
    ("nytimes-access-token", &[r"NYTIMES_API_KEY={w:32}"]),
    ("octopus-deploy-api-key", &[r"OCTOPUS_API_KEY=API-{u:26}"]),
    ("okta-access-token", &[r"OKTA_API_TOKEN=00{w:40}"]),
    (
        "openai-api-key",
        &[
            r"OPENAI_API_KEY=sk-{a:20}T3BlbkFJ{a:20}",
            r"OPENAI_API_KEY=sk-proj-{w:74}T3BlbkFJ{w:74}",
        ],
    ),
    ("openshift-user-token", &[r"oc login --token=sha256~{w:43}"]),
    ("perplexity-api-key", &[r"PERPLEXITY_API_KEY=pplx-{a:48}"]),
    (
        "plaid-api-token",
        &[r"PLAID_ACCESS_TOKEN=access-sandbox-{g}"],
    ),
    (
        "plaid-client-id",
        &[r"PLAID_CLIENT_ID={l:24}", r"PLAID_SECRET={l:30}"],
    ),
    (
        "plaid-secret-key",
        &[r"PLAID_CLIENT_ID={l:24}", r"PLAID_SECRET={l:30}"],
    ),
    (
        "planetscale-api-token",
        &[
            r"PLANETSCALE_TOKEN=pscale_tkn_{w:43}",
            r"pscale_oauth_{w:43}",
            r"DATABASE_PASSWORD=pscale_pw_{w:43}",
        ],
    ),
    (
        "planetscale-oauth-token",
        &[
            r"PLANETSCALE_TOKEN=pscale_tkn_{w:43}",
            r"pscale_oauth_{w:43}",
            r"DATABASE_PASSWORD=pscale_pw_{w:43}",
        ],
    ),
    (
        "planetscale-password",
        &[
            r"PLANETSCALE_TOKEN=pscale_tkn_{w:43}",
            r"pscale_oauth_{w:43}",
            r"DATABASE_PASSWORD=pscale_pw_{w:43}",
        ],
    ),
    (
        "postman-api-token",
        &[r"POSTMAN_API_KEY=PMAK-{h:24}-{h:34}"],
    ),
    ("prefect-api-token", &[r"PREFECT_API_KEY=pnu_{a:36}"]),
    (
        "private-key",
        &[
            "-----BEGIN RSA PRIVATE KEY-----\n{b:64}\n{b:64}\n{b:20}==\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{b:70}\n{b:70}\n-----END OPENSSH PRIVATE KEY-----",
        ],
    ),
    ("privateai-api-token", &[r"PRIVATE_AI_API_KEY={l:32}"]),
    ("pulumi-api-token", &[r"PULUMI_ACCESS_TOKEN=pul-{h:40}"]),
    (
        "pypi-upload-token",
        &[r"password = pypi-AgEIcHlwaS5vcmc{w:150}"],
    ),
    ("rapidapi-access-token", &[r"X-RapidAPI-Key: {w:50}"]),
    ("readme-api-token", &[r"README_API_KEY=rdme_{l:70}"]),
    (
        "rubygems-api-token",
        &[r":rubygems_api_key: rubygems_{h:48}"],
    ),
    ("scalingo-api-token", &[r"SCALINGO_API_TOKEN=tk-us-{w:48}"]),
    (
        "sendbird-access-id",
        &[r"SENDBIRD_APP_ID={G}", r"SENDBIRD_API_TOKEN={h:40}"],
    ),
    (
        "sendbird-access-token",
        &[r"SENDBIRD_APP_ID={G}", r"SENDBIRD_API_TOKEN={h:40}"],
    ),
    (
        "sendgrid-api-token",
        &[r"SENDGRID_API_KEY=SG.{w:22}.{w:43}"],
    ),
    (
        "sendinblue-api-token",
        &[r"BREVO_API_KEY=xkeysib-{h:64}-{a:16}"],
    ),
    ("sentry-access-token", &[r"SENTRY_AUTH_TOKEN={h:64}"]),
    (
        "sentry-org-token",
        &[
            r"SENTRY_AUTH_TOKEN=sntrys_eyJpYXQiO{b:100}_{b:43}",
            r"sntryu_{h:64}",
        ],
    ),
    (
        "sentry-user-token",
        &[
            r"SENTRY_AUTH_TOKEN=sntrys_eyJpYXQiO{b:100}_{b:43}",
            r"sntryu_{h:64}",
        ],
    ),
    (
        "settlemint-application-access-token",
        &[
            r"SETTLEMINT_ACCESS_TOKEN=sm_aat_{a:16}",
            r"sm_pat_{a:16}",
            r"sm_sat_{a:16}",
        ],
    ),
    (
        "settlemint-personal-access-token",
        &[
            r"SETTLEMINT_ACCESS_TOKEN=sm_aat_{a:16}",
            r"sm_pat_{a:16}",
            r"sm_sat_{a:16}",
        ],
    ),
    (
        "settlemint-service-access-token",
        &[
            r"SETTLEMINT_ACCESS_TOKEN=sm_aat_{a:16}",
            r"sm_pat_{a:16}",
            r"sm_sat_{a:16}",
        ],
    ),
    ("shippo-api-token", &[r"SHIPPO_API_KEY=shippo_live_{h:40}"]),
    (
        "shopify-access-token",
        &[
            r"SHOPIFY_ACCESS_TOKEN=shpat_{h:32}",
            r"shpca_{h:32}",
            r"shppa_{h:32}",
            r"shpss_{h:32}",
        ],
    ),
    (
        "shopify-custom-access-token",
        &[
            r"SHOPIFY_ACCESS_TOKEN=shpat_{h:32}",
            r"shpca_{h:32}",
            r"shppa_{h:32}",
            r"shpss_{h:32}",
        ],
    ),
    (
        "shopify-private-app-access-token",
        &[
            r"SHOPIFY_ACCESS_TOKEN=shpat_{h:32}",
            r"shpca_{h:32}",
            r"shppa_{h:32}",
            r"shpss_{h:32}",
        ],
    ),
    (
        "shopify-shared-secret",
        &[
            r"SHOPIFY_ACCESS_TOKEN=shpat_{h:32}",
            r"shpca_{h:32}",
            r"shppa_{h:32}",
            r"shpss_{h:32}",
        ],
    ),
    (
        "sidekiq-secret",
        &[r"export BUNDLE_GEMS__CONTRIBSYS__COM={h:8}:{h:8}"],
    ),
    (
        "sidekiq-sensitive-url",
        &[r#"source "https://{h:8}:{h:8}@gems.contribsys.com/""#],
    ),
    (
        "slack-app-token",
        &[
            r"SLACK_BOT_TOKEN=xoxb-{d:12}-{d:13}-{a:24}",
            r"legacy xoxb-{d:10}-{a:24}",
            r"xoxp-{d:12}-{d:12}-{d:12}-{h:32}",
            r"xoxs-{d:10}-{d:11}-{d:12}-{h:64}",
            r"xoxa-2-{a:36}",
            r"xoxe.xoxp-1-{u:164}",
            r"xoxe-1-{u:146}",
            r"SLACK_APP_TOKEN=xapp-1-{u:11}-{d:13}-{h:64}",
        ],
    ),
    (
        "slack-bot-token",
        &[
            r"SLACK_BOT_TOKEN=xoxb-{d:12}-{d:13}-{a:24}",
            r"legacy xoxb-{d:10}-{a:24}",
            r"xoxp-{d:12}-{d:12}-{d:12}-{h:32}",
            r"xoxs-{d:10}-{d:11}-{d:12}-{h:64}",
            r"xoxa-2-{a:36}",
            r"xoxe.xoxp-1-{u:164}",
            r"xoxe-1-{u:146}",
            r"SLACK_APP_TOKEN=xapp-1-{u:11}-{d:13}-{h:64}",
        ],
    ),
    (
        "slack-config-access-token",
        &[
            r"SLACK_BOT_TOKEN=xoxb-{d:12}-{d:13}-{a:24}",
            r"legacy xoxb-{d:10}-{a:24}",
            r"xoxp-{d:12}-{d:12}-{d:12}-{h:32}",
            r"xoxs-{d:10}-{d:11}-{d:12}-{h:64}",
            r"xoxa-2-{a:36}",
            r"xoxe.xoxp-1-{u:164}",
            r"xoxe-1-{u:146}",
            r"SLACK_APP_TOKEN=xapp-1-{u:11}-{d:13}-{h:64}",
        ],
    ),
    (
        "slack-config-refresh-token",
        &[
            r"SLACK_BOT_TOKEN=xoxb-{d:12}-{d:13}-{a:24}",
            r"legacy xoxb-{d:10}-{a:24}",
            r"xoxp-{d:12}-{d:12}-{d:12}-{h:32}",
            r"xoxs-{d:10}-{d:11}-{d:12}-{h:64}",
            r"xoxa-2-{a:36}",
            r"xoxe.xoxp-1-{u:164}",
            r"xoxe-1-{u:146}",
            r"SLACK_APP_TOKEN=xapp-1-{u:11}-{d:13}-{h:64}",
        ],
    ),
    (
        "slack-legacy-bot-token",
        &[
            r"SLACK_BOT_TOKEN=xoxb-{d:12}-{d:13}-{a:24}",
            r"legacy xoxb-{d:10}-{a:24}",
            r"xoxp-{d:12}-{d:12}-{d:12}-{h:32}",
            r"xoxs-{d:10}-{d:11}-{d:12}-{h:64}",
            r"xoxa-2-{a:36}",
            r"xoxe.xoxp-1-{u:164}",
            r"xoxe-1-{u:146}",
            r"SLACK_APP_TOKEN=xapp-1-{u:11}-{d:13}-{h:64}",
        ],
    ),
    (
        "slack-legacy-token",
        &[
            r"SLACK_BOT_TOKEN=xoxb-{d:12}-{d:13}-{a:24}",
            r"legacy xoxb-{d:10}-{a:24}",
            r"xoxp-{d:12}-{d:12}-{d:12}-{h:32}",
            r"xoxs-{d:10}-{d:11}-{d:12}-{h:64}",
            r"xoxa-2-{a:36}",
            r"xoxe.xoxp-1-{u:164}",
            r"xoxe-1-{u:146}",
            r"SLACK_APP_TOKEN=xapp-1-{u:11}-{d:13}-{h:64}",
        ],
    ),
    (
        "slack-legacy-workspace-token",
        &[
            r"SLACK_BOT_TOKEN=xoxb-{d:12}-{d:13}-{a:24}",
            r"legacy xoxb-{d:10}-{a:24}",
            r"xoxp-{d:12}-{d:12}-{d:12}-{h:32}",
            r"xoxs-{d:10}-{d:11}-{d:12}-{h:64}",
            r"xoxa-2-{a:36}",
            r"xoxe.xoxp-1-{u:164}",
            r"xoxe-1-{u:146}",
            r"SLACK_APP_TOKEN=xapp-1-{u:11}-{d:13}-{h:64}",
        ],
    ),
    (
        "slack-user-token",
        &[
            r"SLACK_BOT_TOKEN=xoxb-{d:12}-{d:13}-{a:24}",
            r"legacy xoxb-{d:10}-{a:24}",
            r"xoxp-{d:12}-{d:12}-{d:12}-{h:32}",
            r"xoxs-{d:10}-{d:11}-{d:12}-{h:64}",
            r"xoxa-2-{a:36}",
            r"xoxe.xoxp-1-{u:164}",
            r"xoxe-1-{u:146}",
            r"SLACK_APP_TOKEN=xapp-1-{u:11}-{d:13}-{h:64}",
        ],
    ),
    (
        "slack-webhook-url",
        &[r"SLACK_WEBHOOK_URL=https://hooks.slack.com/services/T{u:8}/B{u:8}/{a:24}"],
    ),
    ("snyk-api-token", &[r"SNYK_TOKEN={g}"]),
    (
        "sonar-api-token",
        &[
            r"SONAR_TOKEN=squ_{h:40}",
            r"SONAR_TOKEN={h:40}",
            r"sonar.login={w:40}",
        ],
    ),
    (
        "sourcegraph-access-token",
        &[
            r"SRC_ACCESS_TOKEN=sgp_{h:16}_{h:40}",
            r"sgp_local_{h:40}",
            r"sgp_{h:40}",
        ],
    ),
    (
        "square-access-token",
        &[r"SQUARE_ACCESS_TOKEN=EAAA{w:60}", r"sq0atp-{w:22}"],
    ),
    ("squarespace-access-token", &[r"SQUARESPACE_API_KEY={g}"]),
    (
        "stripe-access-token",
        &[
            r"export STRIPE_SECRET_KEY=sk_live_{a:99}",
            r"rk_test_{a:24}",
            r"STRIPE_WEBHOOK_SECRET=whsec_{a:32}",
        ],
    ),
    (
        "sumologic-access-id",
        &[r"SUMO_ACCESS_ID=su{a:12}", r"SUMO_ACCESS_KEY={a:64}"],
    ),
    (
        "sumologic-access-token",
        &[r"SUMO_ACCESS_ID=su{a:12}", r"SUMO_ACCESS_KEY={a:64}"],
    ),
    (
        "telegram-bot-api-token",
        &[
            r"TELEGRAM_BOT_TOKEN={d:10}:AA{w:33}",
            r"curl https://api.telegram.org/bot{d:10}:AA{w:33}/getMe",
        ],
    ),
    ("travisci-access-token", &[r"TRAVIS_TOKEN={a:22}"]),
    ("twilio-api-key", &[r"TWILIO_API_KEY=SK{h:32}"]),
    ("twitch-api-token", &[r"TWITCH_CLIENT_SECRET={l:30}"]),
    (
        "twitter-access-secret",
        &[
            r"TWITTER_API_KEY={a:25}",
            r"TWITTER_API_SECRET={a:50}",
            r"TWITTER_ACCESS_TOKEN={d:19}-{a:30}",
            r"twitter_access_secret: {a:45}",
            r"TWITTER_BEARER_TOKEN=AAAAAAAAAAAAAAAAAAAAA{a:90}",
        ],
    ),
    (
        "twitter-access-token",
        &[
            r"TWITTER_API_KEY={a:25}",
            r"TWITTER_API_SECRET={a:50}",
            r"TWITTER_ACCESS_TOKEN={d:19}-{a:30}",
            r"twitter_access_secret: {a:45}",
            r"TWITTER_BEARER_TOKEN=AAAAAAAAAAAAAAAAAAAAA{a:90}",
        ],
    ),
    (
        "twitter-api-key",
        &[
            r"TWITTER_API_KEY={a:25}",
            r"TWITTER_API_SECRET={a:50}",
            r"TWITTER_ACCESS_TOKEN={d:19}-{a:30}",
            r"twitter_access_secret: {a:45}",
            r"TWITTER_BEARER_TOKEN=AAAAAAAAAAAAAAAAAAAAA{a:90}",
        ],
    ),
    (
        "twitter-api-secret",
        &[
            r"TWITTER_API_KEY={a:25}",
            r"TWITTER_API_SECRET={a:50}",
            r"TWITTER_ACCESS_TOKEN={d:19}-{a:30}",
            r"twitter_access_secret: {a:45}",
            r"TWITTER_BEARER_TOKEN=AAAAAAAAAAAAAAAAAAAAA{a:90}",
        ],
    ),
    (
        "twitter-bearer-token",
        &[
            r"TWITTER_API_KEY={a:25}",
            r"TWITTER_API_SECRET={a:50}",
            r"TWITTER_ACCESS_TOKEN={d:19}-{a:30}",
            r"twitter_access_secret: {a:45}",
            r"TWITTER_BEARER_TOKEN=AAAAAAAAAAAAAAAAAAAAA{a:90}",
        ],
    ),
    (
        "typeform-api-token",
        &[r"TYPEFORM_TOKEN=tfp_{w:59}", r"typeform_token: tfp_{w:59}"],
    ),
    (
        "vault-batch-token",
        &[r"VAULT_TOKEN=hvs.{w:95}", r"batch hvb.{w:150}"],
    ),
    (
        "vault-service-token",
        &[
            r"VAULT_TOKEN=hvs.{w:95}",
            r"batch hvb.{w:150}",
            r"VAULT_TOKEN=s.{a:24}",
        ],
    ),
    (
        "yandex-access-token",
        &[
            r"YANDEX_API_KEY=AQVN{w:36}",
            r"YANDEX_ACCESS_KEY=YC{w:38}",
            r"yandex_oauth: t1.{w:40}.{w:86}",
        ],
    ),
    (
        "yandex-api-key",
        &[
            r"YANDEX_API_KEY=AQVN{w:36}",
            r"YANDEX_ACCESS_KEY=YC{w:38}",
            r"yandex_oauth: t1.{w:40}.{w:86}",
        ],
    ),
    (
        "yandex-aws-access-token",
        &[
            r"YANDEX_API_KEY=AQVN{w:36}",
            r"YANDEX_ACCESS_KEY=YC{w:38}",
            r"yandex_oauth: t1.{w:40}.{w:86}",
        ],
    ),
    ("zendesk-secret-key", &[r"ZENDESK_API_TOKEN={a:40}"]),
];

/// SplitMix64: deterministic samples, so a failure names the same sample every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick(&mut self, alphabet: &str, n: usize) -> String {
        let alphabet = alphabet.as_bytes();
        loop {
            let s: String = (0..n)
                .map(|_| char::from(alphabet[(self.next() % alphabet.len() as u64) as usize]))
                .collect();
            // Real keys of a mixed alphabet hold letters and digits; so do the samples, which
            // also keeps a random draw from spelling a word.
            let mixed = alphabet.iter().any(u8::is_ascii_digit)
                && alphabet.iter().any(u8::is_ascii_alphabetic);
            if !mixed
                || n < 8
                || (s.bytes().any(|b| b.is_ascii_digit())
                    && s.bytes().any(|b| b.is_ascii_alphabetic()))
            {
                return s;
            }
        }
    }
}

const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
const DIGITS: &str = "0123456789";

fn alphabet(class: &str) -> String {
    match class {
        "a" => format!("{UPPER}{LOWER}{DIGITS}"),
        "l" => format!("{LOWER}{DIGITS}"),
        "u" => format!("{UPPER}{DIGITS}"),
        "h" => "0123456789abcdef".to_string(),
        "H" => "0123456789ABCDEF".to_string(),
        "d" => DIGITS.to_string(),
        "b" => format!("{UPPER}{LOWER}{DIGITS}+/"),
        "w" => format!("{UPPER}{LOWER}{DIGITS}_-"),
        "L" => format!("{UPPER}{LOWER}"),
        "bech" => "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L".to_string(),
        "aws" => "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".to_string(),
        other => panic!("unknown class {other}"),
    }
}

/// A sample from `template`, and its generated parts (the secret material).
fn expand(template: &str, rng: &mut Rng) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else {
            break;
        };
        out.push_str(&rest[..open]);
        let spec = &rest[open + 1..close];
        let part = match spec {
            "g" | "G" => {
                let hex = alphabet("h");
                let uuid = format!(
                    "{}-{}-4{}-a{}-{}",
                    rng.pick(&hex, 8),
                    rng.pick(&hex, 4),
                    rng.pick(&hex, 3),
                    rng.pick(&hex, 3),
                    rng.pick(&hex, 12)
                );
                if spec == "G" {
                    uuid.to_uppercase()
                } else {
                    uuid
                }
            }
            _ => {
                let (class, n) = spec.split_once(':').expect("template part is class:length");
                rng.pick(&alphabet(class), n.parse().expect("length is a number"))
            }
        };
        out.push_str(&part);
        parts.push(part);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    (out, parts)
}

/// The contexts a sample is tried in.
fn contexts(sample: &str) -> Vec<String> {
    let assignment = sample.split_once('=').filter(|(name, value)| {
        !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !value.is_empty()
            && !value.contains(char::is_whitespace)
    });
    match assignment {
        Some((name, value)) => vec![
            format!("export {name}={value}"),
            format!("# service config\n{}: {value}\n", name.to_ascii_lowercase()),
            json!({ name.to_ascii_lowercase(): value }).to_string(),
        ],
        None => vec![
            sample.to_string(),
            format!("$ tool run\n{sample}\nexit 0\n"),
        ],
    }
}

/// A rollout line whose tool call output is `output`.
fn tool_output_line(output: &str) -> String {
    json!({
        "timestamp": "2026-12-01T10:00:00.000Z",
        "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "call_7", "output": output},
    })
    .to_string()
}

/// For each family, the samples whose secret material ships.
fn leaks() -> Vec<(&'static str, Vec<String>)> {
    let mut rng = Rng(0x6b63_6170_7761_7463);
    let mut result = Vec::new();
    for (family, templates) in FAMILIES {
        let mut leaked = Vec::new();
        for template in *templates {
            let (sample, parts) = expand(template, &mut rng);
            for context in contexts(&sample) {
                let line = tool_output_line(&context);
                let shipped = global().redact_line(line.as_bytes());
                let visible = parts
                    .iter()
                    .any(|p| p.len() >= 8 && shipped.contains(p.as_str()));
                if visible || serde_json::from_str::<serde_json::Value>(&shipped).is_err() {
                    leaked.push(context);
                }
            }
        }
        result.push((*family, leaked));
    }
    result
}

#[test]
fn the_family_list_is_gitleaks_v8_30_text_rules() {
    // 222 rules in v8.30's default configuration, less `pkcs12-file` (a file-name rule).
    assert_eq!(FAMILIES.len(), 221);
    let mut ids: Vec<&str> = FAMILIES.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), FAMILIES.len(), "a family is listed twice");
}

#[test]
fn at_least_95_percent_of_families_are_redacted_as_tool_output() {
    let leaks = leaks();
    let uncovered: Vec<_> = leaks
        .iter()
        .filter(|(_, leaked)| !leaked.is_empty())
        .collect();
    let covered = leaks.len() - uncovered.len();
    let share = covered as f64 / leaks.len() as f64;
    eprintln!(
        "provider families redacted: {covered} of {} ({:.1} %)",
        leaks.len(),
        share * 100.0
    );
    for (family, leaked) in &uncovered {
        eprintln!("not covered: {family}: {:?}", leaked.first());
    }
    assert!(
        share >= 0.95,
        "{covered} of {} families redacted; leaking: {uncovered:?}",
        leaks.len()
    );
}

#[test]
fn a_secret_free_tool_output_ships_unchanged() {
    let outputs = [
        "fn main() {\n    let token = std::env::var(\"GITHUB_TOKEN\").unwrap_or_default();\n}\n",
        "commit 3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a\nAuthor: Jane Doe <jane@example.com>\n",
        "\"integrity\": \"sha512-q7lVw1Tx9M0v6CSeQ1dTSq8m3E5d0f4yN2Ym0gC7bU2b8HfJx8k1A6sYwqk0V2zGZs8Y3kq9f0cW7eA1hZ5n4w==\"",
        "The twitter handle and the discord channel are in the README; the task asks to skip the disk check.",
        "{\"id\": \"5a0c3f1e-8b2d-4e6f-a1c3-9d7b5e2f4a60\", \"status\": \"ok\"}",
    ];
    for output in outputs {
        let line = tool_output_line(output);
        assert_eq!(global().redact_line(line.as_bytes()), line, "{output}");
    }
}
