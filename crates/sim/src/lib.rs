//! Test machinery for the DualFS engine: a reference model of a POSIX file
//! system, and a harness that runs random operation sequences against the
//! engine and the model side by side.

pub mod harness;
pub mod model;
