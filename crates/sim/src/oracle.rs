//! The crash oracles: which trees a recovered volume may show.
//!
//! A recovered tree must equal the model's tree after some step `k` of the
//! window (at least the last step promised durable, at most the last step
//! begun): that one check covers durability of fsync, atomicity of every
//! operation (a rename shows the old name or the new one) and the absence of
//! half-done operations. File *contents* get one allowance: data overwritten
//! in place is not journaled, so a byte may also hold the value a later step
//! of the window gave it at that offset. Nothing else: a byte that no state
//! of the window had there (stale data of a freed block, another file's
//! bytes, the poison of a block never written) fails.
//!
//! With delayed tails (the default mount: a periodic commit may leave the
//! newly written end of a file for later, recording a shorter size) a file
//! may also be shorter than in state `k`: cut at a block boundary or at a
//! length a record of it that may be durable gave it (ext4's i_disksize:
//! the length at the last durable step, at a file fsync, or around a step
//! that wrote the log; an inline file that outgrew its inode is recorded
//! inline at its durable size), never below its length at the last
//! durable step, nor below what a rename over another file or the close
//! that ends a replacement made whole. Either way its bytes are state
//! `k`'s, cut.
//!
//! Replacement (`namespace::replace`): while a file the engine held after a
//! truncation to zero is being rewritten, a crash must show its old
//! contents, whatever else of state `k` it shows.

use std::collections::HashMap;

use crate::crash::Window;
use crate::image::contains_poison;
use crate::model::Id;
use crate::tree::{EntryKind, Tree};
use crate::workload::{Floor, HoldSpan, Step, tag};

/// The trees a workload went through, with an index by object.
#[derive(Clone, Debug)]
pub struct History {
    /// `trees[k]`: the tree after step `k` (`trees[0]` before the first).
    pub trees: Vec<Tree>,
    by_id: Vec<HashMap<u64, String>>,
    /// Contents an object may show while step `m` is under way.
    partials: Vec<HashMap<u64, Vec<u8>>>,
    /// Files may be cut short at a block boundary (see the module's doc).
    pub delayed_tails: bool,
    /// Files held for replacement: their old contents until they close.
    pub holds: Vec<HoldSpan>,
    /// Lengths files may not be cut below.
    pub floors: Vec<Floor>,
    /// `logged[n]`: step `n` wrote to the meta-data device (a commit or a
    /// checkpoint, which may have recorded each file as the state before
    /// or after that step had it). Missing steps wrote nothing.
    pub logged: Vec<bool>,
    /// File fsyncs: (step, file). A crash after step `k` must also show
    /// each file fsync'd by a later step that returned, as that step left
    /// it (and the one in progress may show too).
    pub fsyncs: Vec<(usize, Id)>,
    /// `order=strict`: a prefix of every operation, data included: no byte
    /// of a later step is allowed where an earlier one is expected.
    pub strict: bool,
}

impl History {
    /// Indexes `trees`; `partials[m]` lists (object, contents) a file may
    /// show while step `m` is under way (see `Runner::partials`).
    #[must_use]
    pub fn with_partials(trees: Vec<Tree>, partials: &[Vec<(u64, Vec<u8>)>]) -> History {
        let mut h = History::new(trees);
        for (m, list) in partials.iter().enumerate().take(h.partials.len()) {
            h.partials[m] = list.iter().cloned().collect();
        }
        h
    }

    /// Indexes `trees`.
    #[must_use]
    pub fn new(trees: Vec<Tree>) -> History {
        let partials = vec![HashMap::new(); trees.len()];
        let by_id = trees
            .iter()
            .map(|t| {
                t.entries
                    .iter()
                    .filter(|(_, e)| e.kind == EntryKind::File)
                    .map(|(p, e)| (e.identity, p.clone()))
                    .collect()
            })
            .collect();
        History {
            trees,
            by_id,
            partials,
            delayed_tails: false,
            holds: Vec::new(),
            floors: Vec::new(),
            logged: Vec::new(),
            fsyncs: Vec::new(),
            strict: false,
        }
    }

    fn last(&self) -> usize {
        self.trees.len() - 1
    }

    /// The contents object `id` had after each step of `from..=to`, and
    /// those it may show while one is under way: byte `o` held `b` in some
    /// state of those steps when one of them holds `b` at `o`. Looked up
    /// once per file, not once per byte that differs.
    fn contents_seen(&self, id: u64, from: usize, to: usize) -> Vec<&[u8]> {
        (from..=to.min(self.last()))
            .flat_map(|m| {
                let after = self.by_id[m].get(&id).map(|p| self.trees[m].entries[p].bytes.as_slice());
                after.into_iter().chain(self.partials[m].get(&id).map(Vec::as_slice))
            })
            .collect()
    }

    /// Checks file contents of `got` against state `k`, allowing bytes of
    /// later states up to `to`.
    fn contents_fit(&self, got: &Tree, want: &Tree, to: usize, k: usize, tag_steps: &[u64]) -> Result<(), String> {
        for (p, g) in &got.entries {
            if g.kind != EntryKind::File {
                continue;
            }
            let w = &want.entries[p];
            if g.bytes == w.bytes {
                continue;
            }
            let seen = if self.strict { Vec::new() } else { self.contents_seen(w.identity, k + 1, to) };
            for (o, (&gb, &wb)) in g.bytes.iter().zip(&w.bytes).enumerate() {
                if gb != wb && !seen.iter().any(|d| d.get(o) == Some(&gb)) {
                    return Err(stale_bytes(p, &g.bytes, o, tag_steps));
                }
            }
        }
        Ok(())
    }

    /// State `k`'s tree as a crash may show it: each file held for
    /// replacement with its old contents, and each file that `got` shows
    /// shorter cut to `got`'s length where delayed tails allow it (at a
    /// block boundary or at a durable length, [`History::durable_length`],
    /// and no shorter than the file was at step `durable` or than a later
    /// floor says).
    fn cut_to(&self, got: &Tree, k: usize, durable: usize) -> std::borrow::Cow<'_, Tree> {
        let want = &self.trees[k];
        let mut cut: Option<Tree> = None;
        let held: Vec<&HoldSpan> =
            self.holds.iter().filter(|h| h.from > durable && h.from <= k && k < h.until).collect();
        for h in &held {
            if let Some(p) = self.by_id[k].get(&h.id) {
                let t = cut.get_or_insert_with(|| want.clone());
                if let Some(e) = t.entries.get_mut(p) {
                    e.bytes.clone_from(&h.old);
                }
            }
        }
        if !self.delayed_tails {
            return cut.map_or(std::borrow::Cow::Borrowed(want), std::borrow::Cow::Owned);
        }
        for (p, w) in &want.entries {
            let Some(g) = got.entries.get(p) else { continue };
            if w.kind != EntryKind::File
                || g.kind != EntryKind::File
                || g.bytes.len() >= w.bytes.len()
                || held.iter().any(|h| h.id == w.identity)
            {
                continue;
            }
            let floor = self
                .floors
                .iter()
                .filter(|f| f.id == w.identity && f.from > durable && f.from <= k)
                .map(|f| f.len)
                .chain(self.by_id[durable].get(&w.identity).map(|dp| self.trees[durable].entries[dp].bytes.len()))
                .max()
                .unwrap_or(0);
            let len = g.bytes.len();
            if len >= floor && (len % 4096 == 0 || self.durable_length(w.identity, len, durable, k)) {
                let t = cut.get_or_insert_with(|| want.clone());
                if let Some(e) = t.entries.get_mut(p) {
                    e.bytes.truncate(g.bytes.len());
                }
            }
        }
        cut.map_or(std::borrow::Cow::Borrowed(want), std::borrow::Cow::Owned)
    }

    /// Whether a record of file `id` that may be durable in a crash state
    /// shown as state `k` gave it length `len`: its length at step
    /// `durable`, at a floor since (a file fsync, a rename over another
    /// file, the close ending a replacement), or before or after a step of
    /// `durable + 1..=k` that wrote the log (its commits and checkpoints).
    fn durable_length(&self, id: u64, len: usize, durable: usize, k: usize) -> bool {
        let len_at = |j: usize| self.by_id[j].get(&id).map(|p| self.trees[j].entries[p].bytes.len());
        len_at(durable) == Some(len)
            || self.floors.iter().any(|f| f.id == id && f.from > durable && f.from <= k && f.len == len)
            || (durable + 1..=k)
                .filter(|&j| self.logged.get(j).copied().unwrap_or(false))
                .any(|j| len_at(j - 1) == Some(len) || len_at(j) == Some(len))
    }

    /// `base` (a state `k`) with the files of `steps` (file fsyncs after
    /// `k`, in order) as those steps left them: an existing file takes its
    /// contents, mode and attributes (its names and link count stay); a
    /// file new since `k` comes with its path and any directories above it
    /// that `base` lacks. Directory link counts follow the tree.
    fn overlay(&self, base: &Tree, steps: &[(usize, Id)]) -> Tree {
        let mut t = base.clone();
        for &(f, id) in steps {
            let src = &self.trees[f];
            let Some(path) = self.by_id[f].get(&id) else { continue };
            let e = &src.entries[path];
            let mut found = false;
            for w in t.entries.values_mut().filter(|w| w.identity == id && w.kind == EntryKind::File) {
                w.bytes.clone_from(&e.bytes);
                w.perm = e.perm;
                w.flags = e.flags;
                w.xattrs.clone_from(&e.xattrs);
                found = true;
            }
            if found {
                continue;
            }
            let mut at = String::new();
            let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
            for (i, c) in parts.iter().enumerate() {
                at = format!("{at}/{c}");
                if t.entries.contains_key(&at) {
                    continue;
                }
                let Some(mut add) = src.entries.get(&at).cloned() else { break };
                if i + 1 == parts.len() {
                    add.nlink = 1;
                }
                t.entries.insert(at.clone(), add);
            }
        }
        let dirs: Vec<String> =
            t.entries.iter().filter(|(_, e)| e.kind == EntryKind::Dir).map(|(p, _)| p.clone()).collect();
        for d in dirs {
            let prefix = if d == "/" { "/".to_string() } else { format!("{d}/") };
            let subdirs = t
                .entries
                .iter()
                .filter(|(p, e)| {
                    e.kind == EntryKind::Dir
                        && p.len() > prefix.len()
                        && p.starts_with(&prefix)
                        && !p[prefix.len()..].contains('/')
                })
                .count();
            if let Some(e) = t.entries.get_mut(&d) {
                e.nlink = 2 + subdirs as u32;
            }
        }
        t
    }

    /// The trees a crash may show for base state `k`: its file fsyncs after
    /// `k` that returned (up to `synced`) applied, and the one under way at
    /// the cut applied or not.
    fn candidates<'a>(
        &self,
        base: std::borrow::Cow<'a, Tree>,
        k: usize,
        window: Window,
        to: usize,
    ) -> Vec<std::borrow::Cow<'a, Tree>> {
        let after: Vec<(usize, Id)> = self.fsyncs.iter().filter(|(f, _)| *f > k && *f <= to).copied().collect();
        if after.is_empty() {
            return vec![base];
        }
        let done: Vec<(usize, Id)> = after.iter().filter(|(f, _)| *f <= window.synced).copied().collect();
        let mut out = vec![std::borrow::Cow::Owned(self.overlay(&base, &done))];
        if done.len() < after.len() {
            out.push(std::borrow::Cow::Owned(self.overlay(&base, &after)));
        }
        out
    }

    /// Finds the step whose tree `got` is, within `window`.
    ///
    /// # Errors
    /// Which oracle failed, in words: durability, rename atomicity, stale
    /// bytes, or a namespace that matches no state.
    pub fn find(&self, got: &Tree, window: Window, steps: &[Step], tag_steps: &[u64]) -> Result<usize, String> {
        let to = window.issued.min(self.last());
        let from = window.durable.min(to);
        let mut content_err = None;
        for k in from..=to {
            for want in self.candidates(self.cut_to(got, k, from), k, window, to) {
                if got.same_namespace(&want).is_ok() {
                    match self.contents_fit(got, &want, to, k, tag_steps) {
                        Ok(()) => return Ok(k),
                        Err(e) => {
                            content_err
                                .get_or_insert(format!("stale data: the namespace is the one after step {k}, but {e}"));
                        }
                    }
                }
            }
        }
        // A state the window allows, but for the files fsync'd since: those
        // fsyncs were lost.
        let lost_file = (from..=to).find_map(|k| {
            let base = self.cut_to(got, k, from);
            let f = self.fsyncs.iter().find(|(f, _)| *f > k && *f <= window.synced.min(to))?;
            (got.same_namespace(&base).is_ok() && self.contents_fit(got, &base, to, k, tag_steps).is_ok()).then_some(*f)
        });
        for k in (0..from).rev() {
            let want = &self.trees[k];
            if got.same_namespace(want).is_ok() && self.contents_fit(got, want, to, k, tag_steps).is_ok() {
                let lost = got.same_namespace(&self.trees[from]).err().unwrap_or_else(|| "contents differ".into());
                return Err(format!(
                    "durability: step {from} was fsync'd (or synced) before the crash, yet the volume shows the \
                     state after step {k} ({lost})"
                ));
            }
        }
        for (i, s) in steps.iter().enumerate().take(to).skip(from) {
            if let Step::Rename { from: a, to: b } = s {
                let (a, b) = (format!("/{a}"), format!("/{b}"));
                let (ha, hb) = (got.entries.contains_key(&a), got.entries.contains_key(&b));
                let seen = |f: &dyn Fn(&Tree) -> bool| (from..=to).any(|m| f(&self.trees[m]));
                if ha && hb && !seen(&|t| t.entries.contains_key(&a) && t.entries.contains_key(&b)) {
                    return Err(format!("rename atomicity: step {} renamed {a} to {b}, and both names exist", i + 1));
                }
                if !ha && !hb && !seen(&|t| !t.entries.contains_key(&a) && !t.entries.contains_key(&b)) {
                    return Err(format!(
                        "rename atomicity: step {} renamed {a} to {b}, and neither name exists",
                        i + 1
                    ));
                }
            }
        }
        if let Some(e) = content_err {
            return Err(e);
        }
        if let Some((f, _)) = lost_file {
            return Err(format!(
                "durability: step {f} fsync'd a file that the recovered volume does not show as that step left it"
            ));
        }
        let near = got.same_namespace(&self.trees[to]).err().unwrap_or_default();
        Err(format!(
            "atomicity: the recovered namespace is none of the states after steps {from}..={to} (against step {to}: {near})"
        ))
    }
}

/// Describes bytes of `path` from offset `o` that no state explains.
fn stale_bytes(path: &str, bytes: &[u8], o: usize, tag_steps: &[u64]) -> String {
    let end = (o + 64).min(bytes.len());
    let run = &bytes[o..end];
    let aligned = &bytes[o & !15..(o & !15) + 32.min(bytes.len() - (o & !15))];
    let origin = if contains_poison(aligned) {
        "poison: a data block never written was made reachable".to_string()
    } else if let Some(s) = tag_steps.iter().find(|&&s| (o..end.min(o + 8)).all(|i| bytes[i] == tag(s, i as u64))) {
        format!("written at this offset by step tag {s}, but not to this file or not in this window")
    } else if run.iter().all(|&b| b == 0) {
        "zeros where data was expected".to_string()
    } else {
        "bytes no step wrote at this offset (another file's data or a stale block)".to_string()
    };
    format!(
        "{path} holds at offset {o} bytes it was never given: {origin}; first bytes {:02x?}",
        &run[..run.len().min(16)]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Model, ROOT};

    fn history() -> (History, Vec<Step>) {
        let mut m = Model::default();
        let mut trees = vec![Tree::of_model(&m)];
        let a = m.create(ROOT, b"a", 0o644).unwrap();
        m.write(a, 0, &crate::workload::tagged(1, 0, 100));
        trees.push(Tree::of_model(&m));
        m.rename(ROOT, b"a", ROOT, b"b", false, false, &|_| false).unwrap();
        trees.push(Tree::of_model(&m));
        let steps = vec![Step::Create("a".into()), Step::Rename { from: "a".into(), to: "b".into() }];
        (History::new(trees), steps)
    }

    #[test]
    fn the_recovered_tree_must_lie_in_the_window() {
        let (h, steps) = history();
        let w = Window { durable: 1, issued: 2, synced: 0 };
        assert_eq!(h.find(&h.trees[1], w, &steps, &[1]), Ok(1));
        assert_eq!(h.find(&h.trees[2], w, &steps, &[1]), Ok(2));
        let e = h.find(&h.trees[0], w, &steps, &[1]).unwrap_err();
        assert!(e.starts_with("durability"), "{e}");
    }

    #[test]
    fn both_names_after_a_rename_is_caught() {
        let (h, steps) = history();
        let mut both = h.trees[2].clone();
        let a = h.trees[1].entries["/a"].clone();
        both.entries.insert("/a".into(), a);
        let e = h.find(&both, Window { durable: 1, issued: 2, synced: 0 }, &steps, &[1]).unwrap_err();
        assert!(e.starts_with("rename atomicity"), "{e}");
    }

    #[test]
    fn a_delayed_tail_may_cut_a_file_at_a_block_but_not_below_its_durable_length() {
        let mut m = Model::default();
        let mut trees = vec![Tree::of_model(&m)];
        let a = m.create(ROOT, b"a", 0o644).unwrap();
        trees.push(Tree::of_model(&m));
        m.write(a, 0, &crate::workload::tagged(1, 0, 9000));
        trees.push(Tree::of_model(&m));
        m.create(ROOT, b"b", 0o644).unwrap();
        trees.push(Tree::of_model(&m));
        let steps = vec![Step::Create("a".into()), Step::Create("b".into())];
        let mut h = History::new(trees);
        // b's create is committed, a's data past 4096 not yet.
        let mut got = h.trees[3].clone();
        got.entries.get_mut("/a").unwrap().bytes.truncate(4096);
        let w = Window { durable: 1, issued: 3, synced: 0 };
        assert!(h.find(&got, w, &steps, &[1]).is_err(), "strict: no state has a cut short");
        h.delayed_tails = true;
        assert_eq!(h.find(&got, w, &steps, &[1]), Ok(3));
        let mut odd = h.trees[3].clone();
        odd.entries.get_mut("/a").unwrap().bytes.truncate(5000);
        assert!(h.find(&odd, w, &steps, &[1]).is_err(), "cuts fall on block boundaries");
        let durable = Window { durable: 2, issued: 3, synced: 0 };
        assert!(h.find(&got, durable, &steps, &[1]).is_err(), "never below the durable length");
    }

    #[test]
    fn a_delayed_tail_may_cut_a_file_at_a_durable_length() {
        let mut m = Model::default();
        let mut trees = vec![Tree::of_model(&m)];
        let a = m.create(ROOT, b"a", 0o644).unwrap();
        m.write(a, 0, &crate::workload::tagged(1, 0, 600));
        trees.push(Tree::of_model(&m));
        m.write(a, 600, &crate::workload::tagged(2, 600, 5000));
        trees.push(Tree::of_model(&m));
        m.write(a, 100, &crate::workload::tagged(3, 100, 50));
        trees.push(Tree::of_model(&m));
        m.create(ROOT, b"b", 0o644).unwrap();
        trees.push(Tree::of_model(&m));
        let steps = vec![Step::Create("a".into()), Step::Create("b".into())];
        let mut h = History::new(trees);
        h.delayed_tails = true;
        // An outgrown inline file recorded inline at its 600 durable bytes,
        // b created.
        let mut got = h.trees[4].clone();
        got.entries.get_mut("/a").unwrap().bytes.truncate(600);
        let w = Window { durable: 1, issued: 4, synced: 0 };
        assert_eq!(h.find(&got, w, &steps, &[1, 2, 3]), Ok(4));
        // With step 0 the durable one, 600 bytes is a length the file had
        // but no durable record gave it, unless step 1 wrote the log.
        let w0 = Window { durable: 0, ..w };
        assert!(h.find(&got, w0, &steps, &[1, 2, 3]).is_err(), "no record gave it 600 bytes");
        h.logged = vec![false, true, false, false, false];
        assert_eq!(h.find(&got, w0, &steps, &[1, 2, 3]), Ok(4));
        h.logged.clear();
        let mut stale = got.clone();
        stale.entries.get_mut("/a").unwrap().bytes[100..150].copy_from_slice(&h.trees[1].entries["/a"].bytes[100..150]);
        assert!(h.find(&stale, w, &steps, &[1, 2, 3]).is_err(), "cut, its bytes are still the state's");
        let mut never = h.trees[4].clone();
        never.entries.get_mut("/a").unwrap().bytes.truncate(1000);
        assert!(h.find(&never, w, &steps, &[1, 2, 3]).is_err(), "a length the file never had");
        assert!(h.find(&got, Window { durable: 2, ..w }, &steps, &[1, 2, 3]).is_err(), "below the durable length");
    }

    #[test]
    fn stale_and_poisoned_bytes_are_caught() {
        let (h, steps) = history();
        let mut t = h.trees[2].clone();
        t.entries.get_mut("/b").unwrap().bytes[..16].copy_from_slice(&crate::image::poison_block(9)[..16]);
        let e = h.find(&t, Window { durable: 2, issued: 2, synced: 0 }, &steps, &[1]).unwrap_err();
        assert!(e.contains("stale data") && e.contains("poison"), "{e}");
    }
}
