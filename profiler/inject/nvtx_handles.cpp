#include "nvtx_handles.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <new>
#include <unordered_map>

#include "recorder.h"

namespace moescope::inject {

moescope_name_t CachedName::id() {
  uint64_t generation = recorder::Recorder::instance().generation() & 0xFFFFFFFFu;
  uint64_t cached = generation_and_id_.load(std::memory_order_acquire);
  if ((cached >> 32) == generation && (cached & 0xFFFFFFFFu) != 0) {
    return static_cast<moescope_name_t>(cached);
  }
  moescope_name_t id = moescope_intern_n(text_.data(), text_.size());
  generation_and_id_.store((generation << 32) | id, std::memory_order_release);
  return id;
}

moescope_name_t NvtxDomain::id_for_category(uint32_t category) {
  if (category == 0 || !has_categories_.load(std::memory_order_acquire)) return id();
  std::string composite;
  {
    std::lock_guard<std::mutex> lock(categories_mutex_);
    auto it = category_names_.find(category);
    if (it == category_names_.end()) return id();
    composite = name().empty() ? it->second : name() + "/" + it->second;
  }
  return moescope_intern_n(composite.data(), composite.size());
}

void NvtxDomain::name_category(uint32_t category, const std::string& name) {
  std::lock_guard<std::mutex> lock(categories_mutex_);
  category_names_[category] = name;
  has_categories_.store(true, std::memory_order_release);
}

NvtxDomain& default_nvtx_domain() {
  static NvtxDomain* domain = new NvtxDomain("");
  return *domain;
}

std::string utf8_from_wide(const wchar_t* text) {
  std::string out;
  if (!text) return out;
  for (; *text; ++text) {
    auto code = static_cast<uint32_t>(*text);
    if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) code = 0xFFFD;
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }
  return out;
}

namespace {

std::mutex g_thread_names_mutex;
std::unordered_map<uint32_t, std::string>* g_pending_thread_names = nullptr;
std::atomic<uint32_t> g_thread_names_version{0};
__attribute__((tls_model("initial-exec"))) thread_local uint32_t t_seen_thread_names_version = 0;

// 0 until the thread asks; reset in a forked child, whose thread inherits the parent's value.
__attribute__((tls_model("initial-exec"))) thread_local uint32_t t_os_thread_id = 0;

uint32_t current_os_thread_id() {
  if (!t_os_thread_id) t_os_thread_id = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_os_thread_id;
}

}  // namespace

void name_os_thread(uint32_t os_thread_id, const std::string& name) {
  if (os_thread_id == current_os_thread_id()) {
    moescope_thread_name(name.c_str());
    return;
  }
  std::lock_guard<std::mutex> lock(g_thread_names_mutex);
  if (!g_pending_thread_names)
    g_pending_thread_names = new std::unordered_map<uint32_t, std::string>;
  (*g_pending_thread_names)[os_thread_id] = name;
  g_thread_names_version.fetch_add(1, std::memory_order_release);
}

void apply_pending_thread_name() {
  uint32_t version = g_thread_names_version.load(std::memory_order_relaxed);
  if (version == t_seen_thread_names_version) return;
  t_seen_thread_names_version = version;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(g_thread_names_mutex);
    auto it = g_pending_thread_names->find(current_os_thread_id());
    if (it == g_pending_thread_names->end()) return;
    name = std::move(it->second);
    g_pending_thread_names->erase(it);
  }
  moescope_thread_name(name.c_str());
}

void forget_thread_names_after_fork() {
  // Another thread may have held the lock at the fork; its pending names were for threads
  // (by the parent's thread ids) that do not exist in the child.
  new (&g_thread_names_mutex) std::mutex;
  if (g_pending_thread_names) g_pending_thread_names->clear();
  t_os_thread_id = 0;
  t_seen_thread_names_version = g_thread_names_version.load(std::memory_order_relaxed);
}

}  // namespace moescope::inject
