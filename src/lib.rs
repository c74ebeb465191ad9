//! OCX: people and AI agents working together on a Fossil repository under
//! boundaries anyone can read before anything runs. See docs/architecture.md
//! for the layers and what each may do.

pub mod answer;
pub mod context;
pub mod entry;
pub mod fields;
pub mod file;
pub mod fossil;
pub mod git;
pub mod http;
pub mod input;
pub mod lock;
pub mod node;
pub mod place;
pub mod protocol;
pub mod registry;
pub mod run;
pub mod stop;
pub mod tool;
pub mod tools;
