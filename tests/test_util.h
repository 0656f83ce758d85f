// Shared helpers for partix tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "partix/partix.h"

// Expects `stmt` to throw partix::Error whose message contains every given fragment.
#define EXPECT_PARTIX_ERROR(stmt, ...)                                                  \
  do {                                                                                  \
    try {                                                                               \
      stmt;                                                                             \
      ADD_FAILURE() << "expected partix::Error from: " #stmt;                           \
    } catch (const partix::Error& e_) {                                                 \
      for (const std::string& frag_ : std::initializer_list<std::string>{__VA_ARGS__}) { \
        EXPECT_NE(std::string(e_.what()).find(frag_), std::string::npos)                \
            << "message '" << e_.what() << "' lacks '" << frag_ << "'";                 \
      }                                                                                 \
    }                                                                                   \
  } while (0)
