# moescope: the two commands a user needs are `make demo` and `make test`.
BUILD       ?= build
ASAN_BUILD  ?= build-asan
JOBS        ?= 2
CMAKE_FLAGS ?=
# Decided when a recipe runs, not when make starts: on a fresh machine setup installs Ninja.
GENERATOR    = $$(command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

# The Python environment the build, the tests and the demo use: $MOESCOPE_PYTHON, else the active
# virtual/conda environment when it has torch, else the project's .venv (scripts/setup.sh makes
# it). Its bin/ comes first on PATH for every recipe, so `python3`, `torchrun` and `pip` are its.
MOESCOPE_PYTHON := $(shell bash scripts/setup.sh --print-python)
export MOESCOPE_PYTHON
export PATH := $(dir $(MOESCOPE_PYTHON)):$(PATH)

.PHONY: all setup configure build test test-asan fuzz demo demo-build bench format clean

all: build

setup:
	@bash scripts/setup.sh

# Configures when there is no cache yet, and again when the chosen Python changed.
configure:
	@if [ ! -f $(BUILD)/CMakeCache.txt ]; then \
	  cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DMOESCOPE_PYTHON=$(MOESCOPE_PYTHON) $(CMAKE_FLAGS); \
	elif ! grep -qxF "MOESCOPE_PYTHON:FILEPATH=$(MOESCOPE_PYTHON)" $(BUILD)/CMakeCache.txt; then \
	  cmake -S . -B $(BUILD) -DMOESCOPE_PYTHON=$(MOESCOPE_PYTHON) $(CMAKE_FLAGS); \
	fi

build: setup configure
	cmake --build $(BUILD) -j $(JOBS)

# The wheel and install tests build the project again (up to 4 GB while they run, removed when
# they pass): said before they start rather than as a failure in the middle of the run.
test: build
	@free_gb=$$(df -Pk $(BUILD) | awk 'NR == 2 {print int($$4 / 1048576)}'); \
	if [ "$$free_gb" -lt 4 ]; then echo "make test: only $$free_gb GB free beside $(BUILD)/;" \
	  "the wheel and install tests need about 4 GB while they run (a full disk fails them)" >&2; fi
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# Second CI stage: the torch-free core under AddressSanitizer + UBSan, then the reader fuzzer.
test-asan: setup
	cmake -S . -B $(ASAN_BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Debug -DMOESCOPE_SANITIZE=ON \
	  -DMOESCOPE_WITH_TORCH=OFF -DMOESCOPE_WITH_CUDA=OFF -DMOESCOPE_WITH_VIEWER=OFF \
	  -DMOESCOPE_BUILD_BENCH=OFF -DMOESCOPE_PYTHON=$(MOESCOPE_PYTHON)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300

fuzz: setup
	bash scripts/run_fuzz.sh $(FUZZ_SECONDS)

# The demo builds only what it runs (cmake/MoescopeDemo.cmake: the CLI, both shims, the viewer,
# moe_train and the torch capture library), not the tests and benchmarks.
demo-build: setup configure
	cmake --build $(BUILD) -j $(JOBS) --target moescope_demo

demo: demo-build
	bash scripts/demo.sh $(BUILD)

bench: build
	bash scripts/run_bench.sh $(BUILD)

format:
	git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
