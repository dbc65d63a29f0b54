//! The integration tests, one binary: each module is one suite (`edge`,
//! `filters`, `gcn`, …) and `common` holds what they share. One binary links
//! the stack once instead of once per suite, which is most of what building
//! the tests costs. Run one suite with `cargo nextest run -E 'test(/^edge::/)'`.

mod common;

mod agents;
mod alert_cuts;
mod answers;
mod append_stream;
mod approvals;
mod astro;
mod astro_cli;
mod astro_edge;
mod cli;
mod concurrency;
mod connect;
mod console;
mod denied_tools;
mod direct;
mod edge;
mod faults;
mod filter_preview;
mod filters;
mod filters_live;
mod fixture_edge;
mod fundamentals;
mod gcn;
mod hardening;
mod hostile_input;
mod limits;
mod oauth;
mod oauth_jwt;
mod oauth_store;
mod objects;
mod otel;
mod pin;
mod principal;
mod probe_edge;
mod progress;
mod replicas;
mod rollout;
mod skills;
mod stdio;
mod stores;
mod streaming;
mod subscriptions;
mod tail;
mod telemetry;
mod tool_list;
