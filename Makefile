# moescope: the two commands a user needs are `make demo` and `make test`.
BUILD       ?= build
ASAN_BUILD  ?= build-asan
JOBS        ?= 2
CMAKE_FLAGS ?=
GENERATOR   := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all setup configure build test test-asan fuzz demo bench format clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: setup configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# Second CI stage: the torch-free core under AddressSanitizer + UBSan, then the reader fuzzer.
test-asan: setup
	cmake -S . -B $(ASAN_BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Debug -DMOESCOPE_SANITIZE=ON \
	  -DMOESCOPE_WITH_TORCH=OFF -DMOESCOPE_WITH_CUDA=OFF -DMOESCOPE_WITH_VIEWER=OFF \
	  -DMOESCOPE_BUILD_BENCH=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300

fuzz: setup
	bash scripts/run_fuzz.sh $(FUZZ_SECONDS)

demo: build
	bash scripts/demo.sh $(BUILD)

bench: build
	bash scripts/run_bench.sh $(BUILD)

format:
	git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
