//! `ocx-cgi`: the page's hand-off program, the small program Fossil starts at
//! `/ext/ocx-cgi` for each request. It hands the request to OCX's page
//! server, or starts `ocx` (beside it) as the page; see
//! `src/entry/cgi/handoff.rs`.

fn main() {
    std::process::exit(ocx::entry::cgi::handoff::main());
}
