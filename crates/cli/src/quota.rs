//! `dualfs quota`: user, group and project quotas in the shape of
//! setquota(8) and repquota(8) (and `xfs_quota -x -c report`), which cannot
//! work on a FUSE mount: the kernel's quotactl(2) never reaches one. A
//! mounted volume is reached through its `dualfs.quota` control attribute,
//! an unmounted one opened here; both run the same request.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::Volume;
use dualfs_engine::volume::MountOptions;
use dualfs_engine::volume::quota::{Kind, QuotaLimits};
use dualfs_fuse::control::{QUOTA, QuotaRequest, quota_json};
use rustix::fs::XattrFlags;
use serde_json::Value;

use crate::args::{QuotaAction, QuotaArgs, QuotaKindArg, QuotaWho};
use crate::devices::{Access, open_volume, split_source};

/// Where the volume is: a mount point, or its two devices.
enum Target {
    Mounted(PathBuf),
    Devices(PathBuf, PathBuf),
}

fn target(t: &[PathBuf]) -> Result<Target> {
    match t {
        [dir] if dir.is_dir() => Ok(Target::Mounted(dir.clone())),
        [one] => {
            let (m, d) = split_source(&one.to_string_lossy(), None)?;
            Ok(Target::Devices(m, d))
        }
        [m, d] => Ok(Target::Devices(m.clone(), d.clone())),
        _ => bail!("give the volume as a mount point, META DATA or META#DATA"),
    }
}

fn offline<R>(meta: &Path, data: &Path, read_only: bool, f: impl FnOnce(&Volume) -> Result<R>) -> Result<R> {
    let access = if read_only { Access::ExclusiveReadOnly } else { Access::Exclusive };
    let vol = open_volume(meta, data, access, MountOptions { read_only, ..MountOptions::default() })?;
    let r = f(&vol)?;
    vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))?;
    Ok(r)
}

fn apply(t: &Target, req: QuotaRequest) -> Result<()> {
    match t {
        Target::Mounted(root) => rustix::fs::setxattr(root, QUOTA, req.to_string().as_bytes(), XattrFlags::empty())
            .map_err(|e| match e {
                rustix::io::Errno::PERM => anyhow!("{}: only root or the user who mounted it may", root.display()),
                rustix::io::Errno::NODATA | rustix::io::Errno::OPNOTSUPP => {
                    anyhow!("{} is not a mounted DualFS volume (or one too old for quotas)", root.display())
                }
                e => anyhow!("{}: {}", root.display(), std::io::Error::from(e)),
            }),
        Target::Devices(m, d) => offline(m, d, false, |vol| req.apply(vol).map_err(|e| anyhow!("{e}"))),
    }
}

fn report_json(t: &Target) -> Result<Value> {
    match t {
        Target::Mounted(root) => {
            let mut buf = vec![0; 1 << 20];
            let n = rustix::fs::getxattr(root, QUOTA, &mut buf)
                .map_err(|e| anyhow!("{}: {}", root.display(), std::io::Error::from(e)))?;
            serde_json::from_slice(&buf[..n]).context("the volume's answer is not JSON")
        }
        Target::Devices(m, d) => offline(m, d, true, |vol| Ok(quota_json(vol))),
    }
}

/// An id from a name or a number: users and groups as the system names
/// them, projects from /etc/projid (`name:id` lines).
fn resolve(kind: Kind, name: &str) -> Result<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let found = match kind {
        Kind::User => nix::unistd::User::from_name(name).ok().flatten().map(|u| u.uid.as_raw()),
        Kind::Group => nix::unistd::Group::from_name(name).ok().flatten().map(|g| g.gid.as_raw()),
        Kind::Project => projects().into_iter().find(|(n, _)| n == name).map(|(_, id)| id),
    };
    found.ok_or_else(|| anyhow!("no {} named {name}", kind.name()))
}

fn projects() -> Vec<(String, u32)> {
    let text = std::fs::read_to_string("/etc/projid").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (n, id) = l.split_once(':')?;
            Some((n.to_string(), id.trim().parse().ok()?))
        })
        .collect()
}

fn name_of(kind: Kind, id: u32) -> String {
    let name = match kind {
        Kind::User => nix::unistd::User::from_uid(id.into()).ok().flatten().map(|u| u.name),
        Kind::Group => nix::unistd::Group::from_gid(id.into()).ok().flatten().map(|g| g.name),
        Kind::Project => projects().into_iter().find(|(_, i)| *i == id).map(|(n, _)| n),
    };
    name.unwrap_or_else(|| format!("#{id}"))
}

/// A block limit as setquota takes it: KiB, or a size with a unit; in
/// blocks of 4 KiB, rounded up.
fn blocks(s: &str) -> Result<u64> {
    let bytes = if s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<u64>().ok().and_then(|k| k.checked_mul(1024))
    } else {
        crate::args::parse_size(s).ok()
    };
    let bytes = bytes.ok_or_else(|| anyhow!("'{s}' is not a size (KiB, or with a unit: 512M, 2G)"))?;
    Ok(bytes.div_ceil(4096))
}

/// Seconds, or a number with s, m, h, d or w.
fn seconds(s: &str) -> Result<u64> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| anyhow!("'{s}' is not a time"))?;
    let mul = match unit {
        "" | "s" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" | "days" => 86_400,
        "w" => 604_800,
        _ => bail!("'{s}' is not a time (seconds, or 90m, 12h, 7d)"),
    };
    n.checked_mul(mul).ok_or_else(|| anyhow!("'{s}' is too long"))
}

fn who(w: &QuotaWho) -> Result<(Kind, u32)> {
    let (kind, name) = match (&w.user, &w.group, &w.project) {
        (Some(u), _, _) => (Kind::User, u),
        (_, Some(g), _) => (Kind::Group, g),
        (_, _, Some(p)) => (Kind::Project, p),
        _ => bail!("say whose limits: -u USER, -g GROUP or -p PROJECT"),
    };
    Ok((kind, resolve(kind, name)?))
}

fn kind(k: &QuotaKindArg) -> Kind {
    if k.user {
        Kind::User
    } else if k.group {
        Kind::Group
    } else {
        Kind::Project
    }
}

fn human_time(secs: u64) -> String {
    match secs {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{}days", s / 86_400),
        s if s >= 3600 => format!("{:02}:{:02}", s / 3600, s % 3600 / 60),
        s => format!("{s}s"),
    }
}

fn size(kib: u64, human: bool) -> String {
    if !human {
        return kib.to_string();
    }
    match kib {
        k if k >= 1 << 30 => format!("{:.1}T", k as f64 / f64::from(1u32 << 30)),
        k if k >= 1 << 20 => format!("{:.1}G", k as f64 / f64::from(1u32 << 20)),
        k if k >= 1 << 10 => format!("{:.1}M", k as f64 / 1024.0),
        k => format!("{k}K"),
    }
}

/// What is left of a grace time ending at `end`, as repquota prints it.
fn grace_left(end: u64, now: u64) -> String {
    match end {
        0 => String::new(),
        e if e <= now => "none".to_string(),
        e => human_time(e - now),
    }
}

fn print_report(v: &Value, kinds: &[Kind], human: bool, name: &str) -> Result<()> {
    if v["on"] != Value::Bool(true) {
        bail!("quotas are off on {name}: turn them on with dualfs quota on");
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let num = |r: &Value, k: &str| r[k].as_u64().unwrap_or(0);
    // Without root the volume answers only the caller's own rows, as
    // quota(1) shows them; projects need root.
    let own = v.get("only").is_some();
    if own {
        let uid = u32::try_from(num(&v["only"], "uid")).unwrap_or(u32::MAX);
        say!("Quotas of user {} (uid {uid}) and of its groups on {name}; others' need root", name_of(Kind::User, uid));
    }
    for &kind in kinds.iter().filter(|k| !(own && **k == Kind::Project)) {
        let g = &v["grace"][kind.name()];
        say!("*** Report for {} quotas on {name}", kind.name());
        say!("Block grace time: {}; Inode grace time: {}", human_time(num(g, "blocks")), human_time(num(g, "inodes")));
        say!("{:>33}{:>28}", "Block limits", "File limits");
        let title = match kind {
            Kind::User => "User",
            Kind::Group => "Group",
            Kind::Project => "Project",
        };
        say!("{title:<16}      used    soft    hard  grace    used  soft  hard  grace");
        say!("{}", "-".repeat(78));
        let rows = v["rows"].as_array().map(Vec::as_slice).unwrap_or_default();
        for r in rows.iter().filter(|r| r["kind"] == kind.name()) {
            let id = u32::try_from(num(r, "id")).unwrap_or(u32::MAX);
            let over = |used: u64, soft: u64, hard: u64| {
                if (soft != 0 && used > soft) || (hard != 0 && used > hard) { '+' } else { '-' }
            };
            let (b, bs, bh) = (num(r, "blocks"), num(r, "block_soft"), num(r, "block_hard"));
            let (i, is, ih) = (num(r, "inodes"), num(r, "inode_soft"), num(r, "inode_hard"));
            say!(
                "{:<16}{}{} {:>8} {:>7} {:>7} {:>6} {:>7} {:>5} {:>5} {:>6}",
                name_of(kind, id),
                over(b, bs, bh),
                over(i, is, ih),
                size(b * 4, human),
                size(bs * 4, human),
                size(bh * 4, human),
                grace_left(num(r, "block_grace_end"), now),
                i,
                is,
                ih,
                grace_left(num(r, "inode_grace_end"), now)
            );
        }
        say!("");
    }
    Ok(())
}

/// Runs `dualfs quota`.
///
/// # Errors
/// The volume cannot be reached or opened, or refuses the change.
pub fn run(args: &QuotaArgs) -> Result<()> {
    match &args.action {
        QuotaAction::On { target: t } => apply(&target(t)?, QuotaRequest::On),
        QuotaAction::Set { who: w, block_soft, block_hard, inode_soft, inode_hard, target: t } => {
            let (kind, id) = who(w)?;
            if id == 0 {
                bail!("id 0 (root, the root group, no project) is never limited");
            }
            let limits = QuotaLimits {
                block_soft: blocks(block_soft)?,
                block_hard: blocks(block_hard)?,
                inode_soft: *inode_soft,
                inode_hard: *inode_hard,
            };
            apply(&target(t)?, QuotaRequest::Set(kind, id, limits))
        }
        QuotaAction::Grace { kind: k, block_grace, inode_grace, target: t } => {
            apply(&target(t)?, QuotaRequest::Grace(kind(k), seconds(block_grace)?, seconds(inode_grace)?))
        }
        QuotaAction::Report { user, group, project, human, json, target: t, .. } => {
            let v = report_json(&target(t)?)?;
            if *json {
                say!("{v}");
                return Ok(());
            }
            let mut kinds: Vec<Kind> = [(*user, Kind::User), (*group, Kind::Group), (*project, Kind::Project)]
                .into_iter()
                .filter_map(|(on, k)| on.then_some(k))
                .collect();
            if kinds.is_empty() {
                kinds = Kind::ALL.to_vec();
            }
            let name = t.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ");
            print_report(&v, &kinds, *human, &name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_times_read_as_setquota_takes_them() {
        assert_eq!(blocks("1024").unwrap(), 256);
        assert_eq!(blocks("1M").unwrap(), 256);
        assert_eq!(blocks("1").unwrap(), 1);
        assert!(blocks("lots").is_err());
        assert_eq!(seconds("90m").unwrap(), 5400);
        assert_eq!(seconds("7d").unwrap(), 604_800);
        assert!(seconds("7y").is_err());
        assert_eq!(grace_left(0, 5), "");
        assert_eq!(grace_left(5, 5), "none");
        assert_eq!(grace_left(86_400 * 2 + 5, 5), "2days");
    }
}
