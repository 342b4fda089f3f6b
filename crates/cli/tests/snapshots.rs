//! Snapshots with real tools: made through the mount point, mounted
//! read-only beside the live volume (two at once) and read with cmp, tar
//! and sha256sum while the live volume changes under them; made, listed
//! and deleted on the unmounted volume too; space back after deletion.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;

use common::{TestVolume, dualfs, sh};
use serde_json::Value;

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "dualfs failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn list(target: &[&str]) -> Value {
    let mut args = vec!["snapshot", "list", "--json"];
    args.extend_from_slice(target);
    serde_json::from_str(&ok(&dualfs(&args))).unwrap()
}

/// A read-only mount of snapshot `name` at `dir/name`, unmounted on drop.
struct SnapMount(PathBuf);

impl SnapMount {
    fn new(v: &TestVolume, name: &str) -> SnapMount {
        let at = v.dir.path().join(name);
        std::fs::create_dir_all(&at).unwrap();
        ok(&dualfs(&[
            "mount",
            "-o",
            &format!("snapshot={name}"),
            v.meta.to_str().unwrap(),
            v.data.to_str().unwrap(),
            at.to_str().unwrap(),
        ]));
        SnapMount(at)
    }
    fn p(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for SnapMount {
    fn drop(&mut self) {
        let _ = dualfs(&["umount", self.p()]);
    }
}

#[test]
fn snapshots_mounted_beside_the_live_volume_do_not_change() {
    let Some(mut v) = TestVolume::create("512M") else { return };
    v.mount();
    let m = v.m().to_string();
    sh(&format!(
        "mkdir {m}/src && head -c 3000000 /dev/urandom > {m}/src/big && seq 1 20000 > {m}/src/list && cp -a \
         /usr/share/doc/coreutils {m}/src/doc 2>/dev/null || true; cd {m} && find src -type f | sort | xargs \
         sha256sum > {dir}/one.sums",
        dir = v.dir.path().display()
    ));
    ok(&dualfs(&["snapshot", "create", &m, "one"]));
    // The live volume changes: overwrite in place, append, delete, add.
    sh(&format!(
        "dd if=/dev/zero of={m}/src/big bs=4096 count=100 conv=notrunc status=none && echo more >> {m}/src/list \
         && rm -rf {m}/src/doc && echo new > {m}/src/new"
    ));
    ok(&dualfs(&["snapshot", "create", &m, "two"]));
    let one = SnapMount::new(&v, "one");
    let two = SnapMount::new(&v, "two");
    let dir = v.dir.path().display().to_string();
    sh(&format!("cd {} && sha256sum -c --quiet {dir}/one.sums", one.p()));
    // Read the snapshots while the live volume keeps changing.
    sh(&format!(
        "for i in 1 2 3; do dd if=/dev/urandom of={m}/src/big bs=1M count=2 conv=notrunc status=none; sync {m}; \
         (cd {o} && sha256sum -c --quiet {dir}/one.sums); done; cmp -n 409600 /dev/zero {t}/src/big; test \"$(cat \
         {t}/src/new)\" = new; test ! -e {t}/src/doc; tar -C {o} -cf - src | tar -tf - | grep -q src/list",
        o = one.p(),
        t = two.p()
    ));
    // Read-only, and deleting a mounted snapshot is refused.
    assert!(!dualfs(&["snapshot", "delete", &m, "one"]).status.success());
    assert!(sh(&format!("touch {}/x 2>&1 || echo refused", one.p())).contains("refused"));
    let l = list(&[&m]);
    assert_eq!(l.as_array().unwrap().len(), 3, "{l}");
    // The live tree first, with the data it reaches (the 3 MB file
    // rewritten in part: some of it its own, the rest shared).
    assert_eq!(l[0]["kind"], "live", "{l}");
    assert!(l[0]["data_only_bytes"].as_u64().unwrap() > 0, "{l}");
    assert!(l[0]["referenced_bytes"].as_u64().unwrap() >= 3_000_000, "{l}");
    assert_eq!(l[1]["name"], "one");
    assert!(l[1]["data_only_bytes"].as_u64().unwrap() > 0, "{l}");
    let n = |v: &Value| v.as_u64().unwrap();
    assert_eq!(n(&l[1]["referenced_bytes"]), n(&l[1]["data_only_bytes"]) + n(&l[1]["data_shared_bytes"]));
    let text = ok(&dualfs(&["snapshot", "list", &m]));
    assert!(text.contains("one") && text.contains("two") && text.contains("SHARED") && text.contains("live"), "{text}");
    let show = ok(&dualfs(&["snapshot", "show", &m, "two", "--json"]));
    assert!(show.contains("\"name\":\"two\""), "{show}");
    drop(one);
    drop(two);
    v.umount();
    // Unmounted: list, delete, make, and fsck checks every snapshot.
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    assert_eq!(list(&[&meta, &data]).as_array().unwrap().len(), 3);
    ok(&dualfs(&["snapshot", "delete", &meta, &data, "one"]));
    ok(&dualfs(&["snapshot", "create", &format!("{meta}#{data}"), "three"]));
    assert!(!dualfs(&["snapshot", "create", &meta, &data, "three"]).status.success());
    v.fsck();
    v.mount();
    let before_delete = v.usage().0;
    ok(&dualfs(&["snapshot", "delete", &m, "two"]));
    ok(&dualfs(&["snapshot", "delete", &m, "three"]));
    sh(&format!("sync {m}"));
    assert!(v.usage().0 < before_delete, "deleting snapshots gave nothing back");
    let l = list(&[&m]);
    assert!(l.as_array().unwrap().len() == 1 && l[0]["kind"] == "live", "{l}");
    v.umount();
}

#[test]
fn a_clone_is_a_tree_of_its_own_mounted_by_name() {
    let Some(mut v) = TestVolume::create("512M") else { return };
    v.mount();
    let m = v.m().to_string();
    let dir = v.dir.path().display().to_string();
    sh(&format!(
        "mkdir {m}/src && head -c 2000000 /dev/urandom > {m}/src/big && seq 1 20000 > {m}/src/list && cd {m} && \
         find src -type f | sort | xargs sha256sum > {dir}/base.sums"
    ));
    ok(&dualfs(&["snapshot", "create", &m, "base"]));
    ok(&dualfs(&["clone", &m, "base", "what-if"]));
    assert!(!dualfs(&["clone", &m, "base", "what-if"]).status.success(), "a taken name");
    assert!(!dualfs(&["clone", &m, "nope", "x"]).status.success(), "no such snapshot");
    // main goes on changing after the clone was made.
    sh(&format!(
        "echo main > {m}/src/only-main && dd if=/dev/zero of={m}/src/big bs=4096 count=10 conv=notrunc status=none"
    ));
    sh(&format!("cd {m} && find src -type f | sort | xargs sha256sum > {dir}/main.sums"));
    let text = ok(&dualfs(&["snapshot", "list", &m]));
    assert!(text.contains("what-if") && text.contains("clone") && text.contains("snapshot"), "{text}");
    v.umount();

    // Mounted by name, the clone is the snapshot as it was, and writable.
    v.mount_with("clone=what-if");
    sh(&format!("cd {m} && sha256sum -c --quiet {dir}/base.sums && test ! -e src/only-main"));
    sh(&format!("echo clone > {m}/src/only-clone && rm {m}/src/list && head -c 100000 /dev/urandom >> {m}/src/big"));
    sh(&format!("cd {m} && find src -type f | sort | xargs sha256sum > {dir}/clone.sums"));
    let text = ok(&dualfs(&["snapshot", "list", &m]));
    assert!(text.contains("live tree: what-if") && text.contains("main"), "{text}");
    // A writable tree is not mounted as a snapshot.
    let at = v.dir.path().join("ro");
    std::fs::create_dir_all(&at).unwrap();
    let out = dualfs(&[
        "mount",
        "-o",
        "snapshot=main",
        v.meta.to_str().unwrap(),
        v.data.to_str().unwrap(),
        at.to_str().unwrap(),
    ]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("clone=main"), "{out:?}");
    v.umount();

    // Back on main: as it was left; then the clone again: as it was left.
    v.mount_with("clone=main");
    sh(&format!("cd {m} && sha256sum -c --quiet {dir}/main.sums && test ! -e src/only-clone"));
    v.umount();
    v.mount_with("clone=what-if");
    sh(&format!("cd {m} && sha256sum -c --quiet {dir}/clone.sums && test ! -e src/list"));
    // The clone depends on nothing: its snapshot and the old tree go.
    ok(&dualfs(&["snapshot", "delete", &m, "base"]));
    ok(&dualfs(&["snapshot", "delete", &m, "main"]));
    assert!(!dualfs(&["snapshot", "delete", &m, "what-if"]).status.success(), "the live tree");
    v.umount();
    v.mount();
    sh(&format!("cd {m} && sha256sum -c --quiet {dir}/clone.sums"));
    v.umount();
}
