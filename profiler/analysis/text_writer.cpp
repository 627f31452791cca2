// The text / markdown writer (text_writer.h).
#include "text_writer.h"

#include <algorithm>

namespace moescope::analysis {

void TextWriter::heading(const std::string& title) {
  out_ << (markdown_ ? "\n## " + title + "\n\n"
                     : "\n" + title + "\n" + std::string(title.size(), '-') + "\n");
}
void TextWriter::table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows) {
  if (markdown_) {
    auto row_text = [](const std::vector<std::string>& cells) {
      std::string text = "|";
      for (const auto& cell : cells) text += " " + cell + " |";
      return text;
    };
    out_ << row_text(header) << "\n|";
    for (size_t i = 0; i < header.size(); ++i) out_ << " --- |";
    out_ << "\n";
    for (const auto& row : rows) out_ << row_text(row) << "\n";
    out_ << "\n";
    return;
  }
  std::vector<size_t> widths(header.size());
  for (size_t i = 0; i < header.size(); ++i) widths[i] = header[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string text = " ";
    for (size_t i = 0; i < cells.size(); ++i) {
      text += cells[i] + std::string(widths[i] - std::min(widths[i], cells[i].size()) + 2, ' ');
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out_ << text << "\n";
  };
  emit(header);
  for (const auto& row : rows) emit(row);
}

}  // namespace moescope::analysis
