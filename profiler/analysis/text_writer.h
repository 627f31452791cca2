// Text and markdown output shared by `moescope report` and `moescope diff`: one writer,
// markdown gets headings and pipe tables, text gets underlined headings and aligned columns.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace moescope::analysis {

class TextWriter {
 public:
  explicit TextWriter(bool markdown) : markdown_(markdown) {}
  void heading(const std::string& title);
  void line(const std::string& text) { out_ << text << "\n"; }
  void table(const std::vector<std::string>& header,
             const std::vector<std::vector<std::string>>& rows);
  std::string str() const { return out_.str(); }
  bool markdown() const { return markdown_; }

 private:
  bool markdown_;
  std::ostringstream out_;
};

}  // namespace moescope::analysis
