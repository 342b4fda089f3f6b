//! Unit tests of the chunked, sparse IFile table.

use super::*;
use crate::types::Seq;

/// A dense table of `len` entries (every block written at the next
/// checkpoint, as on a volume without `SPARSE_IFILE`).
fn dense<E: Entry>(id: TableId, len: usize) -> Table<E> {
    Table::new(id, len, Fresh::Default, false)
}

#[test]
fn blocks_round_trip_and_dirty_tracking_follows_sets() {
    let mut t: Table<SegUsage> = dense(TableId::SegmentUsage, 600);
    assert_eq!(t.block_count(), 3);
    assert_eq!(t.dirty_blocks(), vec![0, 1, 2]);
    for b in 0..3 {
        t.set_address(b, MetaBlock(10 + u64::from(b)));
    }
    assert!(!t.is_dirty());
    t.set(300, SegUsage { live_bytes: 4096, ifile_blocks: 0, last_seq: Seq(3) });
    assert_eq!(t.dirty_blocks(), vec![1]);
    let p = t.encode_block(1);
    let mut u: Table<SegUsage> = dense(TableId::SegmentUsage, 600);
    u.decode_block(1, &p).unwrap();
    assert_eq!(u.get(300), t.get(300));
    assert!(u.decode_block(1, &p[..p.len() - 1]).is_err());
    assert!(u.decode_block(7, &p).is_err());
}

/// A table of three written blocks, all clean.
fn written(len: usize) -> Table<ImapEntry> {
    let mut t: Table<ImapEntry> = dense(TableId::InodeMap, len);
    for i in 0..len {
        t.set(i, ImapEntry { generation: i as u32, ..ImapEntry::default() });
    }
    for b in 0..t.block_count() as u32 {
        t.set_address(b, MetaBlock(100 + u64::from(b)));
    }
    t
}

#[test]
fn a_clean_block_given_back_reads_again_as_it_was() {
    let per = TableId::InodeMap.per_block();
    let mut t = written(2 * per + 5);
    let payload = t.encode_block(1);
    assert!(t.is_evictable(1));
    t.evict(1);
    assert_eq!((t.loaded_blocks(), t.unloaded_blocks()), (2, 1));
    assert!(!t.is_loaded(1) && !t.is_evictable(1));
    // The other blocks are untouched, and the last one can still grow.
    assert_eq!(t.get(per - 1).generation, per as u32 - 1);
    t.grow(2 * per + 6);
    assert_eq!(t.get(2 * per + 5), ImapEntry::default());
    t.decode_block(1, &payload).unwrap();
    assert_eq!(t.unloaded_blocks(), 0);
    assert_eq!(t.get(per + 3).generation, per as u32 + 3);
    assert_eq!(t.entries().count(), 2 * per + 6);
    assert_eq!(t.dirty_blocks(), vec![2], "reading a block back does not dirty it");
}

#[test]
fn a_dirty_or_unwritten_block_is_not_evictable() {
    let mut t = written(600);
    t.set(3, ImapEntry::default());
    assert!(!t.is_evictable(0), "dirty");
    t.grow(2000);
    assert!(!t.is_evictable(t.block_count() as u32 - 1), "never written");
    assert!(t.is_evictable(1));
}

#[test]
#[should_panic(expected = "given back while dirty")]
fn giving_back_a_dirty_block_is_a_bug_asserted() {
    let mut t = written(600);
    t.update(1, |e| e.generation += 1);
    t.evict(0);
}

#[test]
#[should_panic(expected = "used before its block 1 was loaded")]
fn an_entry_of_a_block_given_back_is_never_read_as_default() {
    let per = TableId::InodeMap.per_block();
    let mut t = written(2 * per);
    t.evict(1);
    let _ = t.get(per);
}

#[test]
fn truncation_resets_the_entries_cut_off() {
    let mut t: Table<u64> = dense(TableId::NodeMap, 20);
    t.set(15, 7);
    t.truncate(10);
    t.grow(20);
    assert_eq!(t.get(15), 0);
    assert_eq!(t.entries().count(), 20);
}

#[test]
fn adopting_compares_a_block_not_in_memory_by_address() {
    let per = TableId::InodeMap.per_block();
    let mut t = written(3 * per);
    let mut other = t.clone();
    // Block 2 of the other tree lies elsewhere, with the same bytes.
    other.set_address(2, MetaBlock(500));
    t.evict(0);
    t.evict(2);
    t.adopt(other);
    assert_eq!(t.dirty_blocks(), vec![2], "block 0 is the one both trees name, block 2 is not");
    assert_eq!((t.address(0), t.address(1)), (MetaBlock(100), MetaBlock(101)));
    assert_eq!(t.unloaded_blocks(), 0, "the adopted table is whole");
}

/// A shorter table adopted: the outgoing tree's blocks past its end are
/// cut off, so that the next checkpoint takes them from their segments'
/// counts of IFile blocks (a clone of few inodes mounted after a tree of
/// many left them counted for ever, which fsck named as I7).
#[test]
fn adopting_a_shorter_table_cuts_off_the_blocks_past_its_end() {
    let per = TableId::InodeMap.per_block();
    let mut t = written(3 * per);
    let other = written(per);
    t.adopt(other);
    assert_eq!(t.block_count(), 1);
    assert_eq!(t.cut_addresses(), [MetaBlock(101), MetaBlock(102)]);
}

/// A tree whose last node-map block was never written adopts the
/// outgoing tree's block of the same (default) entries by address: it must
/// still be in memory, as every block of an adopted table is, or the map
/// cannot grow there.
#[test]
fn an_adopted_block_never_written_stays_at_hand() {
    let per = TableId::NodeMap.per_block();
    // Outgoing: two blocks written, the second all defaults (nodes freed).
    let mut t: Table<u64> = Table::new(TableId::NodeMap, 2 * per, Fresh::Default, true);
    t.set(3, 9);
    t.set(per, 0);
    t.set_address(0, MetaBlock(100));
    t.set_address(1, MetaBlock(101));
    // Incoming: as long, its second block never written.
    let mut other: Table<u64> = Table::new(TableId::NodeMap, per + 1, Fresh::Default, true);
    other.set(3, 9);
    other.set_address(0, MetaBlock(100));
    other.grow(2 * per);
    t.adopt(other);
    assert_eq!(t.unloaded_blocks(), 0, "the adopted table is whole");
    assert!(t.is_loaded(1));
    t.grow(2 * per + 1);
    assert_eq!(t.get(2 * per), 0);
}

#[test]
fn a_block_decoded_detached_leaves_the_table_as_it_was() {
    let per = TableId::InodeMap.per_block();
    let mut t = written(2 * per);
    let payload = t.encode_block(1);
    t.evict(1);
    let entries = t.decode_detached(1, &payload).unwrap();
    assert_eq!(entries[3].generation, per as u32 + 3);
    assert!(!t.is_loaded(1));
    assert!(t.decode_detached(2, &payload).is_err(), "past the table");
}

#[test]
fn growth_dirties_only_new_blocks() {
    let mut t: Table<u64> = dense(TableId::NodeMap, 10);
    t.set_address(0, MetaBlock(5));
    t.grow(2000);
    assert_eq!(t.block_count(), 4);
    assert_eq!(t.dirty_blocks(), vec![0, 1, 2, 3]);
}

/// A sparse bitmap of a device of `total` blocks.
fn bitmap(total: u64) -> Table<u64> {
    Table::new(TableId::Bitmap, total.div_ceil(64) as usize, Fresh::Bitmap { total }, true)
}

#[test]
fn a_sparse_table_costs_nothing_until_an_entry_changes() {
    // 15 TiB of data blocks: 64 Mi words, 126,000 blocks, 251 chunks.
    let total = 15u64 << 28;
    let mut t = bitmap(total);
    assert_eq!((t.loaded_blocks(), t.unloaded_blocks(), t.dirty_count()), (0, 0, 0));
    assert_eq!(t.get(1_000_000), 0, "free");
    let last = t.len() - 1;
    assert_eq!(t.get(last), 0, "a device of whole words has no bit past its end");
    t.set(1_000_000, 1);
    assert_eq!((t.loaded_blocks(), t.dirty_blocks()), (1, vec![(1_000_000 / t.per_block()) as u32]));
    assert_eq!(t.chunks.len(), 1_000_000 / t.per_block() / CHUNK_BLOCKS + 1, "chunks up to the one changed");
    // The bits past the end of a device of 100 blocks are in use.
    let t = bitmap(100);
    assert_eq!(t.get(1), !0u64 << 36);
    let groups: Table<GroupDesc> =
        Table::new(TableId::GroupDesc, 3, Fresh::Groups { total: 2 * 1024 + 100, group_blocks: 1024 }, true);
    assert_eq!(groups.get(1).free_blocks, 1024);
    assert_eq!(groups.get(2).free_blocks, 100, "the last group is short");
}

#[derive(Debug)]
struct Index(Vec<MetaBlock>);
impl TableSource for Index {
    fn read_block(&self, _: TableId, _: u32, _: MetaBlock) -> Result<Vec<u8>> {
        Ok(vec![0xff; TableId::Bitmap.per_block() * 8])
    }
    fn read_index(&self, _: TableId, _: u32, _: MetaBlock) -> Result<Vec<MetaBlock>> {
        Ok(self.0.clone())
    }
}

#[test]
fn a_chunk_on_disk_is_read_before_its_blocks_and_names_some_never_written() {
    let per = TableId::Bitmap.per_block();
    let total = (3 * per * 64) as u64;
    let mut t = Table::<u64>::for_load(TableId::Bitmap, 3 * per, Fresh::Bitmap { total }, true);
    t.set_index_address(0, MetaBlock(900));
    assert_eq!(t.unloaded_blocks(), 3, "the whole chunk until its index is read");
    assert!(!t.is_loaded(0) && !t.chunk_known(0));
    // An index block listing fewer blocks than the chunk has: the rest never written.
    let source = Index(vec![MetaBlock(0), MetaBlock(700)]);
    t.load_block(0, &source).unwrap();
    assert_eq!(t.unloaded_blocks(), 1, "block 1 only");
    assert_eq!((t.address(0), t.address(2)), (MetaBlock(0), MetaBlock(0)));
    assert_eq!(t.get(5), 0, "fresh");
    t.load_block(1, &source).unwrap();
    assert_eq!(t.get(per + 5), !0, "read");
    assert_eq!(t.unloaded_blocks(), 0);
    assert_eq!(t.index_address(0), Some(MetaBlock(900)));
    assert_eq!(t.written_addresses().collect::<Vec<_>>(), vec![(1, MetaBlock(700))]);
}

#[test]
#[should_panic(expected = "used before it was loaded")]
fn an_entry_of_a_chunk_not_read_is_never_taken_for_fresh() {
    let per = TableId::Bitmap.per_block();
    let mut t = Table::<u64>::for_load(TableId::Bitmap, 2 * per, Fresh::Bitmap { total: 1 << 20 }, true);
    t.set_index_address(0, MetaBlock(900));
    t.update(3, |w| *w |= 1);
}

#[test]
fn a_dense_index_block_must_name_every_block() {
    let mut t = Table::<u64>::for_load(TableId::NodeMap, 2 * TableId::NodeMap.per_block(), Fresh::Default, false);
    assert!(t.install_chunk(0, MetaBlock(9), vec![MetaBlock(5)]).is_err(), "one block of two");
    assert!(t.install_chunk(0, MetaBlock(9), vec![MetaBlock(5), MetaBlock(0)]).is_err(), "one never written");
    t.install_chunk(0, MetaBlock(9), vec![MetaBlock(5), MetaBlock(6)]).unwrap();
    assert_eq!(t.unloaded_blocks(), 2);
}
