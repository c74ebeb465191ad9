//! The tools, one file each: its Input, its Output, what it needs, its run.
//! A tool never knows which entry point called it and never prints.

pub mod context;
pub mod edit;
pub mod find;
pub mod help;
pub mod list;
pub mod post;
pub mod read;
pub mod receipt;
pub mod save;
pub mod status;
pub mod test;
pub mod thread;
pub mod unversioned_get;
pub mod unversioned_list;
pub mod unversioned_put;
pub mod wiki_edit;
pub mod wiki_read;
pub mod workspace;
