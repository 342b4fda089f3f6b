# DualFS: the two commands a newcomer needs are `make mount` and `make test`
# (see README.md). Everything else here serves those two.

CARGO ?= cargo

.PHONY: test check-style deps

# Every test, and the style gates CI enforces.
test: deps check-style
	$(CARGO) test --workspace --release

check-style:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings

# What a fresh Debian machine lacks: FUSE and a Rust toolchain.
deps:
	@scripts/install-deps
