//! POSIX ACLs through the mount, as on ext4: setfacl and getfacl, the kernel
//! checking named entries for other users, chmod and the mode kept in step,
//! default ACLs inherited instead of the umask, cp -a and tar --acls.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::os::unix::fs::MetadataExt;

use common::{TestVolume, sh, sh_output};

/// Programs run as uid 1000, gid 1000, no supplementary groups.
const USER: &str = "setpriv --reuid=1000 --regid=1000 --clear-groups";
/// Another unprivileged user, in group 1000.
const GROUPMATE: &str = "setpriv --reuid=1002 --regid=1000 --clear-groups";
/// A stranger: neither named nor in the group.
const STRANGER: &str = "setpriv --reuid=1001 --regid=1001 --clear-groups";

fn mode(v: &TestVolume, p: &str) -> u32 {
    std::fs::symlink_metadata(v.path(p)).unwrap().mode() & 0o7777
}

fn can(who: &str, cmd: &str) -> bool {
    let out = sh_output(&format!("{who} sh -c '{cmd}'"));
    if !out.status.success() {
        assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{cmd}: {out:?}");
    }
    out.status.success()
}

#[test]
fn acl_entries_grant_and_deny_access_to_other_users() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    // Other users reach a FUSE mount only with allow_other.
    v.mount_with("allow_other");
    let m = v.m().to_string();
    sh(&format!("cd {m} && echo secret > s && chmod 600 s && mkdir -m 700 private && echo inner > private/f"));
    let read_s = format!("cat {m}/s");
    assert!(!can(USER, &read_s));
    sh(&format!("setfacl -m u:1000:r {m}/s"));
    assert!(can(USER, &read_s), "a named user entry grants");
    assert!(!can(STRANGER, &read_s), "and only to that user");
    assert!(!can(USER, &format!("echo more >> {m}/s")), "only what it grants");
    sh(&format!("setfacl -m g:1000:rw {m}/s"));
    assert!(can(GROUPMATE, &format!("echo more >> {m}/s")), "a named group entry grants");
    sh(&format!("setfacl -m u:1000:- {m}/s"));
    assert!(!can(USER, &read_s), "a named entry denies even a member of a granted group");
    sh(&format!("setfacl -m u:1000:r,m::- {m}/s"));
    assert_eq!(mode(&v, "s"), 0o600, "the mask is the group bits");
    assert!(!can(USER, &read_s), "the mask limits named entries");
    // Search permission on a directory, by ACL.
    let read_inner = format!("cat {m}/private/f");
    assert!(!can(USER, &read_inner));
    sh(&format!("setfacl -m u:1000:x {m}/private && chmod 644 {m}/private/f"));
    assert!(can(USER, &read_inner));
    assert!(!can(USER, &format!("ls {m}/private")), "x is not r");

    // The ACLs are on the volume, not in the kernel's cache.
    v.umount();
    v.mount_with("allow_other");
    assert!(can(USER, &read_inner));
    assert!(!can(USER, &read_s));
    sh(&format!("setfacl -m m::r {m}/s"));
    assert!(can(USER, &read_s));
    v.umount();
}

#[test]
fn setfacl_and_chmod_keep_mode_and_acl_in_step() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount_with("allow_other");
    let m = v.m().to_string();
    sh(&format!("cd {m} && touch f && chmod 644 f && setfacl -m u:1000:rwx f"));
    assert_eq!(mode(&v, "f"), 0o674, "the mask (rwx) becomes the group bits");
    assert!(sh(&format!("ls -l {m}/f")).starts_with("-rw-rwxr--+"));
    sh(&format!("chmod 640 {m}/f"));
    let acl = sh(&format!("getfacl -n -c {m}/f"));
    assert_eq!(acl, "user::rw-\nuser:1000:rwx\t#effective:r--\ngroup::r--\nmask::r--\nother::---\n\n");
    // An ACL the mode can say is a chmod: nothing is stored.
    sh(&format!("setfacl -b {m}/f"));
    assert_eq!(sh(&format!("getfattr -m - -d {m}/f")), "");
    assert_eq!(mode(&v, "f"), 0o640);
    sh(&format!("setfacl --set u::rwx,g::r-x,o::--x {m}/f"));
    assert_eq!(mode(&v, "f"), 0o751);
    assert_eq!(sh(&format!("getfattr -m - -d {m}/f")), "");
    // Removing an ACL that is not there is no error (as on ext4).
    sh(&format!("setfacl -k {m}/f && setfacl -x u:1000 {m}/f"));

    // Setting an ACL drops set-group-id unless the owner is in the group.
    sh(&format!("cd {m} && touch g h && chown 1000:4242 g && chown 1000:1000 h && chmod 2755 g h"));
    sh(&format!("{USER} setfacl -m u:0:r {m}/g {m}/h"));
    assert_eq!(mode(&v, "g"), 0o755, "not in group 4242: the bit goes");
    assert_eq!(mode(&v, "h"), 0o2755, "in group 1000: the bit stays");
    // Only the owner sets ACLs.
    let out = sh_output(&format!("{STRANGER} setfacl -m u:1001:rwx {m}/h"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"), "{out:?}");
    v.umount();
    v.mount_with("allow_other");
    assert_eq!(mode(&v, "f"), 0o751);
    assert_eq!(sh(&format!("getfacl -n -c {m}/h | grep user:")), "user::rwx\nuser:0:r--\n");
    v.umount();
}

#[test]
fn default_acls_are_inherited_instead_of_the_umask() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!("cd {m} && mkdir d && setfacl -d -m u:1000:rwx,g::rwx,o::r-x d"));
    assert_eq!(mode(&v, "d"), 0o755, "a default ACL leaves the directory's mode");
    sh(&format!("cd {m}/d && umask 077 && touch f && mkdir sub && mkfifo p && ln -s f l && mkdir sub/deeper"));
    assert_eq!(mode(&v, "d/f"), 0o664, "the default ACL, not the umask, masks the mode");
    assert_eq!(mode(&v, "d/sub"), 0o775);
    assert_eq!(mode(&v, "d/p"), 0o664);
    assert_eq!(
        sh(&format!("getfacl -n -c {m}/d/f")),
        "user::rw-\nuser:1000:rwx\t#effective:rw-\ngroup::rwx\t#effective:rw-\nmask::rw-\nother::r--\n\n"
    );
    let default_of = |p: &str| sh(&format!("getfacl -n -c -d {m}/{p}"));
    assert_eq!(default_of("d/sub"), default_of("d"), "subdirectories inherit the default ACL");
    assert_eq!(default_of("d/sub/deeper"), default_of("d"), "all the way down");
    assert_eq!(default_of("d/f"), "", "files do not");
    // Without a default ACL the umask applies.
    sh(&format!("cd {m} && umask 027 && touch plain && mkdir plaindir"));
    assert_eq!(mode(&v, "plain"), 0o640);
    assert_eq!(mode(&v, "plaindir"), 0o750);
    sh(&format!("setfacl -k {m}/d && cd {m}/d && umask 077 && touch after"));
    assert_eq!(mode(&v, "d/after"), 0o600, "removing the default ACL brings the umask back");
    v.umount();
}

/// `getfacl -R` of a tree, paths relative to it.
fn acls_of(dir: &str) -> String {
    sh(&format!("cd '{dir}' && getfacl -n -R -p . | grep -v '^# owner\\|^# group'"))
}

#[test]
fn cp_a_and_tar_keep_acls_across_a_remount() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let tar = v.dir.path().join("acl.tar");
    sh(&format!(
        r"cd {m} && mkdir -p src/a/b src/plain && cd src
for i in 1 2 3 4 5; do echo $i > a/f$i; echo $i > plain/p$i; done
setfacl -m u:1000:rw,g:4242:r a/f1 && setfacl -m u:1001:x,m::rx a/f2 && chmod 2750 a/f3
setfacl -m u:1000:rwx a && setfacl -d -m u:1000:rwx,g::r-x a/b && touch a/b/inherited
tar --acls --xattrs -cf {} .",
        tar.display()
    ));
    let src = format!("{m}/src");
    let want = acls_of(&src);
    assert!(want.contains("user:1000:rw-") && want.contains("default:user:1000:rwx"), "{want}");
    sh(&format!(
        "cp -a {m}/src {m}/copy && mkdir {m}/untar && tar --acls --xattrs -C {m}/untar -xpf {}",
        tar.display()
    ));
    assert_eq!(acls_of(&format!("{m}/copy")), want, "cp -a");
    assert_eq!(acls_of(&format!("{m}/untar")), want, "tar --acls");
    v.remount();
    assert_eq!(acls_of(&src), want);
    assert_eq!(acls_of(&format!("{m}/copy")), want, "cp -a, after a remount");
    assert_eq!(acls_of(&format!("{m}/untar")), want, "tar --acls, after a remount");
    v.umount();
}

/// Everything above in one script whose output must be the same on the
/// host's own file system, when it has ACLs (ext4, xfs, btrfs, tmpfs).
const SAME_AS_HOST: &str = r#"
umask 022
touch f; setfacl -m u:65534:r f; stat -c '%A' f; getfacl -n -c f
chmod 640 f; stat -c '%A' f; getfacl -n -c f
mkdir d; setfacl -d -m u:65534:rwx,g::rwx,o::r-x d; stat -c '%A' d; getfacl -n -c d
touch d/g; mkdir d/sub; mkfifo d/p; ln -s g d/l
stat -c '%n %A' d/g d/sub d/p; getfacl -n -c d/g d/sub d/p
setfacl -k f; setfacl -k d/g; setfacl -b f; getfacl -n -c f; stat -c '%A' f
setfacl -x u:65534 d/sub; getfacl -n -c d/sub; stat -c '%A' d/sub
setfacl -k d/sub; getfacl -n -c d/sub; setfacl -k d/sub
getfattr -d -m - f d d/g 2>&1 | grep -v '^$' | sed 's/=.*//'
chmod 2775 d; setfacl -m g:65534:rx d; stat -c '%A' d
echo hello > secret; chmod 600 secret; setfacl -m u:1000:r secret; U cat secret || true
setfacl -m u:1000:- secret; U cat secret || true
chmod 604 secret; U cat secret || true
setfacl -m m::- secret; getfacl -n -c secret; stat -c '%A' secret
"#;

#[test]
fn acls_behave_as_on_the_host_file_system() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let host = v.dir.path().join("host");
    std::fs::create_dir(&host).unwrap();
    let host = host.to_str().unwrap().to_string();
    if !sh_output(&format!("touch {host}/probe && setfacl -m u:1000:r {host}/probe")).status.success() {
        common::skip(&format!("the host file system under {host} has no POSIX ACLs"));
        return;
    }
    sh(&format!("rm {host}/probe && chmod 755 {host}"));
    v.mount_with("allow_other");
    sh(&format!("chmod 755 {}", v.m()));
    let run = |dir: &str| {
        let script = format!("U() {{ {USER} \"$@\"; }}\ncd {dir}\n{SAME_AS_HOST}");
        let out = sh_output(&script);
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        text.replace(dir, "DIR")
    };
    let (on_host, on_dualfs) = (run(&host), run(v.m()));
    assert!(on_host.contains("default:user:65534:rwx"), "{on_host}");
    assert_eq!(on_dualfs, on_host);
    v.umount();
}
