use super::hdd::{HDD5400, Hdd};
use super::predict::{Pattern, SplitMix, closed_loop, drain};
use super::*;

const GIB: u64 = 1 << 30;
const REV5400: f64 = 60_000.0 / 5400.0;

fn req(op: Op, offset: u64, len: u64) -> Request {
    Request { op, offset, len }
}

/// Runs the head until it has nothing left; the completions it reported.
fn run_head(d: &mut Drive) -> Vec<(Ticket, Ms)> {
    let mut done = Vec::new();
    while d.start_next().is_some() {
        done.extend(d.finish());
    }
    done
}

#[test]
fn seek_time_follows_the_square_root_of_the_distance() {
    let h = Hdd::new(HDD5400, 4 * GIB, true);
    let track = 10_000.0 * REV5400;
    assert_eq!(h.seek_ms(1000, 1000), 0.0);
    assert_eq!(h.seek_ms(0, (track as u64) - 1), 0.0, "same track: no seek");
    let next = h.seek_ms(0, track as u64 + 10);
    assert!(next > 1.5 && next < 1.65, "track to track {next}");
    assert!((h.seek_ms(0, 4 * GIB) - 21.0).abs() < 1e-9, "full stroke");
    let quarter = h.seek_ms(0, GIB);
    assert!((quarter - (1.5 + 19.5 * 0.5)).abs() < 1e-9, "a quarter of the disk: {quarter}");
    assert!((h.seek_ms(GIB, 0) - quarter).abs() < 1e-9, "either way");
    let mut last = 0.0;
    for i in 1..100u64 {
        let s = h.seek_ms(0, (i * 40) << 20);
        assert!(s > last, "longer seeks take longer");
        last = s;
    }
}

#[test]
fn rotation_waits_for_the_sector_to_come_round() {
    let h = Hdd::new(HDD5400, 4 * GIB, true);
    let track = 10_000.0 * REV5400;
    // A quarter of a track ahead of the platter's angle: a quarter turn.
    assert!((h.rotation_ms(0.0, (track / 4.0) as u64) - REV5400 / 4.0).abs() < 1e-3);
    // Just passed: nearly a whole turn.
    assert!(h.rotation_ms(REV5400 / 4.0 + 0.01, (track / 4.0) as u64) > REV5400 * 0.99);
    // Averaged over random times and places: half a turn.
    let mut rng = SplitMix(7);
    let n = 20_000;
    let mean =
        (0..n).map(|_| h.rotation_ms((rng.next() % 1_000_000) as f64 / 7.0, rng.next() % (4 * GIB))).sum::<f64>()
            / f64::from(n);
    assert!((mean - REV5400 / 2.0).abs() < 0.1, "mean rotational wait {mean}");
}

#[test]
fn back_to_back_sequential_reads_pay_one_positioning_then_media_time() {
    let mut d = Drive::new(Model::Hdd5400, 4 * GIB, true);
    let n = 64u64;
    for i in 0..n {
        assert!(matches!(d.submit(0.0, req(Op::Read, i * 4096, 4096)), Submitted::Later(_)));
    }
    let done = run_head(&mut d);
    assert_eq!(done.len() as u64, n);
    let end = done.iter().map(|&(_, t)| t).fold(0.0, f64::max);
    let media = (n * 4096) as f64 / 10_000.0;
    // The first read's command and rotation, then the media rate: each
    // later one continues where the last left off.
    assert!(end < 0.3 + REV5400 + media + 0.3, "{end} ms for {media} ms of media time");
    assert!(end > media, "{end}");
    assert_eq!(d.counters().streamed_reads, n - 1);
    assert!(d.counters().positioning_ms < REV5400, "{:?}", d.counters());
}

#[test]
fn a_read_inside_the_read_ahead_is_a_hit_and_one_past_it_streams() {
    let mut d = Drive::new(Model::Hdd5400, 4 * GIB, true);
    let base = GIB;
    assert!(matches!(d.submit(0.0, req(Op::Read, base, 4096)), Submitted::Later(_)));
    let end = d.start_next().unwrap();
    d.finish();
    // 10 ms later the drive has read 100 KB on.
    let now = end + 10.0;
    match d.submit(now, req(Op::Read, base + 64 * 1024, 4096)) {
        Submitted::At(t) => assert!((t - now - 0.3 - 4096.0 / 33_000.0).abs() < 1e-9),
        s => panic!("not a hit: {s:?}"),
    }
    assert_eq!(d.counters().read_ahead_hits, 1);
    // 20 KB past what it has read, on the same track: the head reads on
    // to it, no seek, no rotational wait of its own.
    let s = d.submit(now, req(Op::Read, base + 4096 + 120_000, 4096));
    assert!(matches!(s, Submitted::Later(_)));
    let done = d.start_next().unwrap();
    let expected = (20_000.0 + 4096.0) / 10_000.0;
    assert!((done - now - expected).abs() < 0.05, "{} vs {expected}", done - now);
    d.finish();
    assert_eq!(d.counters().streamed_reads, 1);
    // A write over the segment empties it.
    d.submit(done, req(Op::Write, base, 4096));
    assert!(matches!(d.submit(done + 50.0, req(Op::Read, base + 8192, 4096)), Submitted::Later(_)));
}

#[test]
fn cached_writes_answer_at_bus_speed_and_a_flush_waits_for_their_write_back() {
    let mut d = Drive::new(Model::Hdd5400, 4 * GIB, true);
    let mut t = 0.0;
    for i in 0..8u64 {
        match d.submit(t, req(Op::Write, i * 100 * 4096 * 1000, 4096)) {
            Submitted::At(at) => assert!((at - t - 0.3 - 4096.0 / 33_000.0).abs() < 1e-9),
            s => panic!("not cached: {s:?}"),
        }
        t += 0.01;
    }
    let Submitted::Later(flush) = d.submit(t, req(Op::Flush, 0, 0)) else { panic!("a flush with dirty data waits") };
    let mut busy_end = 0.0;
    let mut flushed = None;
    while let Some(end) = d.start_next() {
        busy_end = end;
        for (tk, at) in d.finish() {
            if tk == flush {
                flushed = Some(at);
            }
        }
    }
    let flushed = flushed.expect("the flush completes when the cache is empty");
    assert!((flushed - busy_end - 0.3).abs() < 1e-9, "{flushed} vs {busy_end}");
    let c = d.counters();
    assert_eq!((c.cached_writes, c.destages), (8, 8));
    assert!((c.busy_ms - (busy_end - 0.0)).abs() < 1.0 || c.busy_ms <= busy_end, "{c:?}");
    // Nothing dirty: the next flush is a command.
    assert!(matches!(d.submit(flushed, req(Op::Flush, 0, 0)), Submitted::At(_)));
}

#[test]
fn adjacent_cached_writes_go_back_as_one_and_reads_of_them_hit() {
    let mut d = Drive::new(Model::Hdd7200, 4 * GIB, true);
    for i in 0..32u64 {
        d.submit(0.0, req(Op::Write, GIB + i * 4096, 4096));
    }
    assert!(matches!(d.submit(0.0, req(Op::Read, GIB + 8192, 8192)), Submitted::At(_)));
    assert_eq!(d.counters().write_cache_hits, 1);
    run_head(&mut d);
    assert_eq!(d.counters().destages, 1);
    assert_eq!(d.counters().destage_bytes, 32 * 4096);
}

#[test]
fn a_full_write_cache_makes_writes_wait_for_room() {
    let mut d = Drive::new(Model::Hdd5400, 4 * GIB, true);
    // 512 KiB of cache: 128 scattered 4 KiB writes fill it.
    let mut later = Vec::new();
    for i in 0..130u64 {
        if let Submitted::Later(t) = d.submit(0.0, req(Op::Write, i * 7 * 4096 * 1000, 4096)) {
            later.push(t);
        }
    }
    assert_eq!(later.len(), 2);
    assert_eq!(d.counters().blocked_writes, 2);
    let first_end = d.start_next().unwrap();
    let done = d.finish();
    assert_eq!(done.len(), 1, "one write-back makes room for one write");
    assert!(done[0].1 > first_end);
    let rest = run_head(&mut d);
    assert_eq!(rest.len(), 1);
}

#[test]
fn without_a_write_cache_a_write_waits_for_the_platter_and_a_flush_is_a_command() {
    let mut d = Drive::new(Model::Hdd5400, 4 * GIB, false);
    assert!(matches!(d.submit(0.0, req(Op::Write, GIB, 4096)), Submitted::Later(_)));
    let end = d.start_next().unwrap();
    assert!(end > 0.3 + 4096.0 / 10_000.0);
    d.finish();
    assert_eq!(d.submit(end, req(Op::Flush, 0, 0)), Submitted::At(end + 0.3));
}

#[test]
fn one_head_serves_waiting_requests_in_elevator_order() {
    let mut d = Drive::new(Model::Hdd7200, 4 * GIB, true);
    let mut tickets = Vec::new();
    for o in [3 * GIB, GIB, 2 * GIB] {
        let Submitted::Later(t) = d.submit(0.0, req(Op::Read, o, 4096)) else { panic!() };
        tickets.push(t);
    }
    let done = run_head(&mut d);
    let order: Vec<Ticket> = done.iter().map(|&(t, _)| t).collect();
    assert_eq!(order, vec![tickets[1], tickets[2], tickets[0]]);
    // Each waited for the one before.
    assert!(done.windows(2).all(|w| w[1].1 > w[0].1));
}

#[test]
fn queue_depth_lets_the_elevator_shorten_seeks_and_the_ssd_overlap() {
    let qd1 = closed_loop(Model::Hdd7200, 4 * GIB, true, Pattern::Randread, 4096, 4 * GIB, 1, 2000);
    let qd32 = closed_loop(Model::Hdd7200, 4 * GIB, true, Pattern::Randread, 4096, 4 * GIB, 32, 2000);
    // About 80 random reads/s at 8.5 ms seek plus 4.2 ms rotation.
    assert!(qd1.iops > 60.0 && qd1.iops < 110.0, "{qd1:?}");
    assert!(qd32.iops > 1.5 * qd1.iops, "{qd32:?} vs {qd1:?}");
    let seq = closed_loop(Model::Hdd7200, 4 * GIB, true, Pattern::Read, 1 << 20, 4 * GIB, 1, 200);
    assert!(seq.mb_s > 140.0 && seq.mb_s < 165.0, "sequential reads near the media rate: {seq:?}");
    let ssd1 = closed_loop(Model::Ssd, 4 * GIB, true, Pattern::Randread, 4096, 4 * GIB, 1, 2000);
    let ssd32 = closed_loop(Model::Ssd, 4 * GIB, true, Pattern::Randread, 4096, 4 * GIB, 32, 2000);
    assert!((ssd1.mean_latency_ms - (0.08 + 4096.0 / 500_000.0)).abs() < 1e-6, "{ssd1:?}");
    assert!(ssd32.iops > 3.0 * ssd1.iops, "{ssd32:?}");
}

#[test]
fn an_ssd_flush_waits_for_every_channel() {
    let mut d = Drive::new(Model::Ssd, GIB, true);
    let Submitted::At(w) = d.submit(0.0, req(Op::Write, 0, 1 << 20)) else { panic!() };
    let Submitted::At(f) = d.submit(0.0, req(Op::Flush, 0, 0)) else { panic!() };
    assert!((f - w - 0.5).abs() < 1e-9, "{f} {w}");
    let Submitted::At(after) = d.submit(0.0, req(Op::Read, 0, 4096)) else { panic!() };
    assert!(after > f);
}

#[test]
fn drain_runs_the_head_until_the_request_is_done() {
    let mut d = Drive::new(Model::Hdd5400, 4 * GIB, true);
    d.submit(0.0, req(Op::Write, GIB, 4096));
    d.submit(0.0, req(Op::Write, 3 * GIB, 4096));
    let end = drain(&mut d, 1.0, &mut None, req(Op::Flush, 0, 0));
    assert!(end > 2.0 * 1.5, "two write-backs with a seek each: {end}");
    assert!(d.start_next().is_none(), "nothing left for the head");
}
