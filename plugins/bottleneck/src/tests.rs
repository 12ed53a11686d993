//! The plugin through its hooks with a fake host: events and samples in,
//! rows, decisions, metrics and routes out.
