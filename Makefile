# ebb front door. `make test` and `make demo` work on a fresh Debian machine:
# each installs what is missing, configures build/ and builds.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
WERROR     ?= $(if $(CI),ON,OFF)

# Recursive makes (cmake --build runs its own) print no "Entering directory" noise.
MAKEFLAGS += --no-print-directory

.PHONY: all deps build test test-frameworks test-long demo bench asan clean nocuda-build format-check format

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEBB_WERROR=$(WERROR) $(CMAKE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300 -LE 'frameworks|long'

# PyTorch and CuPy on the fake GPU (tests/frameworks/, label "frameworks"):
# the venvs under /opt/ebb-tools that install-deps fills.
test-frameworks: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300 -L frameworks

# The long tests (label "long": the broker's 500-operation soak), kept out
# of `make test`'s 10 minutes; .ci/run calls this.
test-long: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900 -L long

demo: build
	@./scripts/demo.sh $(BUILD)

bench: build
	@./scripts/bench.sh $(BUILD)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DEBB_SANITIZE=ON -DEBB_WERROR=$(WERROR) $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600 -LE 'frameworks|long'

# Proves ebb builds where no CUDA toolkit exists: nvcc and cuda.h hidden.
nocuda-build: deps
	cmake -S . -B build-nocuda -DCMAKE_BUILD_TYPE=Release -DEBB_WERROR=$(WERROR) -DEBB_CUDA_KERNELS=OFF -DEBB_HIDE_CUDA_TOOLKIT=ON
	cmake --build build-nocuda -j $(JOBS)
	cd build-nocuda && ctest --output-on-failure -j $(JOBS) --timeout 300 -LE 'frameworks|long'

# The layout of the C of src/, include/ and tests/ (the fake GPU's included) against .clang-format (Debian's clang-format
# 14): format-check lists the files it would change (exit 1 when any),
# format rewrites them.
format-check: deps
	@./scripts/format-check.sh

format: deps
	@./scripts/format-check.sh --fix

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-nocuda
