// The report's two renderers, each in its own file; render_report (report.cpp) picks one.
#pragma once

#include <string>

#include "moescope/analysis/report.h"

namespace moescope::analysis {

// The report as one JSON document (report_json.cpp); load errors included.
std::string render_report_json(const TraceModel& model, const Report& report);

// The report as aligned text, or as markdown with headings and pipe tables (report_text.cpp).
std::string render_report_text(const TraceModel& model, const Report& report, bool markdown);

}  // namespace moescope::analysis
