//! `ocx-cgi`: the page Fossil serves at `/ext/ocx-cgi`. Not built yet: it
//! answers so, as a page, rather than failing.

/// Answers every request with a page saying the web page is not built yet.
pub fn main() -> i32 {
    super::print(
        "Status: 501 Not Implemented\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n\
         OCX's web page is not built yet; use the ocx command line.\n",
    );
    0
}
