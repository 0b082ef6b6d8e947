# KegFS -- the two quick-start commands:
#   make run    install what is missing, build, format and mount the embedded default volume
#   make test   install what is missing, build (plain and ASan+UBSan), start the real servers
#               the tests need on 127.0.0.1 (Redis, Ceph S3 gateway), run every test
# Others: make build, make install [PREFIX=/usr/local], make umount, make test-long,
#         make bench, make clean,
#         make e2e-k8s (a real single-node Kubernetes cluster from $KEG_K8S_BIN; docs/testing.md).

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
PREFIX     ?= /usr/local

.PHONY: all deps deps-test deps-bench build build-asan install run umount test test-unit test-long bench clean e2e-k8s

all: build

deps:
	@scripts/install-deps.sh run

deps-test:
	@scripts/install-deps.sh test

deps-bench:
	@scripts/install-deps.sh bench

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKEG_WERROR=ON $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKEG_WERROR=ON -DKEG_SANITIZE=ON $(CMAKE_FLAGS)

build-asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j$(JOBS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

run: build
	@scripts/run.sh $(BUILD)/mounter/kegfs

umount:
	@$(BUILD)/mounter/kegfs umount $(CURDIR)/var/mnt

test: deps-test build build-asan
	@scripts/test.sh --build $(BUILD) --asan-build $(ASAN_BUILD)

test-unit: build build-asan
	@scripts/test.sh --build $(BUILD) --asan-build $(ASAN_BUILD) --unit-only

test-long: deps-bench build build-asan
	@scripts/test.sh --build $(BUILD) --asan-build $(ASAN_BUILD) --long

# Exit 77 with what is missing when $KEG_K8S_BIN or the container tools are absent.
e2e-k8s: deps-test
	@e2e/k8s/run.sh

# KegFS, local disk, libfuse's passthrough_hp, s3fs and rclone side by side (bench/README.md);
# BENCH_FLAGS e.g. --quick, --targets LIST, --workloads LIST.  The report (JSON, Markdown,
# PNG charts, the raw figures and the machine) goes to $(BENCH_OUT): by default docs/bench/,
# the figures docs/benchmarks.md quotes, for the plain `make bench`, and $(BUILD)/bench-results
# for a run with BENCH_FLAGS (a quick or cut run must not replace the full run's report).
BENCH_OUT ?= $(if $(strip $(BENCH_FLAGS)),$(BUILD)/bench-results,docs/bench)
bench: deps-bench build
	@bench/run.sh $(BUILD) --out $(BENCH_OUT) $(BENCH_FLAGS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
