//! `dualfs migrate` with real tools: move the meta-data device, then the
//! data device, of a mounted volume while a file is appended to and
//! another read; every md5 stays; the new pair mounts after the unmount,
//! and the old devices are refused with it in plain words. An unmounted
//! volume migrates the same way; a new device too small, or the one in
//! use, is refused.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use common::{TestVolume, dualfs, sh};

fn run(args: &[&str]) -> (bool, String) {
    let out = dualfs(args);
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn sums(m: &str) -> String {
    sh(&format!("cd {m} && find . -type f ! -name log | sort | xargs md5sum"))
}

#[test]
fn a_mounted_volume_moves_both_devices_while_files_are_written_and_read() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!(
        "cd {m} && head -c 40M /dev/urandom > big && for d in $(seq 1 10); do mkdir d$d && \
         head -c $((d * 200000)) /dev/urandom > d$d/f && seq 1 $((d * 700)) > d$d/list; done && sync"
    ));
    let before = sums(&m);
    let dir = v.dir.path().to_path_buf();
    let (new_meta, new_data) = (dir.join("new-meta.img"), dir.join("new-data.img"));
    let (old_meta, old_data) = (v.meta.clone(), v.data.clone());
    // The same size, and larger: the volume keeps its size either way.
    sh(&format!("truncate -s $(stat -c %s {}) {}", old_meta.display(), new_meta.display()));
    sh(&format!("truncate -s 200M {}", new_data.display()));
    let df = || sh(&format!("df -B4096 --output=size '{m}' | tail -n 1"));
    let size = df();
    // A writer appending and a reader reading through both migrations.
    let mut busy = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "for i in $(seq 1 400); do echo line $i >> {m}/log; cat {m}/d7/f > /dev/null; \
             [ $((i % 50)) = 0 ] && sync {m}/log; done"
        ))
        .spawn()
        .unwrap();
    let (ok, out) = run(&["migrate", "--meta", new_meta.to_str().unwrap(), &m]);
    assert!(ok && out.contains("migrated the meta-data device to") && out.contains("copied"), "{out}");
    let (ok, out) = run(&["migrate", "--data", new_data.to_str().unwrap(), &m, "--json"]);
    assert!(busy.wait().unwrap().success());
    assert!(ok, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(report["result"]["copied_blocks"].as_u64().unwrap() >= 40 << 8, "{report}");
    assert_eq!(sums(&m), before);
    assert_eq!(sh(&format!("wc -l < {m}/log")).trim(), "400");
    assert_eq!(df(), size, "a migration keeps the volume's size");
    // The device in use is refused, and so is a second move onto it.
    let (ok, out) = run(&["migrate", "--data", new_data.to_str().unwrap(), &m]);
    assert!(!ok && out.contains("is in use"), "{out}");
    let log_sum = sh(&format!("md5sum < {m}/log"));
    v.meta = new_meta.clone();
    v.data = new_data.clone();
    // Unmounts and checks the new pair with fsck.
    v.umount();
    for (meta, data) in [(&old_meta, &new_data), (&new_meta, &old_data), (&old_meta, &old_data)] {
        let (ok, out) = run(&["mount", meta.to_str().unwrap(), data.to_str().unwrap(), &m]);
        assert!(!ok && out.contains("not a pair") && out.contains("dualfs migrate"), "{out}");
    }
    v.mount();
    assert_eq!(sums(&m), before);
    assert_eq!(sh(&format!("md5sum < {m}/log")), log_sum);
    v.umount();
}

#[test]
fn an_unmounted_volume_migrates_and_a_small_device_is_refused() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!("cd {m} && head -c 5M /dev/urandom > a && seq 1 100000 > b"));
    let before = sums(&m);
    v.umount();
    let dir = v.dir.path().to_path_buf();
    let small = dir.join("small.img");
    sh(&format!("truncate -s 8M {}", small.display()));
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let (ok, out) = run(&["migrate", "--data", small.to_str().unwrap(), &meta, &data]);
    assert!(!ok && out.contains("holds 8 MiB") && out.contains("at least that large"), "{out}");
    let (ok, out) = run(&["migrate", "--meta", &data, &meta, &data]);
    assert!(!ok && out.contains("is the volume's data device"), "{out}");
    let (ok, out) = run(&["migrate", "--meta", "/nonexistent/x.img", &meta, &data]);
    assert!(!ok && out.contains("/nonexistent/x.img"), "{out}");
    v.fsck();
    let new = dir.join("moved-meta.img");
    sh(&format!("truncate -s 64M {}", new.display()));
    let (ok, out) = run(&["migrate", "--meta", new.to_str().unwrap(), &meta, &data]);
    assert!(ok && out.contains("the volume is now") && out.contains("moved-meta.img"), "{out}");
    v.meta = new;
    v.fsck();
    v.mount();
    assert_eq!(sums(&m), before);
    v.umount();
}
