// capture_nvtx_kinds_program: one of each NVTX call that samples/nvtx_ranges does not make, so
// the capture test can check how each lands in the trace (capture_nvtx_test.cpp):
//
//   category 1 of the default domain named "io"           push "read" in it       -> domain "io"
//   domain "NCCL" (as NCCL creates it), category 7 "coll" push "allreduce" in it  -> "NCCL/coll"
//                                                          push "init" (no category) -> "NCCL"
//   wide (UTF-32) messages                                 push L"vorwärts", mark L"fertig ✓"
//   Ex calls with a UNICODE message                        push "größe" in the default domain
//   domain mark and start/end                              mark "proxy", start/end "comm_init"
#include <nvtx3/nvToolsExt.h>

#include <cstdio>

namespace {

nvtxEventAttributes_t ascii_event(const char* message, uint32_t category = 0) {
  nvtxEventAttributes_t event = {};
  event.version = NVTX_VERSION;
  event.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  event.category = category;
  event.messageType = NVTX_MESSAGE_TYPE_ASCII;
  event.message.ascii = message;
  return event;
}

}  // namespace

int main() {
  nvtxNameCategoryA(1, "io");
  nvtxDomainHandle_t nccl = nvtxDomainCreateA("NCCL");
  nvtxDomainNameCategoryA(nccl, 7, "coll");

  nvtxEventAttributes_t read = ascii_event("read", 1);
  nvtxRangePushEx(&read);
  nvtxRangePop();

  nvtxEventAttributes_t allreduce = ascii_event("allreduce", 7);
  nvtxDomainRangePushEx(nccl, &allreduce);
  nvtxEventAttributes_t init = ascii_event("init");
  nvtxDomainRangePushEx(nccl, &init);  // nested in "allreduce"
  nvtxDomainRangePop(nccl);
  nvtxDomainRangePop(nccl);

  nvtxRangePushW(L"vorw\u00e4rts");
  nvtxRangePop();
  nvtxMarkW(L"fertig \u2713");
  nvtxEventAttributes_t size = {};
  size.version = NVTX_VERSION;
  size.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  size.messageType = NVTX_MESSAGE_TYPE_UNICODE;
  size.message.unicode = L"gr\u00f6\u00dfe";
  nvtxRangePushEx(&size);
  nvtxRangePop();

  nvtxEventAttributes_t proxy = ascii_event("proxy");
  nvtxDomainMarkEx(nccl, &proxy);
  nvtxEventAttributes_t comm_init = ascii_event("comm_init");
  nvtxRangeId_t id = nvtxDomainRangeStartEx(nccl, &comm_init);
  nvtxDomainRangeEnd(nccl, id);
  std::printf("nvtx kinds done\n");
  return 0;
}
