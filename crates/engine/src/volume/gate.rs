//! Writable trees served beside each other (DESIGN.md, "Writable trees
//! beside the live one"): one tree is entered at a time, and an operation
//! on another tree first makes that one the live tree, as a switch does,
//! keeping the references the kernel holds in the tree that goes.
//!
//! The gate admits operations of the entered tree while its turn lasts
//! (DESIGN.md, "Turns that last"): a waiting tree takes over once the
//! entered tree has been idle for [`GRACE`] with it waiting, or has held
//! the volume for [`SLICE`]; past the slice the entered tree admits
//! nothing new until the other had its turn. An fsync waiting ends the
//! turn at the next drain after [`MIN_TURN`] (DESIGN.md, "An fsync does
//! not wait out a turn"). A tree served alone, with nothing waiting,
//! passes without the gate's lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{CleanRequest, Volume, lock};
use crate::error::{Error, Result};
use crate::faults::{self, Fault};
use crate::meta_log::cleaner::Policy;
use crate::namespace::refs::Refs;

/// The longest turn while another tree's operations wait: past it the
/// entered tree admits nothing new. It bounds what an fsync in a waiting
/// tree waits for (the turn, then a switch), and two busy trees pay a
/// switch (two checkpoints, the maps compared) per slice (DESIGN.md,
/// "Turns that last": 100 ms, against 50 and 200 measured).
pub const SLICE: Duration = Duration::from_millis(100);

/// How long the entered tree keeps its turn idle while another tree's
/// operations wait: its requests drain between any two FUSE requests, so
/// a waiting tree taking over at the drain would switch per request. Long
/// against the gap between two requests of a busy writer on a loaded
/// machine (2 ms let a switch in every few requests there), short against
/// a switch.
pub const GRACE: Duration = Duration::from_millis(10);

/// The shortest turn an operation in a hurry (an fsync) lets the entered
/// tree have: a tree whose turn ended at once, again and again, would
/// make no progress between switches.
pub const MIN_TURN: Duration = Duration::from_millis(10);

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
    /// Operations admitted under the lock and not yet done.
    active: usize,
    /// A switch is under way.
    switching: bool,
    /// Operations waiting, by the tree they want.
    waiting: BTreeMap<String, usize>,
    /// Of those, operations in a hurry (an fsync): by the tree they want.
    hurrying: BTreeMap<String, usize>,
    /// When the entered tree was entered (the machine's clock: only
    /// fairness depends on it, never what is written); none: since the
    /// open, its turn over as soon as another tree waits.
    since: Option<Instant>,
    /// When the entered tree's operations last drained, and whether
    /// another tree's waited then (none: not since it was entered).
    drained: Option<(Instant, bool)>,
    /// The entered tree made something durable (an fsync was admitted)
    /// in this turn.
    turn_fsynced: bool,
    /// Trees whose last turn made something durable: their next turn
    /// comes in a hurry (`GateState::hurries`).
    fsyncing: BTreeSet<String>,
    /// The writable trees served (`Volume::serve_tree`): by name, their
    /// id and how many connections serve each.
    served: BTreeMap<String, (u64, usize)>,
    /// The id the next tree served gets (0 is none).
    next_id: u64,
}

/// Where the time of taking turns goes (`dualfs stats`): what an
/// operation of a tree not entered waits for, and what each part of a
/// switch costs. Microseconds, summed; the largest wait apart.
#[derive(Debug, Default)]
pub(super) struct TurnCosts {
    /// Switches of the live tree made through the gate.
    switches: AtomicU64,
    /// Operations that waited at the gate (for another tree's turn or a
    /// switch), and how long they waited, their own switch included.
    waits: AtomicU64,
    wait_us: AtomicU64,
    wait_max_us: AtomicU64,
    /// Of those, operations in a hurry (an fsync).
    fsync_waits: AtomicU64,
    fsync_wait_us: AtomicU64,
    /// Whole switches, from the gate's decision to the incoming tree
    /// entered.
    total_us: AtomicU64,
    /// Waiting for the cleaning and the commit locks (a write-back step
    /// or a cleaning pass under way).
    locks_us: AtomicU64,
    /// Leaving the outgoing tree compact.
    compact_us: AtomicU64,
    /// The outgoing tree's commit, and the data blocks it wrote back.
    commit_us: AtomicU64,
    commit_data_blocks: AtomicU64,
    /// The checkpoint after that commit.
    checkpoint_us: AtomicU64,
    /// The switch's own checkpoint (the outgoing tree kept, the incoming
    /// one named), and loading the incoming tree after it.
    switch_us: AtomicU64,
}

/// Microseconds since `t`.
fn micros_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl TurnCosts {
    /// Counts one part of a switch that began at `t`.
    pub(super) fn part(&self, which: SwitchPart, t: Instant) {
        let c = match which {
            SwitchPart::Total => &self.total_us,
            SwitchPart::Locks => &self.locks_us,
            SwitchPart::Compact => &self.compact_us,
            SwitchPart::Commit => &self.commit_us,
            SwitchPart::Checkpoint => &self.checkpoint_us,
            SwitchPart::Switch => &self.switch_us,
        };
        c.fetch_add(micros_since(t), Ordering::Relaxed);
    }

    pub(super) fn commit_data(&self, blocks: u64) {
        self.commit_data_blocks.fetch_add(blocks, Ordering::Relaxed);
    }

    fn waited(&self, t: Instant, fsync: bool) {
        let us = micros_since(t);
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.wait_us.fetch_add(us, Ordering::Relaxed);
        self.wait_max_us.fetch_max(us, Ordering::Relaxed);
        if fsync {
            self.fsync_waits.fetch_add(1, Ordering::Relaxed);
            self.fsync_wait_us.fetch_add(us, Ordering::Relaxed);
        }
    }

    /// The counters, named for `Volume::stats`.
    pub(super) fn named(&self) -> [(&'static str, u64); 13] {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("tree_switches", l(&self.switches)),
            ("tree_waits", l(&self.waits)),
            ("tree_wait_us", l(&self.wait_us)),
            ("tree_wait_max_us", l(&self.wait_max_us)),
            ("tree_fsync_waits", l(&self.fsync_waits)),
            ("tree_fsync_wait_us", l(&self.fsync_wait_us)),
            ("tree_switch_total_us", l(&self.total_us)),
            ("tree_switch_locks_us", l(&self.locks_us)),
            ("tree_switch_compact_us", l(&self.compact_us)),
            ("tree_switch_commit_us", l(&self.commit_us)),
            ("tree_switch_commit_data_blocks", l(&self.commit_data_blocks)),
            ("tree_switch_checkpoint_us", l(&self.checkpoint_us)),
            ("tree_switch_us", l(&self.switch_us)),
        ]
    }
}

/// The parts of a switch [`TurnCosts`] times.
#[derive(Clone, Copy, Debug)]
pub(super) enum SwitchPart {
    Total,
    Locks,
    Compact,
    Commit,
    Checkpoint,
    Switch,
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
    /// The id of the tree served alone, entered, with nothing waiting:
    /// its operations pass without the lock (0: none). Cleared under the
    /// lock before anything else may enter.
    solo: AtomicU64,
    /// Operations admitted without the lock and not yet done: a switch
    /// waits for them as for `active`.
    solo_active: AtomicUsize,
    /// Where the time of taking turns goes.
    pub(super) costs: TurnCosts,
}

/// An operation admitted into its tree: the tree stays entered until the
/// guard goes.
#[derive(Debug)]
pub struct TreeGuard<'a> {
    vol: &'a Volume,
    /// Admitted without the lock, as tree `solo` served alone.
    solo: Option<u64>,
}

impl Drop for TreeGuard<'_> {
    fn drop(&mut self) {
        let gate = &self.vol.gate;
        if let Some(id) = self.solo {
            gate.solo_done(id);
            return;
        }
        let mut g = gate.lock_state();
        g.active -= 1;
        if g.active == 0 && gate.solo_active.load(Ordering::SeqCst) == 0 {
            g.drain(Instant::now());
            gate.turn.notify_all();
        }
    }
}

/// A writable tree served ([`Volume::serve_tree`]): while it lives, the
/// tree is neither deleted nor switched to by a mount, and the refusal
/// names where it is served. Its operations enter it through
/// [`Volume::enter_served`].
#[derive(Debug)]
pub struct TreeServed {
    pub(super) _use: super::in_use::TreeUse,
    gate: Arc<Gate>,
    name: String,
    id: u64,
}

impl Drop for TreeServed {
    fn drop(&mut self) {
        let mut g = self.gate.lock_state();
        if let Some((_, n)) = g.served.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                g.served.remove(&self.name);
            }
        }
        self.gate.refresh_solo(&g);
    }
}

impl GateState {
    /// Whether an operation of a tree other than `name` waits.
    fn others_wait(&self, name: &str) -> bool {
        self.waiting.iter().any(|(t, n)| t != name && *n > 0)
    }

    /// Whether an operation of a tree other than `name` waits in a hurry
    /// (an fsync).
    fn others_hurry(&self, name: &str) -> bool {
        self.hurrying.iter().any(|(t, n)| t != name && *n > 0)
    }

    /// Notes that the entered tree's operations drained at `now`.
    fn drain(&mut self, now: Instant) {
        let opposed = self.entered.as_deref().is_some_and(|e| self.others_wait(e));
        self.drained = Some((now, opposed));
    }

    /// How long a waiting tree still waits before it may take over at
    /// `now`, no operation running (zero: at once). The entered tree's
    /// turn lasts while it stays busy: it ends when the tree has held the
    /// volume for [`SLICE`], or has been idle for [`GRACE`] since its
    /// operations drained with another tree waiting. A tree idle when
    /// the other came (drained with nothing waiting) is taken over at once.
    /// An operation waiting in a hurry (`hurry`, the waiter's own, or
    /// another's) ends the turn at the drain once the tree has held the
    /// volume [`MIN_TURN`].
    fn wait_before_switch(&self, now: Instant, hurry: bool) -> Duration {
        let Some(since) = self.since else {
            return Duration::ZERO;
        };
        let held = now.saturating_duration_since(since);
        let hurry = hurry || self.entered.as_deref().is_some_and(|e| self.others_hurry(e));
        match self.drained {
            _ if held >= SLICE => Duration::ZERO,
            _ if hurry && held >= MIN_TURN => Duration::ZERO,
            Some((at, true)) => {
                let idle = now.saturating_duration_since(at);
                let wait = GRACE.saturating_sub(idle).min(SLICE - held);
                if hurry { wait.min(MIN_TURN - held) } else { wait }
            }
            None | Some((_, false)) => Duration::ZERO,
        }
    }

    /// Whether the turn of the entered tree `name` is over at `now` for
    /// a new operation of its own: another tree waits and may take over.
    fn turn_over(&self, name: &str, now: Instant) -> bool {
        if !self.others_wait(name) {
            return false;
        }
        if self.active == 0 {
            return self.wait_before_switch(now, false).is_zero();
        }
        // Busy: nothing new once the slice is over, or the minimum turn
        // with an operation waiting in a hurry; it takes over at the drain.
        let end = if self.others_hurry(name) { MIN_TURN } else { SLICE };
        self.since.is_none_or(|t| now.saturating_duration_since(t) >= end)
    }

    /// Whether an operation of `name`, a tree not entered, waits in a
    /// hurry: it makes something durable (`durable`: an fsync), or its
    /// tree's last turn did. A program that fsyncs writes first, and the
    /// kernel's fsync sends the pages and the times (WRITE, SETATTR)
    /// before the FSYNC: the first of them is what waits for the other
    /// tree's turn (DESIGN.md, "An fsync does not wait out a turn").
    fn hurries(&self, name: &str, durable: bool) -> bool {
        durable || self.fsyncing.contains(name)
    }

    /// Notes that the entered tree's turn ends: whether it made something
    /// durable decides whether its next turn comes in a hurry.
    fn turn_ends(&mut self) {
        if let Some(e) = self.entered.clone() {
            if self.turn_fsynced {
                self.fsyncing.insert(e);
            } else {
                self.fsyncing.remove(&e);
            }
        }
        self.turn_fsynced = false;
    }

    /// The id of the one tree served, if only one is.
    fn served_alone(&self) -> Option<(&str, u64)> {
        let mut it = self.served.iter();
        match (it.next(), it.next()) {
            (Some((name, (id, _))), None) => Some((name.as_str(), *id)),
            _ => None,
        }
    }
}

impl Gate {
    fn lock_state(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets operations of the tree served alone pass without the lock
    /// when it is entered and nothing waits or switches; else makes
    /// every operation take the lock.
    fn refresh_solo(&self, g: &GateState) {
        let solo = match g.served_alone() {
            Some((name, id))
                if g.entered.as_deref() == Some(name) && !g.switching && !g.waiting.values().any(|n| *n > 0) =>
            {
                id
            }
            _ => 0,
        };
        self.solo.store(solo, Ordering::SeqCst);
    }

    /// An operation admitted without the lock as tree `id` is done: the
    /// last one wakes whoever waits once the path is closed.
    fn solo_done(&self, id: u64) {
        // SeqCst with the closing side (solo cleared, then solo_active
        // read): either the closer sees this operation, or this sees the
        // path closed and wakes it.
        if self.solo_active.fetch_sub(1, Ordering::SeqCst) == 1 && self.solo.load(Ordering::SeqCst) != id {
            let mut g = self.lock_state();
            if g.active == 0 {
                g.drain(Instant::now());
            }
            self.turn.notify_all();
        }
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
        self.enter_tree_for(name, false)
    }

    /// [`Volume::enter_tree`] for an operation that makes something
    /// durable (`durable`: an fsync), which the gate counts apart.
    ///
    /// # Errors
    /// As [`Volume::enter_tree`].
    pub fn enter_tree_for(&self, name: &str, durable: bool) -> Result<TreeGuard<'_>> {
        let gate = &self.gate;
        let mut g = gate.lock_state();
        // Set once this operation waits: the time it waited is counted
        // (an fsync's apart).
        let mut waited: Option<Instant> = None;
        loop {
            if g.entered.is_none() {
                // The live tree as the log names it (opened so, or
                // switched to outside the gate).
                g.entered = Some(self.live_tree());
            }
            // Broken on purpose: the operation runs in whatever tree is
            // entered, its changes made durable with that tree's maps.
            let here = g.entered.as_deref() == Some(name) || faults::active(Fault::EnterWithoutSwitch);
            let now = Instant::now();
            let mut timeout = None;
            let hurry = g.hurries(name, durable);
            if here && !g.switching {
                if !g.turn_over(name, now) {
                    g.active += 1;
                    g.turn_fsynced |= durable;
                    gate.refresh_solo(&g);
                    if let Some(t) = waited {
                        gate.costs.waited(t, durable);
                    }
                    return Ok(TreeGuard { vol: self, solo: None });
                }
            } else if !here {
                // Another tree's turn comes: nothing passes unseen now.
                gate.solo.store(0, Ordering::SeqCst);
                if g.active == 0 && !g.switching && gate.solo_active.load(Ordering::SeqCst) == 0 {
                    let wait = g.wait_before_switch(now, hurry);
                    if wait.is_zero() {
                        let t = *waited.get_or_insert(now);
                        g = self.gate_switch(g, name)?;
                        g.active += 1;
                        g.turn_fsynced |= durable;
                        gate.costs.waited(t, durable);
                        return Ok(TreeGuard { vol: self, solo: None });
                    }
                    timeout = Some(wait);
                }
            }
            waited.get_or_insert(now);
            *g.waiting.entry(name.to_string()).or_default() += 1;
            if hurry {
                *g.hurrying.entry(name.to_string()).or_default() += 1;
            }
            g = match timeout {
                Some(d) => gate.turn.wait_timeout(g, d).unwrap_or_else(PoisonError::into_inner).0,
                None => gate.turn.wait(g).unwrap_or_else(PoisonError::into_inner),
            };
            if let Some(n) = g.waiting.get_mut(name) {
                *n -= 1;
            }
            if hurry && let Some(n) = g.hurrying.get_mut(name) {
                *n -= 1;
            }
        }
    }

    /// Admits one operation on the tree `served` serves, as
    /// [`Volume::enter_tree`]; while it is the only tree served, entered,
    /// and nothing waits, without taking the gate's lock.
    ///
    /// # Errors
    /// As [`Volume::enter_tree`].
    pub fn enter_served(&self, served: &TreeServed) -> Result<TreeGuard<'_>> {
        self.enter_served_for(served, false)
    }

    /// [`Volume::enter_served`] for an operation that makes something
    /// durable, as [`Volume::enter_tree_for`].
    ///
    /// # Errors
    /// As [`Volume::enter_tree`].
    pub fn enter_served_for(&self, served: &TreeServed, durable: bool) -> Result<TreeGuard<'_>> {
        let gate = &self.gate;
        if Arc::ptr_eq(&served.gate, gate) && gate.solo.load(Ordering::SeqCst) == served.id {
            gate.solo_active.fetch_add(1, Ordering::SeqCst);
            // Checked again after counting in: a tree that closes the
            // path then reads the count, and waits for this operation.
            if gate.solo.load(Ordering::SeqCst) == served.id {
                return Ok(TreeGuard { vol: self, solo: Some(served.id) });
            }
            gate.solo_done(served.id);
        }
        self.enter_tree_for(&served.name, durable)
    }

    /// Registers `name` as served by one more connection with the gate.
    pub(super) fn gate_serve(&self, name: &str, held: super::in_use::TreeUse) -> TreeServed {
        let gate = &self.gate;
        let mut g = gate.lock_state();
        let id = match g.served.get(name) {
            Some((id, _)) => *id,
            None => {
                g.next_id += 1;
                g.next_id
            }
        };
        g.served.entry(name.to_string()).or_insert((id, 0)).1 += 1;
        gate.refresh_solo(&g);
        TreeServed { _use: held, gate: gate.clone(), name: name.to_string(), id }
    }

    /// Switches the gate to tree `name`, no operation running: the switch
    /// runs with the gate's lock let go, every other tree's operations
    /// waiting for it.
    fn gate_switch<'g>(&'g self, mut g: MutexGuard<'g, GateState>, name: &str) -> Result<MutexGuard<'g, GateState>> {
        let gate = &self.gate;
        g.switching = true;
        g.turn_ends();
        gate.solo.store(0, Ordering::SeqCst);
        let t = Instant::now();
        drop(g);
        let switched = self.switch_serving(name);
        gate.costs.part(SwitchPart::Total, t);
        let mut g = gate.lock_state();
        g.switching = false;
        gate.turn.notify_all();
        if let Err(e) = switched {
            // Whatever the switch did, the log says which tree is live.
            g.entered = None;
            return Err(e);
        }
        g.entered = Some(name.to_string());
        g.since = Some(Instant::now());
        g.drained = None;
        Ok(g)
    }

    /// Forgets what the gate knew of the entered tree (a switch outside
    /// it: the live tree is what the log names).
    pub(super) fn gate_forget_entered(&self) {
        let mut g = self.gate.lock_state();
        // The tree left ends its turn here, not in the next one's.
        g.turn_ends();
        g.entered = None;
        self.gate.refresh_solo(&g);
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
        let t = Instant::now();
        let _one_at_a_time = lock(&self.cleaning);
        gate.costs.part(SwitchPart::Locks, t);
        let t = Instant::now();
        self.leave_compact()?;
        gate.costs.part(SwitchPart::Compact, t);
        gate.costs.switches.fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Tree `a` entered `held` ago, its operations drained `idle` ago
    /// with `b` waiting.
    fn busy_a(now: Instant, held: Duration, idle: Duration) -> GateState {
        GateState {
            entered: Some("a".into()),
            since: Some(now - held),
            drained: Some((now - idle, true)),
            waiting: BTreeMap::from([("b".to_string(), 1)]),
            ..GateState::default()
        }
    }

    #[test]
    fn a_waiting_tree_does_not_take_over_between_two_requests_of_a_busy_one() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        // Drained a moment ago, well inside its slice: the turn lasts, and
        // `a`'s next request is admitted while `b` waits.
        let g = busy_a(now, ms(10), Duration::from_micros(50));
        let wait = g.wait_before_switch(now, false);
        assert!(wait > Duration::ZERO && wait <= GRACE, "{wait:?}");
        assert!(!g.turn_over("a", now));
        // Idle for the grace: `b` takes over, `a` waits.
        let g = busy_a(now, ms(10), GRACE);
        assert_eq!(g.wait_before_switch(now, false), Duration::ZERO);
        assert!(g.turn_over("a", now));
    }

    #[test]
    fn a_turn_ends_with_its_slice_however_busy_the_tree() {
        let now = Instant::now();
        let g = busy_a(now, SLICE, Duration::ZERO);
        assert_eq!(g.wait_before_switch(now, false), Duration::ZERO);
        assert!(g.turn_over("a", now));
        // Busy (an operation running) past its slice: nothing new admitted.
        let mut g = busy_a(now, SLICE + Duration::from_millis(1), Duration::ZERO);
        g.active = 1;
        assert!(g.turn_over("a", now));
        // Inside it, the grace never stretches the wait past the slice.
        let g = busy_a(now, SLICE - Duration::from_micros(100), Duration::ZERO);
        assert!(g.wait_before_switch(now, false) <= Duration::from_micros(100));
    }

    #[test]
    fn an_fsync_waiting_ends_a_busy_turn_at_its_minimum() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        // `a` busy (an operation running) past its minimum turn, inside
        // its slice: an ordinary waiter lets it go on, an fsync does not.
        let mut g = busy_a(now, MIN_TURN + ms(1), Duration::from_micros(50));
        g.active = 1;
        assert!(!g.turn_over("a", now));
        g.hurrying.insert("b".into(), 1);
        assert!(g.turn_over("a", now), "an fsync waits: nothing new of a");
        // Drained a moment ago: the fsync takes over without the grace.
        g.active = 0;
        assert_eq!(g.wait_before_switch(now, false), Duration::ZERO);
        // Inside the minimum turn, it waits for the rest of it only.
        let g = busy_a(now, ms(2), Duration::from_micros(50));
        assert!(!g.turn_over("a", now));
        let wait = g.wait_before_switch(now, true);
        assert!(wait > Duration::ZERO && wait <= MIN_TURN - ms(2), "{wait:?}");
        // An fsync of the entered tree itself hurries nothing.
        let mut g = busy_a(now, MIN_TURN + ms(1), Duration::ZERO);
        g.active = 1;
        g.hurrying.insert("a".into(), 1);
        assert!(!g.turn_over("a", now));
    }

    #[test]
    fn a_tree_whose_last_turn_fsynced_comes_back_in_a_hurry() {
        let now = Instant::now();
        // `b` entered and busy past its minimum turn; `a` left after a
        // turn in which it fsynced, its write now waiting.
        let mut g = busy_a(now, MIN_TURN + Duration::from_millis(1), Duration::ZERO);
        g.entered = Some("a".into());
        g.turn_fsynced = true;
        g.turn_ends();
        g.entered = Some("b".into());
        g.waiting = BTreeMap::from([("a".to_string(), 1)]);
        g.active = 1;
        assert!(g.hurries("a", false), "the write of a tree that fsyncs hurries");
        assert!(!g.turn_over("b", now), "an ordinary waiter lets b go on");
        g.hurrying.insert("a".into(), 1);
        assert!(g.turn_over("b", now), "a hurrying waiter ends b's turn at its minimum");
        // `b` never fsynced: its requests wait as any do.
        assert!(!g.hurries("b", false));
        assert!(g.hurries("b", true));
        // A turn of `a` without an fsync: its next one waits as any.
        g.entered = Some("a".into());
        g.turn_ends();
        assert!(!g.hurries("a", false));
    }

    #[test]
    fn a_tree_idle_when_another_comes_is_taken_over_at_once() {
        let now = Instant::now();
        let mut g = busy_a(now, Duration::from_millis(3), Duration::from_micros(10));
        g.drained = Some((now, false));
        assert_eq!(g.wait_before_switch(now, false), Duration::ZERO);
        // Nothing waits: the entered tree's turn never ends.
        g.waiting.clear();
        assert!(!g.turn_over("a", now + SLICE * 10));
    }

    #[test]
    fn only_a_tree_served_alone_entered_and_unopposed_passes_without_the_lock() {
        let gate = Gate::default();
        let mut g = GateState { entered: Some("a".into()), ..GateState::default() };
        g.served.insert("a".into(), (1, 2));
        gate.refresh_solo(&g);
        assert_eq!(gate.solo.load(Ordering::SeqCst), 1);
        g.waiting.insert("b".into(), 1);
        gate.refresh_solo(&g);
        assert_eq!(gate.solo.load(Ordering::SeqCst), 0, "another tree waits");
        g.waiting.clear();
        g.served.insert("b".into(), (2, 1));
        gate.refresh_solo(&g);
        assert_eq!(gate.solo.load(Ordering::SeqCst), 0, "two trees served");
        g.served.remove("a");
        gate.refresh_solo(&g);
        assert_eq!(gate.solo.load(Ordering::SeqCst), 0, "the tree served is not entered");
        g.entered = Some("b".into());
        g.switching = true;
        gate.refresh_solo(&g);
        assert_eq!(gate.solo.load(Ordering::SeqCst), 0, "a switch under way");
    }
}
