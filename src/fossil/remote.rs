//! A repository's URL, read and written with the `url` crate: the URL a
//! node is served at, the login one names, one with a login put in or
//! taken out, and any password in a text hidden.

use std::borrow::Cow;

use url::Url;

/// `text` as the URL a repository is served at: `http` or `https`, with a
/// host and no login or password, and no white space anywhere.
pub fn served_url(text: &str) -> Option<Url> {
    if text.contains(char::is_whitespace) {
        return None;
    }
    let url = Url::parse(text).ok()?;
    let fits = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && url.username().is_empty()
        && url.password().is_none();
    fits.then_some(url)
}

/// The login a remote URL names (`http://alice@host/`), if it names one.
pub fn login_of(text: &str) -> Option<String> {
    let url = Url::parse(text).ok()?;
    let login = percent_encoding::percent_decode_str(url.username()).decode_utf8_lossy();
    (!login.is_empty()).then(|| login.into_owned())
}

/// `text` with `login` and `password` put in as its user; `text` as it is
/// when it is no URL.
pub fn with_login(text: &str, login: &str, password: &str) -> String {
    with_user(text, login, Some(password))
}

/// `text` naming `login` as its user and holding no password, as Fossil
/// remembers a remote; `text` as it is when it is no URL.
pub fn naming_login(text: &str, login: &str) -> String {
    with_user(text, login, None)
}

fn with_user(text: &str, login: &str, password: Option<&str>) -> String {
    let Ok(mut url) = Url::parse(text) else {
        return text.to_string();
    };
    if url.set_username(login).is_err() || url.set_password(password).is_err() {
        return text.to_string();
    }
    url.into()
}

/// The page `segments` below the remote `text`, with no login, password,
/// query or fragment in it.
pub fn page_of(text: &str, segments: &[&str]) -> Option<String> {
    let mut url = Url::parse(text).ok()?;
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    url.set_query(None);
    url.set_fragment(None);
    url.path_segments_mut()
        .ok()?
        .pop_if_empty()
        .extend(segments);
    Some(url.into())
}

/// `text` with the password of every URL in it hidden (`***`), so it can be
/// printed or logged. A URL is read from its scheme to the next white space
/// or quote; one naming a login that does not read as a URL is hidden from
/// `://` on.
pub fn redact_password(text: &str) -> String {
    let is_scheme = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.');
    let ends = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let start = rest[..i].trim_end_matches(is_scheme).len();
        let end = rest[i..].find(ends).map_or(rest.len(), |e| i + e);
        out.push_str(&rest[..start]);
        out.push_str(&hidden(&rest[start..end], &rest[start..i]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// One URL of a text with its password hidden.
fn hidden<'a>(candidate: &'a str, scheme: &str) -> Cow<'a, str> {
    match Url::parse(candidate) {
        Ok(mut url) if url.password().is_some() => match url.set_password(Some("***")) {
            Ok(()) => Cow::Owned(url.into()),
            Err(()) => Cow::Owned(format!("{scheme}://***")),
        },
        Ok(_) => Cow::Borrowed(candidate),
        Err(_) if candidate.contains('@') => Cow::Owned(format!("{scheme}://***")),
        Err(_) => Cow::Borrowed(candidate),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_hidden() {
        assert_eq!(
            redact_password("unknown command: http://run-1:s3cret@127.0.0.1:8080/ now"),
            "unknown command: http://run-1:***@127.0.0.1:8080/ now"
        );
        assert_eq!(redact_password("http://host:8080/x"), "http://host:8080/x");
        assert_eq!(
            redact_password("cannot open \"https://a:b@h/r\"."),
            "cannot open \"https://a:***@h/r\"."
        );
        assert_eq!(redact_password("x://a:b@[bad"), "x://***");
        assert_eq!(redact_password("é http://a:b@h é"), "é http://a:***@h/ é");
    }

    #[test]
    fn a_served_url_is_http_with_a_host_and_no_login() {
        assert!(served_url("http://127.0.0.1:8080/repo").is_some());
        assert!(served_url("https://example.org").is_some());
        assert!(served_url("http://alice@host/").is_none());
        assert!(served_url("http://host/ x").is_none());
        assert!(served_url("ftp://host/").is_none());
        assert!(served_url("http://").is_none());
        assert!(served_url("/srv/repo.fossil").is_none());
    }

    #[test]
    fn a_login_is_read_put_in_and_taken_out() {
        assert_eq!(
            login_of("http://alice@127.0.0.1:8080/").as_deref(),
            Some("alice")
        );
        assert_eq!(login_of("http://a%40b:pw@h/").as_deref(), Some("a@b"));
        assert_eq!(login_of("http://h/"), None);
        assert_eq!(
            with_login("http://127.0.0.1:8080/r", "run-1", "pw"),
            "http://run-1:pw@127.0.0.1:8080/r"
        );
        assert_eq!(
            page_of("http://alice:pw@127.0.0.1:8080/", &["info", "abc"]).as_deref(),
            Some("http://127.0.0.1:8080/info/abc")
        );
        assert_eq!(
            page_of("https://h/repo/", &["info", "abc"]).as_deref(),
            Some("https://h/repo/info/abc")
        );
    }
}
