//! Model-based test: random operation sequences against the engine and the
//! reference model, compared after every step, fsck at the end.
//!
//! `DUALFS_MODEL_CASES` sets the number of sequences (default 500).

use std::time::Duration;

use dualfs_engine::volume::MountOptions;
use dualfs_sim::harness::{Harness, Op};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let sel = any::<u32>();
    let name = any::<u8>();
    let offset = prop_oneof![4 => 0u64..70_000, 1 => 1_000_000u64..3_000_000];
    prop_oneof![
        10 => (sel, name).prop_map(|(dir, name)| Op::Create { dir, name }),
        5 => (sel, name).prop_map(|(dir, name)| Op::Mkdir { dir, name }),
        2 => (sel, name).prop_map(|(dir, name)| Op::Mkfifo { dir, name }),
        3 => (sel, name, any::<u16>()).prop_map(|(dir, name, len)| Op::Symlink { dir, name, len }),
        15 => (sel, offset.clone(), 0u32..20_000, any::<u8>()).prop_map(|(file, offset, len, seed)| Op::Write { file, offset, len, seed }),
        5 => (sel, prop_oneof![0u64..70_000, 0u64..3_000_000]).prop_map(|(file, size)| Op::Truncate { file, size }),
        3 => (sel, offset, 0u64..40_000).prop_map(|(file, offset, len)| Op::Punch { file, offset, len }),
        6 => (sel, name).prop_map(|(dir, name)| Op::Unlink { dir, name }),
        4 => (sel, name).prop_map(|(dir, name)| Op::Rmdir { dir, name }),
        8 => (sel, name, sel, name, 0u8..3).prop_map(|(from, name, to, new_name, flags)| Op::Rename { from, name, to, new_name, flags }),
        4 => (sel, sel, name).prop_map(|(target, dir, name)| Op::Link { target, dir, name }),
        4 => (sel, name, any::<u16>(), any::<u8>()).prop_map(|(target, name, len, seed)| Op::SetXattr { target, name, len, seed }),
        2 => (sel, name).prop_map(|(target, name)| Op::RemoveXattr { target, name }),
        3 => (sel, any::<u16>()).prop_map(|(target, mode)| Op::Chmod { target, mode }),
        2 => sel.prop_map(|file| Op::Hold { file }),
        2 => sel.prop_map(|which| Op::Release { which }),
        2 => Just(Op::Reopen),
        2 => Just(Op::CrashAfterCommit),
        2 => Just(Op::Tick),
    ]
}

fn options() -> MountOptions {
    MountOptions {
        commit_interval: Duration::ZERO,
        checkpoint_blocks: 300,
        dirty_data_limit: 256 << 10,
        // A tiny cache: most reads go back to the log.
        cache_budget: 48,
        ..MountOptions::default()
    }
}

fn cases() -> u32 {
    std::env::var("DUALFS_MODEL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(500)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..120), inline_max in prop_oneof![Just(0u32), Just(150), Just(1024)]) {
        let mut h = Harness::with_inline_max(4096, 16384, options(), inline_max);
        for (i, op) in ops.iter().enumerate() {
            if let Err(e) = h.apply(op) {
                prop_assert!(false, "step {i}: {e}");
            }
            if let Err(e) = h.compare() {
                prop_assert!(false, "after step {i} ({op:?}): {e}");
            }
        }
        if let Err(e) = h.finish() {
            prop_assert!(false, "at the end: {e}");
        }
    }
}
