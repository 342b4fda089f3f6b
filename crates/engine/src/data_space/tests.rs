//! The allocator's rules: contiguity, deferred frees, reservations, groups.

use super::*;

#[test]
fn fresh_space_has_block_zero_in_use() {
    let s = DataSpace::new(1000, 256, false);
    assert_eq!(s.free_blocks(), 999);
    assert_eq!(s.groups.len(), 4);
    assert_eq!(s.groups.get(3).free_blocks, 1000 - 768);
}

#[test]
fn sequential_allocations_are_contiguous() {
    let mut s = DataSpace::new(10_000, 1024, false);
    s.reserve(30).unwrap();
    let (a, la) = s.allocate(DataBlock(1), 10).unwrap().unwrap();
    let (b, _) = s.allocate(DataBlock(a.0 + u64::from(la)), 20).unwrap().unwrap();
    assert_eq!((a, la), (DataBlock(1), 10));
    assert_eq!(b, DataBlock(11));
    assert_eq!(s.reserved(), 0);
}

#[test]
fn frees_wait_for_durability() {
    let mut s = DataSpace::new(100, 64, false);
    s.reserve(99).unwrap();
    let (a, n) = s.allocate(DataBlock(0), 99).unwrap().unwrap();
    assert_eq!((a, n), (DataBlock(1), 99));
    assert!(s.allocate(DataBlock(0), 1).unwrap().is_none());
    s.free_deferred(a, 10).unwrap();
    assert!(s.allocate(DataBlock(0), 1).unwrap().is_none(), "reused before durable");
    assert_eq!(s.free_for_statfs(), 10);
    s.release(Seq(1000));
    assert!(s.allocate(DataBlock(0), 1).unwrap().is_none(), "released before its group was sealed");
    s.seal_frees(Seq(5));
    s.release(Seq(4));
    assert!(s.allocate(DataBlock(0), 1).unwrap().is_none());
    s.release(Seq(5));
    s.reserve(5).unwrap();
    assert_eq!(s.allocate(DataBlock(0), 5).unwrap(), Some((a, 5)));
}

#[test]
#[should_panic(expected = "marked free")]
fn freeing_blocks_not_in_use_is_a_bug_asserted() {
    let mut s = DataSpace::new(100, 64, false);
    s.free_deferred(DataBlock(10), 2).unwrap();
}

#[test]
#[should_panic(expected = "freed twice")]
fn freeing_blocks_twice_before_the_first_free_is_durable_is_a_bug_asserted() {
    let mut s = DataSpace::new(100, 64, false);
    s.reserve(4).unwrap();
    let (a, n) = s.allocate(DataBlock(1), 4).unwrap().unwrap();
    s.free_deferred(a, n).unwrap();
    assert!(s.check_free(DataBlock(a.0 + 1), 1).unwrap().is_some(), "a caller can tell first");
    s.free_deferred(DataBlock(a.0 + 1), 1).unwrap();
}

#[test]
#[should_panic(expected = "unreserving")]
fn returning_more_than_was_reserved_is_a_bug_asserted() {
    let mut s = DataSpace::new(100, 64, false);
    s.reserve(2).unwrap();
    s.unreserve(3);
}

#[test]
#[should_panic(expected = "beyond the device")]
fn a_range_beyond_the_device_is_never_clamped() {
    let mut s = DataSpace::new(100, 64, false);
    s.mark_used(DataBlock(98), 4).unwrap();
}

#[test]
fn reservations_are_bounded_by_free_space() {
    let mut s = DataSpace::new(100, 64, false);
    s.reserve(99).unwrap();
    assert!(matches!(s.reserve(1), Err(Error::NoSpace(DeviceRole::Data))));
    s.unreserve(9);
    s.reserve(9).unwrap();
}

#[test]
fn directories_go_to_the_emptiest_group() {
    let mut s = DataSpace::new(4096, 1024, false);
    s.reserve(500).unwrap();
    s.allocate(DataBlock(0), 500).unwrap().unwrap();
    let g = s.bind_directory().unwrap();
    assert_eq!(g, GroupNo(1));
    assert_eq!(s.bind_directory().unwrap(), GroupNo(2));
    assert_eq!(s.bind_directory().unwrap(), GroupNo(3));
    assert_eq!(s.bind_directory().unwrap(), GroupNo(1));
}

#[test]
fn a_subdirectory_stays_in_its_parents_group_while_a_quarter_is_free() {
    let mut s = DataSpace::new(4096, 1024, false);
    assert_eq!(s.bind_subdirectory(GroupNo(2)).unwrap(), GroupNo(2));
    // Group 2 at 769 of 1024 used: a quarter free no longer.
    s.reserve(769).unwrap();
    let (at, len) = s.allocate(DataBlock(2048), 769).unwrap().unwrap();
    assert_eq!((at, len), (DataBlock(2048), 769));
    assert_eq!(s.bind_subdirectory(GroupNo(2)).unwrap(), GroupNo(3));
    // Past the last group it wraps round.
    s.reserve(1000).unwrap();
    s.allocate(DataBlock(3072), 1000).unwrap().unwrap();
    assert_eq!(s.bind_subdirectory(GroupNo(2)).unwrap(), GroupNo(0));
}

#[test]
fn growing_adds_free_blocks_and_groups_and_keeps_the_tail_in_use() {
    let mut s = DataSpace::new(100, 64, false);
    s.reserve(s.available()).unwrap();
    while s.allocate(DataBlock(0), 1000).unwrap().is_some() {}
    s.grow(300).unwrap();
    assert_eq!(s.groups.len(), 5);
    assert_eq!(s.free_blocks(), 200);
    assert!(s.all_free(DataBlock(100), 200).unwrap());
    assert!(!s.all_free(DataBlock(99), 1).unwrap());
    let total: u64 = (0..s.groups.len()).map(|g| u64::from(s.groups.get(g).free_blocks)).sum();
    assert_eq!(total, 200);
    s.reserve(200).unwrap();
    let mut got = 0;
    while let Some((b, n)) = s.allocate(DataBlock(0), 1000).unwrap() {
        assert!(b.0 >= 100 && b.0 + u64::from(n) <= 300);
        got += u64::from(n);
    }
    assert_eq!(got, 200);
}

#[test]
fn bits_beyond_the_device_are_never_handed_out() {
    let mut s = DataSpace::new(70, 64, false);
    s.reserve(69).unwrap();
    let mut got = 0;
    while let Some((b, n)) = s.allocate(DataBlock(0), 100).unwrap() {
        assert!(b.0 + u64::from(n) <= 70);
        got += n;
    }
    assert_eq!(got, 69);
}
