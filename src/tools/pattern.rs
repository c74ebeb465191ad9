//! Patterns: the records a project runs again and again, kept as wiki
//! pages `run/NAME` (or found at a URL) whose first fenced JSON block
//! holds a record's fields, as `create` takes them. A page counts in its
//! newest version by receipt among those a login holding admin or setup
//! sent, as a runner page does; every other version is ignored. A pattern
//! limits nothing: `create` writes the whole record, every field written
//! out, so the boundary is read in the record, never in the page.

use crate::node::Receipts;
use crate::stop::Stop;
use crate::tool::Call;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;

/// Where pattern pages are: `run/NAME`.
pub const PREFIX: &str = "run/";

/// How long a pattern's URL may take to answer in full.
const FETCH_WITHIN: Duration = Duration::from_secs(10);

/// The most a pattern's URL may answer.
const FETCH_MAX: u64 = 1 << 20;

/// Where a record's pattern came from, as the record says it (a key v1
/// readers pass over: it limits nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Source {
    /// The wiki page it was read from, in the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
    /// That page's version which counted (its full hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The URL it was fetched from, when it was not read in the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The SHA-256 of what the URL answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A pattern read: where from, its fields, and who wrote it.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub source: Source,
    /// The record's fields its block holds.
    pub fields: Map<String, Value>,
    /// Who sent the version that counts, by receipt (a page's).
    pub sent_by: Option<String>,
    /// When its writer says it was written (a page's).
    pub written: Option<String>,
}

/// Whether `name` can name a pattern: lower-case letters, digits, `-`
/// and `_`, at most 40.
pub fn valid_name(name: &str) -> bool {
    crate::node::runner::valid_name(name)
}

/// The pattern `given` names: a name (the page `run/NAME`), or an http or
/// https URL; a URL naming a wiki page of the server this repository is
/// (or syncs with) is read in the repository instead.
pub fn read(call: &mut Call, receipts: &Receipts, given: &str) -> Result<Pattern, Stop> {
    if given.starts_with("http://") || given.starts_with("https://") {
        if let Some(page) = page_of_this_server(call, given)? {
            return read_page(call, receipts, &page);
        }
        return fetch(call, given);
    }
    if !valid_name(given) {
        return Err(Stop::field(
            "pattern",
            format!("{given:?} is neither a pattern's name nor an http or https URL"),
        )
        .next("give the NAME of the wiki page run/NAME (ocx patterns lists them), or a URL"));
    }
    read_page(call, receipts, &format!("{PREFIX}{given}"))
}

/// The pattern in wiki page `page`, from its version that counts.
pub fn read_page(call: &mut Call, receipts: &Receipts, page: &str) -> Result<Pattern, Stop> {
    call.read(format!(
        "the wiki page {page:?}, its version an administrator sent last"
    ));
    let counting = receipts
        .counting_version(call.repo()?, page)
        .map_err(super::served::stop)?
        .ok_or_else(|| {
            Stop::field(
                "pattern",
                format!("no version of the wiki page {page} was written by a login holding admin or setup"),
            )
            .next("ocx patterns lists the patterns that count")
        })?;
    let text = String::from_utf8_lossy(&counting.text);
    let fields = fields_of(&text, page)?;
    Ok(Pattern {
        source: Source {
            page: Some(page.to_string()),
            version: Some(counting.hash),
            url: None,
            sha256: None,
        },
        fields,
        sent_by: Some(counting.sender),
        written: Some(counting.written),
    })
}

/// A pattern's fields in `text` (from `from`, named in a refusal): its
/// first fenced JSON block, in Markdown or as Fossil renders a page
/// (`<pre><code class="language-json">`), or the whole text when it is a
/// JSON object; each field as `create` takes it, `pattern` itself not.
pub fn fields_of(text: &str, from: &str) -> Result<Map<String, Value>, Stop> {
    let whole = text.trim();
    let block = if whole.starts_with('{') && serde_json::from_str::<Value>(whole).is_ok() {
        whole.to_string()
    } else if let Some(b) = crate::protocol::message::json_blocks(text)
        .into_iter()
        .next()
    {
        b
    } else if let Some(b) = rendered_block(text) {
        b
    } else {
        return Err(Stop::field(
            "pattern",
            format!("{from} holds no fenced JSON block of a record's fields"),
        )
        .next("write the fields as a ```json block"));
    };
    let value: Value = serde_json::from_str(&block).map_err(|e| {
        Stop::field(
            "pattern",
            format!(
                "{from}: its JSON block does not read: {}",
                first_line(&e.to_string())
            ),
        )
        .next("correct the page's block")
    })?;
    let Value::Object(fields) = value else {
        return Err(Stop::field(
            "pattern",
            format!("{from}: its JSON block is not an object of a record's fields"),
        )
        .next("write the fields as one JSON object"));
    };
    if fields.contains_key("pattern") {
        return Err(Stop::field(
            "pattern.pattern",
            format!("{from}: a pattern names no pattern of its own"),
        )
        .next("leave pattern out of the page's block"));
    }
    let de = serde_json::Value::Object(fields.clone());
    if let Err(e) = serde_path_to_error::deserialize::<_, super::create::Input>(&de) {
        let (field, reason) = crate::stop::field_at_fault(&e);
        return Err(
            Stop::field(format!("pattern.{field}"), format!("{from}: {reason}"))
                .next("correct the page's block; `ocx help create` describes each field"),
        );
    }
    Ok(fields)
}

/// The first `<pre><code class="language-json">` of an HTML page, its
/// entities read back.
fn rendered_block(html: &str) -> Option<String> {
    let start = html.find("class=\"language-json\"")?;
    let open = start + html[start..].find('>')? + 1;
    let close = open + html[open..].find("</code>")?;
    let body = &html[open..close];
    Some(
        body.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&#x27;", "'")
            .replace("&amp;", "&"),
    )
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// The wiki page `url` names when it is of the server this repository is
/// (the node's URL) or syncs with (a clone's): `BASE/wiki?name=PAGE` or
/// `BASE/wiki/PAGE`.
fn page_of_this_server(call: &mut Call, url: &str) -> Result<Option<String>, Stop> {
    let given = url::Url::parse(url).map_err(|e| {
        Stop::field("pattern", format!("{url:?} is not a URL: {e}"))
            .next("give an http or https URL")
    })?;
    let repo = call.repo()?;
    let base = match crate::node::root_of(repo)?
        .and_then(|root| crate::node::config::NodeConfig::load(&root))
    {
        Some(cfg) => Some(cfg.url),
        None => repo.remote_url()?,
    };
    let Some(base) = base.and_then(|b| url::Url::parse(&b).ok()) else {
        return Ok(None);
    };
    if given.scheme() != base.scheme()
        || given.host_str() != base.host_str()
        || given.port_or_known_default() != base.port_or_known_default()
    {
        return Ok(None);
    }
    let root = base.path().trim_end_matches('/');
    let Some(rest) = given.path().strip_prefix(root) else {
        return Ok(None);
    };
    if rest == "/wiki" {
        return Ok(given
            .query_pairs()
            .find(|(k, _)| k == "name")
            .map(|(_, v)| v.into_owned()));
    }
    Ok(rest
        .strip_prefix("/wiki/")
        .filter(|p| !p.is_empty())
        .map(|p| {
            percent_encoding::percent_decode_str(p)
                .decode_utf8_lossy()
                .into_owned()
        }))
}

/// The pattern at `url`, fetched without signing in, within ten seconds
/// and a mebibyte. From the web page, a URL of the server's own network
/// is refused: the page fetches nothing a visitor could not.
fn fetch(call: &mut Call, url: &str) -> Result<Pattern, Stop> {
    use sha2::Digest;
    let parsed = url::Url::parse(url).map_err(|e| {
        Stop::field("pattern", format!("{url:?} is not a URL: {e}"))
            .next("give an http or https URL")
    })?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Stop::field("pattern", "a pattern's URL names no login")
            .next("give a URL anyone may read"));
    }
    // From the page, the URL's name is resolved once, its every address
    // checked, and the fetch goes to those addresses alone.
    let agent = if matches!(call.cx.who, crate::context::Who::Web { .. }) {
        let addresses = public(&parsed).ok_or_else(|| {
            Stop::field(
                "pattern",
                format!(
                    "{} is on the server's own network, which the page does not fetch from",
                    parsed.host_str().unwrap_or("")
                ),
            )
            .next("give a public URL, or the pattern's name on this repository")
        })?;
        crate::http::agent_at(Some(FETCH_WITHIN), addresses)
    } else {
        crate::http::agent(Some(FETCH_WITHIN))
    };
    call.read(format!("the pattern at {parsed}"));
    let mut answer = agent.get(parsed.as_str()).call().map_err(|e| {
        Stop::field(
            "pattern",
            format!(
                "{parsed} could not be fetched: {}",
                first_line(&e.to_string())
            ),
        )
        .next("check the URL, then try again")
    })?;
    let status = answer.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(
            Stop::field("pattern", format!("{parsed} answered HTTP {status}"))
                .next("give a URL that answers the pattern"),
        );
    }
    let body = answer
        .body_mut()
        .with_config()
        .limit(FETCH_MAX)
        .read_to_vec()
        .map_err(|e| {
            Stop::field(
                "pattern",
                format!("{parsed}: its answer could not be read whole within a mebibyte and ten seconds: {}", first_line(&e.to_string())),
            )
            .next("give a URL that answers a small page")
        })?;
    let text = String::from_utf8(body.clone()).map_err(|_| {
        Stop::field("pattern", format!("{parsed} did not answer UTF-8 text"))
            .next("give a URL of a text page")
    })?;
    let fields = fields_of(&text, parsed.as_str())?;
    Ok(Pattern {
        source: Source {
            page: None,
            version: None,
            url: Some(parsed.to_string()),
            sha256: Some(hex::encode(sha2::Sha256::digest(&body))),
        },
        fields,
        sent_by: None,
        written: None,
    })
}

/// The addresses `url`'s host has, resolved once, when every one is public.
fn public(url: &url::Url) -> Option<Vec<std::net::SocketAddr>> {
    use std::net::{IpAddr, ToSocketAddrs};
    let host = url.host_str()?;
    let port = url.port_or_known_default().unwrap_or(80);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<std::net::SocketAddr> = (host, port).to_socket_addrs().ok()?.collect();
    let every_public = !addrs.is_empty()
        && addrs.iter().map(|a| a.ip()).all(|ip| match ip {
            IpAddr::V4(v) => {
                let o = v.octets();
                !(v.is_loopback()
                    || v.is_private()
                    || v.is_link_local()
                    || v.is_unspecified()
                    || v.is_broadcast()
                    || v.is_multicast()
                    || v.is_documentation()
                    || o[0] == 0
                    || (o[0] == 100 && (64..128).contains(&o[1])))
            }
            IpAddr::V6(v) => {
                let s = v.segments();
                let mapped = v.to_ipv4_mapped();
                !(v.is_loopback()
                    || v.is_unspecified()
                    || v.is_multicast()
                    || (s[0] & 0xfe00) == 0xfc00
                    || (s[0] & 0xffc0) == 0xfe80
                    || mapped.is_some())
            }
        });
    every_public.then_some(addrs)
}

/// The record's fields: the pattern's, then each of `given` (the call's
/// own, as JSON) in its place; an object the call gives (`sandbox`,
/// `budget`, `restrict`) taken key by key over the pattern's.
pub fn merged(pattern: &Map<String, Value>, given: &Map<String, Value>) -> Map<String, Value> {
    let mut out = pattern.clone();
    for (k, v) in given {
        match (out.get_mut(k), v) {
            (Some(Value::Object(p)), Value::Object(g)) => {
                for (gk, gv) in g {
                    p.insert(gk.clone(), gv.clone());
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_block_is_found_in_markdown_in_a_rendered_page_and_as_the_whole_text() {
        let md = "# Reviewer\n\nWhat it does.\n\n```json\n{\"runner\": \"claude\", \"objective\": \"Review\"}\n```\n";
        assert_eq!(fields_of(md, "run/x").unwrap()["runner"], "claude");
        let html = "<div><pre><code class=\"language-json\">{&quot;objective&quot;: &quot;a &amp; b &lt;c&gt;&quot;}\n</code></pre></div>";
        assert_eq!(fields_of(html, "u").unwrap()["objective"], "a & b <c>");
        assert_eq!(
            fields_of("  {\"checkins\": [\"dev\"]}\n", "u").unwrap()["checkins"],
            json!(["dev"])
        );
    }

    #[test]
    fn a_block_that_does_not_read_is_refused_naming_the_page_and_its_field() {
        let stop = fields_of("```json\n{\"objective\": \n```", "run/bad").unwrap_err();
        assert_eq!(stop.field.as_deref(), Some("pattern"));
        assert!(
            stop.reason
                .starts_with("run/bad: its JSON block does not read"),
            "{}",
            stop.reason
        );
        let stop = fields_of("```json\n{\"objectiv\": \"x\"}\n```", "run/typo").unwrap_err();
        assert_eq!(stop.field.as_deref(), Some("pattern.objectiv"), "{stop:?}");
        assert!(stop.reason.starts_with("run/typo: "));
        let stop = fields_of("```json\n{\"budget\": {\"wall\": 5}}\n```", "run/t").unwrap_err();
        assert_eq!(
            stop.field.as_deref(),
            Some("pattern.budget.wall"),
            "{stop:?}"
        );
        let stop = fields_of("```json\n{\"pattern\": \"x\"}\n```", "run/p").unwrap_err();
        assert_eq!(stop.field.as_deref(), Some("pattern.pattern"));
        assert_eq!(
            fields_of("no block here", "run/n")
                .unwrap_err()
                .field
                .as_deref(),
            Some("pattern")
        );
        assert_eq!(
            fields_of("```json\n[1]\n```", "run/a")
                .unwrap_err()
                .field
                .as_deref(),
            Some("pattern")
        );
    }

    #[test]
    fn the_calls_own_fields_win_key_by_key() {
        let p = json!({"objective": "Review", "budget": {"wall": "1h", "cpu": 60}, "checkins": ["dev"]});
        let g = json!({"budget": {"wall": "30m"}, "checkins": ["trunk"]});
        let m = merged(p.as_object().unwrap(), g.as_object().unwrap());
        assert_eq!(
            Value::Object(m),
            json!({"objective": "Review", "budget": {"wall": "30m", "cpu": 60}, "checkins": ["trunk"]})
        );
    }

    #[test]
    fn only_public_addresses_are_public() {
        for u in [
            "http://127.0.0.1/",
            "http://10.1.2.3/",
            "http://192.168.0.1/",
            "http://[::1]/",
            "http://169.254.1.1/",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://[::ffff:127.0.0.1]/",
            "http://[fd00::1]/",
        ] {
            assert!(public(&url::Url::parse(u).unwrap()).is_none(), "{u}");
        }
        assert!(public(&url::Url::parse("http://93.184.215.14/").unwrap()).is_some());
    }
}
