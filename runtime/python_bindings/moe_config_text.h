// MoEConfig to and from the text the Python package sends: one `field=value` per line, the
// field names of moe_config.h. Kept torch-free of Python so the binding TU stays the only slow one.
#pragma once

#include <string>

#include "moescope/runtime/moe_config.h"

namespace moescope::runtime::python {

/// Parses `text` ("hidden_size=64\ntop_k=2\n...", enums by name: score_function=sigmoid,
/// drop_policy=by_position, receive_cap_policy=fail, nonfinite_policy=dont_check;
/// gate_logit_skew=comma-separated floats). Unnamed fields keep MoEConfig's defaults. Throws
/// c10::Error naming an unknown field or a value that does not parse.
MoEConfig parse_moe_config_text(const std::string& text);

/// Every field of `config` in that text, one line each by field name; parse_moe_config_text
/// gives `config` back. Of a default MoEConfig, it is the defaults the Python MoEConfig must
/// declare (tests/python_runtime checks them against each other).
std::string moe_config_text(const MoEConfig& config);

}  // namespace moescope::runtime::python
