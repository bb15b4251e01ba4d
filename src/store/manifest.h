// The store manifest: what `deltafin pack` wrote and where (docs/store.md).
//
// One JSON file, STORE/manifest.json, versioned. For every routed expert of
// every MoE layer it lists one record: its length, XXH64 checksum, layout (the
// expert's tensors inside the record) and its copies (file and offset; more
// than one copy when mirrored). Files belong to drives (directories). It also
// carries the model's config.json and the source checkpoint's identity.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace deltafin::store {

inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFile = "manifest.json";

// One tensor of an expert, inside its record.
struct TensorSlot {
  std::string name;     // relative to the expert, e.g. "gate_proj.weight_scale_inv"
  std::string dtype;    // safetensors dtype as published: "F8_E4M3", "BF16", "I32", "U8", ...
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // bytes from the record's start
  uint64_t bytes = 0;
};

// The tensors of one kind of expert record (all experts of a layer share one).
struct RecordLayout {
  uint64_t bytes = 0;   // the record's length: tensors plus padding between them
  std::vector<TensorSlot> tensors;
};

struct RecordCopy {
  int file = 0;         // index into Manifest::files
  uint64_t offset = 0;  // bytes, a multiple of Manifest::alignment
};

struct Record {
  int layer = 0;
  int expert = 0;
  int layout = 0;        // index into Manifest::layouts
  uint64_t length = 0;   // == layouts[layout].bytes
  uint64_t checksum = 0; // xxh64 of the record's bytes
  std::vector<RecordCopy> copies;  // >= 1; on distinct drives when mirrored
};

struct StoreFile {
  int drive = 0;        // index into Manifest::drives
  std::string name;     // relative to the drive's directory
  uint64_t bytes = 0;   // the file's size once written
};

struct Manifest {
  int version = kManifestVersion;
  bool complete = false;       // false while pack is still writing (resumable)
  std::string placement;       // mirror | stripe | hot-replicas
  uint32_t alignment = 4096;   // records start on multiples of this
  std::vector<std::string> drives;  // the drive directories pack wrote to
  std::vector<StoreFile> files;
  std::vector<RecordLayout> layouts;
  std::vector<Record> records;
  nlohmann::json model_config = nlohmann::json::object();  // the checkpoint's config.json
  nlohmann::json source = nlohmann::json::object();        // source identity (dir, files, sizes, hashes)

  // The record of (layer, expert), or nullptr. REQUIRES: index() was called
  // after the last change to `records` (load() and from_json() call it).
  const Record* find(int layer, int expert) const;
  void index();

  // Checks internal consistency; throws Error naming `what` and the first
  // bad record/file/layout: indices in range, copies aligned and inside their
  // files, lengths equal to their layout, tensors inside the record and not
  // overlapping, no (layer, expert) twice.
  void validate(const std::string& what) const;

  nlohmann::json to_json() const;
  // Parses and validates. Throws Error naming `what` and the field.
  static Manifest from_json(const nlohmann::json& j, const std::string& what);
  // Loads STORE/manifest.json (or a path to the file itself). With
  // require_complete, a store whose pack was interrupted is an error saying
  // to re-run pack.
  static Manifest load(const std::string& store_or_file, bool require_complete = true);
  // Writes atomically (temporary file, fsync, rename).
  void save(const std::string& path) const;

 private:
  std::unordered_map<uint64_t, size_t> by_key_;
};

// 16 lowercase hex digits, as checksums are written in manifests.
std::string checksum_hex(uint64_t v);

}  // namespace deltafin::store
