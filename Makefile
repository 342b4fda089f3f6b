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

.PHONY: test check-style deps mount umount build install uninstall

# Every test, and the style gates CI enforces.
test: deps check-style
	$(CARGO) test --workspace --release

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
