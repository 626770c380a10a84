//! End-to-end tests of the REST API, the dashboard, the metrics and the command line that
//! steers jobs: each test starts a real `weir demo` serving its REST API on a free port and
//! talks to it over HTTP only — with Weir's own client, raw HTTP, Flink's command line and REST
//! classes, and a headless Chromium (installed by scripts/install-test-tools.sh).

mod api;
mod bad_requests;
mod cli;
mod common;
mod dashboard;
mod flink_classes;
mod flink_cli;
mod flink_schema;
mod unaligned;
