# DualFS: the two commands a newcomer needs are `make mount` and `make test`
# (see README.md). Everything else here serves those two.

CARGO ?= cargo
# rustup, when install-deps had to run it, puts cargo here.
export PATH := $(HOME)/.cargo/bin:$(PATH)

# The default volume of `make mount`: two sparse image files, the meta-data
# one about 10% of SIZE, mounted on MNT.
VOLUME ?= volume
MNT ?= mnt
SIZE ?= 4G
DUALFS = target/release/dualfs

# Where `make install` puts the binary and the helpers mount(8), mkfs(8)
# and fsck(8) look for (they search /sbin, not PATH).
PREFIX ?= /usr/local
SBINDIR ?= /sbin

.PHONY: test test-uring check-style deps fuzz mount umount build install uninstall bench bench-deps bench-report bench-requests xfstests

# Every test, and the style gates CI enforces: the workspace (its mount
# suites over /dev/fuse), then a representative set of the mount suites
# again over io_uring (scripts/test-uring; docs/TESTING.md says which and
# why). A test that cannot run here fails; DUALFS_ALLOW_SKIP=1 lets it pass.
test: deps check-style
	$(CARGO) test --workspace --release
	scripts/test-uring

# Every mount suite of crates/cli over io_uring, not only the set `test` runs.
test-uring: deps
	scripts/test-uring --tests

check-style:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings

# What a fresh Debian machine lacks: FUSE and a Rust toolchain.
deps:
	@scripts/install-deps

build:
	$(CARGO) build --release -p dualfs-cli

# Build, create the default volume if there is none yet, mount it in the
# background (log in $(VOLUME)/dualfs.log).
mount: deps build
	@mkdir -p $(VOLUME) $(MNT)
	@if [ ! -e $(VOLUME)/meta.img ] && [ ! -e $(VOLUME)/data.img ]; then \
		$(DUALFS) mkfs --size $(SIZE) $(VOLUME)/meta.img $(VOLUME)/data.img; fi
	@if mountpoint -q $(MNT); then echo "$(MNT) is already mounted"; else \
		$(DUALFS) mount -o log=$(abspath $(VOLUME))/dualfs.log $(VOLUME)/meta.img $(VOLUME)/data.img $(MNT) && \
		echo "DualFS is mounted on $(MNT) (make umount to unmount)"; fi

# Unmount and wait until the volume is closed cleanly.
umount:
	$(DUALFS) umount $(MNT)

install: build
	install -D -m 0755 $(DUALFS) $(DESTDIR)$(PREFIX)/bin/dualfs
	install -d $(DESTDIR)$(SBINDIR)
	ln -sf $(PREFIX)/bin/dualfs $(DESTDIR)$(SBINDIR)/mount.fuse.dualfs
	ln -sf $(PREFIX)/bin/dualfs $(DESTDIR)$(SBINDIR)/mkfs.dualfs
	ln -sf $(PREFIX)/bin/dualfs $(DESTDIR)$(SBINDIR)/fsck.dualfs

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/dualfs $(DESTDIR)$(SBINDIR)/mount.fuse.dualfs \
		$(DESTDIR)$(SBINDIR)/mkfs.dualfs $(DESTDIR)$(SBINDIR)/fsck.dualfs

# The benchmark suite against ext2, ext4, ext4 with an external journal, XFS
# with an external log, btrfs and fuse2fs, on loop devices (root; about an
# hour), then docs/BENCHMARKS.md and its plots. Every measurement is appended
# to the results store, bench/results.jsonl. BENCH_ARGS adds options of
# bench/suite.py (e.g. --configs dualfs,ext4 --repeats 1).
BENCH_ARGS ?=
bench: bench-deps build
	$(CARGO) build --release -p dualfs-bench
	target/release/engine-bench --json | python3 bench/store.py add-json engine-bench \
		--config-key backend --phase engine-bench --command "engine-bench --json"
	python3 bench/suite.py --trace $(BENCH_ARGS)
	$(MAKE) bench-report

# xfstests through the installed helpers (root; hours for the generic
# group, so not part of `test`): XFSTESTS_DIR names a built xfstests
# checkout, XFSTESTS_ARGS goes to its check (default: the generic auto
# group). docs/TESTING.md, "xfstests".
XFSTESTS_ARGS ?=
xfstests: install
	scripts/xfstests $(XFSTESTS_ARGS)

# Coverage-guided fuzzing (afl++, installed if missing), FUZZ_SECONDS per
# target (default 300); not part of `test`, which replays what it keeps
# (docs/TESTING.md, "Fuzzing").
fuzz:
	scripts/fuzz

# The request path, easy to run again on a quiet machine: DualFS against
# ext4 and the floor (a FUSE server that does no work) in one run (medians
# of 3, no traced run), then system calls through the mount next to ext4
# and fuse2fs (bench/micro.py, FUSE requests counted per operation), both
# into the results store, then docs/BENCHMARKS.md. BENCH_ARGS goes to the
# suite (e.g. --sequences micro,postmark --repeats 1).
bench-requests: bench-deps build
	$(CARGO) build --release -p dualfs-bench
	$(CARGO) build --release -p dualfs-bench --bin no-work-server
	python3 bench/suite.py --configs dualfs,ext4,floor --repeats 3 --fsync 1024,4096,2000 $(BENCH_ARGS)
	python3 bench/micro.py
	$(MAKE) bench-report

# docs/BENCHMARKS.md and its plots from the results store (bench/results.jsonl)
# and the findings written by hand (bench/findings.md).
bench-report:
	/usr/bin/python3 bench/report.py --store bench/results.jsonl --docs docs

# What the suite runs besides DualFS: the peers' tools, the workloads' tools,
# the Linux source tree and matplotlib for the plots.
bench-deps:
	@command -v fio >/dev/null && command -v postmark >/dev/null && command -v bonnie++ >/dev/null && \
	 command -v mkfs.xfs >/dev/null && command -v mkfs.btrfs >/dev/null && command -v fuse2fs >/dev/null && \
	 test -e /usr/src/linux-source-6.1.tar.xz && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null || \
	 (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio postmark bonnie++ \
	  xfsprogs btrfs-progs fuse2fs e2fsprogs linux-source-6.1 python3-matplotlib)
