//! The tools, one file each: its Input, its Output, what it needs, its run.
//! A tool never knows which entry point called it and never prints.

pub mod audit;
pub mod create;
pub mod help;
pub mod hook;
pub mod list;
pub mod lost;
pub mod node;
pub mod post;
pub mod push;
pub mod receipt;
pub mod status;
pub mod stop;
pub mod thread;
pub mod unaudited;
pub mod verdicts;
