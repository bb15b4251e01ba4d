#include "util/parse.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "util/error.h"

namespace deltafin {

std::vector<int32_t> parse_token_list(std::string_view s, std::string_view what) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string_view::npos) j = s.size();
    std::string_view item = s.substr(i, j - i);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.remove_prefix(1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.remove_suffix(1);
    int32_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0)
      fail("{}: '{}' is not a non-negative token id; expected a list like 1,2,3", what,
           std::string(item));
    out.push_back(v);
    i = j + 1;
  }
  if (out.empty()) fail("{}: no token ids given", what);
  return out;
}

uint64_t parse_byte_size(std::string_view s, std::string_view what) {
  std::string str(s);
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(str, &pos);
  } catch (...) {
    fail("{}: '{}' is not a size; use e.g. 512M, 6G or 1.5GiB", what, str);
  }
  std::string unit = str.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB")) unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit.back() == 'B') unit.resize(1);
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K") mult = 1024.0;
  else if (unit == "M") mult = 1024.0 * 1024;
  else if (unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else fail("{}: unknown unit in '{}'; use K, M, G or T", what, str);
  if (!(v >= 0) || !std::isfinite(v)) fail("{}: '{}' is not a non-negative size", what, str);
  const double bytes = v * mult;
  if (bytes >= 18446744073709551616.0) fail("{}: '{}' is too large", what, str);
  return static_cast<uint64_t>(bytes);
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

}  // namespace deltafin
