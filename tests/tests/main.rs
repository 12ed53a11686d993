//! The end-to-end tests, one module per file beside this one, all in one
//! test binary: `cargo test -p sonde-e2e` runs them all, `cargo test -p
//! sonde-e2e --test e2e cluster::` one file's, `cargo test -p sonde-e2e
//! --test e2e cluster::nodes` the tests whose names contain that.
//!
//! One binary instead of one per file: each would link the same helpers and
//! dependencies again (two of them the whole host), and cargo runs test
//! binaries one after another, so a file's slowest test left a test thread
//! idle until it ended. Tests in different files now run side by side; the
//! CPU-sensitive ones take `sonde_e2e::one_at_a_time()`.

mod api;
mod bottleneck;
mod bundled;
mod clockwork;
mod cluster;
mod cluster_query;
mod cluster_tls;
mod collector;
mod container;
mod delivery;
mod determined;
mod diagnosis;
mod dist;
mod dlrover;
mod event_tables;
mod gateway;
mod gpu;
mod gpu_pods;
mod guests;
mod http_api;
mod mpi;
mod otlp_json;
mod paramserver;
mod plugin_kit;
mod plugins_cluster;
mod python_client;
mod record_replay;
mod scrape;
mod semconv;
mod slurm;
mod spool;
