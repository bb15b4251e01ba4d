// Errors a user can cause (missing file, bad JSON, unknown architecture, budget
// too small) are thrown as deltafin::Error with a one-line message that names
// the thing and says what to do. The CLI catches them, prints the message and
// exits non-zero. Programming errors use DF_CHECK (aborts with file:line).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace deltafin {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace deltafin

// Internal invariant: a failure here is a bug in deltafin, not the user's fault.
#define DF_CHECK(cond)                                                        \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "deltafin: internal error at %s:%d: %s\n",         \
                   __FILE__, __LINE__, #cond);                                \
      std::abort();                                                           \
    }                                                                         \
  } while (0)
