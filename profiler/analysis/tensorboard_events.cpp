// TensorBoard event files without TensorFlow (format in tensorboard_events.h).
#include "moescope/analysis/tensorboard_events.h"

#include <unistd.h>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

namespace moescope::analysis {
namespace {

// Reflected Castagnoli polynomial.
constexpr uint32_t kCastagnoli = 0x82F63B78u;
// TFRecord adds this after rotating the CRC (a CRC of data holding CRCs is then still useful).
constexpr uint32_t kMaskDelta = 0xa282ead8u;

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kCastagnoli : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// ---- protobuf wire format: only what an Event with scalars needs ------------------------------
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
template <typename Fixed>
void put_fixed(std::string& out, Fixed value) {  // little-endian hosts (x86-64, aarch64)
  char bytes[sizeof(Fixed)];
  std::memcpy(bytes, &value, sizeof(Fixed));
  out.append(bytes, sizeof(Fixed));
}
void put_bytes_field(std::string& out, uint32_t field, std::string_view bytes) {
  put_varint(out, (uint64_t{field} << 3) | 2u);  // length-delimited
  put_varint(out, bytes.size());
  out.append(bytes);
}
std::string event_header(double wall_time_seconds, int64_t step) {
  std::string event;
  put_varint(event, (1u << 3) | 1u);  // wall_time: 64-bit
  put_fixed(event, wall_time_seconds);
  put_varint(event, (2u << 3) | 0u);  // step: varint
  put_varint(event, static_cast<uint64_t>(step));
  return event;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == 0) return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t crc = ~0u;
  for (unsigned char byte : data) crc = kCrcTable[(crc ^ byte) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

TensorBoardEventWriter::TensorBoardEventWriter(const std::string& directory) {
  std::error_code code;
  std::filesystem::create_directories(directory, code);
  if (code) {
    error_ = "cannot create " + directory + ": " + code.message();
    return;
  }
  const double now = double(std::time(nullptr));
  path_ = (std::filesystem::path(directory) /
           ("events.out.tfevents." + std::to_string(int64_t(now)) + "." + host_name() + "." +
            std::to_string(getpid()) + ".moescope"))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    error_ = "cannot write " + path_ + ": " + std::strerror(errno);
    return;
  }
  std::string event = event_header(now, 0);
  put_bytes_field(event, 3, "brain.Event:2");  // file_version
  write_record(event);
}

TensorBoardEventWriter::~TensorBoardEventWriter() {
  close();
}

void TensorBoardEventWriter::add_scalar(std::string_view tag, double value, int64_t step,
                                        double wall_time_seconds) {
  if (file_ == nullptr) return;
  std::string summary_value;
  put_bytes_field(summary_value, 1, tag);
  put_varint(summary_value, (2u << 3) | 5u);  // simple_value: 32-bit float
  put_fixed(summary_value, static_cast<float>(value));
  std::string summary;
  put_bytes_field(summary, 1, summary_value);
  std::string event = event_header(wall_time_seconds, step);
  put_bytes_field(event, 5, summary);
  write_record(event);
}

void TensorBoardEventWriter::write_record(const std::string& event) {
  std::string record;
  std::string length;
  put_fixed(length, uint64_t{event.size()});
  record += length;
  put_fixed(record, masked_crc32c(length));
  record += event;
  put_fixed(record, masked_crc32c(event));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() && error_.empty()) {
    error_ = "cannot write " + path_ + ": " + std::strerror(errno);
  }
}

bool TensorBoardEventWriter::close() {
  if (file_ != nullptr) {
    if (std::fclose(file_) != 0 && error_.empty()) {
      error_ = "cannot write " + path_ + ": " + std::strerror(errno);
    }
    file_ = nullptr;
  }
  return error_.empty();
}

}  // namespace moescope::analysis
