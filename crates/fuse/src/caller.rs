//! What the kernel does not say about the process behind a request: its
//! supplementary groups, read from /proc when a decision needs them.

use std::fs;

use dualfs_engine::volume::Changer;

use crate::answers::Caller;

/// Who makes a change that may drop set-id bits, for the engine's rule
/// ([`Changer`]): `privileged` when the kernel left CAP_FSETID to us and
/// the caller is root (its fs uid stands for the capability), or when the
/// kernel has already decided nothing is to drop. Unprivileged callers'
/// groups come from /proc only when `file_mode` has a set-group-id bit to
/// decide about.
pub fn changer(caller: Caller, privileged: bool, file_mode: u32) -> Changer {
    if privileged {
        return Changer::Privileged;
    }
    let mut groups = vec![caller.gid];
    if file_mode & 0o2000 != 0 {
        groups.extend(supplementary_groups(caller.pid));
    }
    Changer::Unprivileged { groups }
}

/// Whether the caller may keep a file's set-group-id bit: it is root (the
/// kernel's `capable(CAP_FSETID)`, approximated by the fs uid), its fs gid
/// is the file's group, or the file's group is one of its supplementary
/// groups. Without a readable /proc entry (the process is gone) the answer
/// errs on the side of clearing the bit.
pub fn in_group_or_root(uid: u32, gid: u32, pid: u32, file_gid: u32) -> bool {
    uid == 0 || gid == file_gid || supplementary_groups(pid).contains(&file_gid)
}

/// Every group the caller is in: its fs gid and its supplementary groups.
pub fn groups(caller: Caller) -> Vec<u32> {
    let mut groups = vec![caller.gid];
    groups.extend(supplementary_groups(caller.pid).into_iter().filter(|&g| g != caller.gid));
    groups
}

/// The `Groups:` line of /proc/PID/status.
fn supplementary_groups(pid: u32) -> Vec<u32> {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_in_its_own_groups() {
        let pid = std::process::id();
        let groups = supplementary_groups(pid);
        for g in &groups {
            assert!(in_group_or_root(12345, 54321, pid, *g));
        }
        assert!(in_group_or_root(0, 1, pid, 99_999));
        assert!(in_group_or_root(5, 7, pid, 7));
        assert!(!in_group_or_root(5, 7, u32::MAX, 8), "no such process: not in the group");
    }

    #[test]
    fn an_unprivileged_changer_is_in_its_groups_and_no_other() {
        let pid = std::process::id();
        let who = Caller { uid: 1000, gid: 77, pid };
        assert_eq!(changer(who, true, 0o6755), Changer::Privileged);
        let c = changer(who, false, 0o2666);
        assert!(c.keeps_sgid_of(77));
        for g in supplementary_groups(pid) {
            assert!(c.keeps_sgid_of(g));
        }
        assert!(!changer(Caller { pid: u32::MAX, ..who }, false, 0o2666).keeps_sgid_of(78));
    }
}
