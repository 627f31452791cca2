// The record-kind table: one row per kind of record_schema.h, naming, sizing, describing it and
// listing its fields. docs/trace-format.md's records table is the same table in prose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "moescope/trace/trace_format.h"

namespace moescope::trace {

// One field of a record after its header, as record_schema.h declares it.
struct RecordFieldInfo {
  const char* type;  // "u32", "i64", "f32", ... (the docs' spelling)
  const char* name;
  uint16_t offset;  // from the start of the record
  uint16_t count;   // array extent, 1 for a scalar
  const char* doc;
};

// One row per kind, in kind order: its name, fixed size, whether the field after the header is
// an end time (delta-coded against the start), for kinds with a variable tail which u32 field
// counts the tail's elements and their size, and its fields. Generated from record_schema.h.
// The writer's column coding, the reader's checks, delta coding, `moescope info` and
// tests/profiler's check of docs/trace-format.md all read this table.
struct RecordKindInfo {
  RecordKind kind;
  const char* name;
  uint16_t fixed_size;
  bool has_end_time;
  uint16_t tail_count_offset;   // offset of the u32 element count; 0 = fixed size
  uint16_t tail_element_bytes;  // bytes per tail element
  const char* description;
  const RecordFieldInfo* fields;  // the fields after the header, in order
  uint16_t num_fields;
};

namespace record_kind_table {
template <typename T>
constexpr const char* field_type_name() {
  if constexpr (std::is_same_v<T, uint8_t>) return "u8";
  if constexpr (std::is_same_v<T, uint16_t>) return "u16";
  if constexpr (std::is_same_v<T, uint32_t>) return "u32";
  if constexpr (std::is_same_v<T, uint64_t>) return "u64";
  if constexpr (std::is_same_v<T, int32_t>) return "i32";
  if constexpr (std::is_same_v<T, int64_t>) return "i64";
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, double>) return "f64";
  static_assert(std::is_arithmetic_v<T>, "a record field is a number or an array of numbers");
  return "?";
}
// True when the record's first field after the header is `end_time` (what delta coding needs).
template <typename Record>
constexpr bool end_time_follows_header() {
  if constexpr (requires { Record::end_time; }) {
    return offsetof(Record, end_time) == sizeof(RecordHeader);
  } else {
    return false;
  }
}

// FieldsOf<Record>::list: the record's fields, then an empty end marker (a kind may have none).
template <typename Record>
struct FieldsOf;
#define MOESCOPE_FIELD_INFO(type, name, dims, init, doc)                     \
  {field_type_name<type>(), #name, static_cast<uint16_t>(offsetof(R, name)), \
   static_cast<uint16_t>(sizeof(type dims) / sizeof(type)), doc},
#define MOESCOPE_KIND_FIELDS(Enum, number, Struct, FIELDS, ...)           \
  template <>                                                             \
  struct FieldsOf<Struct> {                                               \
    using R = Struct;                                                     \
    static constexpr RecordFieldInfo list[] = {                           \
        FIELDS(MOESCOPE_FIELD_INFO){nullptr, nullptr, 0, 0, nullptr}};    \
    static constexpr uint16_t count = sizeof(list) / sizeof(list[0]) - 1; \
  };
MOESCOPE_RECORD_KINDS(MOESCOPE_KIND_FIELDS)
#undef MOESCOPE_KIND_FIELDS
#undef MOESCOPE_FIELD_INFO
}  // namespace record_kind_table

#define MOESCOPE_KIND_ROW(Enum, number, Struct, FIELDS, name, size, end_time, tail_count, \
                          tail_bytes, description)                                        \
  {RecordKind::Enum,                                                                      \
   name,                                                                                  \
   sizeof(Struct),                                                                        \
   end_time,                                                                              \
   static_cast<uint16_t>(offsetof(Struct, tail_count)),                                   \
   tail_bytes,                                                                            \
   description,                                                                           \
   record_kind_table::FieldsOf<Struct>::list,                                             \
   record_kind_table::FieldsOf<Struct>::count},
inline constexpr RecordKindInfo kRecordKinds[] = {MOESCOPE_RECORD_KINDS(MOESCOPE_KIND_ROW)};
#undef MOESCOPE_KIND_ROW
#define MOESCOPE_KIND_END_TIME_CHECK(Enum, number, Struct, FIELDS, name, size, end_time, ...) \
  static_assert(record_kind_table::end_time_follows_header<Struct>() == end_time,             \
                name ": end_time must be the first field exactly when the row says so");
MOESCOPE_RECORD_KINDS(MOESCOPE_KIND_END_TIME_CHECK)
#undef MOESCOPE_KIND_END_TIME_CHECK
static_assert(sizeof(kRecordKinds) / sizeof(kRecordKinds[0]) == kMaxRecordKind);
constexpr bool record_kinds_in_order() {
  for (uint8_t i = 0; i < kMaxRecordKind; ++i) {
    if (static_cast<uint8_t>(kRecordKinds[i].kind) != i + 1) return false;
    if (kRecordKinds[i].fixed_size % 8 != 0) return false;
  }
  return true;
}
static_assert(record_kinds_in_order(), "kRecordKinds lists kinds 1..kMaxRecordKind in order");

// ---- copying a field list between the structs declared from it -----------------------------
// MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_LAYER_STATS, sample, record) copies every field of the
// list from `record` to `sample`: C ABI struct -> on-disk record (the recorder's encoders),
// on-disk record -> model struct (the loader's decoders). Each field must have the list's type
// on both sides (checked); bytes are copied at the fields' offsets, so packed records and arrays
// need no special case.
#define MOESCOPE_COPY_FIELD(type, name, dims, init, doc)                                         \
  static_assert(                                                                                 \
      std::is_same_v<decltype(std::remove_cvref_t<decltype(to)>::name), type dims> &&            \
          std::is_same_v<decltype(std::remove_cvref_t<decltype(from)>::name), type dims>,        \
      #name ": both sides declare the field list's type");                                       \
  std::memcpy(                                                                                   \
      reinterpret_cast<unsigned char*>(&to) + offsetof(std::remove_cvref_t<decltype(to)>, name), \
      reinterpret_cast<const unsigned char*>(&from) +                                            \
          offsetof(std::remove_cvref_t<decltype(from)>, name),                                   \
      sizeof(type dims));
#define MOESCOPE_COPY_FIELDS(FIELDS, destination, source) \
  do {                                                    \
    auto& to = (destination);                             \
    const auto& from = (source);                          \
    FIELDS(MOESCOPE_COPY_FIELD)                           \
  } while (0)

// True for the kinds kRecordKinds lists.
constexpr bool is_known_record_kind(uint8_t kind) {
  return kind >= 1 && kind <= kMaxRecordKind;
}

// The kind's row, or null for an unknown kind. (The constexpr queries below index the table
// instead of testing this pointer: GCC's UBSan makes a pointer test non-constant.)
constexpr const RecordKindInfo* record_kind_info(uint8_t kind) {
  return is_known_record_kind(kind) ? &kRecordKinds[kind - 1] : nullptr;
}

// Fixed size of each kind (0 = unknown kind). Variable-length kinds return their fixed part.
constexpr uint32_t fixed_record_size(uint8_t kind) {
  return is_known_record_kind(kind) ? kRecordKinds[kind - 1].fixed_size : 0;
}

// True for kinds whose field after the header is an end time (delta-coded against the start).
constexpr bool has_end_time(uint8_t kind) {
  return is_known_record_kind(kind) && kRecordKinds[kind - 1].has_end_time;
}

// True for kinds followed by a tail whose length a field declares.
constexpr bool has_variable_tail(uint8_t kind) {
  return is_known_record_kind(kind) && kRecordKinds[kind - 1].tail_count_offset != 0;
}

// "span_begin", ...; "unknown" for an unknown kind.
constexpr const char* record_kind_name(uint8_t kind) {
  return is_known_record_kind(kind) ? kRecordKinds[kind - 1].name : "unknown";
}

// Bytes of variable tail that a record (of at least its kind's fixed size) declares it carries:
// a string's length, 4 per expert, 8 per split; 0 for the fixed-size kinds.
uint64_t declared_tail_bytes(const uint8_t* record);

}  // namespace moescope::trace
