// Parsing of command-line values: token lists, byte sizes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin {

// "1,2,3" -> {1,2,3}. Throws Error naming `what` on anything else.
std::vector<int32_t> parse_token_list(std::string_view s, std::string_view what = "--tokens");

// "512M", "6G", "1.5GiB", "1000000" -> bytes. K/M/G/T are powers of 1024.
uint64_t parse_byte_size(std::string_view s, std::string_view what);

// 17547264 -> "16.7 MiB".
std::string format_bytes(double bytes);

}  // namespace deltafin
