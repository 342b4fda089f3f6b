//! POSIX access control lists, stored as the extended attributes
//! `system.posix_acl_access` and `system.posix_acl_default` in the kernel's
//! xattr form, with the rules ext4 follows (Linux `fs/posix_acl.c`):
//!
//! - an access ACL and the permission bits of the mode are two views of one
//!   thing: setting an ACL sets the mode (the group bits are the mask's, if
//!   there is one), and an ACL the mode says exactly is not stored at all;
//! - a chmod rewrites the owner, mask (or group) and other entries;
//! - a new inode in a directory with a default ACL takes it, masked by the
//!   mode it was created with, instead of the umask; a new directory also
//!   inherits the default ACL itself.
//!
//! The xattr form: `u32 version (2)`, then entries of `u16 tag, u16 perm,
//! u32 id`, little-endian, in the order owner, named users, owning group,
//! named groups, mask, other.

use super::Fs;
use super::xattr::SetMode;
use crate::error::{Error, Result};
use crate::format::codec::{Reader, Writer};
use crate::types::{FileKind, InodeNo};

/// The xattr holding the access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The xattr holding a directory's default ACL.
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const ENTRY_BYTES: usize = 8;
/// Entries of an ACL, bounded as the kernel bounds what it sends over FUSE
/// (one page).
pub const MAX_ENTRIES: usize = (4096 - 4) / ENTRY_BYTES;

/// The file's owner.
pub const USER_OBJ: u16 = 0x01;
/// A named user.
pub const USER: u16 = 0x02;
/// The file's group.
pub const GROUP_OBJ: u16 = 0x04;
/// A named group.
pub const GROUP: u16 = 0x08;
/// The most any named entry or the owning group may grant.
pub const MASK: u16 = 0x10;
/// Everybody else.
pub const OTHER: u16 = 0x20;
/// The id of the entries that name nobody (owner, group, mask, other).
const UNDEFINED_ID: u32 = u32::MAX;

/// Which of a file's two ACLs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AclKind {
    /// Checked on access; its owner, group (or mask) and other entries are the mode.
    Access,
    /// A directory's ACL for what is created in it.
    Default,
}

impl AclKind {
    /// Which ACL an xattr name holds, if it holds one.
    #[must_use]
    pub fn of_xattr(name: &[u8]) -> Option<AclKind> {
        match name {
            ACCESS => Some(AclKind::Access),
            DEFAULT => Some(AclKind::Default),
            _ => None,
        }
    }

    /// The xattr that holds it.
    #[must_use]
    pub fn xattr(self) -> &'static [u8] {
        match self {
            AclKind::Access => ACCESS,
            AclKind::Default => DEFAULT,
        }
    }
}

/// One entry: whom it names and what it grants (`0..=7`, rwx).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AclEntry {
    /// [`USER_OBJ`], [`USER`], [`GROUP_OBJ`], [`GROUP`], [`MASK`] or [`OTHER`].
    pub tag: u16,
    /// Read 4, write 2, execute 1.
    pub perm: u16,
    /// User or group id of a named entry.
    pub id: u32,
}

/// A valid ACL: the entries in the kernel's order, each required one present.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Acl {
    entries: Vec<AclEntry>,
}

impl Acl {
    /// An ACL of `entries`.
    ///
    /// # Errors
    /// `Invalid` if they do not form a valid ACL.
    pub fn new(mut entries: Vec<AclEntry>) -> Result<Acl> {
        for e in &mut entries {
            if !matches!(e.tag, USER | GROUP) {
                e.id = UNDEFINED_ID;
            }
        }
        let acl = Acl { entries };
        acl.validate()?;
        Ok(acl)
    }

    /// Decodes an xattr value. `None` is an ACL of no entries, which the
    /// kernel reads as "no ACL".
    ///
    /// # Errors
    /// `Invalid` for a wrong version, a ragged length, or entries that do
    /// not form a valid ACL.
    pub fn decode(v: &[u8]) -> Result<Option<Acl>> {
        let bad = || Error::Invalid("malformed POSIX ACL");
        let mut r = Reader::new(v);
        if r.u32().map_err(|_| bad())? != VERSION || !r.remaining().is_multiple_of(ENTRY_BYTES) {
            return Err(bad());
        }
        if r.remaining() / ENTRY_BYTES > MAX_ENTRIES {
            return Err(Error::XattrTooBig);
        }
        let mut entries = Vec::with_capacity(r.remaining() / ENTRY_BYTES);
        while r.remaining() > 0 {
            let tag = r.u16().map_err(|_| bad())?;
            let perm = r.u16().map_err(|_| bad())?;
            let id = r.u32().map_err(|_| bad())?;
            entries.push(AclEntry { tag, perm, id });
        }
        if entries.is_empty() {
            return Ok(None);
        }
        Acl::new(entries).map(Some)
    }

    /// The xattr value.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u32(VERSION);
        for e in &self.entries {
            let id = if matches!(e.tag, USER | GROUP) { e.id } else { UNDEFINED_ID };
            w.u16(e.tag).u16(e.perm).u32(id);
        }
        w.into_inner()
    }

    /// The entries, in order.
    #[must_use]
    pub fn entries(&self) -> &[AclEntry] {
        &self.entries
    }

    /// The kernel's `posix_acl_valid`: tags in order (owner, users, group,
    /// groups, mask, other), each singleton once, a mask whenever there is
    /// a named entry, permissions within rwx.
    fn validate(&self) -> Result<()> {
        // States: which tags may come next.
        #[derive(PartialEq)]
        enum State {
            Owner,
            Users,
            Groups,
            Other,
            Done,
        }
        let bad = Error::Invalid("not a valid POSIX ACL");
        let mut state = State::Owner;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.perm & !7 != 0 {
                return Err(bad);
            }
            state = match (e.tag, state) {
                (USER_OBJ, State::Owner) => State::Users,
                (USER, State::Users) => {
                    needs_mask = true;
                    State::Users
                }
                (GROUP_OBJ, State::Users) => State::Groups,
                (GROUP, State::Groups) => {
                    needs_mask = true;
                    State::Groups
                }
                (MASK, State::Groups) => State::Other,
                (OTHER, State::Other) => State::Done,
                (OTHER, State::Groups) if !needs_mask => State::Done,
                _ => return Err(bad),
            };
        }
        if state == State::Done { Ok(()) } else { Err(bad) }
    }

    fn perm_of(&self, tag: u16) -> Option<u32> {
        self.entries.iter().find(|e| e.tag == tag).map(|e| u32::from(e.perm))
    }

    fn set_perm(&mut self, tag: u16, f: impl Fn(u16) -> u16) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.tag == tag) {
            e.perm = f(e.perm) & 7;
        }
    }

    /// The permission bits (`0o777`) the ACL stands for — the group bits
    /// are the mask's when there is one — and whether the ACL says more
    /// than they do (named entries or a mask).
    #[must_use]
    pub fn mode(&self) -> (u32, bool) {
        let owner = self.perm_of(USER_OBJ).unwrap_or(0);
        let group = self.perm_of(MASK).or_else(|| self.perm_of(GROUP_OBJ)).unwrap_or(0);
        let other = self.perm_of(OTHER).unwrap_or(0);
        let extended = self.entries.iter().any(|e| matches!(e.tag, USER | GROUP | MASK));
        (owner << 6 | group << 3 | other, extended)
    }

    /// After a chmod: the owner, mask (or owning group) and other entries
    /// take the new permission bits; named entries stay.
    pub fn chmod(&mut self, mode: u32) {
        let bits = |shift: u32| ((mode >> shift) & 7) as u16;
        self.set_perm(USER_OBJ, |_| bits(6));
        let group_tag = if self.perm_of(MASK).is_some() { MASK } else { GROUP_OBJ };
        self.set_perm(group_tag, |_| bits(3));
        self.set_perm(OTHER, |_| bits(0));
    }

    /// A default ACL applied to a new inode created with `mode` (the
    /// kernel's `posix_acl_create_masq`): the owner, mask (or owning group)
    /// and other entries are limited by the mode, and the mode by them.
    /// Returns the new mode (set-id and sticky bits kept) and whether the
    /// ACL says more than the mode, i.e. must be stored.
    pub fn create_masq(&mut self, mode: u32) -> (u32, bool) {
        let bits = |shift: u32| ((mode >> shift) & 7) as u16;
        self.set_perm(USER_OBJ, |p| p & bits(6));
        let group_tag = if self.perm_of(MASK).is_some() { MASK } else { GROUP_OBJ };
        self.set_perm(group_tag, |p| p & bits(3));
        self.set_perm(OTHER, |p| p & bits(0));
        let (perm, extended) = self.mode();
        ((mode & !0o777) | perm, extended)
    }
}

/// What a new inode takes from its directory: its permission bits, and
/// the ACLs to store with it.
#[derive(Clone, Debug)]
pub struct Inherited {
    /// Permission bits, set-id and sticky included.
    pub perm: u32,
    /// An access ACL that says more than `perm`.
    pub access: Option<Acl>,
    /// The default ACL (directories only).
    pub default: Option<Acl>,
}

impl Fs {
    /// `ino`'s ACL of `kind`, if it has one.
    ///
    /// # Errors
    /// A stored ACL that does not decode (corruption); I/O errors.
    pub fn acl_get(&mut self, ino: InodeNo, kind: AclKind) -> Result<Option<Acl>> {
        match self.xattr_get(ino, kind.xattr()) {
            Ok(v) => Acl::decode(&v).map_err(|_| {
                Error::corrupt_meta("xattr entry", 0, format!("inode {ino} has a malformed {kind:?} ACL"))
            }),
            Err(Error::NoXattr) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stores `acl` as `ino`'s ACL of `kind`, or removes it (`None`).
    /// Returns whether anything changed.
    ///
    /// # Errors
    /// No space for the attribute; I/O errors.
    pub fn acl_put(&mut self, ino: InodeNo, kind: AclKind, acl: Option<&Acl>) -> Result<bool> {
        match acl {
            Some(a) => {
                let v = a.encode();
                if self.xattr_get(ino, kind.xattr()).is_ok_and(|old| old == v) {
                    return Ok(false);
                }
                self.xattr_set(ino, kind.xattr(), &v, SetMode::Any)?;
                Ok(true)
            }
            None => match self.xattr_remove(ino, kind.xattr()) {
                Ok(()) => Ok(true),
                Err(Error::NoXattr) => Ok(false),
                Err(e) => Err(e),
            },
        }
    }

    /// Keeps the access ACL in step with a new mode (chmod).
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn acl_chmod(&mut self, ino: InodeNo, mode: u32) -> Result<()> {
        if let Some(mut acl) = self.acl_get(ino, AclKind::Access)? {
            acl.chmod(mode);
            self.acl_put(ino, AclKind::Access, Some(&acl))?;
        }
        Ok(())
    }

    /// What an inode of `kind` created in `parent` with `perm` takes from
    /// the directory: its default ACL if it has one, else the umask.
    /// Symbolic links take neither.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn acl_inherit(&mut self, parent: InodeNo, kind: FileKind, perm: u32, umask: u32) -> Result<Inherited> {
        if kind == FileKind::Symlink {
            return Ok(Inherited { perm, access: None, default: None });
        }
        let Some(default) = self.acl_get(parent, AclKind::Default)? else {
            return Ok(Inherited { perm: perm & !(umask & 0o777), access: None, default: None });
        };
        let mut access = default.clone();
        let (perm, extended) = access.create_masq(perm);
        Ok(Inherited {
            perm,
            access: extended.then_some(access),
            default: (kind == FileKind::Directory).then_some(default),
        })
    }

    /// Stores the ACLs a new inode inherited.
    ///
    /// # Errors
    /// No space for the attributes; I/O errors.
    pub fn acl_store_inherited(&mut self, ino: InodeNo, inherited: &Inherited) -> Result<()> {
        if let Some(a) = &inherited.access {
            self.acl_put(ino, AclKind::Access, Some(a))?;
        }
        if let Some(d) = &inherited.default {
            self.acl_put(ino, AclKind::Default, Some(d))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry; the id of an unnamed one reads back as the undefined id.
    fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id: if matches!(tag, USER | GROUP) { id } else { UNDEFINED_ID } }
    }

    fn acl(entries: &[AclEntry]) -> Acl {
        let a = Acl { entries: entries.to_vec() };
        Acl::decode(&a.encode()).expect("valid").expect("not empty")
    }

    fn minimal(mode: u32) -> Acl {
        let p = |s: u32| ((mode >> s) & 7) as u16;
        acl(&[e(USER_OBJ, p(6), 0), e(GROUP_OBJ, p(3), 0), e(OTHER, p(0), 0)])
    }

    #[test]
    fn an_acl_round_trips_through_its_xattr_form() {
        let a = acl(&[
            e(USER_OBJ, 7, 0),
            e(USER, 4, 1000),
            e(GROUP_OBJ, 5, 0),
            e(GROUP, 6, 50),
            e(MASK, 7, 0),
            e(OTHER, 0, 0),
        ]);
        let v = a.encode();
        assert_eq!(v.len(), 4 + 6 * 8);
        assert_eq!(&v[..4], &[2, 0, 0, 0]);
        // Unnamed entries carry the undefined id, as the kernel writes them.
        assert_eq!(&v[8..12], &[0xff; 4]);
        assert_eq!(Acl::decode(&v).unwrap(), Some(a));
    }

    #[test]
    fn malformed_and_invalid_acls_are_refused() {
        let ok = minimal(0o644).encode();
        assert!(Acl::decode(&ok[..ok.len() - 1]).is_err(), "ragged");
        let mut v1 = ok.clone();
        v1[0] = 1;
        assert!(Acl::decode(&v1).is_err(), "version 1");
        assert_eq!(Acl::decode(&[2, 0, 0, 0]).unwrap(), None, "no entries is no ACL");
        let bad = [
            // Named user without a mask.
            vec![e(USER_OBJ, 7, 0), e(USER, 4, 1), e(GROUP_OBJ, 5, 0), e(OTHER, 0, 0)],
            // Out of order.
            vec![e(GROUP_OBJ, 5, 0), e(USER_OBJ, 7, 0), e(OTHER, 0, 0)],
            // Other missing.
            vec![e(USER_OBJ, 7, 0), e(GROUP_OBJ, 5, 0)],
            // Two owners.
            vec![e(USER_OBJ, 7, 0), e(USER_OBJ, 7, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 0, 0)],
            // Permission beyond rwx.
            vec![e(USER_OBJ, 8, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 0, 0)],
            // Unknown tag.
            vec![e(USER_OBJ, 7, 0), e(0x40, 5, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 0, 0)],
        ];
        for entries in bad {
            let mut w = Writer::new();
            w.u32(VERSION);
            for x in &entries {
                w.u16(x.tag).u16(x.perm).u32(x.id);
            }
            let v = w.into_inner();
            assert!(Acl::decode(&v).is_err(), "{entries:?}");
        }
    }

    #[test]
    fn the_mode_of_an_acl_takes_the_mask_as_group_bits() {
        assert_eq!(minimal(0o640).mode(), (0o640, false));
        let a = acl(&[e(USER_OBJ, 6, 0), e(USER, 7, 9), e(GROUP_OBJ, 4, 0), e(MASK, 5, 0), e(OTHER, 1, 0)]);
        assert_eq!(a.mode(), (0o651, true));
        // A mask alone still says more than the mode: it stays stored.
        let m = acl(&[e(USER_OBJ, 6, 0), e(GROUP_OBJ, 4, 0), e(MASK, 6, 0), e(OTHER, 0, 0)]);
        assert_eq!(m.mode(), (0o660, true));
    }

    #[test]
    fn chmod_rewrites_owner_mask_and_other_but_not_named_entries() {
        let mut a = acl(&[e(USER_OBJ, 7, 0), e(USER, 7, 9), e(GROUP_OBJ, 7, 0), e(MASK, 7, 0), e(OTHER, 7, 0)]);
        a.chmod(0o4640);
        assert_eq!(a.entries(), &[e(USER_OBJ, 6, 0), e(USER, 7, 9), e(GROUP_OBJ, 7, 0), e(MASK, 4, 0), e(OTHER, 0, 0)]);
        let mut m = minimal(0o777);
        m.chmod(0o751);
        assert_eq!(m, minimal(0o751));
    }

    #[test]
    fn a_default_acl_masks_and_is_masked_by_the_create_mode() {
        // setfacl -d -m u:nobody:rwx,g::rwx,o::r-x on a directory; open(0666).
        let mut a = acl(&[e(USER_OBJ, 7, 0), e(USER, 7, 65534), e(GROUP_OBJ, 7, 0), e(MASK, 7, 0), e(OTHER, 5, 0)]);
        let (mode, extended) = a.create_masq(0o666);
        assert_eq!((mode, extended), (0o664, true));
        assert_eq!(
            a.entries(),
            &[e(USER_OBJ, 6, 0), e(USER, 7, 65534), e(GROUP_OBJ, 7, 0), e(MASK, 6, 0), e(OTHER, 4, 0)]
        );
        // Without named entries or mask the result is a plain mode.
        let mut p = minimal(0o750);
        assert_eq!(p.create_masq(0o2777), (0o2750, false));
    }
}
