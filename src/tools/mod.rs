//! The tools, one file each: its Input, its Output, what it needs, its run.
//! A tool never knows which entry point called it and never prints.

pub mod audit;
pub mod context;
pub mod create;
pub mod edit;
pub mod find;
pub mod help;
pub mod hook;
pub mod list;
pub mod lost;
pub mod node;
pub mod post;
pub mod push;
pub mod read;
pub mod receipt;
pub mod save;
pub mod status;
pub mod stop;
pub mod test;
pub mod thread;
pub mod unaudited;
pub mod unversioned_get;
pub mod unversioned_list;
pub mod unversioned_put;
pub mod verdicts;
pub mod wiki_edit;
pub mod wiki_read;
pub mod workspace;
