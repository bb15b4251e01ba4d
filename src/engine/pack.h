// `deltafin pack`: copies every routed expert of a checkpoint into a store —
// one contiguous, 4 KiB-aligned record per (layer, expert) holding its gate,
// up and down tensors and their scales, bytes unchanged (contract 1) — spread
// over drive directories, with a manifest (docs/store.md). Resumable: the
// manifest is saved, marked incomplete, as records are made durable.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace deltafin {

struct PackOptions {
  std::string model_dir;            // the Hugging Face checkpoint
  std::string out_dir;              // the store: manifest.json (+ heat.json later)
  std::vector<std::string> drives;  // drive directories (created if missing)
  std::string placement = "stripe";  // stripe | mirror | hot-replicas
  double hot_fraction = 0.1;        // hot-replicas: share of records mirrored on every drive
  bool progress = true;             // one status line a second on stderr
};

struct PackResult {
  uint64_t records = 0, records_skipped = 0;  // skipped: already written by an interrupted run
  uint64_t bytes_written = 0;
  double seconds = 0;
};

// Throws Error naming the thing on any failure; what was made durable stays
// in the incomplete manifest, and re-running the same command resumes.
PackResult pack_store(const PackOptions& opts);

// Re-reads every record of a store and checks its checksum; returns the
// number of records checked. Throws Error naming the first bad record.
uint64_t verify_store(const std::string& store_dir, const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace deltafin
