// Options and loading shared by the commands that run a model: --model takes
// a Hugging Face model directory or a packed store (deltafin pack).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/runtime.h"
#include "engine/session.h"

namespace deltafin::cli {

struct ModelArgs {
  std::string model;
  int threads = 0;  // 0: all cores
  int64_t ctx_size = 0;  // 0: 4096 with --ram-budget, else unlimited
  std::string ram_budget, drives, io = "uring", pilot = "on", cache_policy = "lru";
  int queue_depth = 16;
  int pilot_reads = 0;
  std::string read_chunk;
  double hot_fraction = 0.5;
  bool verify_reads = false, no_heat_update = false, skip_missing_drives = false;
  bool stats = false;
  std::string stats_json;
};

// Adds --model (required), --threads and the streaming options.
void add_model_options(CLI::App* cmd, ModelArgs& a);

std::unique_ptr<Runtime> load(const ModelArgs& a);

// The run's statistics (--stats to stderr, --stats-json FILE), measured:
// session timings, expert hits and reads, pilot recall/precision, I/O wait,
// per-drive bytes, peak resident memory.
// at_first_token: the streaming statistics when the first token was out
// (generate), so that the decode phase's reads are reported on their own.
void report_stats(const ModelArgs& a, Runtime& rt, const SessionStats& s, double ttft_s,
                  const residency::StreamStats* at_first_token = nullptr);

}  // namespace deltafin::cli
