//! `dualfs probe`: what blkid would say of DualFS devices (blkid itself
//! does not know the format, so fstab's tags and udev's by-uuid links need
//! this).

use std::fmt::Write as _;

use anyhow::Result;
use dualfs_engine::format::superblock::{Role, Superblock};
use dualfs_engine::types::BLOCK_BYTES;
use serde_json::{Value, json};

use crate::args::ProbeArgs;
use crate::exit::Exit;
use crate::find::{Probed, block_devices, probe};
use crate::words::uuid;

/// blkid's exit status when nothing was identified.
const EXIT_NOTHING: i32 = 2;

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Meta => "meta",
        Role::Data => "data",
    }
}

/// The properties of one DualFS device, in blkid's order.
fn properties(sb: &Superblock) -> Vec<(&'static str, String)> {
    let own = match sb.role {
        Role::Meta => sb.meta_uuid,
        Role::Data => sb.data_uuid,
    };
    let mut p = vec![("UUID", uuid(&sb.volume_uuid)), ("UUID_SUB", uuid(&own))];
    if !sb.label_str().is_empty() {
        p.push(("LABEL", sb.label_str()));
    }
    p.push(("BLOCK_SIZE", BLOCK_BYTES.to_string()));
    p.push(("TYPE", "dualfs".to_string()));
    p.push(("ROLE", role_name(sb.role).to_string()));
    p
}

/// A value as blkid quotes it: `"` and `\` escaped.
fn quoted(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// udev's `_ENC` form: bytes outside `[A-Za-z0-9#+-.:=@_]` as `\xHH`.
fn udev_encoded(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"#+-.:=@_".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect()
}

fn line(path: &std::path::Path, sb: &Superblock) -> String {
    let fields: Vec<String> = properties(sb).into_iter().map(|(k, v)| format!("{k}={}", quoted(&v))).collect();
    format!("{}: {}", path.display(), fields.join(" "))
}

fn export(path: &std::path::Path, sb: &Superblock) -> String {
    let mut o = format!("DEVNAME={}\n", path.display());
    for (k, v) in properties(sb) {
        let _ = writeln!(o, "{k}={v}");
    }
    o
}

fn udev(sb: &Superblock) -> String {
    let mut o = String::new();
    let volume = uuid(&sb.volume_uuid);
    let own = uuid(&match sb.role {
        Role::Meta => sb.meta_uuid,
        Role::Data => sb.data_uuid,
    });
    let _ = writeln!(o, "ID_FS_UUID={volume}\nID_FS_UUID_ENC={}", udev_encoded(&volume));
    let _ = writeln!(o, "ID_FS_UUID_SUB={own}\nID_FS_UUID_SUB_ENC={}", udev_encoded(&own));
    if !sb.label_str().is_empty() {
        let _ = writeln!(o, "ID_FS_LABEL={}\nID_FS_LABEL_ENC={}", sb.label_str(), udev_encoded(&sb.label_str()));
    }
    let _ = writeln!(o, "ID_FS_TYPE=dualfs\nID_FS_USAGE=filesystem\nID_FS_DUALFS_ROLE={}", role_name(sb.role));
    o
}

fn json_of(path: &std::path::Path, sb: &Superblock) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("device".into(), json!(path.display().to_string()));
    for (k, v) in properties(sb) {
        m.insert(k.to_lowercase(), json!(v));
    }
    Value::Object(m)
}

/// Runs `dualfs probe`.
///
/// # Errors
/// `Exit(2)` when no DualFS device was found (blkid's status), after
/// saying why for every device named.
pub fn run(args: &ProbeArgs) -> Result<()> {
    let named = !args.devices.is_empty();
    let devices = if named { args.devices.clone() } else { block_devices() };
    let mut found = Vec::new();
    for d in devices {
        match probe(&d) {
            Ok(Probed::DualFs(sb)) => found.push((d, *sb)),
            Ok(Probed::Damaged(why)) if named => {
                eprintln!("dualfs: {}: a damaged DualFS superblock: {why}", d.display())
            }
            Ok(Probed::Other) if named => eprintln!("dualfs: {}: not a DualFS device", d.display()),
            Err(e) if named => eprintln!("dualfs: {e:#}"),
            // Scanning: devices that cannot be read (an empty loop device)
            // or hold something else are not ours to report.
            _ => {}
        }
    }
    if args.json {
        let list: Vec<Value> = found.iter().map(|(p, sb)| json_of(p, sb)).collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else if args.udev {
        for (_, sb) in &found {
            print!("{}", udev(sb));
        }
    } else if args.export {
        let blocks: Vec<String> = found.iter().map(|(p, sb)| export(p, sb)).collect();
        print!("{}", blocks.join("\n"));
    } else {
        for (p, sb) in &found {
            println!("{}", line(p, sb));
        }
    }
    if found.is_empty() { Err(Exit(EXIT_NOTHING).into()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_and_encoded_as_blkid_and_udev_do() {
        assert_eq!(quoted(r#"my "disk""#), r#""my \"disk\"""#);
        assert_eq!(udev_encoded("my disk/1"), "my\\x20disk\\x2f1");
        assert_eq!(udev_encoded("2ad5-84"), "2ad5-84");
    }
}
