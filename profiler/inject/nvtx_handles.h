// What the shim hands out for NVTX handles, and how NVTX names become recorder names.
//
// NVTX domains and registered strings are created once and used for the whole process, while a
// recording (and with it the ids of interned names) restarts in a forked child. So a handle
// keeps the text and caches the interned id together with the recording's generation:
//
//   nvtxDomainHandle_t  -> NvtxDomain*            {name, cached id, named categories}
//   nvtxStringHandle_t  -> NvtxRegisteredString*  {text, cached id}
//
// Handles are never freed (nvtxDomainDestroy only forgets nothing): a handle may still be in
// use on another thread, and programs create a handful of them.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "moescope/recorder.h"

namespace moescope::inject {

// An interned id valid for one recording generation: (generation << 32) | id.
class CachedName {
 public:
  explicit CachedName(std::string text) : text_(std::move(text)) {}
  moescope_name_t id();
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::atomic<uint64_t> generation_and_id_{0};
};

class NvtxDomain {
 public:
  explicit NvtxDomain(std::string name) : name_(std::move(name)) {}
  // The domain's id for spans: 0 for the default domain (empty name).
  moescope_name_t id() { return name_.text().empty() ? 0 : name_.id(); }
  // The id spans of `category` are recorded under: the domain itself, or "<domain>/<category
  // name>" (just the category name in the default domain) once the category was named.
  moescope_name_t id_for_category(uint32_t category);
  void name_category(uint32_t category, const std::string& name);
  const std::string& name() const { return name_.text(); }

 private:
  CachedName name_;
  std::mutex categories_mutex_;
  std::map<uint32_t, std::string> category_names_;
  std::atomic<bool> has_categories_{false};
};

// The default domain (calls without a domain, and a null nvtxDomainHandle_t).
NvtxDomain& default_nvtx_domain();

// UTF-8 text of a wide NVTX string (wchar_t is UTF-32 on Linux).
std::string utf8_from_wide(const wchar_t* text);

// Names an OS thread's track. The recorder names the calling thread only, so a name given to
// another thread waits until that thread next records an NVTX event.
void name_os_thread(uint32_t os_thread_id, const std::string& name);
// Applies a pending name for the calling thread; costs one relaxed load when none changed.
void apply_pending_thread_name();

// In a forked child (on the thread that forked): ranges the parent pushed were recorded into
// the parent's trace; their pops must not close spans of the child's trace.
void forget_recorded_nvtx_ranges();
// In a forked child: thread names waiting for parent threads are dropped, the lock rebuilt.
void forget_thread_names_after_fork();

}  // namespace moescope::inject
