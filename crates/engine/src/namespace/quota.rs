//! Quota limits and their enforcement: the record of limits and grace
//! times lives in the root directory's `dualfs.quota` attribute (so it is
//! logged, cleaned, snapshotted and recovered like any other meta-data),
//! the usage in the meta log's cache ([`crate::meta_log::quota_usage`]).
//! A change that would pass a hard limit, or a soft one whose grace time
//! ran out, is refused with `QuotaExceeded` (EDQUOT). Id 0 (root, the root
//! group, no project) is never limited, as XFS's default entry.

use super::Fs;
use crate::error::{Error, Result};
use crate::format::inode::InodeRecord;
use crate::format::quota::{QUOTA_XATTR, QuotaEntry, QuotaKind, QuotaTable};
use crate::meta_log::quota_usage::Used;
use crate::namespace::xattr::SetMode;
use crate::types::{InodeNo, Timestamp};

/// What a change adds to one id: blocks and inodes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Adding {
    /// Data blocks.
    pub blocks: u64,
    /// Inodes.
    pub inodes: u64,
}

/// The ids an inode is charged to.
#[must_use]
pub fn ids_of(uid: u32, gid: u32, project: u32) -> [(QuotaKind, u32); 3] {
    [(QuotaKind::User, uid), (QuotaKind::Group, gid), (QuotaKind::Project, project)]
}

/// Whether `used + more` may be reached under `soft`/`hard` with the grace
/// time ending at `*end` (`grace` long, once it starts at `now`). Starts or
/// stops the grace time; returns whether `*end` changed.
fn judge(used: u64, more: u64, soft: u64, hard: u64, end: &mut u64, grace: u64, now: u64) -> Result<bool> {
    let after = used.saturating_add(more);
    if more > 0 && hard != 0 && after > hard {
        return Err(Error::QuotaExceeded);
    }
    if soft != 0 && after > soft {
        if *end == 0 {
            *end = now.saturating_add(grace);
            return Ok(true);
        }
        if more > 0 && now >= *end {
            return Err(Error::QuotaExceeded);
        }
        return Ok(false);
    }
    // At or under the soft limit: no grace time runs.
    let changed = *end != 0;
    *end = 0;
    Ok(changed)
}

impl Fs {
    /// Reads the quota record from the root directory (an empty one when
    /// the attribute is not there yet) and keeps it.
    ///
    /// # Errors
    /// The attribute cannot be read or does not decode.
    pub fn load_quota_table(&mut self) -> Result<()> {
        let table = match self.xattr_get(InodeNo::ROOT, QUOTA_XATTR) {
            Ok(v) => QuotaTable::decode(&v).map_err(|e| Error::corrupt_meta("quota record", 0, e.0))?,
            Err(Error::NoXattr) => QuotaTable::default(),
            Err(e) => return Err(e),
        };
        self.quota = Some(table);
        Ok(())
    }

    /// The quota record kept (None: the volume keeps no quotas).
    #[must_use]
    pub fn quota_table(&self) -> Option<&QuotaTable> {
        self.quota.as_ref()
    }

    /// Replaces the quota record and logs it with the current operation.
    ///
    /// # Errors
    /// The root's attributes cannot be written.
    pub fn store_quota_table(&mut self, table: QuotaTable) -> Result<()> {
        self.xattr_set(InodeNo::ROOT, QUOTA_XATTR, &table.encode(), SetMode::Any)?;
        self.quota = Some(table);
        Ok(())
    }

    /// What `kind`/`id` uses, blocks reserved for dirty pages of its files
    /// included (they are allocated at write-back, and the write that made
    /// them is the one to refuse).
    pub fn used_now(&mut self, kind: QuotaKind, id: u32) -> Used {
        let Some(usage) = self.log.quota_usage() else { return Used::default() };
        let mut used = usage.get(kind, id);
        let reserved: Vec<(InodeNo, u64)> = self.pages.reserved.iter().map(|(i, n)| (*i, *n)).collect();
        for (ino, n) in reserved {
            if let Ok(rec) = self.log.inode(ino)
                && ids_of(rec.uid, rec.gid, rec.project).contains(&(kind, id))
            {
                used.blocks += n;
            }
        }
        used
    }

    /// Refuses with `QuotaExceeded` when adding `add` to each of `ids`
    /// would pass a limit; starts and stops grace times on the way (the
    /// record is logged with the operation when one changed).
    ///
    /// # Errors
    /// `QuotaExceeded`; the record cannot be written.
    pub fn quota_allows(&mut self, ids: [(QuotaKind, u32); 3], add: Adding, now: Timestamp) -> Result<()> {
        let Some(table) = &self.quota else { return Ok(()) };
        let now = u64::try_from(now.sec).unwrap_or(0);
        let limited: Vec<_> = ids
            .into_iter()
            .filter(|&(_, id)| id != 0)
            .filter_map(|key| table.entries.get(&key).map(|e| (key, *e)))
            .collect();
        if limited.is_empty() {
            return Ok(());
        }
        let grace = table.grace;
        // Every block reserved for dirty pages, whoever's: a bound on what
        // an id's dirty files hold, so that a write far from every limit
        // costs no walk of the dirty files.
        let bound = self.log.space().reserved();
        let mut changed = Vec::new();
        for ((kind, id), mut e) in limited {
            let allocated = self.log.quota_usage().map(|u| u.get(kind, id)).unwrap_or_default();
            let far = |used: u64, more: u64, soft: u64, hard: u64, end: u64| {
                let after = used.saturating_add(more);
                end == 0 && (soft == 0 || after <= soft) && (hard == 0 || after <= hard)
            };
            let l = e.limits;
            if far(allocated.blocks.saturating_add(bound), add.blocks, l.block_soft, l.block_hard, e.block_grace_end)
                && far(allocated.inodes, add.inodes, l.inode_soft, l.inode_hard, e.inode_grace_end)
            {
                continue;
            }
            let used = self.used_now(kind, id);
            let (bg, ig) = grace[kind.code() as usize];
            let l = e.limits;
            let b = judge(used.blocks, add.blocks, l.block_soft, l.block_hard, &mut e.block_grace_end, bg, now)?;
            let i = judge(used.inodes, add.inodes, l.inode_soft, l.inode_hard, &mut e.inode_grace_end, ig, now)?;
            if b || i {
                changed.push(((kind, id), e));
            }
        }
        if !changed.is_empty()
            && let Some(mut table) = self.quota.clone()
        {
            for (key, e) in changed {
                table.entries.insert(key, e);
            }
            self.store_quota_table(table)?;
        }
        Ok(())
    }

    /// [`Fs::quota_allows`] for `more` blocks of file `ino`.
    ///
    /// # Errors
    /// As [`Fs::quota_allows`]; the inode cannot be read.
    pub fn quota_allows_blocks(&mut self, ino: InodeNo, more: u64, now: Timestamp) -> Result<()> {
        if self.quota.is_none() || more == 0 {
            return Ok(());
        }
        let rec = self.log.inode(ino)?;
        let ids = ids_of(rec.uid, rec.gid, rec.project);
        self.quota_allows(ids, Adding { blocks: more, inodes: 0 }, now)
    }

    /// Whether inode `rec` may be given to the ids of `to` (chown, chgrp,
    /// a new project): each id it joins takes its blocks and one inode.
    ///
    /// # Errors
    /// As [`Fs::quota_allows`].
    pub fn quota_allows_move(&mut self, rec: &InodeRecord, to: &InodeRecord, now: Timestamp) -> Result<()> {
        if self.quota.is_none() {
            return Ok(());
        }
        let from = ids_of(rec.uid, rec.gid, rec.project);
        let mut joins = ids_of(to.uid, to.gid, to.project);
        for j in &mut joins {
            if from.contains(j) {
                // Not joined: nothing to charge (0 is never limited).
                j.1 = 0;
            }
        }
        let reserved = self.pages.reserved.get(&rec.ino).copied().unwrap_or(0);
        self.quota_allows(joins, Adding { blocks: rec.blocks + reserved, inodes: 1 }, now)
    }

    /// Sets (or with no limits, clears) the limits of `kind`/`id`, keeping
    /// its grace times.
    ///
    /// # Errors
    /// `Invalid` for id 0 or a full record; the record cannot be written.
    pub fn set_quota_limits(&mut self, kind: QuotaKind, id: u32, entry: QuotaEntry) -> Result<()> {
        let Some(mut table) = self.quota.clone() else { return Err(Error::NotSupported) };
        if id == 0 {
            return Err(Error::Invalid("id 0 is never limited"));
        }
        if !table.room_for((kind, id)) {
            return Err(Error::Invalid("the quota record is full"));
        }
        table.entries.insert((kind, id), entry);
        table.entries.retain(|_, e| *e != QuotaEntry::default());
        self.store_quota_table(table)
    }
}

#[cfg(test)]
mod tests {
    use super::judge;
    use crate::error::Error;

    #[test]
    fn a_soft_limit_turns_hard_when_the_grace_time_ends() {
        let mut end = 0;
        assert!(judge(10, 1, 10, 20, &mut end, 60, 1000).unwrap());
        assert_eq!(end, 1060);
        assert!(!judge(11, 1, 10, 20, &mut end, 60, 1059).unwrap());
        assert!(matches!(judge(12, 1, 10, 20, &mut end, 60, 1060), Err(Error::QuotaExceeded)));
        // Freeing is always allowed, and back under the soft limit the
        // grace time stops.
        assert!(!judge(12, 0, 10, 20, &mut end, 60, 2000).unwrap());
        assert!(judge(5, 0, 10, 20, &mut end, 60, 2000).unwrap());
        assert_eq!(end, 0);
    }

    #[test]
    fn a_hard_limit_is_never_passed() {
        let mut end = 0;
        assert!(judge(19, 1, 0, 20, &mut end, 60, 0).is_ok());
        assert!(matches!(judge(20, 1, 0, 20, &mut end, 60, 0), Err(Error::QuotaExceeded)));
        assert!(judge(25, 0, 0, 20, &mut end, 60, 0).is_ok());
    }
}
