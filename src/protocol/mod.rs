//! The protocol's messages (C1–C4, C7) and verdicts (V1, V2): message
//! blocks read from and written into posts and ticket changes, typed, and
//! found where they stand.

pub mod ask;
pub mod found;
pub mod kinds;
pub mod message;
pub mod money;
pub mod reference;
pub mod schedule;
pub mod verdict;

/// The raw tag OCX puts on each message it writes: a hint for readers,
/// never relied on to find one.
pub const MESSAGE_TAG: &str = "ocx-message";
