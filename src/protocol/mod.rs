//! The protocol's messages (C1): OCX message blocks read from and written
//! into posts and ticket changes.

pub mod message;
