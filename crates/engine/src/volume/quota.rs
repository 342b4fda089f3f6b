//! User, group and project quotas (DESIGN.md, "Quotas"): turning them on,
//! setting limits and grace times, reporting, and checking that the usage
//! kept equals the usage counted from the inodes (invariant Q1).

use super::{Volume, lock};
use crate::error::{Error, Result};
use crate::format::quota::{Limits, QuotaEntry, QuotaKind, QuotaTable};
use crate::format::superblock::{FORMAT_MINOR_QUOTA, INCOMPAT_QUOTA};
use crate::meta_log::quota_usage::Used;
use crate::meta_log::segments::OpKind;

pub use crate::format::quota::{DEFAULT_GRACE_SECS, Limits as QuotaLimits, QuotaKind as Kind};
pub use crate::meta_log::quota_usage::Used as QuotaUsed;

/// One line of a report: an id with usage or limits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct QuotaRow {
    /// User, group or project.
    pub kind: QuotaKind,
    /// The id.
    pub id: u32,
    /// What it uses (blocks of 4 KiB, inodes).
    pub used: Used,
    /// Its limits and grace times.
    pub entry: QuotaEntry,
}

/// What `dualfs quota report` shows.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct QuotaReport {
    /// Block and inode grace times per kind (user, group, project), seconds.
    pub grace: [(u64, u64); 3],
    /// Every id with usage or limits, by kind and id.
    pub rows: Vec<QuotaRow>,
}

impl Volume {
    /// Whether the volume keeps quotas.
    #[must_use]
    pub fn quotas_on(&self) -> bool {
        lock(&self.fs).log.superblock().incompat & INCOMPAT_QUOTA != 0
    }

    /// Reads the limits and counts usage from every inode, on a volume
    /// that keeps quotas (at open, and when another tree becomes live).
    ///
    /// # Errors
    /// The record does not decode; an inode cannot be read.
    pub(super) fn start_quotas(&self) -> Result<()> {
        let mut fs = lock(&self.fs);
        if fs.log.superblock().incompat & INCOMPAT_QUOTA == 0 {
            return Ok(());
        }
        fs.load_quota_table()?;
        let usage = fs.log.count_quota_usage()?;
        fs.log.set_quota_usage(Some(usage));
        Ok(())
    }

    /// Turns quotas on (format 1.9, [`INCOMPAT_QUOTA`]): marks the volume,
    /// counts usage once and writes an empty record. Nothing is limited
    /// until [`Volume::set_quota`]. Already on: nothing changes.
    ///
    /// # Errors
    /// Read-only; a device fails.
    pub fn enable_quotas(&self) -> Result<()> {
        self.check_writable()?;
        if self.quotas_on() && lock(&self.fs).quota_table().is_some() {
            return Ok(());
        }
        {
            let _commit = super::lock(&self.commit);
            self.mark_features(INCOMPAT_QUOTA, FORMAT_MINOR_QUOTA)?;
        }
        self.start_quotas()?;
        self.mutate(OpKind::Grow, |fs, _| {
            let table = fs.quota_table().cloned().unwrap_or_default();
            fs.store_quota_table(table)
        })?;
        self.sync()
    }

    fn quota_table_or_refuse(&self) -> Result<QuotaTable> {
        lock(&self.fs).quota_table().cloned().ok_or(Error::Invalid("quotas are off on this volume: turn them on first"))
    }

    /// Sets the limits of `kind`/`id` (all zero: no limits), durably.
    /// A grace time already running keeps running.
    ///
    /// # Errors
    /// `Invalid` with quotas off, for id 0 or a full record; a device fails.
    pub fn set_quota(&self, kind: QuotaKind, id: u32, limits: Limits) -> Result<()> {
        self.check_writable()?;
        self.quota_table_or_refuse()?;
        self.mutate(OpKind::Grow, |fs, _| {
            let old = fs.quota_table().and_then(|t| t.entries.get(&(kind, id)).copied()).unwrap_or_default();
            let entry = QuotaEntry { limits, ..old };
            fs.set_quota_limits(kind, id, entry)
        })?;
        // A grace time starts with the next change, past the soft limit.
        self.sync()
    }

    /// Sets the block and inode grace times of `kind`, in seconds, durably;
    /// grace times already running keep their end.
    ///
    /// # Errors
    /// `Invalid` with quotas off; a device fails.
    pub fn set_quota_grace(&self, kind: QuotaKind, block_secs: u64, inode_secs: u64) -> Result<()> {
        self.check_writable()?;
        self.quota_table_or_refuse()?;
        self.mutate(OpKind::Grow, |fs, _| {
            let mut table = fs.quota_table().cloned().unwrap_or_default();
            table.grace[kind.code() as usize] = (block_secs, inode_secs);
            fs.store_quota_table(table)
        })?;
        self.sync()
    }

    /// Usage, limits and grace times of every id that has any.
    ///
    /// # Errors
    /// `Invalid` with quotas off.
    pub fn quota_report(&self) -> Result<QuotaReport> {
        let table = self.quota_table_or_refuse()?;
        let fs = lock(&self.fs);
        let usage = fs.log.quota_usage().map(|u| u.all()).unwrap_or_default();
        let mut rows: std::collections::BTreeMap<(QuotaKind, u32), QuotaRow> = usage
            .into_iter()
            .map(|((kind, id), used)| ((kind, id), QuotaRow { kind, id, used, entry: QuotaEntry::default() }))
            .collect();
        for (&(kind, id), e) in &table.entries {
            rows.entry((kind, id)).or_insert(QuotaRow { kind, id, used: Used::default(), entry: *e }).entry = *e;
        }
        Ok(QuotaReport { grace: table.grace, rows: rows.into_values().collect() })
    }

    /// Whether file `ino` is charged to an id whose block limit (soft or
    /// hard) is within `window` blocks of its usage: the adapter then
    /// opens it for writing without the kernel's cache, so that write(2)
    /// gets EDQUOT itself (DESIGN.md, "Quotas").
    #[must_use]
    pub fn quota_near_limit(&self, ino: crate::types::InodeNo, window: u64) -> bool {
        let mut fs = lock(&self.fs);
        let Some(table) = fs.quota_table() else { return false };
        if table.entries.is_empty() {
            return false;
        }
        let table = table.clone();
        let Ok(rec) = fs.inode(ino) else { return false };
        let ids = crate::namespace::quota::ids_of(rec.uid, rec.gid, rec.project);
        ids.into_iter().filter(|&(_, id)| id != 0).any(|(kind, id)| {
            let Some(e) = table.entries.get(&(kind, id)) else { return false };
            // Allocated, and every reserved block as if it were this id's
            // (a bound: an open must not walk the dirty files).
            let allocated = fs.log.quota_usage().map_or(0, |u| u.get(kind, id).blocks);
            let used = allocated.saturating_add(fs.log.space().reserved()).saturating_add(window);
            [e.limits.block_soft, e.limits.block_hard].into_iter().any(|l| l != 0 && used > l)
        })
    }

    /// Invariant Q1: the usage kept equals the usage counted again from
    /// every inode in use. Returns one sentence per id that differs (empty:
    /// it holds). Reads the whole inode map: for tests and checks.
    ///
    /// # Errors
    /// An inode cannot be read.
    pub fn verify_quota_usage(&self) -> Result<Vec<String>> {
        let mut fs = lock(&self.fs);
        let Some(kept) = fs.log.quota_usage().cloned() else { return Ok(Vec::new()) };
        let counted = fs.log.count_quota_usage()?;
        let mut out = Vec::new();
        if kept.underflowed() {
            out.push("a usage count went below zero".to_string());
        }
        let mut keys: Vec<_> = kept.all().into_iter().map(|(k, _)| k).collect();
        keys.extend(counted.all().into_iter().map(|(k, _)| k));
        keys.sort_unstable();
        keys.dedup();
        for (kind, id) in keys {
            let (k, c) = (kept.get(kind, id), counted.get(kind, id));
            if k != c {
                out.push(format!(
                    "{} {id}: kept {} blocks and {} inodes, the inodes hold {} blocks and {} inodes",
                    kind.name(),
                    k.blocks,
                    k.inodes,
                    c.blocks,
                    c.inodes
                ));
            }
        }
        Ok(out)
    }
}
