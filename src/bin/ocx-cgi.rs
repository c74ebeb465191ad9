//! `ocx-cgi`: the page's hand-off program, the small program Fossil starts
//! at `/ext/ocx-cgi` for each request. It hands the request to OCX's page
//! server, or starts `ocx` (beside it) as the page; see
//! `src/entry/cgi/handoff.rs`. Its `main` is the C library's, so Rust's
//! start (a stack guard read from `/proc/self/maps`, signal stacks) is not
//! paid on every request; nothing here needs it.

#![no_main]

/// The program's entry, called by the C library.
#[unsafe(no_mangle)]
pub extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    ocx::entry::cgi::handoff::main()
}
