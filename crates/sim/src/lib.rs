//! Test machinery for the DualFS engine: a reference model of a POSIX file
//! system, a harness that runs random operation sequences against the
//! engine and the model side by side, and the crash-state explorer
//! (recording devices, crash states, oracles, workloads).
//!
//! docs/TESTING.md says how to run the explorer and replay a failure.

pub mod crash;
pub mod decode;
pub mod explorer;
pub mod faulty;
pub mod fuzz;
pub mod harness;
pub mod image;
pub mod model;
pub mod oracle;
pub mod record;
pub mod rng;
pub mod stream_fuzz;
pub mod stream_structure;
pub mod three_devices;
pub mod tree;
pub mod workload;
pub mod workloads;
