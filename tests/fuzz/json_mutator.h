// A structure-aware libFuzzer mutator for JSON inputs (Kineto traces, plan files): it parses the
// input and changes a value or its type inside it (null, 1e300, INT64_MIN, a number where a
// string was, a key removed or added, an element duplicated, a string swapped for a word the
// reader looks for), so most mutants stay valid JSON and test the reader's field checks rather
// than the parser's. One call in four, and on input that is not JSON, it leaves the mutation to
// libFuzzer's byte-level LLVMFuzzerMutate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moescope::fuzz {

// LLVMFuzzerCustomMutator's contract: mutates data[0, size) in place (up to max_size bytes)
// and returns the new size. `keys` are added to objects, `words` replace strings.
size_t mutate_json_input(uint8_t* data, size_t size, size_t max_size, unsigned int seed,
                         const std::vector<std::string>& keys,
                         const std::vector<std::string>& words);

}  // namespace moescope::fuzz
