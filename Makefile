# Two entry points do every set-up step on a fresh Debian 12 machine:
#   make run    installs the packages, builds, and runs the main job on the bundled model
#   make test   installs the packages, builds, and runs every test (plus sanitizer and fuzz runs)
# Everything else here is a building block of those two.

JOBS ?= $(shell nproc)
BUILD ?= build
BUILD_ASAN ?= build-asan
BUILD_FUZZ ?= build-fuzz
BUILD_ARM ?= build-arm64
# `make fuzz` runs every libFuzzer target (fuzz/, one per parser of untrusted input) for an equal share of
# FUZZ_SECONDS; FUZZ_TARGETS=chat_template runs one target alone.
FUZZ_TARGETS ?= gguf_reader model_load tokenizer chat_template server_request draft_vocab imatrix kld_base grammar
FUZZ_SECONDS ?= 120
# `make soak` runs the server soak (tests/server/soak_test.py; 15 s in both test suites) on the ASan build for
# SOAK_SECONDS.
SOAK_SECONDS ?= 300
MODEL ?= models/example.gguf

DEBIAN_PACKAGES := cmake ninja-build g++ make clang libclang-rt-14-dev libgtest-dev libgmock-dev \
	libbenchmark-dev libcli11-dev nlohmann-json3-dev libpcre2-dev pkg-config python3 python3-jinja2 libcpp-httplib-dev libutf8proc-dev libssl-dev \
	libtomlplusplus-dev
# Only `mtp-train` (src/train) and its tests need libtorch (about 150 packages and 0.5 GB): `make run` builds
# everything else without it, `make test` installs it before it builds, so the tests cover mtp-train. OpenBLAS
# takes over libtorch's libblas.so.3 from the reference BLAS, several times slower (docs/training.md).
TRAIN_PACKAGES := libtorch-dev libopenblas0-pthread
# Only the tests need these: promtool (checks /metrics), nginx (in front of two replicas), and headless
# Chromium driven by Selenium (the chat page at GET /).
TEST_PACKAGES := prometheus nginx-light chromium chromium-driver python3-selenium
# `make arm-test` cross-compiles the kernel layers for 64-bit Arm and runs their tests under qemu (the neon
# level: qemu emulates the dot product): the cross compiler, qemu and GoogleTest's sources, no Arm packages.
ARM_PACKAGES := g++-aarch64-linux-gnu qemu-user googletest
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps train-deps test-deps build build-mtp build-asan build-fuzz run test unit-test asan-test arm-test fuzz soak chat-goldens bench format clean

# $(call install,PACKAGES,APT-FLAGS): installs those of PACKAGES that are missing.
install = @missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(2) $$missing; \
	fi

deps:
	$(call install,$(DEBIAN_PACKAGES),)

train-deps:
	$(call install,$(TRAIN_PACKAGES),)

test-deps:
	$(call install,$(TEST_PACKAGES),--no-install-recommends)

configure = cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps
	$(configure)
	cmake --build $(BUILD) -j $(JOBS)

# Only the `mtp` program and the libraries it links (not the tests, benchmarks or mtp-train): what `make run` needs.
build-mtp: deps
	$(configure)
	cmake --build $(BUILD) -j $(JOBS) --target mtp

build-asan: deps
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
	  -DMTP_SANITIZE=ON -DMTP_BUILD_BENCH=OFF
	cmake --build $(BUILD_ASAN) -j $(JOBS)

build-fuzz: deps
	CXX=clang++ cmake -S . -B $(BUILD_FUZZ) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1" -DMTP_FUZZ=ON \
	  -DMTP_BUILD_TESTS=OFF -DMTP_BUILD_BENCH=OFF
	cmake --build $(BUILD_FUZZ) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))

# The main job on the bundled model: its summary, then generation with MTP speculative decoding (the text, then
# tokens/s and the acceptance statistics on stderr).
run: build-mtp
	./$(BUILD)/src/tools/mtp inspect $(MODEL)
	./$(BUILD)/src/tools/mtp run -m $(MODEL) -p "def __init__(self" -n 96 --spec mtp --draft-max 3

# libtorch first: the Release build then configures with it and builds mtp-train and its tests.
unit-test: train-deps test-deps build
	@./$(BUILD)/tests/kernels/kernels_test --gtest_filter=Isa.LevelsThisHostTests | grep '^kernel levels'
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer.
asan-test: build-asan test-deps
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS)

# The base, quant and kernels layers built for 64-bit Arm (statically linked) and their tests run under
# qemu-aarch64: the scalar and neon kernel levels, the quantizers' bytes against ggml's, the thread pool on a
# weaker memory model. Only these layers: the rest has no Arm-specific code.
arm-test: deps
ifeq ($(shell uname -m),x86_64)
	$(call install,$(ARM_PACKAGES),)
	cmake -S . -B $(BUILD_ARM) -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DMTP_CORE_ONLY=ON \
	  -DMTP_BUILD_BENCH=OFF
	cmake --build $(BUILD_ARM) -j $(JOBS)
	@qemu-aarch64 -cpu max $(BUILD_ARM)/tests/kernels/kernels_test --gtest_filter=Isa.LevelsThisHostTests | \
	  grep '^kernel levels' | sed 's/^/arm64 (qemu): /'
	ctest --test-dir $(BUILD_ARM) --output-on-failure -j $(JOBS)
else
	@echo "arm-test: cross-compiles from x86-64 only; on this $$(uname -m) host the unit tests ran these layers"
endif

# A short libFuzzer run of each target, seeded with its committed corpus (fuzz/corpus/<target>); what it
# adds goes to $(BUILD_FUZZ)/corpus/<target>, a crash to $(BUILD_FUZZ)/fuzz_<target>-crash-*. Stops at the
# first target that fails. -timeout: a single input running that long is a hang. The fuzz build lets UBSan
# recover, so halt_on_error makes undefined behaviour a crash the run reports and stops at.
fuzz: build-fuzz
	@export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1; \
	each=$$(( $(FUZZ_SECONDS) / $(words $(FUZZ_TARGETS)) )); [ $$each -ge 1 ] || each=1; \
	for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz_$$t for $$each s"; \
	  mkdir -p $(BUILD_FUZZ)/corpus/$$t; \
	  ./$(BUILD_FUZZ)/fuzz/fuzz_$$t -max_total_time=$$each -timeout=30 -print_final_stats=1 \
	    -artifact_prefix=$(BUILD_FUZZ)/fuzz_$$t- $(BUILD_FUZZ)/corpus/$$t fuzz/corpus/$$t || exit 1; \
	done

# 64 streaming clients against the sanitized server for SOAK_SECONDS, with hang-ups and random drafting
# settings: 0 errors, every slot and KV block freed, no growth of resident memory after the warm-up.
soak: build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 SOAK_SECONDS=$(SOAK_SECONDS) \
	  python3 tests/server/soak_test.py $(BUILD_ASAN)/src/tools/mtp $(MODEL)

# The chat-template goldens checked in under tests/chat/data were rendered by Python's jinja2; re-render them
# with Debian's jinja2 (the system python, where apt installs it) and compare.
chat-goldens: deps
	/usr/bin/python3 scripts/reference/chat/render_reference.py --check

test: unit-test asan-test arm-test fuzz chat-goldens

bench: build
	./$(BUILD)/bench/gguf/bench_gguf_open
	./$(BUILD)/bench/quant/quant_throughput
	./$(BUILD)/bench/engine/spec_bench $(MODEL) --tokens 64

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ) $(BUILD_ARM)
