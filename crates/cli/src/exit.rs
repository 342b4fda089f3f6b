//! The exit status a command leaves with when it is not 0 or 1: fsck's,
//! blkid's, a background mount's child's. Its own module so that every
//! command can return one and `main` read it.

/// An exit status to leave with, its message already printed (by the
/// command, or by a background mount's child on the caller's standard
/// error).
#[derive(Debug)]
pub struct Exit(pub i32);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for Exit {}
