//! The one way OCX makes an HTTP client (to a Fossil server's page, or to
//! a local model): a status other than 2xx is read as an answer, no
//! redirect is followed (a link an answer names is never taken), and the
//! whole request is bounded as the caller says.

use std::time::Duration;

/// A client whose every request ends within `within` (never, for `None`),
/// naming itself `ocx/VERSION`.
pub fn agent(within: Option<Duration>) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(within)
        .timeout_await_100(None)
        .user_agent(format!("ocx/{}", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}
