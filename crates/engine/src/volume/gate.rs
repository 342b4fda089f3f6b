//! Writable trees served beside each other (DESIGN.md, "Writable trees
//! beside the live one"): one tree is entered at a time, and an operation
//! on another tree first makes that one the live tree, as a switch does,
//! keeping the references the kernel holds in the tree that goes.
//!
//! The gate admits operations of the entered tree while any run, and
//! switches only when none does. A tree entered longer than [`SLICE`]
//! while another waits admits nothing new until the other had its turn,
//! so that one busy tree does not keep another waiting for ever.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{CleanRequest, Volume, lock};
use crate::error::{Error, Result};
use crate::faults::{self, Fault};
use crate::meta_log::cleaner::Policy;
use crate::namespace::refs::Refs;

/// How long a tree keeps the volume while another tree's operations wait:
/// long against a switch (two checkpoints, some 36 KiB of meta-data), short
/// against a person waiting.
pub const SLICE: Duration = Duration::from_secs(1);

/// At most this many segments are cleaned as a tree is left.
const LEAVE_VICTIMS: usize = 16;

/// Segments the tree left fills less than this are cleaned as it is left:
/// moving out of them frees at least as much as it writes.
const LEAVE_UTILIZATION: f64 = 0.5;

/// Who is inside the gate.
#[derive(Debug, Default)]
struct GateState {
    /// The tree entered through the gate (None: not known yet, the live
    /// tree the log names).
    entered: Option<String>,
    /// Operations admitted and not yet done.
    active: usize,
    /// A switch is under way.
    switching: bool,
    /// Operations waiting, by the tree they want.
    waiting: BTreeMap<String, usize>,
    /// When the entered tree was entered (the machine's clock: only
    /// fairness depends on it, never what is written); none: since the
    /// open, its turn over as soon as another tree waits.
    since: Option<Instant>,
}

/// The gate and what each tree not entered keeps in memory.
#[derive(Debug, Default)]
pub(super) struct Gate {
    state: Mutex<GateState>,
    turn: Condvar,
    /// The references the kernel holds in each tree left since the open.
    /// A tree not here has none: entered for the first time, its orphans
    /// are finished as an open finishes them.
    kept_refs: Mutex<HashMap<String, Refs>>,
}

/// An operation admitted into its tree: the tree stays entered until the
/// guard goes.
#[derive(Debug)]
pub struct TreeGuard<'a> {
    vol: &'a Volume,
}

impl Drop for TreeGuard<'_> {
    fn drop(&mut self) {
        let gate = &self.vol.gate;
        let mut g = gate.state.lock().unwrap_or_else(PoisonError::into_inner);
        g.active -= 1;
        if g.active == 0 {
            gate.turn.notify_all();
        }
    }
}

impl GateState {
    /// Whether an operation of a tree other than `name` waits.
    fn others_wait(&self, name: &str) -> bool {
        self.waiting.iter().any(|(t, n)| t != name && *n > 0)
    }
}

impl Volume {
    /// Admits one operation on tree `name`: waits while another tree's
    /// operations run, and makes `name` the live tree first if it is not
    /// (everything committed and checkpointed, then one checkpoint that
    /// keeps the outgoing tree and names the incoming one, as
    /// [`Volume::switch_tree`]; the references held in the outgoing tree
    /// stay with it). Each tree served is entered before each of its
    /// operations, and only one tree's operations run at a time.
    ///
    /// # Errors
    /// No such tree, a read-only snapshot, a read-only volume, a receive
    /// under way, or a device fails (as [`Volume::switch_tree`]).
    pub fn enter_tree(&self, name: &str) -> Result<TreeGuard<'_>> {
        let gate = &self.gate;
        let mut g = gate.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if g.entered.is_none() {
                // The live tree as the log names it (opened so, or
                // switched to outside the gate).
                g.entered = Some(self.live_tree());
            }
            // Broken on purpose: the operation runs in whatever tree is
            // entered, its changes made durable with that tree's maps.
            let here = g.entered.as_deref() == Some(name) || faults::active(Fault::EnterWithoutSwitch);
            if here && !g.switching {
                let turn_over = g.others_wait(name) && g.since.is_none_or(|t| t.elapsed() >= SLICE);
                if !turn_over {
                    g.active += 1;
                    return Ok(TreeGuard { vol: self });
                }
            } else if !here && g.active == 0 && !g.switching {
                g = self.gate_switch(g, name)?;
                g.active += 1;
                return Ok(TreeGuard { vol: self });
            }
            *g.waiting.entry(name.to_string()).or_default() += 1;
            g = gate.turn.wait(g).unwrap_or_else(PoisonError::into_inner);
            if let Some(n) = g.waiting.get_mut(name) {
                *n -= 1;
            }
        }
    }

    /// Switches the gate to tree `name`, no operation running: the switch
    /// runs with the gate's lock let go, every other tree's operations
    /// waiting for it.
    fn gate_switch<'g>(&'g self, mut g: MutexGuard<'g, GateState>, name: &str) -> Result<MutexGuard<'g, GateState>> {
        let gate = &self.gate;
        g.switching = true;
        drop(g);
        let switched = self.switch_serving(name);
        let mut g = gate.state.lock().unwrap_or_else(PoisonError::into_inner);
        g.switching = false;
        gate.turn.notify_all();
        if let Err(e) = switched {
            // Whatever the switch did, the log says which tree is live.
            g.entered = None;
            return Err(e);
        }
        g.entered = Some(name.to_string());
        g.since = Some(Instant::now());
        Ok(g)
    }

    /// Forgets what the gate knew of the entered tree (a switch outside
    /// it: the live tree is what the log names).
    pub(super) fn gate_forget_entered(&self) {
        self.gate.state.lock().unwrap_or_else(PoisonError::into_inner).entered = None;
    }

    /// Makes `name` the live tree while the kernel holds inodes of the
    /// outgoing one: they are kept with it, and the incoming tree's come
    /// back.
    fn switch_serving(&self, name: &str) -> Result<()> {
        // The orphans an open left for later belong to the tree opened.
        self.finish_loading()?;
        let first = !self.gate.kept_refs.lock().unwrap_or_else(PoisonError::into_inner).contains_key(name);
        let gate = &self.gate;
        // A cleaning pass (or a resize, a migration) works in steps on the
        // live tree's maps: it ends before they are another tree's.
        let _one_at_a_time = lock(&self.cleaning);
        self.leave_compact()?;
        self.switch_live(name, false, &mut |outgoing, refs| {
            let mut kept = gate.kept_refs.lock().unwrap_or_else(PoisonError::into_inner);
            let incoming = kept.remove(name).unwrap_or_default();
            kept.insert(outgoing.to_string(), std::mem::replace(refs, incoming));
        })?;
        // Every tree left through the gate is made live again for its
        // requests: the cleaner may count on its turn.
        let turns = gate.kept_refs.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
        lock(&self.fs).log.set_trees_taking_turns(turns);
        if first {
            // A tree entered for the first time since the open: nothing
            // holds its orphans, which a crash or a close left.
            self.finish_orphans()?;
            if lock(&self.fs).log.has_dirty() {
                self.checkpoint()?;
            }
        }
        Ok(())
    }

    /// Leaves the live tree compact before it is kept (DESIGN.md, "A tree
    /// is left compact"): when the log is short of free segments, or the
    /// tree's blocks lie loose (its record would pin more than twice the
    /// segments they fill), the cleaner moves them out of the segments it
    /// fills least, those the other trees taking turns pin among them, so
    /// that what its record pins while it is kept is about what it holds
    /// live. The cleaning lock is held.
    fn leave_compact(&self) -> Result<()> {
        let threshold = self.clean_threshold();
        let victims = {
            let mut fs = lock(&self.fs);
            let short = fs.log.free_segments() < threshold;
            fs.log.load_segment_usage()?;
            if !short && !fs.log.live_tree_is_loose() {
                return Ok(());
            }
            fs.log.pick_victims_moving(Policy::Greedy, LEAVE_VICTIMS, LEAVE_UTILIZATION)
        };
        if victims.is_empty() {
            return Ok(());
        }
        // The switch's own checkpoints free what only this tree held there.
        let req =
            CleanRequest { max_segments: victims.len(), policy: Policy::Greedy, max_utilization: 1.0, free_now: false };
        match self.clean_locked(req, Some(victims), &mut |_, _| {}) {
            // No room to move more: the switch goes on with what moved.
            Ok(_) | Err(Error::NoSpace(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Refuses `what` (a deletion) while the kernel holds inodes of tree
    /// `name` kept beside the live one; else forgets the tree (a clone
    /// made later under its name is entered for the first time).
    pub(super) fn refuse_tree_held(&self, name: &str, what: &str) -> Result<()> {
        let mut kept = self.gate.kept_refs.lock().unwrap_or_else(PoisonError::into_inner);
        match kept.get(name) {
            Some(r) if !r.is_empty() => Err(Error::Busy(format!(
                "{name} is in use ({} inodes held open or looked up): it is not {what}",
                r.len()
            ))),
            _ => {
                kept.remove(name);
                Ok(())
            }
        }
    }
}
