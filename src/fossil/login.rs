//! Fossil's web sign-in, as its user table records it: the login cookie's
//! name, and the login an unexpired cookie belongs to. The web page proves
//! its viewer with these rather than believe a `FOSSIL_USER` that Fossil
//! may have passed on from its own environment.

use super::FossilError;
use super::Repository;
use super::caps::Capabilities;
use rusqlite::OptionalExtension;

/// Fossil's own logins, which never sign in with a cookie of this form.
const SPECIAL: [&str; 4] = ["anonymous", "nobody", "developer", "reader"];

impl Repository {
    /// The login cookie's name: `fossil-` and the first 16 characters of
    /// the login group's code, or of the project's when in no group.
    pub fn login_cookie_name(&self) -> Result<String, FossilError> {
        let code = match self.config("login-group-code")? {
            Some(group) => group,
            None => self.project_code()?,
        };
        Ok(format!(
            "fossil-{}",
            code.chars().take(16).collect::<String>()
        ))
    }

    /// The login whose login cookie the `Cookie` header `header` carries,
    /// when the user table confirms it: the cookie's hash is the one
    /// stored for that login (compared in constant time), unexpired, and
    /// the login has capabilities and a password. Anything else, an
    /// anonymous sign-in among them, is `None`.
    pub fn login_by_cookie(&self, header: &str) -> Result<Option<String>, FossilError> {
        let name = self.login_cookie_name()?;
        let Some(value) = header.split(';').find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then_some(v)
        }) else {
            return Ok(None);
        };
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        let mut parts = value.splitn(3, '/');
        let (Some(hash), Some(_code), Some(login)) = (parts.next(), parts.next(), parts.next())
        else {
            return Ok(None);
        };
        if hash.is_empty() || SPECIAL.contains(&login) {
            return Ok(None);
        }
        let stored: Option<Option<String>> = self
            .db
            .prepare_cached(
                "SELECT cookie FROM user WHERE login=?1 AND cexpire>julianday('now') \
                 AND length(cap)>0 AND length(pw)>0",
            )?
            .query_row([login], |r| r.get(0))
            .optional()?;
        Ok(match stored.flatten() {
            Some(cookie) if same_secret(cookie.as_bytes(), hash.as_bytes()) => {
                Some(login.to_string())
            }
            _ => None,
        })
    }

    /// Whether `shown`, the capabilities Fossil gave a request, are exactly
    /// what the repository grants `login`, and more than a visitor who has
    /// not signed in gets: what Fossil shows when it signed `login` in
    /// itself (its local `ui` sign-in), and not when it merely passed on a
    /// name from its environment.
    pub fn shows_own_capabilities(&self, login: &str, shown: &str) -> Result<bool, FossilError> {
        if SPECIAL.contains(&login) {
            return Ok(false);
        }
        let Some(own) = self.own_capabilities(login)? else {
            return Ok(false);
        };
        let special = self.special()?;
        let full = |letters: &str| Capabilities::effective(letters, &special, true);
        let shown = full(shown);
        Ok(shown == full(&own) && shown != full(&special.nobody))
    }
}

/// Whether two secrets are the same, taking the same time wherever they
/// differ (their lengths are not secret).
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"ab"));
        assert!(!same_secret(b"", b"a"));
    }
}
