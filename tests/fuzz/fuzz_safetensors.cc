// Fuzz target: safetensors headers are untrusted input (a downloaded
// checkpoint). Parsing must reject or accept, never crash or read outside
// the buffer; every accepted tensor must lie inside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "format/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = deltafin::SafetensorsFile::parse(data, size, "fuzz");
    for (const auto& [name, t] : f->tensors()) {
      if (t.data < data || t.data + t.bytes > data + size) std::abort();
      volatile uint8_t sink = t.bytes ? t.data[t.bytes - 1] : 0;
      (void)sink;
    }
  } catch (const deltafin::Error&) {
  }
  return 0;
}
