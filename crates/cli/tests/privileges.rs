//! Privileges and time through the mount, against what ext4 does: a
//! fallocate or an O_DIRECT write by another user drops set-id bits and
//! file capabilities (as buffered writes and truncation do), and times the
//! kernel stamps and times the volume stamps never run backwards. Under
//! `nosecurity_xattr` capabilities cannot be set and set-id bits still drop.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use common::{TestVolume, sh};

/// Mode bits and capability of `f`, as `stat` and `getcap` say them.
fn privileges(m: &str, f: &str) -> String {
    sh(&format!("cd {m} && echo \"$(stat -c %a {f}) $(getcap {f} | cut -d' ' -f2)\"")).trim().to_string()
}

#[test]
fn fallocate_and_direct_writes_by_others_drop_set_id_bits_and_capabilities() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    if !common::sh_output("command -v setcap && command -v setpriv").status.success() {
        common::skip("setcap (libcap2-bin) or setpriv (util-linux) is missing (scripts/install-deps)");
        return;
    }
    v.mount_with("allow_other");
    let m = v.m().to_string();
    sh(&format!("chmod 777 {m}"));
    for (i, op) in [
        "fallocate -l 65536",
        "fallocate -n -l 65536",
        "fallocate -p -o 0 -l 4096",
        "fallocate -z -o 0 -l 4096",
        "dd if=/dev/zero bs=4096 count=1 oflag=direct conv=notrunc status=none of=",
    ]
    .iter()
    .enumerate()
    {
        let f = format!("f{i}");
        sh(&format!("cd {m} && head -c 8192 /dev/urandom > {f} && chmod 6777 {f} && setcap cap_net_raw+ep {f}"));
        assert_eq!(privileges(&m, &f), "6777 cap_net_raw=ep", "{op}: set up");
        let cmd = if op.ends_with('=') { format!("{op}{f}") } else { format!("{op} {f}") };
        sh(&format!("cd {m} && setpriv --reuid 1000 --regid 1000 --clear-groups sh -c '{cmd}'"));
        // Seen at once: the kernel is told to forget the mode it cached.
        assert_eq!(privileges(&m, &f), "777", "{op} by another user");
        // Root keeps the set-id bits, but never the capability (ext4's
        // file_modified drops it for everyone).
        sh(&format!("cd {m} && chmod 6777 {f} && setcap cap_net_raw+ep {f} && {cmd}"));
        assert_eq!(privileges(&m, &f), "6777", "{op} by root");
    }
    v.umount();
}

#[test]
fn times_stamped_by_the_kernel_and_by_the_volume_never_run_backwards() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    // Each round: a reference stamped by the volume (create), then a write
    // the kernel stamps (writeback cache), then a link the volume stamps
    // while the kernel owns the file's times (its pages are dirty).
    let out = sh(&format!(
        r#"cd {m}; bad=0
for i in $(seq 100); do
  touch ref$i
  echo data > w$i
  exec 3>>x$i; echo more >&3; ln x$i y$i; exec 3>&-
  [ "$(stat -c %.9Y w$i)" \< "$(stat -c %.9Y ref$i)" ] && bad=$((bad+1))
  [ "$(stat -c %.9Z y$i)" \< "$(stat -c %.9Z ref$i)" ] && bad=$((bad+1))
done
echo $bad"#,
        m = v.m()
    ));
    assert_eq!(out.trim(), "0", "later events stamped earlier");
    v.umount();
}

/// How many `security.selinux` lookups `ls -l` of `dir` makes (strace).
fn label_lookups(dir: &str) -> usize {
    let out = sh(&format!("strace -f -e trace=lgetxattr,getxattr ls -l {dir} 2>&1 >/dev/null"));
    out.lines().filter(|l| l.contains("\"security.selinux\"")).count()
}

#[test]
fn nosecurity_xattr_turns_off_capabilities_and_labels_but_not_set_id_bits_acls_or_user_xattrs() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    let tools =
        "command -v setcap && command -v setpriv && command -v strace && command -v setfacl && command -v setfattr";
    if !common::sh_output(tools).status.success() {
        common::skip("setcap, setpriv, strace, setfacl or setfattr is missing (scripts/install-deps)");
        return;
    }
    v.mount_with("allow_other");
    let m = v.m().to_string();
    sh(&format!(
        "cd {m} && chmod 777 . && mkdir many && touch many/f1 many/f2 many/f3 many/f4 && echo x > kept && setcap cap_net_raw+ep kept"
    ));
    let served = label_lookups(&format!("{m}/many"));
    assert!(served >= 4, "served: ls asks for each file's label ({served})");
    v.umount();

    v.mount_with("allow_other,nosecurity_xattr");
    assert_eq!(label_lookups(&format!("{m}/many")), 1, "not served: ls asks once, then knows");
    let refused = common::sh_output(&format!("cd {m} && echo y > f && setcap cap_net_raw+ep f"));
    assert!(!refused.status.success(), "a capability cannot be set");
    let said = sh(&format!("getfattr -n security.selinux {m}/f 2>&1 || true"));
    assert!(said.contains("Operation not supported"), "{said}");
    assert_eq!(privileges(&m, "kept"), "644", "a stored capability is not seen");
    // The kernel drops set-id bits on a write by another user as before.
    sh(&format!("cd {m} && chmod 6777 f && setpriv --reuid 1000 --regid 1000 --clear-groups sh -c 'echo z >> f'"));
    assert_eq!(privileges(&m, "f"), "777", "set-id bits dropped by another user's write");
    // ACLs and the user namespace stay served.
    sh(&format!("cd {m} && setfacl -m u:1000:r f && setfattr -n user.note -v hi f"));
    assert!(sh(&format!("getfacl -cn {m}/f")).contains("user:1000:r--"));
    assert_eq!(sh(&format!("getfattr --only-values -n user.note {m}/f")), "hi");
    let listed = sh(&format!("getfattr -d -m - {m}/kept"));
    assert!(!listed.contains("security."), "{listed}");
    v.umount();

    v.mount_with("allow_other");
    assert_eq!(privileges(&m, "kept"), "644 cap_net_raw=ep", "kept on the volume");
    v.umount();
}

/// Linux 6.2's rule for set-group-id without group execute
/// (`setattr_should_drop_sgid`): every change of the data by a caller
/// outside the file's group and without CAP_FSETID drops it, where the old
/// rule read the bit as mandatory locking and kept it; a member keeps it.
#[test]
fn set_group_id_without_group_execute_goes_for_outsiders_and_stays_for_members() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    if !common::sh_output("command -v setpriv").status.success() {
        common::skip("setpriv (util-linux) is missing");
        return;
    }
    v.mount_with("allow_other");
    let m = v.m().to_string();
    sh(&format!("chmod 777 {m}"));
    let outsider = "setpriv --reuid 1000 --regid 1000 --clear-groups";
    let member = "setpriv --reuid 1000 --regid 1000 --groups 2000";
    for (i, op) in [
        "fallocate -p -o 0 -l 4096",
        "fallocate -z -o 0 -l 4096",
        "fallocate -l 65536",
        "truncate -s 100",
        "dd if=/dev/zero bs=4096 count=1 conv=notrunc status=none of=",
        "dd if=/dev/zero bs=4096 count=1 oflag=direct conv=notrunc status=none of=",
    ]
    .iter()
    .enumerate()
    {
        let cmd = |f: &str| if op.ends_with('=') { format!("{op}{f}") } else { format!("{op} {f}") };
        for (start, want) in [("2666", "666"), ("6766", "766")] {
            let f = format!("o{i}_{start}");
            sh(&format!("cd {m} && head -c 8192 /dev/urandom > {f} && chmod {start} {f}"));
            sh(&format!("cd {m} && {outsider} sh -c '{}'", cmd(&f)));
            assert_eq!(privileges(&m, &f), want, "{op} on {start} by a user outside the group");
        }
        let f = format!("m{i}");
        sh(&format!("cd {m} && head -c 8192 /dev/urandom > {f} && chgrp 2000 {f} && chmod 6766 {f}"));
        sh(&format!("cd {m} && {member} sh -c '{}'", cmd(&f)));
        assert_eq!(privileges(&m, &f), "2766", "{op} by a member of the group: only set-user-id goes");
    }
    // chown drops set-group-id without group execute only for an outsider
    // without CAP_FSETID; root keeps it.
    sh(&format!("cd {m} && touch c && chmod 2666 c && chown 1000 c"));
    assert_eq!(privileges(&m, "c"), "2666", "root's chown");
    sh(&format!("cd {m} && touch d && chown 1000:0 d && chmod 2666 d && {outsider} chgrp 1000 d"));
    assert_eq!(privileges(&m, "d"), "666", "the owner's chgrp out of a group it is not in");
    v.umount();
}
