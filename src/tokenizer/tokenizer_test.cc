#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

TEST(Placeholder, Builds) { SUCCEED(); }
