#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "util/arena.h"
#include "util/error.h"
#include "util/parse.h"
#include "util/thread_pool.h"

namespace deltafin {

TEST(Parse, TokenList) {
  EXPECT_EQ(parse_token_list("1,2, 3"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_THROW(parse_token_list("1,,2"), Error);
  EXPECT_THROW(parse_token_list("a"), Error);
  EXPECT_THROW(parse_token_list("-1"), Error);
  EXPECT_THROW(parse_token_list(""), Error);
}

TEST(Parse, ByteSize) {
  EXPECT_EQ(parse_byte_size("512M", "x"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("1.5GiB", "x"), 3ull << 29);
  EXPECT_EQ(parse_byte_size("100", "x"), 100u);
  EXPECT_THROW(parse_byte_size("5Q", "x"), Error);
  EXPECT_THROW(parse_byte_size("lots", "x"), Error);
  EXPECT_THROW(parse_byte_size("9e40G", "x"), Error);  // found by the fuzzer
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<std::atomic<int>> hits(1001);
      pool.parallel_for(1001, 7, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

}  // namespace deltafin

TEST(Arena, PageAlignedZeroedAndMovable) {
  deltafin::Arena a(5 * 1000 * 1000 + 7);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 4096, 0u);
  EXPECT_GE(a.size(), 5u * 1000 * 1000 + 7);
  EXPECT_EQ(a.size() % 4096, 0u);
  for (size_t i = 0; i < a.size(); i += 4096) ASSERT_EQ(a.data()[i], 0);
  a.data()[a.size() - 1] = 42;
  uint8_t* p = a.data();
  deltafin::Arena b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[b.size() - 1], 42);
  deltafin::Arena empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
}
