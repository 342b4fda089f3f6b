//! Quotas through the mount, with real tools run as another user: dd, cp
//! and touch get EDQUOT ("Disk quota exceeded") at a hard limit, a soft
//! limit turns hard once its grace time ends, chown to a full user is
//! refused, mv into another project's tree copies (EXDEV), and `dualfs
//! quota report` shows what each id uses, mounted and not, and a user
//! their own usage without root.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use common::{TestVolume, dualfs, sh, sh_output};

/// Runs `script` as uid and gid 1000; its combined output and status.
fn as_user(m: &str, script: &str) -> (bool, String) {
    let out = sh_output(&format!("cd {m} && setpriv --reuid 1000 --regid 1000 --clear-groups sh -c '{script}' 2>&1"));
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The row of user `id` in a JSON report.
fn user_row(json: &str, id: u64) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["rows"].as_array().unwrap().iter().find(|r| r["kind"] == "user" && r["id"] == id).cloned().unwrap()
}

fn quota(args: &[&str]) -> String {
    let out = dualfs(&[&["quota"], args].concat());
    assert!(out.status.success(), "dualfs quota {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tools_hit_the_limits_and_the_report_shows_usage() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    if !sh_output("command -v setpriv").status.success() {
        common::skip("setpriv (util-linux) is missing (scripts/install-deps)");
        return;
    }
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    // Offline: on, and a limit, as setquota takes it (KiB, or units).
    quota(&["on", &meta, &data]);
    quota(&["set", "-u", "1000", "2M", "4M", "0", "5", &meta, &data]);
    v.mount_with("allow_other");
    let m = v.m().to_string();
    sh(&format!("chmod 777 {m}"));
    // dd past the hard limit: write(2) itself fails (the file is opened
    // without the kernel's cache near a limit).
    let (ok, out) = as_user(&m, "dd if=/dev/zero of=big bs=64k count=100 status=none");
    assert!(!ok && out.contains("Disk quota exceeded"), "dd: {out}");
    let size: u64 = sh(&format!("stat -c %s {m}/big")).trim().parse().unwrap();
    assert!((3 << 20..=4 << 20).contains(&size), "dd stopped at {size} bytes");
    // cp of a file that does not fit, touch past the inode limit.
    sh(&format!("head -c 1048576 /dev/urandom > {m}/src && chmod 644 {m}/src"));
    let (ok, out) = as_user(&m, "cp src copy");
    assert!(!ok && out.contains("Disk quota exceeded"), "cp: {out}");
    as_user(&m, "rm -f copy big");
    let (ok, out) = as_user(&m, "touch a b c d e f");
    assert!(!ok && out.contains("Disk quota exceeded"), "touch: {out}");
    assert_eq!(sh(&format!("ls {m} | grep -c '^[a-f]$' || true")).trim(), "5");
    // Chown of root's file to the full user: refused.
    let out = sh_output(&format!("chown 1000 {m}/src 2>&1"));
    assert!(!out.status.success(), "chown to a full user succeeded");
    // The report, mounted: five inodes of five, limits as set (in blocks).
    let rep = quota(&["report", "-u", &m]);
    assert!(rep.contains("Report for user quotas"), "{rep}");
    let row = user_row(&quota(&["report", "--json", &m]), 1000);
    assert_eq!((row["inodes"].as_u64(), row["inode_hard"].as_u64()), (Some(5), Some(5)), "{row}");
    assert_eq!((row["block_soft"].as_u64(), row["block_hard"].as_u64()), (Some(512), Some(1024)), "{row}");
    // A user reads their own usage without root, as quotactl's Q_GETQUOTA
    // allows: their user's row and their group's, no one else's.
    let bin = env!("CARGO_BIN_EXE_dualfs");
    let (ok, out) = as_user(&m, &format!("{bin} quota report --json {m}"));
    assert!(ok, "a user reading their own quota: {out}");
    let own: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = own["rows"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["kind"] == "user" && r["id"] == 1000), "{out}");
    assert!(rows.iter().all(|r| r["id"] == 1000 && r["kind"] != "project"), "another's row shown: {out}");
    let (ok, out) = as_user(&m, &format!("{bin} quota report {m}"));
    assert!(ok && out.contains("uid 1000") && !out.contains("Report for project"), "{out}");
    // A soft limit with a grace time of 2 s: past it, then refused.
    as_user(&m, "rm -f a b c d e");
    quota(&["grace", "-u", "2", "2", &m]);
    quota(&["set", "-u", "1000", "64", "4M", "0", "0", &m]);
    let (ok, out) = as_user(&m, "head -c 131072 /dev/zero > soft && sync soft");
    assert!(ok, "past the soft limit, within the grace time: {out}");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let (ok, out) = as_user(&m, "head -c 131072 /dev/zero >> soft && sync soft");
    assert!(!ok && out.contains("Disk quota exceeded"), "after the grace time: {out}");
    // A project's tree: mv in copies (EXDEV inside, mv falls back).
    sh(&format!("mkdir {m}/proj && chattr +P -p 42 {m}/proj && echo x > {m}/outside"));
    quota(&["set", "-p", "42", "0", "1M", "0", "0", &m]);
    sh(&format!("mv {m}/outside {m}/proj/"));
    assert_eq!(sh(&format!("lsattr -p {m}/proj/outside | awk '{{print $1}}'")).trim(), "42");
    let out = sh_output(&format!("head -c 2097152 /dev/zero > {m}/proj/big 2>&1"));
    assert!(!out.status.success(), "a full project took 2 MiB");
    let rep = quota(&["report", "-p", "-h", &m]);
    assert!(rep.contains("Report for project quotas"), "{rep}");
    v.umount();
    // Offline, the same report; fsck clean.
    let rep = quota(&["report", "--json", &meta, &data]);
    let report: serde_json::Value = serde_json::from_str(&rep).unwrap();
    assert_eq!(report["on"], serde_json::Value::Bool(true), "{rep}");
    v.fsck();
}
