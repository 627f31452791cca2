// Inputs the loader refuses before merging (internal to the analysis library): a JSON file
// that is no trace at all; a recording given twice, or two recordings of one process at
// different times (torch.profiler cycles), which are not two ranks; files of another job
// (other_jobs.h: another world size, a rank again at another time, hours apart); and a
// torch.profiler (Kineto) trace given together with .moetrace files, whose clock the loader
// cannot relate to theirs (the same process's own profiler trace, recognised by its threads and
// time range, or another process's).
#pragma once

#include <vector>

#include "file_load.h"

namespace moescope::analysis {

// Marks each refused file unopened and adds an error (LoadError::refused) saying why and what
// to do instead. `together`: the files are to be analysed on one timeline (not `info`).
void refuse_unusable_inputs(std::vector<FileLoad>& files, bool together);

}  // namespace moescope::analysis
