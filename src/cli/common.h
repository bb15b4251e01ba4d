// Options and loading shared by the commands that run a model.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "format/checkpoint.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace deltafin::cli {

struct ModelArgs {
  std::string model;
  int threads = 0;  // 0: all cores
};

// Adds --model (required) and --threads to a subcommand.
void add_model_options(CLI::App* cmd, ModelArgs& a);

struct LoadedModel {
  std::unique_ptr<Checkpoint> ck;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Model> model;
};

LoadedModel load(const ModelArgs& a);

}  // namespace deltafin::cli
