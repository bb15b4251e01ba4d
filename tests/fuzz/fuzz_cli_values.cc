// Fuzz target: command-line values (token lists, byte sizes) come from users.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/error.h"
#include "util/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  try {
    deltafin::parse_token_list(s);
  } catch (const deltafin::Error&) {
  }
  try {
    deltafin::parse_byte_size(s, "fuzz");
  } catch (const deltafin::Error&) {
  }
  return 0;
}
