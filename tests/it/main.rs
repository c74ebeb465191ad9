//! OCX's integration tests: one binary, real Fossil repositories made per
//! test with `fossil new`, the real `ocx` binary run as a user would.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod agent;
mod agents;
mod answers;
mod attack_accounts;
mod attack_disk;
mod attack_host;
mod attack_pages;
mod attack_protocol;
mod attack_run;
mod attack_secrets;
mod attack_senders;
mod attack_terminal;
mod attack_upstream;
mod attack_waits;
mod attack_web;
mod budget_asks;
mod cgi;
mod cli;
mod crash;
mod egress;
mod enrol;
mod function_length;
mod git_export;
mod held_writes;
mod hostile;
mod house;
mod layers;
mod machine_faults;
mod machines;
mod mcp;
mod messages;
mod metrics;
mod model;
mod node;
mod ollama;
mod page_server;
mod patterns;
mod project;
mod protocol;
mod questions;
mod reads;
mod relay;
mod release;
mod restricted;
mod run_page;
mod sandbox;
mod schedules;
mod served;
mod support;
mod terminal;
mod tls;
mod tunnel;
mod writes;
